#!/usr/bin/env python3
"""Bad input gives a clear per-file error and the rest of the run continues.

Inputs: a truncated ELF, a file of zeros with an ELF magic, a text file, a
symlink loop, a missing path, a directory, and (when running as root, by
dropping to an unprivileged user) an unreadable file; each is named in a
one-line "mldoctor: error:" message while a good input given after them is
still analysed. Inside the search path, a corrupt candidate stops the load
exactly where the real ld.so stops it.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import *  # noqa: E402,F401,F403

t = scratch()
good = build_lib(t + "/libgood.so", soname="libgood.so")
with open(good, "rb") as f:
    data = f.read()
with open(t + "/truncated.so", "wb") as f:
    f.write(data[:100])
with open(t + "/zeros.so", "wb") as f:
    f.write(b"\x7fELF" + b"\0" * 4000)
with open(t + "/text.so", "w") as f:
    f.write("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
os.symlink(t + "/loop-b", t + "/loop-a")
os.symlink(t + "/loop-a", t + "/loop-b")
os.makedirs(t + "/dir.so")
# Header fields that point outside the file: e_phoff past the end.
bad_phoff = bytearray(data)
bad_phoff[32:40] = (len(data) + 4096).to_bytes(8, "little")
with open(t + "/phoff.so", "wb") as f:
    f.write(bad_phoff)

inputs = ["truncated.so", "zeros.so", "text.so", "loop-a", "missing.so", "dir.so", "phoff.so", "libgood.so"]
p = mldoctor("libs", *[t + "/" + i for i in inputs], env=clean_env())
check_eq(p.returncode, 2, "exit status 2 when an input could not be analysed")
err = p.stderr
check_in("mldoctor: error: " + t + "/text.so: not an ELF file", err, "text file")
check_in("mldoctor: error: " + t + "/loop-a: Too many levels of symbolic links", err, "symlink loop")
check_in("mldoctor: error: " + t + "/missing.so: No such file or directory", err, "missing file")
check_in(t + "/dir.so", err, "directory named")
for name in ("truncated.so", "zeros.so", "phoff.so"):
    check(t + "/" + name in p.stdout + err, "%s is reported" % name)
check_in(t + "/libgood.so\n  libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6", p.stdout,
         "the good input after the bad ones is still analysed")
for line in err.splitlines():
    check(line.startswith("mldoctor: error: "), "every diagnostic is one 'mldoctor: error:' line: %r" % line)

# A corrupt file found in the search path ends the load as ld.so ends it.
d = t + "/search"
os.makedirs(d + "/lib")
build_lib(d + "/lib/libdep.so", soname="libdep.so")
build_lib(d + "/libuser.so", soname="libuser.so", runpath=d + "/lib", flags=["-L" + d + "/lib", "-ldep"])
with open(d + "/lib/libdep.so", "wb") as f:
    f.write(b"not an elf file at all, but long enough to hold an ELF header......")
real, rc, rerr = ldso_list(d + "/libuser.so", env=clean_env())
check(rc != 0 and "invalid ELF header" in rerr, "ld.so stops on the corrupt candidate: %r" % rerr)
p = mldoctor("libs", d + "/libuser.so", env=clean_env(), check_rc=1)
check_in("ld.so would stop loading " + d + "/libuser.so: " + d + "/lib/libdep.so: invalid ELF header",
         p.stdout, "the model stops with the same reason")

# Unreadable to an unprivileged user: drop privileges when running as root.
if os.geteuid() == 0 and shutil.which("setpriv"):
    u = t + "/private"
    os.makedirs(u)
    shutil.copy(good, u + "/libsecret.so")
    os.chmod(u + "/libsecret.so", 0)
    os.chmod(t, 0o755)
    q = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", MLDOCTOR, "libs",
                        u + "/libsecret.so", good], capture_output=True, text=True, env=clean_env())
    check_eq(q.returncode, 2, "unreadable input: exit 2")
    check_in("mldoctor: error: " + u + "/libsecret.so: Permission denied", q.stderr, "unreadable input named")
    check_in(good + "\n", q.stdout, "the readable input is still analysed")

shutil.rmtree(t, ignore_errors=True)
finish("libs-bad-input")

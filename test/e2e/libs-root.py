#!/usr/bin/env python3
"""`mldoctor libs --root DIR` analyses a tree as if it were the machine.

The fixture root has its own system directory and ld.so.cache written by the
real ldconfig (`ldconfig -r`), an absolute symlink that must resolve inside
the root, and lacks a library this machine has: the model must find what the
root provides, from the root's cache, and report the rest as missing.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import *  # noqa: E402,F401,F403

t = scratch()
root = t + "/root"
libdir = root + "/usr/lib/x86_64-linux-gnu"
os.makedirs(libdir)
os.makedirs(root + "/opt/app")
os.makedirs(root + "/etc")
os.symlink("usr/lib", root + "/lib")
# The root's loader and C library are this machine's (so the layout and the
# glibc release are detected from files inside the root).
for name in ("ld-linux-x86-64.so.2", "libc.so.6"):
    shutil.copy("/usr/lib/x86_64-linux-gnu/" + name, libdir + "/" + name)
os.makedirs(root + "/lib64", exist_ok=True)
os.symlink("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", root + "/lib64/ld-linux-x86-64.so.2")
build_lib(libdir + "/libfoo.so.1", soname="libfoo.so.1")
# libapp needs libfoo (in the root) and libz (on this machine, not in the root).
build_lib(root + "/opt/app/libapp.so", soname="libapp.so",
          flags=["-L" + libdir, "-l:libfoo.so.1", "-lz"])
with open(root + "/etc/ld.so.conf", "w") as f:
    f.write("/usr/lib/x86_64-linux-gnu\n")
subprocess.run(["ldconfig", "-r", root, "-C", "/etc/ld.so.cache", "-f", "/etc/ld.so.conf"], check=True)

p = mldoctor("libs", "--root", root, "/opt/app/libapp.so", env=clean_env(), check_rc=1)
out = p.stdout
check_in("libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1  [ld.so.cache]", out,
         "libfoo is found through the root's own ld.so.cache")
check_in("libc.so.6 => /usr/lib/x86_64-linux-gnu/libc.so.6  [ld.so.cache]", out,
         "libc is the root's copy, named by its path inside the root")
check_in("libz.so.1 => not found", out, "a library only this machine has is missing in the root")
check_in("system search path: /lib/x86_64-linux-gnu/libz.so.1 (no such file)", out,
         "the root's system directories are searched")
check(root not in out, "paths are shown as they are inside the root:\n" + out)
check_in("LD001", out, "missing library finding")

# Without --root the same file resolves libz on this machine.
q = mldoctor("libs", root + "/opt/app/libapp.so", env=clean_env())
check_in("libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1", q.stdout, "on the live machine libz is found")

shutil.rmtree(t, ignore_errors=True)
finish("libs-root")

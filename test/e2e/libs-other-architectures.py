#!/usr/bin/env python3
"""Objects of another architecture given to `libs` (issue 34, bad input):
a clear per-file statement, never a resolution by another loader's rules.

  1. An AArch64 shared object on this x86-64 machine (a built library with
     its e_machine set to EM_AARCH64: `libs` reads headers and the dynamic
     section only): unless an AArch64 loader is installed here, `libs` says
     there is none (naming /lib/ld-linux-aarch64.so.1), resolves nothing to
     an x86-64 file, and its ld.so.cache line says none of the cache's
     entries is for AArch64, with the entry count the machine's own
     `ldconfig -p` reports; in JSON the input carries the same note.
  2. A 32-bit ARM object (an ELFCLASS32 EM_ARM ET_DYN written here with a
     DT_NEEDED of libc.so.6): one "mldoctor: error:" line saying its loader
     is not modelled and nothing is resolved, exit status 2, and a good
     input after it still analysed.
  3. The AArch64 object inside a --root tree that has an AArch64 loader and
     libc where Debian puts them: resolved there, to those files.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import *  # noqa: E402,F401,F403

EM_AARCH64, EM_ARM = 183, 40


def arm32_object(path, needed="libc.so.6"):
    """A minimal little-endian ELFCLASS32 EM_ARM ET_DYN: one PT_LOAD, one
    PT_DYNAMIC with DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_NULL."""
    strtab = b"\0" + needed.encode() + b"\0"
    ehsize, phentsize, phnum = 52, 32, 2
    dyn_off = ehsize + phentsize * phnum
    dyn = struct.pack("<8I", 1, 1, 5, 0, 10, len(strtab), 0, 0)  # NEEDED, STRTAB (patched), STRSZ, NULL
    str_off = dyn_off + len(dyn)
    dyn = struct.pack("<8I", 1, 1, 5, str_off, 10, len(strtab), 0, 0)
    size = str_off + len(strtab)
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIIIIIHHHHHH", 3, EM_ARM, 1, 0, ehsize, 0, 0x05000400, ehsize, phentsize,
                                 phnum, 40, 0, 0)
    load = struct.pack("<8I", 1, 0, 0, 0, size, size, 5, 0x1000)
    dynamic = struct.pack("<8I", 2, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 6, 4)
    with open(path, "wb") as f:
        f.write(header + load + dynamic + dyn + strtab)
    return path


t = scratch()
good = build_lib(t + "/libgood.so", soname="libgood.so")
with open(good, "rb") as f:
    data = bytearray(f.read())
struct.pack_into("<H", data, 18, EM_AARCH64)
arm64 = t + "/libarm64.so"
with open(arm64, "wb") as f:
    f.write(data)

# 1. On this machine.
p = mldoctor("libs", arm64, env=clean_env())
out = p.stdout
if os.path.exists("/lib/ld-linux-aarch64.so.1"):
    print("this machine has an AArch64 loader: the no-loader note is not expected")
else:
    check_in("note: no AArch64 loader here (/lib/ld-linux-aarch64.so.1 is missing)", out,
             "the AArch64 object on x86-64: the missing loader is said")
resolved = re.findall(r"=> (/\S+)", out)
for path in resolved:
    with open(path, "rb") as f:
        head = f.read(20)
    check_eq(struct.unpack_from("<H", head, 18)[0], EM_AARCH64,
             "a dependency of the AArch64 object resolved to %s, which is not AArch64" % path)
cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
m = re.match(r"(\d+) libs found in cache", cache.stdout)
if m and int(m.group(1)) > 0 and " (libc6,AArch64" not in cache.stdout:
    check_in("ld.so.cache: libc.so.6 (no entry: none of its %s entries is for AArch64)" % m.group(1), out,
             "the cache line says the cache holds nothing for AArch64 (ldconfig -p: %s entries)" % m.group(1))
j = json.loads(mldoctor("libs", "--json", arm64, env=clean_env()).stdout)
inputs = [i for i in j["inputs"] if i["path"] == arm64]
check(inputs and ("note" in inputs[0]) == (not os.path.exists("/lib/ld-linux-aarch64.so.1")),
      "the JSON input carries the note: %s" % (inputs and inputs[0].get("note")))
check_in("AArch64", json.dumps(j["loaders"]), "the JSON names the AArch64 loader it modelled")

# 2. A 32-bit ARM object.
arm32 = arm32_object(t + "/libarm32.so")
p = mldoctor("libs", arm32, good, env=clean_env())
check_eq(p.returncode, 2, "exit status 2: the ARM object could not be analysed")
check_in("mldoctor: error: %s: an ARM object (ELFCLASS32): mldoctor models the loaders of x86-64, AArch64 "
         "and i386 only; its dependencies are not resolved" % arm32, p.stderr, "the ARM object's statement")
check(arm32 not in p.stdout, "nothing is resolved for the ARM object:\n%s" % p.stdout)
check_in(good + "\n  libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6", p.stdout, "the good input is still analysed")

# 3. In a tree with an AArch64 loader and libc where Debian puts them (the
# files' contents are the patched object: libs reads their headers).
root = t + "/root"
for d in ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "etc"):
    os.makedirs(os.path.join(root, d))
libc = bytearray(data)
for name in ("lib/aarch64-linux-gnu/libc.so.6", "lib/ld-linux-aarch64.so.1"):
    with open(os.path.join(root, name), "wb") as f:
        f.write(libc)
shutil.copy(arm64, os.path.join(root, "usr/lib/aarch64-linux-gnu/libarm64.so"))
p = mldoctor("libs", "--root", root, "/usr/lib/aarch64-linux-gnu/libarm64.so", env=clean_env())
check("note: no AArch64 loader" not in p.stdout, "the tree has an AArch64 loader: no note\n%s" % p.stdout)
check_in("libc.so.6 => /lib/aarch64-linux-gnu/libc.so.6", p.stdout, "resolved inside the tree")

shutil.rmtree(t, ignore_errors=True)
finish("libs-other-architectures")

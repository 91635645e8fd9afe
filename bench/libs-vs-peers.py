#!/usr/bin/env python3
"""Benchmark: `mldoctor libs` against libtree and an ldd loop.

Runs each tool once over every ELF shared object directly under
/usr/lib/x86_64-linux-gnu (symlinks skipped, so each file counts once) and
prints wall time, time per file and the ratio to mldoctor. Same files, same
machine, one run each; the page cache is warmed by a first untimed pass of
`cat` over the files so no tool pays for the first disk read.

Usage: bench/libs-vs-peers.py [MLDOCTOR]   (default build/mldoctor)
"""
import os
import resource
import subprocess
import sys
import time

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def elf_objects():
    out = []
    for name in sorted(os.listdir(LIBDIR)):
        p = os.path.join(LIBDIR, name)
        if ".so" not in name or os.path.islink(p) or not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            h = f.read(20)
        if len(h) == 20 and h[:4] == b"\x7fELF" and h[4] == 2 and h[16] == 3:
            out.append(p)
    return out


def timed(cmds, chunk=None):
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for cmd in cmds:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - start
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss


def chunks(files, n):
    return [files[i:i + n] for i in range(0, len(files), n)]


def main():
    mld = sys.argv[1] if len(sys.argv) > 1 else "build/mldoctor"
    files = elf_objects()
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 20):
                pass
    rows = []
    rows.append(("mldoctor libs (one call, all files)", timed([[mld, "libs"] + files])))
    rows.append(("mldoctor libs --json (one call)", timed([[mld, "libs", "--json"] + files])))
    rows.append(("mldoctor libs (50 files a call)", timed([[mld, "libs"] + c for c in chunks(files, 50)])))
    rows.append(("libtree (50 files a call)", timed([["libtree"] + c for c in chunks(files, 50)])))
    rows.append(("ldd (one call per file)", timed([["ldd", f] for f in files])))
    base = rows[2][1][0]
    print("%d ELF shared objects in %s" % (len(files), LIBDIR))
    print("%-40s %9s %12s %9s %8s" % ("tool", "wall s", "us per file", "cpu s", "vs mld50"))
    for name, (wall, cpu, _) in rows:
        print("%-40s %9.3f %12.0f %9.3f %7.1fx" % (name, wall, wall / len(files) * 1e6, cpu, wall / base))


if __name__ == "__main__":
    main()

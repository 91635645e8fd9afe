#!/usr/bin/env python3
"""How long `mldoctor stacks PID` takes on a 64-thread CPython process.

Usage: bench/stacks-speed.py build/mldoctor [--runs 15] [--threads 64]

For Debian's /usr/bin/python3 and each CPython 3.8-3.13 under ~/.pyenv: a
process whose threads wait on an Event under 3 to 43 frames of their own
(the target of test/e2e/stacks-interpreters.py, simplified), then `stacks`
(Python frames only: nothing stops) and `stacks --native` (libdw stops each
thread while it unwinds it) run --runs times each; prints the median and
the slowest wall time of the whole command, start of the binary included.
Target (issue 19): under 100 ms for 64 threads.
"""
import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = r'''
import sys, threading
go = threading.Event()
def deep(n):
    if n == 0:
        go.wait()
        return 0
    return deep(n - 1) + 1
ts = [threading.Thread(target=deep, args=(i % 41,)) for i in range(int(sys.argv[2]))]
for t in ts: t.start()
open(sys.argv[1], "w").close()
go.wait()
'''


def wall(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mldoctor")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=64)
    a = ap.parse_args()
    mld = os.path.abspath(a.mldoctor)
    pythons = [("3.11 (Debian)", "/usr/bin/python3")]
    for minor in range(8, 14):
        found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.%d.*/bin/python3.%d" % (minor, minor))))
        if found:
            pythons.append(("3.%d" % minor, found[-1]))
    print("%-14s %8s %8s %10s %10s" % ("CPython", "median", "slowest", "--native", "slowest"))
    with tempfile.TemporaryDirectory() as d:
        target = os.path.join(d, "t.py")
        open(target, "w").write(TARGET)
        for name, py in pythons:
            ready = os.path.join(d, "ready-" + name.split()[0])
            proc = subprocess.Popen([py, target, ready, str(a.threads)])
            while not os.path.exists(ready):
                time.sleep(0.02)
            time.sleep(0.3)
            plain = [wall([mld, "stacks", str(proc.pid)]) for _ in range(a.runs)]
            native = [wall([mld, "stacks", "--native", str(proc.pid)]) for _ in range(max(3, a.runs // 3))]
            proc.kill()
            proc.wait()
            bad = [rc for _, rc in plain + native if rc != 0]
            p = [t * 1000 for t, _ in plain]
            n = [t * 1000 for t, _ in native]
            print("%-14s %6.1f ms %6.1f ms %8.1f ms %8.1f ms%s" % (
                name, statistics.median(p), max(p), statistics.median(n), max(n),
                "  (failed runs: %r)" % bad if bad else ""))


if __name__ == "__main__":
    main()

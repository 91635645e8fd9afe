#!/usr/bin/env python3
"""`mldoctor run` overhead: wall time of a command with and without it.

Usage: bench/run-overhead.py build/mldoctor [--runs 9] [-- CMD ...]
Default CMD: /usr/bin/python3 -c "import torch" (about 330 objects loaded,
600 searches, a few thread-count calls: the events of a real job's start).

The two variants run in pairs after one warm-up each, the order inside a
pair alternating (plain-traced, traced-plain, ...), so page cache and CPU
frequency drift hit both alike; the report goes to /dev/null. Prints each run, the medians and the fastest runs with
their ratios (target <= 1.03, DESIGN §3.6) and the number of events the
traced runs wrote. For a figure that does not depend on the machine's noise,
count instructions instead (docs/benchmarks.md shows the callgrind command).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


CPU = []  # user+system seconds of each run's whole process tree, in call order


def timed(cmd):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    CPU.append(ru.ru_utime + ru.ru_stime)
    return time.perf_counter() - t, os.waitstatus_to_exitcode(status)


def main():
    argv = sys.argv[1:]
    cmd = ["/usr/bin/python3", "-c", "import torch"]
    if "--" in argv:
        cmd = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser()
    ap.add_argument("mldoctor")
    ap.add_argument("--runs", type=int, default=9)
    a = ap.parse_args(argv)
    mld = os.path.abspath(a.mldoctor)
    with tempfile.TemporaryDirectory() as keep:
        trace = os.path.join(keep, "trace")
        traced = [mld, "run", "--report", os.devnull, "--"] + cmd
        kept = [mld, "run", "--report", os.devnull, "--trace-dir", trace, "--"] + cmd
        timed(cmd)
        timed(traced)
        plain_t, traced_t, plain_c, traced_c = [], [], [], []
        for i in range(a.runs):
            # ABBA: which variant goes first alternates, so a drift of the
            # machine within a pair does not count against one of them.
            if i % 2 == 0:
                p, rc1 = timed(cmd)
                t, rc2 = timed(traced)
            else:
                t, rc2 = timed(traced)
                p, rc1 = timed(cmd)
            if rc1 != rc2:
                sys.exit("exit status differs: %d plain, %d traced" % (rc1, rc2))
            plain_t.append(p)
            traced_t.append(t)
            pc, tc = (CPU[-2], CPU[-1]) if i % 2 == 0 else (CPU[-1], CPU[-2])
            plain_c.append(pc)
            traced_c.append(tc)
            print("run %d: plain %.3f s, traced %.3f s" % (i + 1, p, t))
        timed(kept)
        events = 0
        for name in os.listdir(trace):
            with open(os.path.join(trace, name), "rb") as f:
                events += f.read().count(b"\n")
    mp, mt = statistics.median(plain_t), statistics.median(traced_t)
    print("command: %s" % " ".join(cmd))
    print("median: plain %.3f s, under mldoctor run %.3f s: ratio %.3f (%+.1f%%), %d events"
          % (mp, mt, mt / mp, (mt / mp - 1) * 100, events))
    # Each pair ran back to back: the median of the pairs' ratios cancels a
    # machine that slows down and speeds up over the minutes of the run.
    pr = statistics.median(t / p for p, t in zip(plain_t, traced_t))
    print("median of the %d pairs' ratios: %.3f (%+.1f%%)" % (len(plain_t), pr, (pr - 1) * 100))
    cr = statistics.median(t / p for p, t in zip(plain_c, traced_c))
    print("CPU time (user+system, whole tree): median plain %.3f s, traced %.3f s; median of pair ratios %.3f (%+.1f%%)"
          % (statistics.median(plain_c), statistics.median(traced_c), cr, (cr - 1) * 100))
    # On a shared VM the median moves by several percent from run to run;
    # the fastest run of each is the least disturbed estimate.
    lp, lt = min(plain_t), min(traced_t)
    print("fastest: plain %.3f s, under mldoctor run %.3f s: ratio %.3f (%+.1f%%)" % (lp, lt, lt / lp, (lt / lp - 1) * 100))


if __name__ == "__main__":
    main()

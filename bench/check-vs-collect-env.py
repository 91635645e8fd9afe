#!/usr/bin/env python3
"""`mldoctor check` against `python3 -m torch.utils.collect_env`, same machine,
same interpreter, back to back.

Usage: bench/check-vs-collect-env.py build/mldoctor [--python /usr/bin/python3] [--runs 5]

Both describe the environment a training job would run in; collect_env imports
torch (and asks pip, conda, nvidia-smi, gcc, cmake ...), check does not import
anything and also replays the import set through the loader model. Prints wall
time and peak RSS (of the process tree, from wait4) per run, the medians and
the ratio. A warm-up run of each comes first and is not counted (page cache).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def run(cmd, env):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_maxrss / 1024.0, p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mldoctor")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    env = dict(os.environ)
    tools = {
        "mldoctor check": [os.path.abspath(a.mldoctor), "check", "--python", a.python],
        "collect_env": [a.python, "-m", "torch.utils.collect_env"],
    }
    results = {}
    for name, cmd in tools.items():
        run(cmd, env)  # warm-up
        walls, rss = [], []
        for _ in range(a.runs):
            w, m, rc = run(cmd, env)
            if rc not in (0, 1):
                sys.exit("%s exited %d" % (name, rc))
            walls.append(w)
            rss.append(m)
        results[name] = (walls, rss)
        print("%-16s %s  median %.3f s  peak RSS %.0f MiB" % (
            name, " ".join("%.3f" % w for w in walls), statistics.median(walls), max(rss)))
    m = statistics.median(results["mldoctor check"][0])
    c = statistics.median(results["collect_env"][0])
    print("collect_env / mldoctor check = %.1fx" % (c / m))


if __name__ == "__main__":
    main()

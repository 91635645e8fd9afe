#!/usr/bin/env python3
"""What mldoctor.runtimes() and mldoctor.guard() cost the process they run
in, against threadpoolctl (the peer: threadpool_info() answers the same
question) and, optionally, an older copy of the package.

Usage: bench/python-guard-cost.py [--runs 5] [--other DIR]
  --other DIR: a directory holding another mldoctor package (for example
  `git archive REV python/mldoctor | tar -x -C DIR --strip-components=1`),
  measured the same way.

Every figure is CPU time (user+system) of /usr/bin/python3 processes, the
least of --runs runs, so the machine's other load matters less:
- import: `import torch, scipy.linalg, sklearn.ensemble, cv2, numba` and
  numba's pool start, without and with guard() called first;
- in one process with those imported: runtimes() first and again,
  threadpoolctl.threadpool_info() first and again, one walk of the loaded
  objects (what guard() repeats after each extension import)."""
import argparse
import os
import subprocess
import sys

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
STACK = "import torch, scipy.linalg, sklearn.ensemble, cv2, numba\nnumba.get_num_threads()\n"

IMPORT = r"""
import sys, time, warnings
sys.path.insert(0, %(pkg)r)
warnings.simplefilter("ignore")
import mldoctor
if %(guard)r:
    mldoctor.guard()
t = time.process_time()
""" + STACK + r"""
print(time.process_time() - t)
"""

CALLS = r"""
import sys, time, warnings
sys.path.insert(0, %(pkg)r)
warnings.simplefilter("ignore")
import mldoctor, threadpoolctl
from mldoctor import _runtimes
""" + STACK + r"""
def cpu(f, n=1):
    t = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - t) / n
print(cpu(mldoctor.runtimes), cpu(mldoctor.runtimes, 10), cpu(threadpoolctl.threadpool_info),
      cpu(threadpoolctl.threadpool_info, 10), cpu(_runtimes.loaded_objects, 30), len(_runtimes.loaded_objects()))
"""


def least(code, runs):
    best = None
    for _ in range(runs):
        out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True, cwd="/")
        vals = [float(x) for x in out.stdout.split()]
        best = vals if best is None else [min(a, b) for a, b in zip(best, vals)]
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--other")
    args = ap.parse_args()
    packages = [("this tree", os.path.join(SOURCE, "python"))]
    if args.other:
        packages.append(("other", os.path.abspath(args.other)))
    for name, pkg in packages:
        plain = least(IMPORT % {"pkg": pkg, "guard": False}, args.runs)[0]
        guarded = least(IMPORT % {"pkg": pkg, "guard": True}, args.runs)[0]
        first, again, tp_first, tp_again, walk, objects = least(CALLS % {"pkg": pkg}, args.runs)
        print("%s (%s)" % (name, pkg))
        print("  import without guard() %.2f s CPU, with guard() %.2f s (+%.0f%%)"
              % (plain, guarded, 100 * (guarded - plain) / plain))
        print("  runtimes(): first %.1f ms, again %.1f ms; threadpoolctl.threadpool_info(): first %.1f ms, again "
              "%.1f ms" % (first * 1e3, again * 1e3, tp_first * 1e3, tp_again * 1e3))
        print("  one walk of the %d loaded objects: %.2f ms" % (objects, walk * 1e3))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# labels: slow scenario roots
"""numba's threading-layer errors, printed for real by numba in every Debian
generation (issue 33 item 2), and named by `mldoctor logs`.

In this machine's Debian 12 (numba 0.56) and each test root (bullseye 0.52,
trixie 0.61, sid 0.65), with the root's own python3, numpy and numba:

- THR013: NUMBA_THREADING_LAYER=omp, a parallel (prange) function run once
  (GNU OpenMP's pool starts), then os.fork() and the child runs it again:
  numba's omp layer prints "Terminating: fork() called from a process
  already using GNU OpenMP, this is unsafe." and ends the child.
- THR015: NUMBA_THREADING_LAYER=workqueue, the parallel function called
  from four threads at once: the workqueue layer detects the concurrent entry
  and aborts the process (its wording differs by release).
- THR016: NUMBA_THREADING_LAYER=tbb where TBB cannot load (Debian 12 has no
  libtbb; in the roots an empty file is bound over numba's tbbpool
  extension): "No threading layer could be loaded." (inside a TypingError
  from 0.56 on).

Oracle: numba itself (the program fails and the message is in its output).
mldoctor half: the top incident of `logs` on that output is the rule.
Environment: MLDOCTOR; MLD_ROOT_SUITES limits the roots (comma-separated).
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402


KERNEL = r'''
import numpy as np
from numba import njit, prange
@njit(parallel=True)
def total(a):
    s = 0.0
    for i in prange(a.shape[0]):
        s += a[i]
    return s
a = np.ones(100000)
'''
FORK = KERNEL + r'''
import os, sys
total(a)
pid = os.fork()
if pid == 0:
    total(a)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
sys.exit(1 if status else 0)
'''
CONCURRENT = KERNEL + r'''
import threading
total(a)
def work():
    for _ in range(5000):
        total(a)
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("no concurrent entry was detected", flush=True)
'''
ONE_CALL = KERNEL + r'''
print("the parallel call ran", total(a), flush=True)
'''
CASES = [("THR013", "omp", FORK), ("THR015", "workqueue", CONCURRENT), ("THR016", "tbb", ONE_CALL)]


def hide_tbb_layer(root_dir, empty):
    """Binds for the root that leave numba's TBB layer unloadable, as on a
    system without TBB: an empty file over its tbbpool extension (Debian 12,
    the host, has no libtbb at all)."""
    ufunc = os.path.join(root_dir, "usr/lib/python3/dist-packages/numba/np/ufunc")
    pools = [f for f in os.listdir(ufunc) if f.startswith("tbbpool") and f.endswith(".so")]
    mldtest.check(pools, "%s: numba's tbbpool extension is there to hide" % root_dir)
    return [(empty, "/usr/lib/python3/dist-packages/numba/np/ufunc/" + f, "ro") for f in pools]


def generation(suite, base):
    scratch = os.path.join(base, suite)
    os.makedirs(scratch)
    empty = os.path.join(scratch, "empty.so")
    open(empty, "w").close()
    results = []
    for rule, layer, code in CASES:
        if suite == "host":
            env = mldtest.clean_env(NUMBA_THREADING_LAYER=layer, NUMBA_CACHE_DIR=scratch)
            p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                               env=env, cwd=scratch, timeout=600)
        else:
            root_dir = roots.root(suite)
            binds = hide_tbb_layer(root_dir, empty) if rule == "THR016" else []
            p = roots.run(root_dir, ["python3", "-c", code], timeout=600, binds=binds,
                          env={"NUMBA_THREADING_LAYER": layer, "NUMBA_CACHE_DIR": "/tmp"})
        results.append(roots.case_result(suite, rule, p, os.path.join(scratch, rule + ".log")))
    return results


def main():
    base = mldtest.scratch()
    roots.check_real_messages(lambda s: generation(s, base), roots.wanted_suites(), "roots-numba-messages",
                              must_print=("Terminating", "terminating", "No threading layer could be loaded"))


if __name__ == "__main__":
    main()

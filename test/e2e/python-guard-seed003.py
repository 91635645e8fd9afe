#!/usr/bin/env python3
# labels: scenario
"""Seed 003 under mldoctor.guard(), with Debian's real torch and numba: the
script sets torch to one thread, then numba's first parallel call launches
its omp threading layer, which calls omp_set_num_threads(NUMBA_NUM_THREADS)
on the libgomp torch runs on. guard() warns THR003 at that moment, whether
or not OMP_NUM_THREADS is set, pointing at the script's line, with the
counts torch itself reports before and after (torch.get_num_threads(), the
oracle). The user's own torch.set_num_threads() calls, before and between
imports, are never warned. Both ways into the launch are tried:
numba.get_num_threads() and an @njit(parallel=True) function's first call.
Exit 77 without python3-torch or python3-numba, or when numba's layer is
not omp (then seed 003 cannot happen)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402

SOURCE = os.environ["MLD_SOURCE_DIR"]
PYTHON = "/usr/bin/python3"

CHILD = r"""
import sys, warnings
sys.path.insert(0, %(python)r)
import mldoctor
mldoctor.guard()
warnings.simplefilter("ignore")
warnings.simplefilter("always", mldoctor.HazardWarning)
import torch
torch.set_num_threads(3)
import scipy.linalg
torch.set_num_threads(1)
import numpy as np
import numba
print("BEFORE", torch.get_num_threads(), flush=True)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always", mldoctor.HazardWarning)
    if sys.argv[1] == "get_num_threads":
        numba.get_num_threads()  # LINE-LAUNCH
    else:
        @numba.njit(parallel=True)
        def total(a):
            s = 0.0
            for i in numba.prange(a.shape[0]):
                s += a[i]
            return s
        total(np.ones(100))  # LINE-LAUNCH
print("AFTER", torch.get_num_threads(), numba.threading_layer(), flush=True)
for w in ws:
    print("WARN", w.category.__name__, w.filename, w.lineno)
    print(w.message)
print("COUNT", len(ws))
torch.set_num_threads(1)
import sklearn.ensemble
print("QUIET-AFTER-USER-SET")
"""

probe = subprocess.run([PYTHON, "-c", "import torch, numba"], capture_output=True, text=True)
if probe.returncode != 0:
    print("SKIP: needs python3-torch and python3-numba: %s" % probe.stderr.strip().splitlines()[-1:])
    sys.exit(77)

tmp = scratch()
script = os.path.join(tmp, "train.py")
text = CHILD % {"python": os.path.join(SOURCE, "python")}
open(script, "w").write(text)
base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_THREADING_LAYER",
                                                         "KMP_DUPLICATE_LIB_OK", "MKL_NUM_THREADS")}
base["NUMBA_NUM_THREADS"] = "2"  # numba's count, whatever this machine's CPUs
for how in ("get_num_threads", "njit"):
    line = 1 + next(i for i, ln in enumerate(text.splitlines())
                    if "LINE-LAUNCH" in ln and (how == "get_num_threads") == ("get_num_threads" in ln))
    for omp in (None, "1"):
        env = dict(base)
        if omp:
            env["OMP_NUM_THREADS"] = omp
        label = "%s, OMP_NUM_THREADS %s" % (how, omp or "unset")
        p = subprocess.run([PYTHON, script, how], capture_output=True, text=True, env=env, timeout=600)
        out = p.stdout + p.stderr
        print("== %s\n%s" % (label, out))
        if not check_eq(p.returncode, 0, "%s: the script's exit status" % label):
            continue
        after = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("AFTER ")][0]
        before = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("BEFORE ")][0]
        if after[2] != "omp":
            print("SKIP: numba's threading layer is %s here, not omp: seed 003 cannot happen" % after[2])
            sys.exit(77)
        check_eq((before[1], after[1]), ("1", "2"), "%s: torch's own count goes from 1 to numba's 2" % label)
        check_in("COUNT 1", p.stdout, "%s: one warning at the launch" % label)
        check_in("WARN HazardWarning %s %d" % (script, line), p.stdout, "%s: the warning points at the call" % label)
        check_in("mldoctor THR003: numba's threading layer launch (layer omp", p.stdout, "%s: names numba" % label)
        check_in("changed the thread count of GNU libgomp", p.stdout, "%s: names the runtime" % label)
        check_in("from %s to %s" % (before[1], after[1]), p.stdout, "%s: torch's own counts" % label)
        check_in("(torch's intra-op pool runs on it: libtorch_cpu", p.stdout, "%s: says torch runs on it" % label)
        check_in("NUMBA_NUM_THREADS", p.stdout, "%s: the rule's fix names numba's variable" % label)
        check_eq(p.stdout.count("HazardWarning"), 1, "%s: the user's own set_num_threads calls are not warned"
                 % label)
        check_in("QUIET-AFTER-USER-SET", p.stdout, "%s: the script ran to its end" % label)
finish("python-guard-seed003")

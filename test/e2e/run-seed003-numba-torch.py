#!/usr/bin/env python3
# labels: slow scenario
"""Seed 003 under `mldoctor run`: torch is set to 1 thread, then
numba.get_num_threads() starts numba's OpenMP pool, whose omppool module
calls omp_set_num_threads(NUMBA_NUM_THREADS) on the same libgomp.

Real half (the oracle): the script prints torch's count before and after
numba; after numba it is numba's count, not 1. The script runs twice, with
and without `mldoctor run`, and prints the same.

mldoctor half: the report's THR003 names numba's omppool library as the
caller that changed libgomp's count, the old value (1) and the new one, and
the earlier setter (libtorch_cpu); the thread-call events carry the value
before and after each call, and the runtime it landed in is libgomp.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish  # noqa: E402
from scenarios import (PY, expect_finding, finding_text, run_traced, scenario_env,  # noqa: E402
                       skip_unless)
import subprocess  # noqa: E402

skip_unless("torch", "numba")
SCRIPT = ("import torch; torch.set_num_threads(1); print('torch before', torch.get_num_threads())\n"
          "import numba; n = numba.get_num_threads(); print('numba', n)\n"
          "print('torch after', torch.get_num_threads())\n")
env = scenario_env(NUMBA_NUM_THREADS="2", NUMBA_THREADING_LAYER="omp")

plain = subprocess.run([PY, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
print("real:", plain.stdout.replace("\n", " | "))
check(plain.returncode == 0, "the script runs: " + plain.stderr)
check_in("torch before 1", plain.stdout, "torch starts at 1 thread")
check_in("torch after 2", plain.stdout, "numba's pool reset torch's libgomp count to 2 (seed 003)")

doc, traced = run_traced([PY, "-c", SCRIPT], env)
check(traced.stdout == plain.stdout and traced.returncode == plain.returncode,
      "same output and status under mldoctor run: %r vs %r" % (traced.stdout, plain.stdout))
f = expect_finding(doc, "THR003", "numba resets torch's count")
if f:
    text = finding_text(f)
    print("THR003:", f["message"])
    check_in("omppool", f["message"], "the caller that changed the count is numba's omppool")
    check_in("libgomp.so.1", f["message"], "the runtime is libgomp")
    check_in("from 1 to 2", f["message"], "old and new value")
    check_in("libtorch_cpu", f["message"], "the earlier setter")
    check_in("NUMBA_NUM_THREADS=1", " ".join(f.get("env_fix") or []), "the fix gives numba torch's count")
    check_in("numba", text, "evidence names numba's library path")
if doc:
    calls = [c for p in doc["processes"] for c in p["thread_calls"]]
    numba_calls = [c for c in calls if "omppool" in c["caller"]]
    check(numba_calls and numba_calls[0]["before"] == 1 and numba_calls[0]["after"] == 2
          and numba_calls[0]["runtime"].endswith("libgomp.so.1"),
          "the omppool call is recorded with before=1 after=2 into libgomp: %r" % numba_calls)
    at_exit = [r for p in doc["processes"] for r in p["runtimes_at_exit"] if r["path"].endswith("libgomp.so.1")]
    check(at_exit and at_exit[0]["threads"] == 2 and at_exit[0]["kind"] == "gnu-openmp",
          "at exit libgomp's count is numba's 2: %r" % at_exit)
finish(os.path.basename(__file__))

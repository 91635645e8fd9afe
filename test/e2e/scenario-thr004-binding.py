#!/usr/bin/env python3
# labels: scenario
"""THR004: with OpenMP thread binding on, ranks of one node that the
launcher did not bind to their own CPUs pin their threads to the same CPUs.

Real half (the oracle): two "ranks" of a real OpenMP program (built here with
gcc -fopenmp, and with clang-14 against LLVM libomp where it is installed)
start with the binding variables of each case and either the mask this test
inherited (a launcher that binds nothing) or one CPU each (a launcher that
binds each rank, `taskset -c`); every OpenMP thread reports the CPUs it may
run on (pthread_getaffinity_np). The ranks share CPUs when both pinned their
threads have CPUs in common, at least one of them placed by OpenMP (its CPUs
are not just its rank's mask). libgomp's GOMP_CPU_AFFINITY places threads
outside the rank's mask.

mldoctor half: `check --json` as rank 0 would run it: the same variables,
LOCAL_WORLD_SIZE=2, rank 0's mask. THR004 must be present exactly when the
real ranks shared CPUs. A single rank cannot see the others' masks: the
inherited-mask cases are compared only where rank 0's mask holds more than
half of the online CPUs (then equal masks must overlap); elsewhere they are
reported as not comparable.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, clean_env, fail, finish, scratch  # noqa: E402

PROGRAM = r"""
#define _GNU_SOURCE
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
int main(void) {
#pragma omp parallel
  {
    cpu_set_t s;
    CPU_ZERO(&s);
    pthread_getaffinity_np(pthread_self(), sizeof s, &s);
    char buf[4096];
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < (int)sizeof buf - 8; c++)
      if (CPU_ISSET(c, &s)) n += snprintf(buf + n, sizeof buf - n, "%d,", c);
#pragma omp critical
    printf("%d %s\n", omp_get_thread_num(), buf);
  }
  return 0;
}
"""

cpus = sorted(os.sched_getaffinity(0))
if len(cpus) < 2:
    print("SKIP: needs 2 usable CPUs (has %d)" % len(cpus))
    sys.exit(77)


def online_cpus():
    out = set()
    with open("/sys/devices/system/cpu/online") as f:
        for part in f.read().strip().split(","):
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
    return out


online = online_cpus()
d = scratch()
src = os.path.join(d, "p.c")
with open(src, "w") as f:
    f.write(PROGRAM)
programs = {}
gomp = os.path.join(d, "p-gomp")
subprocess.run(["gcc", "-fopenmp", "-O1", src, "-o", gomp], check=True)
programs["libgomp"] = gomp
llvm_lib = "/usr/lib/llvm-14/lib"
if shutil.which("clang-14") and os.path.exists(os.path.join(llvm_lib, "libomp.so")):
    omp = os.path.join(d, "p-omp")
    subprocess.run(["clang-14", "-fopenmp", "-O1", src, "-o", omp, "-L" + llvm_lib, "-Wl,-rpath," + llvm_lib],
                   check=True)
    programs["libomp"] = omp
else:
    print("note: clang-14 or LLVM libomp missing: the libomp cases are not run")

STEER = ("OMP_", "GOMP_", "KMP_", "LOCAL_WORLD_SIZE", "SLURM_", "OMPI_", "PMI_", "MPI_LOCALNRANKS")
threads = str(min(len(cpus), 4))


def env_of(settings, **extra):
    env = {k: v for k, v in clean_env().items() if not k.startswith(STEER)}
    env["OMP_NUM_THREADS"] = threads
    env.update(settings)
    env.update(extra)
    return env


def rank_threads(program, settings, mask):
    """The CPU sets of a real rank's OpenMP threads."""
    p = subprocess.run(["taskset", "-c", ",".join(map(str, mask)), program], env=env_of(settings),
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        fail("%s under %s: exit %d\n%s" % (program, settings, p.returncode, p.stderr))
        return []
    return [set(int(c) for c in line.split()[1].split(",") if c) for line in p.stdout.splitlines() if line.strip()]


def real_share(program, settings, masks):
    ranks = [rank_threads(program, settings, m) for m in masks]
    # Two threads, one of each rank, on common CPUs, at least one of them
    # placed by OpenMP (its CPUs are not simply its rank's mask: two
    # unpinned ranks that float over one mask are the scheduler's to share).
    m0, m1 = set(masks[0]), set(masks[1])
    shared = any(a & b and (a != m0 or b != m1) for a in ranks[0] for b in ranks[1])
    return shared, ranks


def predicted(settings, mask):
    env = env_of(settings, LOCAL_WORLD_SIZE="2")
    cmd = ["taskset", "-c", ",".join(map(str, mask)), MLDOCTOR, "check", "--json"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("%s: not JSON (exit %d)\n%s" % (" ".join(cmd), p.returncode, p.stderr))
        return None
    return [f for f in doc["findings"] if f["rule"] == "THR004"]


inherited = [cpus, cpus]
bound = [[cpus[0]], [cpus[1]]]
cases = [
    ("libgomp", {"OMP_PROC_BIND": "true"}, inherited),
    ("libgomp", {"OMP_PLACES": "cores"}, inherited),
    ("libgomp", {"OMP_PROC_BIND": "close", "OMP_PLACES": "threads"}, inherited),
    ("libgomp", {}, inherited),
    ("libgomp", {"OMP_PROC_BIND": "false", "OMP_PLACES": "cores"}, inherited),
    ("libgomp", {"OMP_PROC_BIND": "true"}, bound),
    ("libgomp", {"OMP_PLACES": "cores"}, bound),
    ("libgomp", {"GOMP_CPU_AFFINITY": "%d %d" % (cpus[0], cpus[1])}, bound),
    ("libomp", {"KMP_AFFINITY": "granularity=fine,compact,1,0"}, inherited),
    ("libomp", {"OMP_PROC_BIND": "spread"}, inherited),
    ("libomp", {"KMP_AFFINITY": "compact"}, bound),
]
seen = {True: 0, False: 0}
for runtime, settings, masks in cases:
    if runtime not in programs:
        continue
    what = "%s %s, ranks on %s" % (runtime, settings or "(no binding)", masks)
    shared, ranks = real_share(programs[runtime], settings, masks)
    if masks is inherited and len(cpus) * 2 <= len(online):
        print("not comparable (rank 0's mask is at most half of the node): %s; real: %s" % (what, ranks))
        continue
    got = predicted(settings, masks[0])
    if got is None:
        continue
    seen[shared] += 1
    if check_eq(bool(got), shared, "%s: THR004 present (real threads: %s)" % (what, ranks)) and got:
        check(all(k in got[0]["message"] for k in settings), "%s: the message names %s: %s" % (
            what, list(settings), got[0]["message"]))
        check(all(e.startswith("-") for e in got[0]["env_fix"]), "%s: the fix unsets: %s" % (what, got[0]["env_fix"]))
        # The fix applied for real: the variables unset, the ranks no longer share.
        fixed = {k: v for k, v in settings.items() if "-" + k not in got[0]["env_fix"]}
        after, _ = real_share(programs[runtime], fixed, masks)
        check_eq(after, False, "%s: ranks share CPUs after the fix" % what)
        check_eq(predicted(fixed, masks[0]), [], "%s: THR004 after the fix" % what)
check(seen[True] > 0 and seen[False] > 0, "both outcomes compared (shared: %d, not: %d)" % (seen[True], seen[False]))
shutil.rmtree(d, ignore_errors=True)
finish("scenario-thr004-binding")

#!/usr/bin/env python3
# labels: slow scenario
"""THR004: with OpenMP thread binding on, ranks of one node that the
launcher did not bind to their own CPUs pin their threads to the same CPUs —
when the OpenMP runtime they load really pins them, which depends on the
runtime: GNU libgomp builds its places from the kernel's topology, LLVM
libomp from the APIC IDs CPUID gives (on an AMD CPU whose hypervisor hides
leaf 0xB it sees one core per package, and OMP_PROC_BIND's default places,
cores, are then one place: the whole mask).

Real half (the oracle): a fixture Python package per runtime, an extension
module whose code is an OpenMP parallel region reporting each thread's CPUs
(pthread_getaffinity_np): `gompprobe` built with gcc -fopenmp (NEEDED
libgomp.so.1), `llvmprobe` with clang-14 -fopenmp against Debian's LLVM
libomp (NEEDED libomp.so.5, RUNPATH /usr/lib/llvm-14/lib). Two "ranks" of
/usr/bin/python3 import the module and call it, with the binding variables
of each case and either the mask this test inherited (a launcher that binds
nothing) or one CPU each (a launcher that binds each rank, `taskset -c`).
The ranks share CPUs when both pinned their threads have CPUs in common, at
least one of them placed by OpenMP (its CPUs are not just its rank's mask).
libgomp's GOMP_CPU_AFFINITY places threads outside the rank's mask.

mldoctor half: `check --json --import <module>` as rank 0 would run it:
the same variables, LOCAL_WORLD_SIZE=2, rank 0's mask; the import replay
sees which runtime the module loads. THR004 must be present exactly when
that runtime's real ranks shared CPUs, and a fix applied for real must stop
the sharing. (Without a Python environment THR004 judges both runtimes and
says which pins; a live check always finds an interpreter, so that path is
held by the unit tests, thr004-test.cc.) A single rank cannot see the others' masks: the
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
from scenarios import PY, py_info  # noqa: E402

MODULE = r"""
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
static PyObject *threads(PyObject *self, PyObject *args) {
  static char out[1 << 16];
  int n = 0;
  out[0] = 0;
#pragma omp parallel
  {
    cpu_set_t s;
    CPU_ZERO(&s);
    pthread_getaffinity_np(pthread_self(), sizeof s, &s);
    char buf[4096];
    int k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < (int)sizeof buf - 8; c++)
      if (CPU_ISSET(c, &s)) k += snprintf(buf + k, sizeof buf - k, "%d,", c);
#pragma omp critical
    n += snprintf(out + n, sizeof out - n, "%d %s\n", omp_get_thread_num(), buf);
  }
  return PyUnicode_FromString(out);
}
static PyMethodDef methods[] = {{"threads", threads, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "NAME", NULL, -1, methods};
PyMODINIT_FUNC PyInit_NAME(void) { return PyModule_Create(&def); }
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
site = os.path.join(d, "site")
os.makedirs(site)


def build_module(name, compiler, extra):
    src = os.path.join(d, name + ".c")
    with open(src, "w") as f:
        f.write(MODULE.replace("NAME", name))
    out = os.path.join(site, name + py_info()["suffix"])
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-fopenmp", "-I" + py_info()["include"], src, "-o",
                    out] + extra, check=True)
    return name


modules = {"libgomp": build_module("gompprobe", "gcc", [])}
llvm_lib = "/usr/lib/llvm-14/lib"
if shutil.which("clang-14") and os.path.exists(os.path.join(llvm_lib, "libomp.so")):
    modules["libomp"] = build_module("llvmprobe", "clang-14",
                                     ["-L" + llvm_lib, "-Wl,--enable-new-dtags,-rpath," + llvm_lib])
else:
    print("note: clang-14 or LLVM libomp missing: the libomp cases are not run")

STEER = ("OMP_", "GOMP_", "KMP_", "LOCAL_WORLD_SIZE", "SLURM_", "OMPI_", "PMI_", "MPI_LOCALNRANKS",
         "PYTHON")
threads = str(min(len(cpus), 4))


def env_of(settings, **extra):
    env = {k: v for k, v in clean_env().items() if not k.startswith(STEER)}
    env["OMP_NUM_THREADS"] = threads
    env["PYTHONPATH"] = site
    env.update(settings)
    env.update(extra)
    return env


def rank_threads(module, settings, mask):
    """The CPU sets of a real rank's OpenMP threads."""
    code = "import %s; print(%s.threads(), end='')" % (module, module)
    p = subprocess.run(["taskset", "-c", ",".join(map(str, mask)), PY, "-c", code], env=env_of(settings),
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        fail("%s under %s: exit %d\n%s" % (module, settings, p.returncode, p.stderr))
        return []
    return [set(int(c) for c in line.split()[1].split(",") if c) for line in p.stdout.splitlines() if line.strip()]


def real_share(module, settings, masks):
    ranks = [rank_threads(module, settings, m) for m in masks]
    # Two threads, one of each rank, on common CPUs, at least one of them
    # placed by OpenMP (its CPUs are not simply its rank's mask: two
    # unpinned ranks that float over one mask are the scheduler's to share).
    m0, m1 = set(masks[0]), set(masks[1])
    shared = any(a & b and (a != m0 or b != m1) for a in ranks[0] for b in ranks[1])
    return shared, ranks


def predicted(settings, mask, module):
    """THR004 of rank 0's check, with the module's import replayed."""
    env = env_of(settings, LOCAL_WORLD_SIZE="2")
    cmd = ["taskset", "-c", ",".join(map(str, mask)), MLDOCTOR, "check", "--json", "--python", PY,
           "--import", module]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("%s: not JSON (exit %d)\n%s" % (" ".join(cmd), p.returncode, p.stderr))
        return None
    return [f for f in doc["findings"] if f["rule"] == "THR004"]


NAMES = {"libgomp": "GNU libgomp", "libomp": "LLVM libomp"}
inherited = [cpus, cpus]
bound = [[cpus[0]], [cpus[1]]]
cases = [
    ({"OMP_PROC_BIND": "true"}, inherited),
    ({"OMP_PROC_BIND": "spread"}, inherited),
    ({"OMP_PLACES": "cores"}, inherited),
    ({"OMP_PLACES": "threads"}, inherited),
    ({"OMP_PLACES": "sockets"}, inherited),
    ({"OMP_PROC_BIND": "close", "OMP_PLACES": "threads"}, inherited),
    ({}, inherited),
    ({"OMP_PROC_BIND": "false", "OMP_PLACES": "cores"}, inherited),
    ({"OMP_PROC_BIND": "false", "OMP_PLACES": "threads"}, inherited),
    ({"KMP_AFFINITY": "granularity=fine,compact,1,0"}, inherited),
    ({"KMP_AFFINITY": "compact"}, inherited),
    ({"OMP_PROC_BIND": "true"}, bound),
    ({"OMP_PLACES": "cores"}, bound),
    ({"GOMP_CPU_AFFINITY": "%d %d" % (cpus[0], cpus[1])}, bound),
    ({"GOMP_CPU_AFFINITY": "%d %d" % (cpus[0], cpus[1])}, inherited),
    ({"KMP_AFFINITY": "compact"}, bound),
]
seen = {True: 0, False: 0}
for settings, masks in cases:
    comparable = not (masks is inherited and len(cpus) * 2 <= len(online))
    for runtime, module in modules.items():
        what = "%s %s, ranks on %s" % (runtime, settings or "(no binding)", masks)
        shared, ranks = real_share(module, settings, masks)
        if not comparable:
            print("not comparable (rank 0's mask is at most half of the node): %s; real: %s" % (what, ranks))
            continue
        got = predicted(settings, masks[0], module)
        if got is None:
            continue
        seen[shared] += 1
        print("%s: real %s, THR004 %s" % (what, "shared" if shared else "not shared", "present" if got else "absent"))
        if check_eq(bool(got), shared, "%s: THR004 present (real threads: %s)" % (what, ranks)) and got:
            msg = got[0]["message"]
            check(all(k in msg for k in settings), "%s: the message names %s: %s" % (what, list(settings), msg))
            check(NAMES[runtime] + " (loaded by import " + module in msg,
                  "%s: the message names the runtime the job loads: %s" % (what, msg))
            check(all(e.startswith("-") for e in got[0]["env_fix"]), "%s: the fix unsets: %s" % (what, got[0]["env_fix"]))
            # The fix applied for real: the variables unset, the ranks no longer share.
            fixed = {k: v for k, v in settings.items() if "-" + k not in got[0]["env_fix"]}
            after, _ = real_share(module, fixed, masks)
            check_eq(after, False, "%s: ranks share CPUs after the fix" % what)
            check_eq(predicted(fixed, masks[0], module), [], "%s: THR004 after the fix" % what)
check(seen[True] > 0 and seen[False] > 0, "both outcomes compared (shared: %d, not: %d)" % (seen[True], seen[False]))
shutil.rmtree(d, ignore_errors=True)
finish("scenario-thr004-binding")

#!/usr/bin/env python3
# labels: scenario
"""MKL cannot load its CPU-specific kernel library, for real (issue 33 item 2,
MKL011).

A directory holds Debian's real MKL 2020.4 (libmkl_rt, core, interface and
threading layers, from scripts/fetch-test-debs.sh) but none of its kernel
libraries (libmkl_def, libmkl_avx*, libmkl_mc*): what a wheel or an
installer that copied the core but not the kernels leaves. A Python job calls
cblas_dgemm through ctypes; at that first call MKL's dispatcher dlopens the
kernel library for this CPU from its own directory, prints its own error
lines and exits. Which kernel it asks for depends on the CPU (on an AMD EPYC
here MKL 2020.4 asks for libmkl_def.so alone; on an Intel CPU the AVX2 or
AVX-512 one and libmkl_def.so), so the test takes the wording MKL printed.

Oracle: MKL itself (the job exits non-zero and prints "Intel MKL FATAL
ERROR: Cannot load ..."). mldoctor half: `logs` names MKL011 as the first
incident's cause, with the library MKL named; the loader-level line
("cannot open shared object file") is not reported as a separate LD010
error; `explain MKL011` cites MKL's binary.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import PY, scenario_env, test_debs_libdir  # noqa: E402

libdir = test_debs_libdir("libmkl_rt.so", "libmkl_core.so", "libmkl_intel_thread.so", "libmkl_sequential.so",
                          "libmkl_def.so")
t = scratch()
mkl = os.path.join(t, "mkl")
os.mkdir(mkl)
kernels = re.compile(r"^libmkl_(def|avx\w*|mc\w*|vml_\w+)\.so")
copied = []
for name in sorted(os.listdir(libdir)):
    if name.startswith("libmkl_") and not kernels.match(name):
        os.symlink(os.path.join(libdir, name), os.path.join(mkl, name))
        copied.append(name)
check("libmkl_core.so" in copied and not any(kernels.match(n) for n in copied),
      "the directory has MKL's core and no kernel library: %s" % copied)

job = os.path.join(t, "dgemm.py")
with open(job, "w") as f:
    f.write("""import ctypes, sys
mkl = ctypes.CDLL(sys.argv[1])
n = 4
a = (ctypes.c_double * (n * n))(*([1.0] * (n * n)))
c = (ctypes.c_double * (n * n))()
# cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
mkl.cblas_dgemm(101, 111, 111, n, n, n, ctypes.c_double(1.0), a, n, a, n, ctypes.c_double(0.0), c, n)
print("dgemm done", c[0])
""")
env = scenario_env()
env["LD_LIBRARY_PATH"] = mkl
env["MKL_THREADING_LAYER"] = "SEQUENTIAL"
p = subprocess.run([PY, job, os.path.join(mkl, "libmkl_rt.so")], env=env, capture_output=True, text=True,
                   timeout=300)
out = p.stdout + p.stderr
print("job exit %d:\n%s" % (p.returncode, out))
check(p.returncode != 0, "MKL ended the job (exit %d)" % p.returncode)
check("dgemm done" not in out, "the call never returned")
fatal = re.search(r"Intel MKL FATAL ERROR: Cannot load (libmkl_\w+\.so)", out)
check(fatal is not None, "MKL printed its fatal error")
log = os.path.join(t, "job.log")
with open(log, "w") as f:
    f.write(out)

r = subprocess.run([MLDOCTOR, "logs", "--json", log], capture_output=True, text=True)
check_eq(r.returncode, 1, "logs exits 1 on an error finding")
doc = json.loads(r.stdout)
incidents = doc["inputs"][0]["incidents"]
check(incidents and incidents[0]["rule"] == "MKL011", "the first incident is MKL011: %r" %
      [i.get("rule") for i in incidents])
errors = [f for f in doc["inputs"][0]["findings"] if f.get("severity") == "error"]
check_eq(sorted({f["rule"] for f in errors}), ["MKL011"], "the only error rule is MKL011 (no separate LD010)")
if fatal and errors:
    check(any(fatal.group(1) in f["message"] for f in errors), "a finding names %s: %r" %
          (fatal.group(1), [f["message"] for f in errors]))

x = subprocess.run([MLDOCTOR, "explain", "MKL011"], capture_output=True, text=True)
check_in("usr/lib/x86_64-linux-gnu/libmkl_core.so in Debian's libmkl-core 2020.4.304-4", x.stdout,
         "explain cites MKL's binary")
finish(os.path.basename(__file__))

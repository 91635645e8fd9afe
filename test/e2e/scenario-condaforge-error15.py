#!/usr/bin/env python3
# labels: slow scenario
"""The conda-forge OMP: Error #15 case, with real Intel MKL (Debian's MKL
2020.4, unpacked by scripts/fetch-test-debs.sh, which make test runs).

A conda-forge-shaped prefix P (as `_openmp_mutex=*_llvm` makes it):
  P/lib/libomp.so        LLVM's libomp (Debian's libomp.so.5 copied, soname libomp.so)
  P/lib/libgomp.so.1  -> libomp.so
  P/lib/libiomp5.so      another copy of LLVM's runtime (soname libiomp5.so): the
                         Intel runtime MKL's default INTEL layer dlopens from its dir
  P/lib/libmkl_*.so      links to the real MKL files (libmkl_rt finds its layers,
                         and libiomp5.so, in its own directory)
  D/torchlike<EXT>       NEEDED libgomp.so.1, RUNPATH P/lib; its PyInit runs an
                         OpenMP parallel region (torch initialises its pool at import)
  D/mklmod<EXT>          NEEDED libmkl_rt.so, RUNPATH P/lib; mklmod_run() calls cblas_dgemm

Real half: /usr/bin/python3 imports both and calls MKL: the second runtime
aborts the process with OMP: Error #15 (the runtimes print their compiled-in
library name). mldoctor half: `check --import torchlike,mklmod` reports OMP001
as an error whose message is the runtime's own line.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import (build_ext_module, build_omp_runtime_copy, expect_finding,  # noqa: E402
                       finding_text, run_python, run_check, scenario_env, skip_unless,
                       test_debs_libdir)

skip_unless(tools=("patchelf", "/usr/lib/x86_64-linux-gnu/libomp.so.5"))
L = test_debs_libdir("libmkl_rt.so", "libmkl_core.so", "libmkl_intel_thread.so",
                     "libmkl_intel_lp64.so", "libmkl_def.so")

t = scratch()
lib = os.path.join(t, "P", "lib")
d = os.path.join(t, "site")
os.makedirs(lib)
os.makedirs(d)
build_omp_runtime_copy(os.path.join(lib, "libomp.so"), "libomp.so")
os.symlink("libomp.so", os.path.join(lib, "libgomp.so.1"))
build_omp_runtime_copy(os.path.join(lib, "libiomp5.so"), "libiomp5.so")
for f in os.listdir(L):
    if f.startswith("libmkl_"):
        os.symlink(os.path.join(L, f), os.path.join(lib, f))

build_ext_module(d, "torchlike", body="""
int torchlike_threads(void) { int n = 0;
#pragma omp parallel reduction(+:n)
  n += 1;
  return n; }
""", init="torchlike_threads();", runpath=lib, flags=["-fopenmp"],
                 needed=["-L" + lib, "-l:libgomp.so.1"])
build_ext_module(d, "mklmod", body=r"""
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int,
                 double, double *, int);
int mklmod_run(void) {
  static double a[64 * 64], b[64 * 64], c[64 * 64];
  cblas_dgemm(101, 111, 111, 64, 64, 64, 1.0, a, 64, b, 64, 0.0, c, 64);
  return 0;
}
""", runpath=lib, needed=["-L" + lib, "-l:libmkl_rt.so"])

env = scenario_env(pythonpath=d)
p = run_python("import ctypes, torchlike, mklmod\nctypes.CDLL(mklmod.__file__).mklmod_run()\n"
               "print('survived')\n", env)
print("real: exit %d" % p.returncode)
err_line = next((l for l in p.stderr.splitlines() if "OMP: Error #15" in l), None)
print("  " + str(err_line))
check(p.returncode != 0 and "survived" not in p.stdout,
      "the real process aborts (exit %d, stdout %r)" % (p.returncode, p.stdout))
check(err_line is not None, "the real process prints OMP: Error #15; stderr:\n" + p.stderr[:2000])
if err_line:
    err_line = err_line[err_line.index("OMP: Error #15"):]

doc, _ = run_check("--import", "torchlike,mklmod", env=env)
f = expect_finding(doc, "OMP001", "torchlike,mklmod")
if f:
    print("check: %s: %s" % (f.get("severity"), f.get("message")))
    check_eq(f.get("severity"), "error", "OMP001 severity with two LLVM copies")
    text = finding_text(f)
    # The libgomp.so.1 torchlike needs is LLVM's file: counted as LLVM.
    check_in("LLVM libomp libomp.so => " + lib, text, "OMP001 counts P/lib/libgomp.so.1 as LLVM's")
    check_in("libiomp5.so", text, "OMP001 names MKL's libiomp5")
    check_in("first MKL call", text, "OMP001 names MKL's first call as libiomp5's importer")
    if err_line:
        check_in(err_line, f.get("message", ""), "OMP001's message is the runtime's own line")

shutil.rmtree(t, ignore_errors=True)
finish("scenario-condaforge-error15")

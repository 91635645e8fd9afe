#!/usr/bin/env python3
# labels: slow scenario
"""Seed 000 with real Intel MKL: Debian's non-free MKL 2020.4 (libmkl_rt and
its layers, unpacked by scripts/fetch-test-debs.sh, which make test runs)
beside Debian's torch and its GNU libgomp.so.1.

  D/mklmod<EXT>   a real extension module, NEEDED libmkl_rt.so (RUNPATH: the
                  unpacked MKL directory); mklmod_run() calls cblas_dgemm
                  (400x400, a threaded MKL routine) and mkl_get_max_threads
  D/mkl/          mkl-service's `import mkl` check, modelled: mkl-service is
                  not in Debian and this machine reaches only Debian's
                  archive, so mkl/_mklinit<EXT> is a C port of its
                  _preload_threading_layer (mkl/_mklinitmodule.c,
                  research/threading.md §2) calling the real libmkl_rt's
                  MKL_Set_Threading_Layer

For each setting the real /usr/bin/python3 does `import torch[, mkl]; import
mklmod; torch.set_num_threads(2); mklmod_run()` and is the oracle: the
objects mapped afterwards (/proc/self/maps), which runtime MKL's threading
layer binds its OpenMP calls to (LD_DEBUG=bindings), and whether it exits.
`mldoctor check --import torch[,mkl],mklmod` must predict the same MKL layer
objects and OpenMP runtimes (libmkl_rt dlopens them at its first call:
check/mkl-layer.cc) and MKL001/OMP001 with the right severities.
"""
import glob
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import (build_ext_module, findings, finding_text, mapped_objects,  # noqa: E402
                       run_check, run_python, scenario_env, skip_unless, summary,
                       test_debs_libdir)

skip_unless("torch")
L = test_debs_libdir("libmkl_rt.so", "libmkl_core.so", "libmkl_intel_thread.so",
                     "libmkl_gnu_thread.so", "libmkl_sequential.so", "libmkl_intel_lp64.so",
                     "libmkl_def.so")

t = scratch()
d = os.path.join(t, "site")
os.makedirs(os.path.join(d, "mkl"))
build_ext_module(d, "mklmod", body=r"""
int mkl_get_max_threads(void);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int,
                 double, double *, int);
enum { N = 400 };
static double a[N * N], b[N * N], c[N * N];
double mklmod_c00;
int mklmod_run(void) {
  for (int i = 0; i < N * N; i++) { a[i] = 1; b[i] = 2; }
  cblas_dgemm(101, 111, 111, N, N, N, 1.0, a, N, b, N, 0.0, c, N);
  mklmod_c00 = c[0];
  return mkl_get_max_threads();
}
""", runpath=L, needed=["-L" + L, "-l:libmkl_rt.so"])

# mkl-service's _preload_threading_layer, ported (the error text is its own).
MKLINIT = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
/* mkl_service.h maps mkl_set_threading_layer to MKL_Set_Threading_Layer (by
   value); the lowercase symbol is the Fortran interface (by reference). */
int MKL_Set_Threading_Layer(int);
static void set_layer(const char *name, int code) {
  MKL_Set_Threading_Layer(code);
  setenv("MKL_THREADING_LAYER", name, 0);
}
static void preload(void) {
  const char *mtlayer = getenv("MKL_THREADING_LAYER");
  void *omp = dlsym(RTLD_DEFAULT, "omp_get_num_threads");
  const char *omp_name = "(unidentified)";
  const char *iomp = NULL;
  Dl_info info;
  if (omp && dladdr(omp, &info)) {
    omp_name = basename((char *)info.dli_fname);
    iomp = strstr(omp_name, "libiomp5.so");
  }
  if (!mtlayer || !*mtlayer) {
    if (omp && !iomp) { set_layer("GNU", 3); return; }
    set_layer("INTEL", 0);
    if (!omp) dlopen("libiomp5.so", RTLD_LAZY | RTLD_GLOBAL);
  } else if (strcasecmp(mtlayer, "intel") == 0) {
    if (omp && !iomp) {
      fprintf(stderr, "Error: mkl-service + Intel(R) MKL: MKL_THREADING_LAYER=INTEL is "
              "incompatible with %s library.\n\tTry to import numpy first or set the threading "
              "layer accordingly. Set MKL_SERVICE_FORCE_INTEL to force it.\n", omp_name);
      if (!getenv("MKL_SERVICE_FORCE_INTEL")) exit(1);
    } else {
      dlopen("libiomp5.so", RTLD_LAZY | RTLD_GLOBAL);
    }
  }
}
"""
build_ext_module(os.path.join(d, "mkl"), "_mklinit", body=MKLINIT, init="preload();",
                 runpath=L, needed=["-L" + L, "-l:libmkl_rt.so", "-ldl"])
with open(os.path.join(d, "mkl", "__init__.py"), "w") as f:
    f.write("import sys\nflags = sys.getdlopenflags()\nsys.setdlopenflags(flags | 256)  # RTLD_GLOBAL\n"
            "try:\n    from . import _mklinit\nfinally:\n    sys.setdlopenflags(flags)\n")

REAL = r"""
import ctypes, os, sys
for name in sys.argv[1].split(","):
    __import__(name)
import torch, mklmod
torch.set_num_threads(2)
m = ctypes.CDLL(mklmod.__file__)
print("mkl_get_max_threads", m.mklmod_run())
print("c00", ctypes.c_double.in_dll(m, "mklmod_c00").value, "expected", 800.0)
print("MAPS")
print(open("/proc/self/maps").read())
"""


def real(names, env, tag):
    """(returncode, stderr, mapped objects, {runtime: [symbols]} MKL's layer binds to)."""
    dbg = os.path.join(t, "bind-" + tag.replace("=", "-").replace(" ", "_"))
    env = dict(env, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=dbg)
    code = "import sys; sys.argv = ['-', %r]\n" % names + REAL
    p = run_python(code, env)
    maps, head = [], p.stdout
    if "MAPS\n" in p.stdout:
        head, text = p.stdout.split("MAPS\n", 1)
        maps = mapped_objects(text)
    binds = {}
    for fn in glob.glob(dbg + ".*"):
        with open(fn, errors="replace") as f:
            for line in f:
                if "binding file" not in line or "libmkl_" not in line.split(" to ")[0]:
                    continue
                if "_thread.so" not in line.split(" to ")[0]:
                    continue
                target = line.split(" to ", 1)[1].split(" ", 1)[0]
                sym = line.rsplit("`", 1)[1].rstrip("'\n")
                if sym.startswith((".gomp_critical", "omp_", "GOMP_", "__kmpc")) and \
                        os.path.basename(target).startswith(("libgomp", "libiomp", "libomp")):
                    binds.setdefault(os.path.realpath(target), set()).add(sym)
    print("real [%s]: exit %d" % (tag, p.returncode))
    for line in head.splitlines():
        print("  " + line)
    for line in p.stderr.splitlines()[:3]:
        print("  stderr: " + line)
    for m in maps:
        b = os.path.basename(m)
        if "mkl" in b or "omp" in b:
            print("  mapped " + m)
    for target, syms in sorted(binds.items()):
        print("  MKL layer binds to %s: %s" % (target, " ".join(sorted(s for s in syms if not s.startswith(".")))))
    return p.returncode, p.stderr, maps, binds


def omp_files(paths):
    return sorted({os.path.realpath(m) for m in paths
                   if os.path.basename(m).startswith(("libgomp", "libiomp", "libomp"))})


def mkl_files(paths):
    return sorted({os.path.basename(m) for m in paths if os.path.basename(m).startswith("libmkl_")
                   and not os.path.basename(m).startswith(("libmkl_def", "libmkl_avx", "libmkl_mc",
                                                           "libmkl_vml"))})


def predicted(doc):
    """The OpenMP runtimes (real paths) and MKL objects of check's simulated process."""
    imports = (doc or {}).get("imports") or {}
    objs = [p for s in imports.get("steps") or [] for p in s.get("loaded") or []]
    omp = [r.get("path") for r in imports.get("openmp_runtimes") or []]
    return omp_files(omp), mkl_files(objs), imports


def severity(doc, rule):
    fs = findings(doc, rule)
    return fs[0].get("severity") if fs else None


GOMP = os.path.realpath("/usr/lib/x86_64-linux-gnu/libgomp.so.1")
CASES = [
    # tag, imports before mklmod, env, expected MKL001 severity, OMP001 severity
    ("MKL_THREADING_LAYER=INTEL", "torch", dict(MKL_THREADING_LAYER="INTEL"), "error", "warning"),
    ("MKL_THREADING_LAYER=GNU", "torch", dict(MKL_THREADING_LAYER="GNU"), None, "warning"),
    ("MKL_THREADING_LAYER=SEQUENTIAL", "torch", dict(MKL_THREADING_LAYER="SEQUENTIAL"), None, None),
    ("mkl-service, INTEL, MKL_SERVICE_FORCE_INTEL", "torch,mkl",
     dict(MKL_THREADING_LAYER="INTEL", MKL_SERVICE_FORCE_INTEL="1"), "error", "warning"),
    ("mkl-service, INTEL", "torch,mkl", dict(MKL_THREADING_LAYER="INTEL"), "error", None),
    ("mkl-service, layer unset", "torch,mkl", {}, None, "warning"),
]

for tag, names, extra, mkl001, omp001 in CASES:
    env = scenario_env(pythonpath=d, **extra)
    rc, err, maps, binds = real(names, env, tag)
    doc, _ = run_check("--import", names + ",mklmod", env=env)
    if doc is None:
        continue
    p_omp, p_mkl, imports = predicted(doc)
    print("check [%s]: runtimes %s; MKL objects %s; findings %s" % (
        tag, p_omp, p_mkl, [(f.get("rule"), f.get("severity")) for f in doc.get("findings", [])
                            if f.get("rule") in ("MKL001", "OMP001")]))
    exited = rc != 0
    if "INTEL" in extra.get("MKL_THREADING_LAYER", "") and "mkl" in names.split(",") \
            and "MKL_SERVICE_FORCE_INTEL" not in extra:
        check(exited and "MKL_THREADING_LAYER=INTEL is incompatible with libgomp.so.1" in err,
              "[%s] mkl-service exits with its message (exit %d, stderr %r)" % (tag, rc, err[:300]))
        f = findings(doc, "MKL001")
        check(bool(f) and "exits at `import mkl`" in finding_text(f[0]),
              "[%s] MKL001 predicts the exit: %s" % (tag, summary(doc)))
    else:
        check(rc == 0, "[%s] the real process runs (exit %d)\n%s" % (tag, rc, err[-2000:]))
        # The objects: what check's first-call model loads is what is mapped.
        check_eq(p_mkl, mkl_files(maps), "[%s] MKL objects check predicts vs mapped" % tag)
        check_eq(p_omp, omp_files(maps), "[%s] OpenMP runtimes check predicts vs mapped" % tag)
        # Which runtime MKL's threads run on: the layer's OpenMP calls.
        if extra.get("MKL_THREADING_LAYER") == "SEQUENTIAL":
            check(not binds, "[%s] the sequential layer binds no OpenMP call: %r" % (tag, binds))
        elif "MKL_THREADING_LAYER=GNU" in tag or tag.endswith("layer unset"):
            check("GOMP_parallel_start" in binds.get(GOMP, set()),
                  "[%s] MKL's GNU layer forks through %s: %r" % (tag, GOMP, binds))
        else:
            forks = [r for r, s in binds.items() if "__kmpc_fork_call" in s]
            check(forks and GOMP not in forks,
                  "[%s] MKL's Intel layer forks through LLVM's runtime: %r" % (tag, binds))
            check("omp_get_num_threads" in binds.get(GOMP, set()),
                  "[%s] ... while its omp_* queries bind to libgomp: %r" % (tag, binds))
    check_eq(severity(doc, "MKL001"), mkl001, "[%s] MKL001 severity" % tag)
    check_eq(severity(doc, "OMP001"), omp001, "[%s] OMP001 severity" % tag)
    if omp001:
        text = finding_text(findings(doc, "OMP001")[0])
        check_in("libgomp.so.1", text, "[%s] OMP001 names GNU OpenMP" % tag)
        check_in("first MKL call", text, "[%s] OMP001 names MKL's first call as the importer" % tag)

shutil.rmtree(t, ignore_errors=True)
finish("scenario-seed000-real-mkl")

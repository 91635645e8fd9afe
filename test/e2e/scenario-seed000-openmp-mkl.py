#!/usr/bin/env python3
# labels: slow scenario
"""Seed 000: GNU OpenMP (torch's libgomp.so.1) and Intel's libiomp5 (pulled
in by an MKL-linked extension module) in one process.

Intel MKL is not in Debian's archive, so the MKL side is a fixture:
  D/mklnumpy<EXT>        a real extension module, NEEDED libmkl_rt.so.2,
                         DT_RUNPATH $ORIGIN/lib
  D/lib/libmkl_rt.so.2   soname libmkl_rt.so.2, NEEDED libiomp5.so, RUNPATH $ORIGIN
  D/lib/libiomp5.so      LLVM's libomp.so.5 copied, soname set to libiomp5.so
D is on PYTHONPATH.

Real half: /usr/bin/python3 does `import torch; import mklnumpy` and reads
/proc/self/maps: libgomp.so.1 and libiomp5.so are both mapped. It also shows
they are separate pools (torch.set_num_threads(1) changes libgomp's
omp_get_max_threads but not libiomp5's), and records what mkl-service's
layer check would see (dlsym(RTLD_DEFAULT, "omp_get_num_threads") and dladdr:
after import torch it is libgomp.so.1, made global by libtorch_global_deps.so).

mldoctor half: `check --import torch,mklnumpy` reports OMP001 naming both
runtimes and MKL001 with env_fix MKL_THREADING_LAYER=GNU; with
MKL_THREADING_LAYER=GNU in the environment there is no MKL001.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import (build_mkl_env, expect_finding, expect_no_finding, finding_text,  # noqa: E402
                       mapped_objects, run_check, run_python, scenario_env, skip_unless)

skip_unless("torch", tools=("patchelf", "/usr/lib/x86_64-linux-gnu/libomp.so.5"))

t = scratch()
d = os.path.join(t, "site")
os.makedirs(d)
fx = build_mkl_env(d)

REAL = r"""
import ctypes, os
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
def global_omp():
    # What mkl-service's _preload_threading_layer sees.
    try:
        f = ctypes.CDLL(None).omp_get_num_threads
    except AttributeError:
        return "-"
    info = DlInfo()
    ctypes.CDLL("libc.so.6").dladdr(ctypes.cast(f, ctypes.c_void_p), ctypes.byref(info))
    return os.path.basename(info.fname.decode())
import torch
print("global-omp-after-torch", global_omp())
import mklnumpy
print("global-omp-after-mklnumpy", global_omp())
torch.set_num_threads(1)
gomp = ctypes.CDLL("libgomp.so.1")
mod = ctypes.CDLL(mklnumpy.__file__)
print("threads gomp=%d iomp=%d" % (gomp.omp_get_max_threads(), mod.mklnumpy_threads()))
print("MAPS")
print(open("/proc/self/maps").read())
"""


def soname(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "(SONAME)" in line:
            return line.split("[", 1)[1].rstrip("]")
    return None


def real(env, tag):
    p = run_python(REAL, env)
    if not check(p.returncode == 0, "[%s] real run failed (exit %d)\nstdout:\n%s\nstderr:\n%s"
                 % (tag, p.returncode, p.stdout[:2000], p.stderr)):
        return None
    head, maps = p.stdout.split("MAPS\n", 1)
    omp = [(m, soname(m)) for m in mapped_objects(maps) if "omp" in os.path.basename(m)]
    print("real [%s]:" % tag)
    for line in head.splitlines():
        print("  " + line)
    for path, so in omp:
        print("  mapped %s (soname %s)" % (path, so))
    return head, [so for _, so in omp]


env = scenario_env(pythonpath=d)
r = real(env, "nothing set")
if r:
    head, sonames = r
    check("libgomp.so.1" in sonames and "libiomp5.so" in sonames,
          "both OpenMP runtimes are mapped: %r" % sonames)
    check_in("global-omp-after-torch libgomp.so.1", head,
             "after import torch libgomp is globally visible (mkl-service would pick GNU)")
    check_in("threads gomp=1 iomp=", head, "torch.set_num_threads(1) sets libgomp's count")
    iomp_threads = int(head.split("iomp=")[1].split()[0])
    check(iomp_threads == len(os.sched_getaffinity(0)),
          "libiomp5's pool keeps its own count (%d)" % iomp_threads)

gnu_env = scenario_env(pythonpath=d, MKL_THREADING_LAYER="GNU")
real(gnu_env, "MKL_THREADING_LAYER=GNU")  # the fixture's mkl_rt NEEDs libiomp5 either way

# mldoctor half.
doc, _ = run_check("--import", "torch,mklnumpy", env=env)
f = expect_finding(doc, "OMP001", "torch,mklnumpy")
if f:
    text = finding_text(f)
    check_in("libgomp.so.1", text, "OMP001 names GNU OpenMP")
    check_in("libiomp5.so", text, "OMP001 names Intel OpenMP")
f = expect_finding(doc, "MKL001", "torch,mklnumpy")
if f:
    check_in("MKL_THREADING_LAYER=GNU", f.get("env_fix") or [], "MKL001 env_fix")

doc, _ = run_check("--import", "torch,mklnumpy", env=gnu_env)
if doc is not None:
    expect_no_finding(doc, "MKL001", "torch,mklnumpy with MKL_THREADING_LAYER=GNU")

shutil.rmtree(t, ignore_errors=True)
finish("scenario-seed000-openmp-mkl")

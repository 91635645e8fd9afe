#!/usr/bin/env python3
# labels: slow scenario
"""CUDA001 with real CUDA runtimes: Debian's non-free libcudart11.0 (11.8,
unpacked by scripts/fetch-test-debs.sh, which make test runs) beside the
CUDA 13 toolkit's libcudart.so.13 under /usr/local/cuda (where that is
absent, a stand-in: the 11.8 file copied with patchelf --set-soname
libcudart.so.13, which the test says).

  D/cuda11mod<EXT>  NEEDED libcudart.so.11.0 (RUNPATH the unpacked directory)
  D/cuda13mod<EXT>  NEEDED libcudart.so.13 (RUNPATH the CUDA 13 directory)
Each exports a function calling cudaRuntimeGetVersion, which needs no driver.

Real half: /usr/bin/python3 imports both and reports both runtime versions
and /proc/self/maps (both libraries mapped: dlopen needs no GPU and no
driver). mldoctor half: `check --import cuda11mod,cuda13mod` reports CUDA001
naming both files, and, on a machine without a driver, says so without
claiming a GPU problem it cannot see.
"""
import ctypes
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import (build_ext_module, expect_finding, finding_text, mapped_objects,  # noqa: E402
                       run_check, run_python, scenario_env, summary, test_debs_libdir)

L11 = test_debs_libdir("libcudart.so.11.0")
t = scratch()
d = os.path.join(t, "site")
os.makedirs(d)

L13 = "/usr/local/cuda/lib64"
if not os.path.exists(os.path.join(L13, "libcudart.so.13")):
    L13 = os.path.join(t, "cuda13")
    os.makedirs(L13)
    stand_in = os.path.join(L13, "libcudart.so.13")
    shutil.copy(os.path.realpath(os.path.join(L11, "libcudart.so.11.0")), stand_in)
    subprocess.run(["patchelf", "--set-soname", "libcudart.so.13", stand_in], check=True)
    print("NOTE: no /usr/local/cuda/lib64/libcudart.so.13 here; a stand-in (the 11.8 file "
          "renamed with patchelf) plays it")

BODY = ("int cudaRuntimeGetVersion(int *);\n"
        "int %s_version(void){int v = -1; int rc = cudaRuntimeGetVersion(&v); return rc ? -1000 - rc : v;}\n")
m11 = build_ext_module(d, "cuda11mod", body=BODY % "cuda11mod", runpath=L11,
                       needed=["-L" + L11, "-l:libcudart.so.11.0"])
m13 = build_ext_module(d, "cuda13mod", body=BODY % "cuda13mod", runpath=L13,
                       needed=["-L" + L13, "-l:libcudart.so.13"])

env = scenario_env(pythonpath=d)
p = run_python(r"""
import ctypes, cuda11mod, cuda13mod
print("versions", ctypes.CDLL(cuda11mod.__file__).cuda11mod_version(),
      ctypes.CDLL(cuda13mod.__file__).cuda13mod_version())
print("MAPS")
print(open("/proc/self/maps").read())
""", env)
real_cudart = []
if check(p.returncode == 0, "real import of both modules (exit %d)\n%s" % (p.returncode, p.stderr)):
    head, maps = p.stdout.split("MAPS\n", 1)
    real_cudart = sorted(os.path.realpath(m) for m in mapped_objects(maps)
                         if os.path.basename(m).startswith("libcudart"))
    print("real: " + head.strip())
    for m in real_cudart:
        print("  mapped " + m)
    check(len(real_cudart) == 2, "both CUDA runtimes are mapped: %r" % real_cudart)
    # Both runtimes are live code in the process: each answers (13 with its
    # version; 11.8 with an error code when there is no driver).
    check(head.split()[1] != "-1" and head.split()[2] != "-1", "both runtimes were called: " + head)

doc, _ = run_check("--import", "cuda11mod,cuda13mod", env=env)
f = expect_finding(doc, "CUDA001", "cuda11mod,cuda13mod")
if f:
    text = finding_text(f)
    print("check: " + text.replace("\n", "\n  "))
    check_in("libcudart", f.get("subject", ""), "CUDA001's subject is the family")
    for m in real_cudart:
        # check names the path as the loader opened it; compare real paths.
        named = [line.split(" => ", 1)[1].split(",")[0] for line in text.splitlines() if " => " in line]
        check(m in [os.path.realpath(n) for n in named],
              "CUDA001 names the mapped %s (evidence %r)" % (m, named))
    check_in("cuda11mod", text, "CUDA001 names the import that loads 11.0")
    check_in("cuda13mod", text, "CUDA001 names the import that loads 13")

# No driver on this machine: check must not claim a driver it cannot see.
if doc is not None and not os.path.exists("/proc/driver/nvidia/version"):
    libcuda_found = any(isinstance(l, dict) and l.get("soname") == "libcuda.so.1" and l.get("path")
                        for l in doc.get("libraries") or [])
    gpu_findings = [(x.get("rule"), x.get("severity"), x.get("message")) for x in doc.get("findings", [])
                    if x.get("rule", "").startswith(("GPU", "NCCL", "CUDA"))]
    print("check on this driverless machine: libcuda.so.1 found: %s; GPU/NCCL/CUDA findings: %s"
          % (libcuda_found, gpu_findings))
    check(not any(r == "CUDA001" and "libcuda" == (x or "") for r, _, x in gpu_findings),
          "no CUDA001 about the driver library")
    check(all(s != "error" for r, s, _ in gpu_findings if r != "CUDA001"),
          "no GPU/NCCL error on a machine with no GPU: %s" % summary(doc))

shutil.rmtree(t, ignore_errors=True)
finish("scenario-cuda001-real-cudart")

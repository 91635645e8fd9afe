#!/usr/bin/env python3
# labels: slow scenario
"""A CUDA pip torch finds its CUDA libraries in the nvidia-*-cu12 wheels
through RUNPATH chains.

Fixture (wheels.py nvidia_env), a venv (no system site-packages):
  torch/lib/libtorch_global_deps.so, torch/lib/libtorch_cuda.so
      NEEDED libcublas.so.12, libcudart.so.12; RUNPATH
      $ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cuda_runtime/lib:
      $ORIGIN/../../nvidia/cudnn/lib:$ORIGIN (torch 2.x's)
  nvidia/cuda_runtime/lib/libcudart.so.12   CUDA 13's real libcudart.so.13 from
      /usr/local/cuda, SONAME set to libcudart.so.12 (a stand-in where absent)
  nvidia/cublas/lib/libcublas.so.12 (stand-in) NEEDs libcublasLt.so.12 and
      libcudart.so.12, RUNPATH $ORIGIN
  dist-infos nvidia-cuda-runtime-cu12, nvidia-cublas-cu12, torch.
Also with LD_LIBRARY_PATH naming a directory with another libcudart.so.12:
LD_LIBRARY_PATH is searched before RUNPATH, for the wheel's libraries too.

Real half: the venv's python imports torch; maps. mldoctor half: `check
--import torch` ends with the same objects under the fixture, each brought
by import torch, and no missing-library or version finding.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, finish, scratch  # noqa: E402
from scenarios import expect_no_finding, scenario_env, skip_unless  # noqa: E402
from wheels import (GOMP, compare_objects, nvidia_env, print_real, real_imports,  # noqa: E402
                    run_check_py, under)

skip_unless(tools=("patchelf", "readelf", GOMP))

t = scratch()
fx = nvidia_env(t)
print("libcudart.so.12: %s" % fx["cudart_kind"])
py = fx["python"]

for tag, extra in (("RUNPATH", {}), ("LD_LIBRARY_PATH first", "ldlp")):
    env = scenario_env()
    other = None
    if extra:
        d = os.path.join(t, "other-cuda", "lib64")
        os.makedirs(d, exist_ok=True)
        other = os.path.join(d, "libcudart.so.12")
        shutil.copy(fx["cudart"], other)
        env["LD_LIBRARY_PATH"] = d
    real = real_imports(py, ["torch"], env)
    if real:
        print_real(tag, real, t)
        check(real["steps"][0]["ok"], "[%s] import torch works for real" % tag)
        mapped = under(real["maps"], t)
        want = os.path.realpath(other or fx["cudart"])
        check(want in mapped, "[%s] the real process maps %s: %r" % (tag, want, mapped))
        for lib in ("cublas", "cublaslt"):
            check(os.path.realpath(fx[lib]) in mapped, "[%s] %s is mapped" % (tag, fx[lib]))
    doc, _ = run_check_py(py, "--import", "torch", env=env)
    if doc:
        compare_objects(doc, real, t, "[%s] --import torch" % tag)
        for rule in ("LD001", "LD002"):
            expect_no_finding(doc, rule, "[%s] --import torch" % tag)

shutil.rmtree(t, ignore_errors=True)
finish("scenario-wheel-nvidia-runpath")

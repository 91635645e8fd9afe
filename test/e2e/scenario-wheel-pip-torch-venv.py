#!/usr/bin/env python3
# labels: slow scenario
"""Issue 17's Must-show venv: Debian's torch plus one wheel-shaped package
whose extension module is in a subpackage and vendors a renamed GNU OpenMP.

Fixture (test/e2e/lib/wheels.py pip_torch_venv), built from real ELF files:
  V = `/usr/bin/python3 -m venv --system-site-packages` (torch stays in
      /usr/lib/python3/dist-packages), site = V/lib/python3.X/site-packages
  site/pkg/__init__.py            from pkg import _core
  site/pkg/_core<EXT>             calls omp_get_max_threads@OMP_1.0; NEEDED and
                                  vn_file libgomp-<hash>.so.1, RUNPATH $ORIGIN/../pkg.libs
  site/pkg.libs/libgomp-<hash>.so.1   the system's libgomp.so.1, SONAME rewritten
                                  (auditwheel's name: sha256 of the original)
  site/pkg-1.0.dist-info          METADATA, WHEEL, INSTALLER, top_level.txt,
                                  RECORD with every file's sha256 and size

Real half (the oracle): V/bin/python imports torch, then pkg; /proc/self/maps
after each, and omp_get_max_threads of each mapped runtime (OMP_NUM_THREADS=3,
then omp_set_num_threads(1) through one: two separate pools).
mldoctor half: `check --python V/bin/python --import torch,pkg` replays pkg's
module, names both GNU OpenMP copies with the import that brings each
(openmp_runtimes and OMP001), and its objects under V are the mapped ones.
`--import torch,nosuchpkg`: the real import fails ("No module named
'nosuchpkg'"); check's output names nosuchpkg instead of dropping it.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import expect_finding, finding_text, scenario_env, skip_unless  # noqa: E402
from wheels import (GOMP, brought_by, check_step_for, compare_objects, compare_runtimes,  # noqa: E402
                    pip_torch_venv, print_real, real_imports, real_runtimes, real_step,
                    run_check_py, separate_pools, soname)

skip_unless("torch", tools=("patchelf", "readelf", GOMP))

t = scratch()
fx = pip_torch_venv(t)
env = scenario_env(OMP_NUM_THREADS=3)
py = fx["python"]

real = real_imports(py, ["torch", "pkg"], env)
if real:
    print_real("torch, pkg", real, t)
    check(all(s["ok"] for s in real["steps"]), "torch and pkg import for real: %r" % real["steps"])
    gomps = real_runtimes(real)
    check(os.path.realpath(GOMP) in gomps and os.path.realpath(fx["gomp"]) in gomps and len(gomps) == 2,
          "two GNU OpenMP copies are mapped for real (system's and pkg's): %r" % gomps)
    check(brought_by(real, fx["gomp"]) == "pkg", "pkg's libgomp copy comes with import pkg")
    check(brought_by(real, GOMP) == "torch", "the system libgomp comes with import torch")
    separate_pools(real, "torch, pkg")

doc, _ = run_check_py(py, "--import", "torch,pkg", env=env)
if doc:
    s = check_step_for(doc, fx["module"])
    check(s is not None and s.get("import") == "pkg",
          "check replays pkg's module %s under import pkg (RECORD-based discovery); steps: %s"
          % (fx["module"], json.dumps([(x.get("import"), x.get("path")) for x in doc["imports"]["steps"]])))
    compare_runtimes(doc, real, "torch,pkg")
    compare_objects(doc, real, t, "torch,pkg")
    f = expect_finding(doc, "OMP001", "torch,pkg")
    if f:
        text = finding_text(f)
        check_in(soname(fx["gomp"]), text, "OMP001 names pkg's vendored copy")
        check_in("libgomp.so.1", text, "OMP001 names the system's libgomp")
        check_in("import pkg", text, "OMP001 says which import brings pkg's copy")
        check_in("import torch", text, "OMP001 says which import brings torch's")

# An import name that maps to nothing.
real = real_imports(py, ["torch", "nosuchpkg"], env)
s = real_step(real, "nosuchpkg")
if s:
    print("real [torch, nosuchpkg]: %s" % s["error"])
    check(not s["ok"] and "nosuchpkg" in (s["error"] or ""), "import nosuchpkg fails for real")
doc, p = run_check_py(py, "--import", "torch,nosuchpkg", env=env)
if doc:
    check_in("nosuchpkg", json.dumps(doc), "check --json reports the import nosuchpkg")
_, p = run_check_py(py, "--import", "torch,nosuchpkg", env=env, json_out=False)
check_in("nosuchpkg", p.stdout, "check's text report names nosuchpkg")

shutil.rmtree(t, ignore_errors=True)
finish("scenario-wheel-pip-torch-venv")

#!/usr/bin/env python3
# labels: slow scenario
"""Three wheels, three vendored GNU OpenMP copies, two of them one build.

Fixture (test/e2e/lib/wheels.py opencv_vendored_env): a venv (no system
site-packages) with
  torch/lib/libgomp-<h>.so.1                    pip torch's copy (lib/libtorch_cpu.so
                                                NEEDs it; torch._C -> libtorch_python.so
                                                -> libtorch_cpu.so)
  opencv_python_headless.libs/libgomp-<h2>.so.1.0.0   cv2/cv2.abi3.so's copy: another
                                                build (another build-id, hash, name)
  scikit_learn.libs/libgomp-<h>.so.1.0.0        sklearn.utils._openmp_helpers' copy:
                                                the SAME build as torch's (same
                                                original, same hash), another name
all copies of the system's libgomp renamed as auditwheel renames them, with
dist-infos (torch, opencv-python-headless, scikit-learn) whose RECORDs list them.

Real half: the venv's python imports torch, cv2, sklearn; maps after each;
each runtime's omp_get_max_threads (three separate pools); readelf's build-ids.
mldoctor half: `check --import torch,cv2,sklearn`: the runtimes and the import
that brings each as the maps show; the objects under the venv as mapped;
OMP001 names the three copies; LD004 pairs torch's and scikit-learn's copies
(one build under two names) and puts no copies of different builds together.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import expect_finding, expect_no_finding, findings, finding_text, scenario_env, skip_unless  # noqa: E402
from wheels import (GOMP, build_id, compare_objects, compare_runtimes, evidence_paths,  # noqa: E402
                    opencv_vendored_env, print_real, real_imports, real_runtimes, run_check_py,
                    separate_pools, soname)

skip_unless(tools=("patchelf", "readelf", GOMP))

t = scratch()
fx = opencv_vendored_env(t)
env = scenario_env(OMP_NUM_THREADS=3)
py = fx["python"]
copies = {k: os.path.realpath(fx[k]["gomp"]) for k in ("torch", "cv2", "sklearn")}
ids = {k: build_id(p) for k, p in copies.items()}
print("build-ids: %r" % ids)
check(ids["torch"] == ids["sklearn"] and ids["cv2"] != ids["torch"],
      "torch's and sklearn's copies are one build, cv2's another: %r" % ids)

real = real_imports(py, ["torch", "cv2", "sklearn"], env)
if real:
    print_real("torch, cv2, sklearn", real, t)
    check(all(s["ok"] for s in real["steps"]), "all three import for real")
    check(real_runtimes(real) == sorted(copies.values()),
          "the three copies are mapped for real: %r" % real_runtimes(real))
    separate_pools(real, "torch, cv2, sklearn")

doc, _ = run_check_py(py, "--import", "torch,cv2,sklearn", env=env)
if doc:
    compare_runtimes(doc, real, "torch,cv2,sklearn")
    compare_objects(doc, real, t, "torch,cv2,sklearn")
    f = expect_finding(doc, "OMP001", "torch,cv2,sklearn")
    if f:
        text = finding_text(f)
        for k, p in copies.items():
            check_in(soname(p), text, "OMP001 names %s's copy" % k)
        # Each copy's owner, and the fix for wheels (never "use all PyPI wheels").
        for owner in ("torch 2.1.0", "opencv-python-headless 4.8.1.78", "scikit-learn 1.3.2"):
            check_in("from " + owner, text, "OMP001 names the distribution " + owner)
        check_in("pip cannot make them share one", f.get("fix", ""), "OMP001's fix is for wheels")
        check("PyPI wheels" not in f.get("fix", ""), "OMP001's fix: %r" % f.get("fix"))
    pairs = [sorted(evidence_paths(f)) for f in findings(doc, "LD004")]
    print("check's LD004 groups: %r" % pairs)
    check(sorted([copies["torch"], copies["sklearn"]]) in pairs,
          "LD004 pairs torch's and scikit-learn's copies (one build, build-id %s); groups: %r"
          % (ids["torch"], pairs))
    for g in pairs:
        check(len({build_id(p) for p in g}) == 1,
              "an LD004 group holds copies of one build only (readelf build-ids %r)"
              % {p: build_id(p) for p in g})
    expect_no_finding(doc, "LD002", "torch,cv2,sklearn")
    expect_no_finding(doc, "TLS001", "torch,cv2,sklearn")

shutil.rmtree(t, ignore_errors=True)
finish("scenario-wheel-opencv-vendored-omp")

#!/usr/bin/env python3
# labels: slow scenario
"""A failed step is a failed step: opencv's wheel needs GLIBCXX_3.4.32, the
system's libstdc++.so.6 (GCC 12) stops at GLIBCXX_3.4.30.

Fixture: opencv_vendored_env(cv2_glibcxx="GLIBCXX_3.4.32") (wheels.py): as
scenario-wheel-opencv-vendored-omp, but cv2/cv2.abi3.so was linked against a
libstdc++ stub with GLIBCXX_3.4.32 and references a symbol at that version;
at run time libtorch_cpu.so has already loaded the system libstdc++.so.6.

Real half: torch imports; `import cv2` fails with the loader's message (the
version need), and glibc's rollback unmaps what that dlopen() had mapped
(cv2's vendored libgomp is NOT in /proc/self/maps afterwards); sklearn imports.
Two OpenMP runtimes in the real link map.
mldoctor half: `check --import torch,cv2,sklearn`: cv2's step fails with the
loader's message (LD002's message byte-identical), the replay rolls it back
(its objects and its libgomp gone: two runtimes, LD004 pairs torch's and
scikit-learn's copies, never cv2's), and `libs PYTHON --load-order` reports
the failing step with the same message.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import expect_finding, findings, scenario_env, skip_unless  # noqa: E402
from wheels import (GOMP, check_step_for, compare_objects, compare_runtimes, evidence_paths,  # noqa: E402
                    opencv_vendored_env, print_real, real_imports, real_runtimes, real_step,
                    run_check_py, under)

skip_unless(tools=("patchelf", "readelf", GOMP))

t = scratch()
fx = opencv_vendored_env(t, cv2_glibcxx="GLIBCXX_3.4.32")
env = scenario_env(OMP_NUM_THREADS=3)
py = fx["python"]
copies = {k: os.path.realpath(fx[k]["gomp"]) for k in ("torch", "cv2", "sklearn")}

real = real_imports(py, ["torch", "cv2", "sklearn"], env)
message = None
if real:
    print_real("torch, cv2, sklearn", real, t)
    s = real_step(real, "cv2")
    check(s is not None and not s["ok"], "import cv2 fails for real")
    message = s["error"] if s else None
    check_in("version `GLIBCXX_3.4.32' not found (required by %s)" % fx["cv2"]["module"], message or "",
             "the real loader's message")
    check(real_step(real, "torch")["ok"] and real_step(real, "sklearn")["ok"], "torch and sklearn import")
    check(copies["cv2"] not in under(real["maps"], t),
          "cv2's vendored libgomp is unmapped after the failed dlopen")
    check(real_runtimes(real) == sorted([copies["torch"], copies["sklearn"]]),
          "two OpenMP runtimes in the real process: %r" % real_runtimes(real))

doc, _ = run_check_py(py, "--import", "torch,cv2,sklearn", env=env)
if doc and message:
    st = check_step_for(doc, fx["cv2"]["module"])
    check(st is not None and st.get("ok") is False,
          "check's step for cv2.abi3.so fails: %s" % json.dumps(st))
    if st:
        check_eq(st.get("error"), message, "check's step error is the real loader's message")
    f = expect_finding(doc, "LD002", "torch,cv2,sklearn")
    if f:
        check_in(message, f.get("message", ""), "LD002's message is the real loader's, byte for byte")
    compare_runtimes(doc, real, "torch,cv2,sklearn (cv2 fails)")
    compare_objects(doc, real, t, "torch,cv2,sklearn (cv2 fails)")
    pairs = [sorted(evidence_paths(f)) for f in findings(doc, "LD004")]
    print("check's LD004 groups: %r" % pairs)
    check(sorted([copies["torch"], copies["sklearn"]]) in pairs,
          "LD004 pairs torch's and scikit-learn's copies; groups: %r" % pairs)
    check(not any(copies["cv2"] in g for g in pairs),
          "LD004 does not name cv2's copy, which the failed dlopen unloaded: %r" % pairs)

# libs --load-order: the same dlopen() calls from the interpreter.
order = [fx["torch"]["global_deps"], fx["torch"]["module"], fx["cv2"]["module"], fx["sklearn"]["module"]]
p = subprocess.run([MLDOCTOR, "libs", "--json", os.path.realpath(py), "--load-order", ",".join(order)],
                   env=env, capture_output=True, text=True, timeout=120)
try:
    lo = json.loads(p.stdout).get("load_order") or {}
except ValueError:
    lo = {}
    check(False, "libs --load-order: no JSON (exit %d): %s" % (p.returncode, p.stderr))
steps = lo.get("steps") or []
cv = [s for s in steps if s.get("object") == fx["cv2"]["module"]]
check(bool(cv) and cv[0].get("ok") is False,
      "libs --load-order reports cv2's dlopen() as failed: %s" % json.dumps(cv))
if cv and message:
    check_eq(cv[0].get("error"), message, "libs --load-order's error is the real loader's message")
check(p.returncode != 0, "libs --load-order exits non-zero when a step fails (exit %d)" % p.returncode)

shutil.rmtree(t, ignore_errors=True)
finish("scenario-wheel-failed-step")

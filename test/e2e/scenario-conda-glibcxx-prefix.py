#!/usr/bin/env python3
# labels: slow scenario
"""A GLIBCXX need met only by a conda prefix's libstdc++.

Fixture (wheels.py conda_glibcxx_env): a prefix P with bin/python (a venv of
/usr/bin/python3, so sys.prefix is P), conda-meta/libstdcxx-ng-13.2.0-*.json,
P/lib/libstdc++.so.6 -> libstdc++.so.6.0.32 (a stub whose versions go up to
GLIBCXX_3.4.32; the system's GCC 12 libstdc++ stops at 3.4.30), and in
P/lib/python3.X/site-packages:
  cxxpkg/_ext<EXT>    needs GLIBCXX_3.4.32, RUNPATH $ORIGIN/../../../ (P/lib)
  cxxnorp/_ext<EXT>   the same need, no RUNPATH
  cxxtop<EXT>, cxxtopnorp<EXT>   the same two as top-level single-file modules
                      (RUNPATH $ORIGIN/../..), which check resolves without
                      RECORD: the loader's half of the question on its own
CONDA_PREFIX=P in the environment of both halves.

Real half and mldoctor half, three runs for each pair (cxxpkg/cxxnorp,
cxxtop/cxxtopnorp):
  import cxxpkg           works (P/lib's libstdc++ is mapped): no LD002
  import cxxnorp          fails: the system's libstdc++ lacks the version;
                          LD002's message byte-identical to the loader's
  import cxxpkg, cxxnorp  both work (the loaded soname is reused): no LD002
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import expect_finding, expect_no_finding, scenario_env, skip_unless  # noqa: E402
from wheels import (check_step_for, compare_objects, conda_glibcxx_env, print_real,  # noqa: E402
                    real_imports, run_check_py, under)

skip_unless(tools=("readelf",))

t = scratch()
fx = conda_glibcxx_env(t)
py = fx["python"]
env = scenario_env(CONDA_PREFIX=fx["root"], CONDA_DEFAULT_ENV="fixture")
mods = fx["modules"]

RUNS = []
for good, bad in (("cxxpkg", "cxxnorp"), ("cxxtop", "cxxtopnorp")):
    RUNS += [[good], [bad], [good, bad]]
for names in RUNS:
    tag = ",".join(names)
    bad_alone = len(names) == 1 and names[0].endswith("norp")
    real = real_imports(py, names, env)
    if not real:
        continue
    print_real(tag, real, t)
    doc, _ = run_check_py(py, "--import", tag, env=env)
    fails = [s for s in real["steps"] if not s["ok"]]
    if bad_alone:
        check(bool(fails), "[%s] fails for real without the RUNPATH" % tag)
        message = fails[0]["error"] if fails else ""
        check_in("version `GLIBCXX_3.4.32' not found (required by %s)" % mods[names[0]], message,
                 "[%s] the real loader's message" % tag)
        check(os.path.realpath(fx["libstdcxx"]) not in under(real["maps"], t),
              "[%s] the prefix's libstdc++ is not mapped" % tag)
        if doc:
            f = expect_finding(doc, "LD002", tag)
            if f:
                check_in(message, f.get("message", ""), "[%s] LD002's message is the loader's" % tag)
                # A conda environment: its own libstdc++, new enough (GCC 13.2 defines 3.4.32).
                check_in("conda install -c conda-forge 'libstdcxx-ng>=13.2'", f.get("fix", ""),
                         "[%s] LD002's fix in a conda environment" % tag)
            st = check_step_for(doc, mods[names[0]])
            check(st is not None and st.get("ok") is False, "[%s] check's step fails: %r" % (tag, st))
            if st:
                check_eq(st.get("error"), message, "[%s] check's step error" % tag)
    else:
        check(not fails, "[%s] imports for real: %r" % (tag, fails))
        check(os.path.realpath(fx["libstdcxx"]) in under(real["maps"], t),
              "[%s] the prefix's libstdc++ is mapped" % tag)
        if doc:
            expect_no_finding(doc, "LD002", tag)
            for n in names:
                st = check_step_for(doc, mods[n])
                check(st is not None and st.get("ok") is True, "[%s] check's step for %s loads: %r" % (tag, n, st))
    if doc:
        compare_objects(doc, real, t, "[%s]" % tag)

shutil.rmtree(t, ignore_errors=True)
finish("scenario-conda-glibcxx-prefix")

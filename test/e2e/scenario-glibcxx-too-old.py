#!/usr/bin/env python3
# labels: slow scenario
"""An extension module needs GLIBCXX_3.4.30, but the libstdc++.so.6 its
DT_RUNPATH finds is older.

Fixture (stubs, not real C++ runtimes; both have soname libstdc++.so.6):
  T/new/libstdc++.so.6   versions GLIBCXX_3.4 .. GLIBCXX_3.4.30 (link time only)
  T/old/libstdc++.so.6   versions GLIBCXX_3.4 .. GLIBCXX_3.4.28
  T/mods/newcxx<EXT>     linked against the new stub, references
                         std::condition_variable::wait@GLIBCXX_3.4.30,
                         DT_RUNPATH T/old; T/mods is on PYTHONPATH.

Real half: `import newcxx` fails with
  "T/old/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by T/mods/newcxx...so)".
Control: `import torch, newcxx` works, because torch already loaded the
system's libstdc++.so.6 (GCC 12: up to GLIBCXX_3.4.30) and a loaded soname
is reused before any RUNPATH is searched.

mldoctor half: `check --import newcxx` reports LD002 naming GLIBCXX_3.4.30
and the old stub's path; `--import torch,newcxx` reports no LD002.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import (build_glibcxx_env, expect_finding, expect_no_finding, run_check,  # noqa: E402
                       run_python, scenario_env, skip_unless)

skip_unless()
t = scratch()
fx = build_glibcxx_env(t)
env = scenario_env(pythonpath=fx["mods"])

p = run_python("import newcxx", env)
err = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
print("real [import newcxx]: exit %d: %s" % (p.returncode, err))
expected = ("ImportError: %s: version `GLIBCXX_3.4.30' not found (required by %s)"
            % (fx["old"], fx["module"]))
check(p.returncode != 0, "import newcxx fails for real")
check_in(expected, p.stderr, "the real loader's error")

has_torch = run_python("import torch", env).returncode == 0
if has_torch:
    q = run_python("import torch, newcxx; import sys; "
                   "print([l.split()[-1] for l in open('/proc/self/maps') if 'libstdc++' in l][0])", env)
    print("real [import torch, newcxx]: exit %d, libstdc++ mapped: %s %s"
          % (q.returncode, q.stdout.strip(), q.stderr.strip()[-300:]))
    check(q.returncode == 0, "with torch first the system libstdc++.so.6 satisfies newcxx")
    check(fx["old"] not in q.stdout, "the old stub is not loaded when torch came first")

# mldoctor half.
doc, _ = run_check("--import", "newcxx", env=env)
f = expect_finding(doc, "LD002", "--import newcxx")
if f:
    check_in("GLIBCXX_3.4.30", f.get("message", ""), "LD002 message names the missing version")
    check_in(fx["old"], f.get("message", ""), "LD002 message names the library that lacks it")
if has_torch:
    doc, _ = run_check("--import", "torch,newcxx", env=env)
    if doc is not None:
        expect_no_finding(doc, "LD002", "--import torch,newcxx")

shutil.rmtree(t, ignore_errors=True)
finish("scenario-glibcxx-too-old")

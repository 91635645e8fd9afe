#!/usr/bin/env python3
# labels: slow scenario
"""Seed 001: static TLS exhaustion on import.

Fixture: eight real extension modules tlsmod1..tlsmod8 in D (on PYTHONPATH),
each with 400 bytes of initial-exec TLS used by a function (DF_STATIC_TLS).
Modules loaded after startup must fit their static TLS into the loader's
surplus, which the interpreter's own libraries have already partly used.

Real half: /usr/bin/python3 -c "import tlsmod1, ..., tlsmod8" fails with
"ImportError: <file>: cannot allocate memory in static TLS block"; the test
records which file. Then the same with `import torch` first, which takes some
of the surplus itself (libgomp and others), so the failure comes earlier.

mldoctor half: `check --import tlsmod1,...,tlsmod8` (and with torch first)
reports TLS001 whose subject or message names the module that really failed.
"""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import (build_tls_modules, expect_finding, expect_no_finding, run_check,  # noqa: E402
                       run_python, scenario_env, skip_unless)

skip_unless()
COUNT = 8
t = scratch()
d = os.path.join(t, "site")
os.makedirs(d)
paths = build_tls_modules(d, COUNT)
mods = ["tlsmod%d" % k for k in range(1, COUNT + 1)]
env = scenario_env(pythonpath=d)
ERR = re.compile(r"ImportError: (\S+): cannot allocate memory in static TLS block")


def real(order):
    p = run_python("import " + ", ".join(order), env)
    m = ERR.search(p.stderr)
    print("real [import %s]: exit %d, %s" % (", ".join(order), p.returncode,
                                               m.group(0) if m else "no static TLS error"))
    if not check(p.returncode != 0 and m, "the real import fails with the static TLS error\nstderr:\n"
                 + p.stderr):
        return None
    return m.group(1)


failed = {}
failed["plain"] = real(mods)
has_torch = os.path.exists("/usr/bin/python3") and run_python("import torch", env).returncode == 0
if has_torch:
    failed["torch"] = real(["torch"] + mods)
    if failed["plain"] and failed["torch"]:
        check(paths.index(failed["torch"]) < paths.index(failed["plain"]),
              "torch's own static TLS makes an earlier module fail (%s vs %s)"
              % (failed["torch"], failed["plain"]))

# The modules before the failing one do load: the first four alone import.
if failed["plain"]:
    ok = mods[:paths.index(failed["plain"])]
    p = run_python("import " + ", ".join(ok), env)
    check(p.returncode == 0, "import %s works\n%s" % (", ".join(ok), p.stderr))

# mldoctor half.
for case, order in (("plain", mods), ("torch", ["torch"] + mods)):
    if not failed.get(case):
        continue
    doc, _ = run_check("--import", ",".join(order), env=env)
    f = expect_finding(doc, "TLS001", "--import " + ",".join(order))
    if f:
        name = os.path.basename(failed[case])
        check_in(name, "%s\n%s" % (f.get("subject", ""), f.get("message", "")),
                 "[%s] TLS001 names the module that really failed" % case)
        for other in paths:
            if other != failed[case]:
                check(os.path.basename(other) not in str(f.get("subject", "")),
                      "[%s] TLS001 subject is not %s" % (case, os.path.basename(other)))
    if case == "plain" and failed["plain"]:
        ok = mods[:paths.index(failed["plain"])]
        doc, _ = run_check("--import", ",".join(ok), env=env)
        if doc is not None:
            expect_no_finding(doc, "TLS001", "--import " + ",".join(ok))

shutil.rmtree(t, ignore_errors=True)
finish("scenario-seed001-static-tls")

#!/usr/bin/env python3
# labels: slow scenario
"""Seed 001 under `mldoctor run`: an import that fails on static TLS.

Fixture: tlsmod1..tlsmod8 (scenarios.build_tls_modules), each with 400 bytes
of initial-exec TLS. Importing all eight exhausts the loader's static TLS
surplus: the real dlopen fails with "<module>: cannot allocate memory in
static TLS block" (the oracle; Python turns it into an ImportError).

mldoctor half: the report's TLS001 names the module whose dlopen really
failed (the message the program got from dlerror), shows the static TLS the
loaded modules already use (the loader model replayed on the dlopen calls
the job made, which must fail at the same call), and gives a GLIBC_TUNABLES
value. Re-running the same job with that value in the environment, with and
without `mldoctor run`, imports all eight modules.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check_eq, check, check_in, finish, scratch  # noqa: E402
from scenarios import (PY, build_tls_modules, expect_finding, finding_text, run_traced,  # noqa: E402
                       scenario_env, skip_unless)

skip_unless()
t = scratch()
d = os.path.join(t, "site")
os.makedirs(d)
paths = build_tls_modules(d, 8)
env = scenario_env(pythonpath=d)
code = "import " + ", ".join("tlsmod%d" % k for k in range(1, 9)) + "\nprint('all imported')\n"
ERR = re.compile(r"ImportError: (\S+): cannot allocate memory in static TLS block")

plain = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=120)
m = ERR.search(plain.stderr)
check(plain.returncode != 0 and m, "real: the import fails on static TLS\n" + plain.stderr)
doc, traced = run_traced([PY, "-c", code], env)
mt = ERR.search(traced.stderr)
check(traced.returncode == plain.returncode and mt, "under run the job fails the same way:\n" + traced.stderr)
failed_module = mt.group(1) if mt else None
print("real failure:", m.group(1) if m else None, "| under run:", failed_module)
f = expect_finding(doc, "TLS001", "static TLS failure")
fix = None
if f and failed_module:
    text = finding_text(f)
    print("TLS001:", f["message"])
    check_in(failed_module, f["message"], "TLS001 names the module whose dlopen failed")
    check_in("cannot allocate memory in static TLS block", f["message"], "with the loader's message")
    check_in("bytes of static TLS", text, "evidence: the TLS the module needs and what was left")
    check_in("used at startup", text, "evidence: the TLS the loaded modules already use")
    check_in("fails at the same dlopen", text, "the loader model agrees with the real failure")
    # The dlerror text also matches the log rules TLS010/TLS011; TLS001
    # replaces them (rules/TLS001.toml), so the report names the cause once.
    also = [x["rule"] for x in doc["findings"] if x["rule"] in ("TLS010", "TLS011")]
    check_eq(also, [], "log findings TLS001 replaces")
    fix = [e for e in f.get("env_fix") or [] if e.startswith("GLIBC_TUNABLES=")]
    check(len(fix) == 1, "one GLIBC_TUNABLES setting: %r" % f.get("env_fix"))
if fix:
    value = fix[0].split("=", 1)[1]
    print("fix:", value)
    env2 = dict(env, GLIBC_TUNABLES=value)
    again = subprocess.run([PY, "-c", code], env=env2, capture_output=True, text=True, timeout=120)
    check(again.returncode == 0 and "all imported" in again.stdout,
          "with the fix the real import succeeds:\n" + again.stderr)
    doc2, traced2 = run_traced([PY, "-c", code], env2)
    check(traced2.returncode == 0 and "all imported" in traced2.stdout,
          "with the fix it also succeeds under mldoctor run:\n" + traced2.stderr)
    check(doc2 is not None and not [x for x in doc2["findings"] if x["rule"] == "TLS001"],
          "and the re-run's report has no TLS001")
finish(os.path.basename(__file__))

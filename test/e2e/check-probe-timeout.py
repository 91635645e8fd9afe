#!/usr/bin/env python3
# labels: scenario
"""`check` of an interpreter whose start-up never ends (issue 31, item 2):
the probe is killed after --python-timeout, and the report still prints,
host facts and all, with the environment described from its layout and the
timeout said with why it happens; the exit status follows the findings.

Fixture: opencv_vendored_env (wheels.py, OMP001 and LD004: GNU OpenMP
copies) with a wait.pth whose import line reads a FIFO: site.py runs it at
every start-up, and it waits in open(2) for a writer that never comes. The real interpreter is the oracle (`python -c pass` does not end).
Then an interpreter with no layout to fall back on (a script that sleeps):
the report still prints, saying Python was not examined and why.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish  # noqa: E402
from wheels import broken_install_env, start_waits  # noqa: E402

t, fx, env = broken_install_env()
python = fx["python"]
fifo = os.path.join(t, "never-written")
os.mkfifo(fifo)
with open(os.path.join(fx["site"], "wait.pth"), "w") as f:
    f.write("import os; open(%r).read()\n" % fifo)
check(start_waits(python, env), "the real interpreter's start-up waits in wait.pth's import line")


def run(*args):
    p = subprocess.run([MLDOCTOR, "check", "--python-timeout", "2"] + list(args), env=env,
                       capture_output=True, text=True, timeout=300)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    return p


p = run("--python", python)
check_eq(p.returncode, 0, "exit 0: the findings' status (warnings), not a tool error")
out = p.stdout
for row in ("Host      ", "CPUs      ", "Memory    ", "Limits    memlock ", "Env       "):
    check_in(row, out, "the host facts are reported")
check_in("Python    3.", out, "the Python row")
check_in("venv " + os.path.join(t, "venv"), out, "the venv, from its layout")
check_in("          described from its layout: " + python + ": the interpreter did not answer within 2 s and "
         "was killed; a Python start-up waits like this on something sitecustomize, usercustomize or a .pth "
         "file's import line runs (a network mount, a lock, a FIFO)", out, "the timeout, its length and why")
check_in("OMP001", out, "what the layout shows is still checked (OMP001)")
check("mldoctor: error" not in p.stderr, "no tool error")

doc = json.loads(run("--json", "--python", python).stdout)
check_in("did not answer within 2 s", doc["python"]["probe_error"] or "", "JSON: python.probe_error")
check_in("OMP001", [f["rule"] for f in doc["findings"]], "JSON: OMP001")

# No layout to fall back on: a script that never answers.
bare = os.path.join(t, "hangs", "python3")
os.makedirs(os.path.dirname(bare))
with open(bare, "w") as f:
    f.write("#!/bin/sh\nexec sleep 600\n")
os.chmod(bare, 0o755)
p = run("--python", bare)
check_in("Memory    ", p.stdout, "no layout: the host facts are still reported")
check_in("Python    not examined: " + bare + ": the interpreter did not answer within 2 s and was killed",
         p.stdout, "no layout: not examined, and why")
check_in("nor does its layout describe it", p.stdout, "no layout: said")
check(p.returncode in (0, 1), "no layout: the findings' exit status (%d)" % p.returncode)
check("mldoctor: error" not in p.stderr, "no layout: no tool error")
# An interpreter that does not exist is still a failed request (exit 2, no report).
p = run("--python", os.path.join(t, "nonexistent", "python3"))
check_eq(p.returncode, 2, "a missing --python: exit 2")
check_eq(p.stdout, "", "a missing --python: no report")
finish(os.path.basename(__file__))

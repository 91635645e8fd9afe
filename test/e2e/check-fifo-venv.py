#!/usr/bin/env python3
# labels: scenario
"""`check` of a venv whose metadata and a `.pth` file are FIFOs (issue 31,
item 2): it returns, names each FIFO with what it is, and keeps the findings
it can still make.

Fixture: opencv_vendored_env (wheels.py): a venv with pip-shaped torch,
opencv-python-headless and scikit-learn, each with its own copy of GNU
OpenMP (OMP001; torch's and sklearn's are one build: LD004). Then, as a broken or hostile install leaves them:
  - blocked-1.0.dist-info/METADATA is a FIFO (open(2) for reading waits for
    a writer: `check` never returned);
  - opencv's RECORD is a FIFO;
  - zz-hang.pth is a FIFO (Python's site.py opens every .pth at start-up:
    every start of this interpreter waits there, the probe's included).
Nobody ever writes to them. The real interpreter shows the .pth's effect
(`python -c pass` does not end), which is what the report says.
"""
import json
import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish  # noqa: E402
from wheels import broken_install_env, start_waits  # noqa: E402

t, fx, env = broken_install_env()
site, python = fx["site"], fx["python"]
metadata = os.path.join(site, "blocked-1.0.dist-info", "METADATA")
os.makedirs(os.path.dirname(metadata))
opencv_info = [d for d in os.listdir(site) if d.startswith("opencv_python_headless-") and d.endswith(".dist-info")]
record = os.path.join(site, opencv_info[0], "RECORD")
os.unlink(record)
pth = os.path.join(site, "zz-hang.pth")
for fifo in (metadata, record, pth):
    os.mkfifo(fifo)

# The oracle: the FIFO .pth stops the real interpreter's start-up.
check(start_waits(python, env), "the real interpreter's start-up waits on the FIFO .pth")

# A hang fails here (the timeout), not in ctest.
p = subprocess.run([MLDOCTOR, "check", "--python", python], env=env, capture_output=True, text=True,
                   timeout=300)
print(p.stdout)
print(p.stderr, file=sys.stderr)
check_eq(p.returncode, 0, "exit 0: the findings are warnings (all GNU OpenMP)")
out = p.stdout
check_in("Python    3.", out, "the interpreter answered the probe (the FIFO .pth skipped)")
check_in("venv " + os.path.join(t, "venv"), out, "the venv is described")
lines = out.splitlines()
not_read = [i for i, l in enumerate(lines) if l.startswith("Not read  ")]
if check(len(not_read) == 1, "one Not read row"):
    rows = [lines[not_read[0]][10:]] + [l[10:] for l in lines[not_read[0] + 1:not_read[0] + 3]]
    check_eq(sorted(rows), sorted([
        metadata + ": not a regular file (a FIFO): not read",
        record + ": not a regular file (a FIFO): not read",
        pth + ": not a regular file (a FIFO): not read; site.py waits on it at every start-up of this "
              "Python until something writes to it"]), "each FIFO named, with what it is")
check_in("OMP001", out, "OMP001 (torch's, opencv's and sklearn's OpenMP copies) is still found")
check_in("LD004", out, "LD004 (torch's and sklearn's copies of one build) is still found")
check_in("2 warnings", out, "the summary")
check("no findings" not in out, "no '✓ no findings'")

# The JSON has them all, and the distributions around them.
p = subprocess.run([MLDOCTOR, "check", "--json", "--python", python], env=env, capture_output=True,
                   text=True, timeout=300)
doc = json.loads(p.stdout)
check_eq(sorted(x["path"] for x in doc["not_read"]), sorted([metadata, record, pth]), "JSON not_read")
dists = {d["name"]: d["version"] for d in doc["python"]["distributions"]}
check_eq(dists.get("blocked"), "1.0", "the FIFO-METADATA distribution is listed from its directory name")
check_in("opencv-python-headless", dists, "opencv's distribution (RECORD a FIFO) is listed")
check(any(pr["path"] == os.path.dirname(metadata) and "not a regular file (a FIFO)" in pr["what"]
          for pr in doc["python"]["problems"]), "python.problems: the METADATA FIFO")
check_in("OMP001", [f["rule"] for f in doc["findings"]], "JSON: OMP001")

# Nothing was touched: each is still the FIFO it was.
for fifo in (metadata, record, pth):
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "%s is still a FIFO" % fifo)
finish(os.path.basename(__file__))

#!/usr/bin/env python3
"""`mldoctor diff`'s refusals and its JSON: every unusable input is refused
with exit 2 and a message naming the file and what to do, never a partial
comparison:
  * a report of a newer schema (mldoctor.check/2) names both versions;
  * a report of another command (mldoctor.run/1), a JSON file that is no
    mldoctor report, a file that is not JSON, a missing file, one report only;
--markdown renders it for a bug report, and --json of two saved reports is the mldoctor.fleet/1 document with the
difference and its members.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, finish  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(os.path.dirname(HERE), "golden", "diff-older-version")
old = os.path.join(GOLDEN, "gpu016-0.1.0.json")
new = os.path.join(GOLDEN, "gpu017-0.2.0.json")


def diff(*args):
    return subprocess.run([MLDOCTOR, "diff"] + list(args), capture_output=True, text=True, timeout=60)


with tempfile.TemporaryDirectory() as t:
    def write(name, content):
        p = os.path.join(t, name)
        with open(p, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return p

    doc = json.load(open(new))
    doc["schema"] = "mldoctor.check/2"
    doc["version"] = "1.3.0"
    cases = [
        ([old, write("newer.json", doc)],
         "newer.json: schema mldoctor.check/2 (written by mldoctor 1.3.0) is newer than this mldoctor reads"),
        ([old, write("run.json", {"schema": "mldoctor.run/1"})],
         "run.json: a mldoctor.run/1 report, not a check report"),
        ([old, write("other.json", {"name": "x"})], "other.json: not an mldoctor report"),
        ([old, write("text.json", "Host vm\n")], "text.json: not JSON"),
        ([old, os.path.join(t, "missing.json")], "missing.json: No such file or directory"),
        ([old], "diff compares two or more reports"),
    ]
    for args, message in cases:
        p = diff(*args)
        check(p.returncode == 2 and message in p.stderr and not p.stdout,
              "refused with %r: rc=%d stderr=%r stdout=%r" % (message, p.returncode, p.stderr, p.stdout[:200]))

    p = diff("--json", old, new)
    check(p.returncode == 0, "a warning-level difference exits 0 by default (rc %d)" % p.returncode)
    d = json.loads(p.stdout)
    check(d["schema"] == "mldoctor.fleet/1" and d["source"] == "reports", "diff --json schema")
    env = [g for g in d["groups"] if g["name"] == "environment"][0]
    check(env["differs"] and env["keys"][0]["key"] == "OMP_NUM_THREADS", "the environment difference is listed")
    libs = [g for g in d["groups"] if g["name"] == "libraries"][0]
    check(libs["not_recorded"] == [0], "the 0.1.0 report is left out of the libraries group")
    check([f["rule"] for f in d["findings"]] == ["FLEET005"], "one finding: %s" % d["findings"])
    p = diff("--fail-on", "warning", old, new)
    check(p.returncode == 1, "--fail-on warning makes the difference fail (rc %d)" % p.returncode)

    p = diff("--markdown", old, new)
    check(p.returncode == 0 and p.stdout.startswith("## mldoctor diff · 2 reports on 2 nodes")
          and "| gpu017 | gpu017-0.2.0.json |" in p.stdout and "### ! `FLEET005`" in p.stdout
          and "### Findings of check on each node" in p.stdout, "--markdown renders the same comparison:\n" + p.stdout)

finish("diff-cli")

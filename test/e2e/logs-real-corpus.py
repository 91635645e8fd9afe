#!/usr/bin/env python3
"""`mldoctor logs` on real failure logs: the accuracy figure of the knowledge
base. test/fixtures/logs-real/ holds excerpts users pasted in public issue
threads (verbatim machine output), each with a .toml naming the thread (`url`),
the rule that names the real cause (`expect`, or "healthy" for logs of runs
that worked), other rules that legitimately apply (`also`) and the cause as
the thread established it.

Measured: the rule of the top incident (mldoctor's first answer) against
`expect` for every failure excerpt, and error findings on healthy excerpts.
Fails when top-incident accuracy is under 95%, when a healthy excerpt gets an
error, when a log rule has no excerpt (expect or also) and is not listed in
UNCOVERED below with the reason, or when an excerpt's metadata is incomplete.
Prints the figure and every miss (file, expected, got), and with
CORPUS_REPORT=path writes the per-rule table for docs/benchmarks.md.
"""
import collections
import glob
import json
import os
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, finish  # noqa: E402

SOURCE = os.environ.get("MLD_SOURCE_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CORPUS = os.path.join(SOURCE, "test", "fixtures", "logs-real")
MIN_ACCURACY = 0.95
# MLD_RULES_DIR: measure the rule files of that directory instead of the
# binary's builtin ones (a rule author's edits, before a build).
RULES = (["--no-builtin-rules", "--rules-dir", os.environ["MLD_RULES_DIR"]]
         if os.environ.get("MLD_RULES_DIR") else [])

# Log rules with no real excerpt in the corpus, each with why. A rule leaves
# this list when an excerpt is found; a listed rule that gains one fails as
# stale.
UNCOVERED = {
    "NCCL026": "the settings that disable P2P/SHM appear in threads as workarounds that worked, "
               "never as the logged cause; the rule's examples come from nccl#2057 and "
               "returnn#1469",
}


def log_rules():
    out = json.loads(subprocess.run([MLDOCTOR, "rules", "--json"] + RULES, capture_output=True,
                                    text=True, check=True).stdout)
    rules = out["rules"] if isinstance(out, dict) else out
    return {r["id"] for r in rules if r.get("signatures") or r.get("stacks")}


def scan(path):
    p = subprocess.run([MLDOCTOR, "logs", "--json", "--fail-on", "info", path] + RULES,
                       capture_output=True, text=True)
    check(p.returncode in (0, 1), "%s: mldoctor exited %d: %s" % (path, p.returncode, p.stderr))
    return json.loads(p.stdout)["inputs"][0]


known = log_rules()
covered = set()
failures = []
per_rule = collections.defaultdict(lambda: [0, 0])
misses = []
healthy = 0
healthy_errors = []
for kind in ("failures", "healthy"):
    for log in sorted(glob.glob(os.path.join(CORPUS, kind, "*.log"))):
        name = os.path.relpath(log, CORPUS)
        meta_path = log[:-4] + ".toml"
        if not check(os.path.exists(meta_path), "%s has no .toml" % name):
            continue
        meta = tomllib.load(open(meta_path, "rb"))
        check(str(meta.get("url", "")).startswith("https://"), "%s: url missing" % name)
        check(bool(meta.get("cause") or kind == "healthy"), "%s: cause missing" % name)
        doc = scan(log)
        if kind == "healthy":
            healthy += 1
            check(meta.get("expect") == "healthy", "%s: expect must be \"healthy\"" % name)
            errors = [f["rule"] for f in doc["findings"] if f["severity"] == "error"]
            if errors:
                healthy_errors.append((name, errors))
            continue
        expect = meta.get("expect", "")
        if not check(expect in known, "%s: expect %r is not a log rule" % (name, expect)):
            continue
        covered.add(expect)
        covered.update(a for a in meta.get("also", []) if a in known)
        top = doc["incidents"][0]["rule"] if doc["incidents"] else None
        per_rule[expect][1] += 1
        if top == expect:
            per_rule[expect][0] += 1
        else:
            rules = [f["rule"] for f in doc["findings"]]
            misses.append((name, expect, top, rules))

total = sum(n for _, n in per_rule.values())
right = sum(k for k, _ in per_rule.values())
anywhere = total - sum(1 for _, e, _, rules in misses if e not in rules)
accuracy = right / total if total else 0.0
print("%d failure excerpts: top incident right in %d (%.1f%%), named anywhere in %d (%.1f%%); "
      "%d healthy excerpts, %d with an error finding"
      % (total, right, 100 * accuracy, anywhere, 100 * anywhere / max(total, 1), healthy,
         len(healthy_errors)))
for name, expect, top, rules in misses:
    print("  miss %s: expected %s, top %s, all %s" % (name, expect, top, rules))
for name, errors in healthy_errors:
    print("  healthy %s: errors %s" % (name, errors))

check(total >= 150, "at least 150 failure excerpts (have %d)" % total)
check(healthy >= 40, "at least 40 healthy excerpts (have %d)" % healthy)
check(accuracy >= MIN_ACCURACY, "top-incident accuracy %.1f%% under %.0f%%"
      % (100 * accuracy, 100 * MIN_ACCURACY))
check(not healthy_errors, "error findings on healthy excerpts")
for rule in sorted(known - covered):
    check(rule in UNCOVERED, "log rule %s has no real excerpt in the corpus" % rule)
for rule in sorted(UNCOVERED):
    check(rule not in covered, "%s is listed in UNCOVERED but has an excerpt now" % rule)
    check(rule in known, "%s is listed in UNCOVERED but is no log rule" % rule)

report = os.environ.get("CORPUS_REPORT")
if report:
    with open(report, "w") as out:
        out.write("| rule | excerpts | top incident right |\n|---|---|---|\n")
        for rule in sorted(per_rule):
            k, n = per_rule[rule]
            out.write("| %s | %d | %d |\n" % (rule, n, k))
finish("logs-real-corpus")

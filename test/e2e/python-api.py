#!/usr/bin/env python3
"""The Python package python/mldoctor from the source tree, over the built
binary ($MLDOCTOR): its dataclasses cover every key the binary really
prints (the finding, evidence, incident and input objects of `logs --json`
fed every rule's [[example]] log with context, `check --json`, every rule of
`rules --json`), and the finding's fields are docs/json-schema.md's table,
so API, binary and documentation cannot drift apart. check() equals the
CLI's check for the same interpreter; logs() finds a rule from its example
text and from a path; explain() is explain --json; an unknown rule and a
bad option raise MldoctorError with the tool's own message and status 2;
`python -m mldoctor` adds --python only where the subcommand takes it."""
import dataclasses
import glob
import json
import os
import pathlib
import re
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

SOURCE = os.environ["MLD_SOURCE_DIR"]
sys.path.insert(0, os.path.join(SOURCE, "python"))
import mldoctor  # noqa: E402
from mldoctor.__main__ import TAKES_PYTHON, with_python  # noqa: E402


def fields(cls):
    return {f.name for f in dataclasses.fields(cls)}


def keys_covered(objs, cls, what):
    seen = set()
    for o in objs:
        seen |= set(o)
    check(seen, "%s: the binary printed some" % what)
    check_eq(sorted(seen - fields(cls)), [], "%s keys the binary prints without a field in mldoctor.%s"
             % (what, cls.__name__))
    return seen


def cli_json(*args, stdin=None):
    p = subprocess.run([MLDOCTOR] + list(args), input=stdin, capture_output=True, text=True, timeout=300)
    check(p.returncode in (0, 1), "mldoctor %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return json.loads(p.stdout)


def examples():
    """(rule id, example log) of every rule file."""
    out = []
    for f in sorted(glob.glob(os.path.join(SOURCE, "rules", "*.toml"))):
        d = tomllib.load(open(f, "rb"))
        out += [(d["id"], e["log"]) for e in d.get("example", [])]
    return out


def drift():
    ex = examples()
    check(len(ex) > 50, "rule examples found: %d" % len(ex))
    log = "".join(("[rank%d]: " % (i % 4) if i % 3 == 0 else "") + text for i, (_, text) in enumerate(ex))
    doc = cli_json("logs", "--json", "-C", "1", "-", stdin=log)
    inputs = doc["inputs"]
    check_eq(sorted(set(doc) - fields(mldoctor.Report)), [], "logs document keys without a Report field")
    keys_covered(inputs, mldoctor.LogInput, "logs input")
    findings = [f for i in inputs for f in i["findings"]]
    seen = keys_covered(findings, mldoctor.Finding, "finding (logs)")
    check("ranks" in seen and "last_line" in seen, "the logs run printed the optional finding keys: %r" % seen)
    ev = keys_covered([e for f in findings for e in f["evidence"]], mldoctor.Evidence, "evidence (logs)")
    check("context" in ev, "the logs run printed context evidence")
    keys_covered([x for i in inputs for x in i["incidents"]], mldoctor.Incident, "incident")

    check_doc = cli_json("check", "--json", "--python", sys.executable)
    keys_covered(check_doc["findings"], mldoctor.Finding, "finding (check)")
    keys_covered([e for f in check_doc["findings"] for e in f["evidence"]], mldoctor.Evidence, "evidence (check)")

    rules = cli_json("rules", "--json")["rules"]
    keys_covered(rules, mldoctor.Rule, "rule")
    keys_covered([r["fix"] for r in rules], mldoctor.RuleFix, "rule fix")
    keys_covered([s for r in rules for s in r.get("signatures", [])], mldoctor.Signature, "signature")
    keys_covered([s for r in rules for s in r.get("sources", [])], mldoctor.RuleSource, "rule source")
    keys_covered([s for r in rules for s in r.get("stacks", [])], mldoctor.StackWait, "stack wait")
    typed = mldoctor.rules()
    check_eq([r.id for r in typed], [r["id"] for r in rules], "mldoctor.rules() is rules --json")

    # The documented finding object is exactly the dataclass.
    text = open(os.path.join(SOURCE, "docs", "json-schema.md")).read()
    table = text.split("## The finding object", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    check_eq(sorted(fields(mldoctor.Finding)), sorted(documented), "Finding's fields are json-schema.md's table")
    ev_line = re.search(r"Evidence: `(\{.*?\})`", table).group(1)
    check_eq(sorted(fields(mldoctor.Evidence)), sorted(re.findall(r'"([a-z_]+)"', ev_line)),
             "Evidence's fields are json-schema.md's")

    # Typed findings round-trip what was printed.
    report = mldoctor.logs(log, context=1)
    check_eq([(f.rule, f.subject, f.count) for f in report.findings],
             [(f["rule"], f["subject"], f["count"]) for f in findings], "mldoctor.logs(text) is logs --json")
    check_eq(report.exit_status, 1, "findings at the default --fail-on: exit status 1 (not an error)")


def api():
    cli = cli_json("check", "--json", "--python", sys.executable, "--import", "numpy")
    rep = mldoctor.check(imports=["numpy"])
    check_eq(rep.schema, "mldoctor.check/1", "check's schema")
    check_eq(rep.python["interpreter"], sys.executable, "check() examines the running interpreter by default")
    check_eq([(f.rule, f.subject) for f in rep.findings], [(f["rule"], f["subject"]) for f in cli["findings"]],
             "check() finds what check --json finds")
    check(all(isinstance(f, mldoctor.Finding) and all(isinstance(e, mldoctor.Evidence) for e in f.evidence)
              for f in rep.findings), "findings are typed")

    rule_id, example = next((r, e) for r, e in examples() if r.startswith("OMP"))
    found = mldoctor.logs("some other line\n" + example)
    check_in(rule_id, [f.rule for f in found.findings], "logs(text) finds %s from its example" % rule_id)
    path = os.path.join(scratch(), "train.log")
    open(path, "w").write(example)
    for arg in (path, pathlib.Path(path)):
        r = mldoctor.logs(arg)
        check_eq((r.inputs[0].path, rule_id in [f.rule for f in r.findings]), (path, True),
                 "logs(%s) reads the file" % type(arg).__name__)

    rule = mldoctor.explain("OMP001")
    check_eq(rule.title, cli_json("explain", "OMP001", "--json")["title"], "explain() is explain --json")
    check(rule.detector and rule.fix.text, "explain() has the detector and fix")

    for call, args in ((lambda: mldoctor.explain("NOPE999"), ["explain", "NOPE999"]),
                       (lambda: mldoctor.check(ranks_per_node=0), ["check", "--ranks-per-node", "0"])):
        p = subprocess.run([MLDOCTOR] + args, capture_output=True, text=True)
        try:
            call()
            check(False, "%s raises MldoctorError" % args)
        except mldoctor.MldoctorError as e:
            check_eq((e.exit_status, p.returncode), (2, 2), "%s: exit status 2" % args)
            check(e.message and e.message in p.stderr, "%s: the tool's message %r is in its stderr %r"
                  % (args, e.message, p.stderr))
    try:
        mldoctor.explain("NOPE999")
    except mldoctor.MldoctorError as e:
        check_eq(str(e), "mldoctor: error: no rule NOPE999 (mldoctor rules lists them)", "unknown rule's message")


def launcher():
    exe = "/venv/bin/python"
    check_eq(sorted(TAKES_PYTHON), ["check", "fix", "fleet", "jit", "snapshot"], "the subcommands with --python")
    for sub in ("check", "fix", "fleet", "jit", "snapshot", "diff", "run", "logs", "explain", "rules", "libs",
                "stacks"):
        h = subprocess.run([MLDOCTOR, sub, "--help"], capture_output=True, text=True).stdout
        check_eq(sub in TAKES_PYTHON, "--python" in h, "%s --help and TAKES_PYTHON agree" % sub)
    cases = [
        (["check", "--json"], ["check", "--python", exe, "--json"]),
        (["--no-color", "check"], ["--no-color", "check", "--python", exe]),
        (["check", "--python", "/x"], ["check", "--python", "/x"]),
        (["fix", "--python=/x"], ["fix", "--python=/x"]),
        (["run", "--", "check"], ["run", "--", "check"]),
        (["logs", "check"], ["logs", "check"]),
        (["--version"], ["--version"]),
        ([], []),
    ]
    for args, want in cases:
        check_eq(with_python(args, exe), want, "python -m mldoctor %s" % args)


def main():
    drift()
    api()
    launcher()
    finish("python-api")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Measures `mldoctor logs` on a corpus of real log excerpts (the learning and
held-out parts of issue 33; docs/benchmarks.md, "logs on real failure logs").

    bench/logs-corpus-measure.py [--mldoctor BIN] [--rules-dir DIR] [--misses] CORPUS

CORPUS holds failures/*.log and healthy/*.log, each with a .toml: `url`,
`expect` (the rule whose title names the cause the thread established;
"healthy"; or "NEW" when no rule existed for it when the excerpt was
collected), `also`, `cause`. Prints the figure: the rule of the top incident
(`logs --json`, inputs[0].incidents[0].rule) against `expect`, over excerpts
with a rule label and with NEW counted as misses, and the error findings on
healthy excerpts. With --misses, every miss and healthy error (file,
expected, got, cause) — for the learning part; the held-out part is measured
once, at the end, and its misses are read only then.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tomllib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--mldoctor", default=os.environ.get("MLDOCTOR", "mldoctor"))
    ap.add_argument("--rules-dir", help="measure these rule files instead of the builtin ones")
    ap.add_argument("--misses", action="store_true", help="list every miss")
    args = ap.parse_args()
    rules = ["--no-builtin-rules", "--rules-dir", args.rules_dir] if args.rules_dir else []

    known = json.loads(subprocess.run([args.mldoctor, "rules", "--json"] + rules,
                                      capture_output=True, text=True, check=True).stdout)
    known = {r["id"] for r in known["rules"]}

    labelled = right = new = new_named = 0
    misses, healthy_errors = [], []
    healthy = 0
    for kind in ("failures", "healthy"):
        for log in sorted(glob.glob(os.path.join(args.corpus, kind, "*.log"))):
            name = os.path.relpath(log, args.corpus)
            meta = tomllib.load(open(log[:-4] + ".toml", "rb"))
            p = subprocess.run([args.mldoctor, "logs", "--json", "--fail-on", "info", log] + rules,
                               capture_output=True, text=True)
            if p.returncode not in (0, 1):
                print("mldoctor failed on %s (%d): %s" % (name, p.returncode, p.stderr),
                      file=sys.stderr)
                return 2
            doc = json.loads(p.stdout)["inputs"][0]
            top = doc["incidents"][0]["rule"] if doc["incidents"] else None
            if kind == "healthy":
                healthy += 1
                errors = sorted({f["rule"] for f in doc["findings"] if f["severity"] == "error"})
                if errors:
                    healthy_errors.append((name, errors, meta.get("cause", "")))
                continue
            expect = meta.get("expect", "")
            if expect == "NEW":
                new += 1
                new_named += top is not None and top not in known
                misses.append((name, "NEW", top, meta.get("new_rule") or meta.get("cause", "")))
                continue
            labelled += 1
            if top == expect:
                right += 1
            else:
                if expect not in known:
                    print("%s: expect %s is no rule of this binary" % (name, expect),
                          file=sys.stderr)
                misses.append((name, expect, top, meta.get("cause", "")))

    total = labelled + new
    print("%s: %d failure excerpts (%d with a rule label, %d NEW); top incident right in %d of "
          "%d labelled (%.1f%%), %d of %d counting NEW as misses (%.1f%%); %d healthy excerpts, "
          "%d with an error finding"
          % (args.corpus, total, labelled, new, right, labelled, 100.0 * right / max(labelled, 1),
             right, total, 100.0 * right / max(total, 1), healthy, len(healthy_errors)))
    if args.misses:
        for name, expect, top, cause in misses:
            print("  miss %s: expected %s, top %s — %s" % (name, expect, top, cause))
        for name, errors, cause in healthy_errors:
            print("  healthy %s: errors %s — %s" % (name, ", ".join(errors), cause))
    return 0


if __name__ == "__main__":
    sys.exit(main())

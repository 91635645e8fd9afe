#!/usr/bin/env python3
"""The build-time Vectorscan databases of the builtin rules find exactly what
compiling the same rules at run time finds: every rule example (and every
negative) of the knowledge base in one log, scanned by `mldoctor logs`
(precompiled database) and by `mldoctor logs --rules-dir EMPTY` (the same
rules, compiled at run time because a rules directory was given).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, finish, scratch  # noqa: E402


def findings(args):
    p = subprocess.run([MLDOCTOR, "logs", "--json"] + args, capture_output=True, text=True)
    doc = json.loads(p.stdout)
    return [(f["rule"], f["message"], f["count"], f["evidence"][0].get("line"))
            for f in doc["inputs"][0]["findings"]]


def main():
    t = scratch()
    rules = json.loads(subprocess.run([MLDOCTOR, "rules", "--json"], capture_output=True, text=True,
                                      check=True).stdout)["rules"]
    ids = [r["id"] for r in rules]
    # The rule files hold the examples; read them from the source tree.
    src = os.environ.get("MLD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    import tomllib
    text = []
    for rid in ids:
        with open(os.path.join(src, "rules", rid + ".toml"), "rb") as f:
            rule = tomllib.load(f)
        for e in rule.get("example", []) + rule.get("negative", []):
            text.append(e["log"].strip("\n"))
            text.append("---- separator ----")
    log = os.path.join(t, "all-examples.log")
    with open(log, "w") as f:
        f.write("\n".join(text) + "\n")
    empty = os.path.join(t, "empty")
    os.mkdir(empty)
    pre = findings([log])
    runtime = findings(["--rules-dir", empty, log])
    check(len(pre) > 50, "the examples produce findings (%d)" % len(pre))
    check_eq(pre, runtime, "precompiled and run-time compiled databases agree")
    finish("logs-precompiled")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Rule ids in the C++ sources against the rule files.

Every rule id written as a string literal in src/ ("OMP001") names a rule of
rules/ (an emitted id without a rule would reach the user without its
explanation or fix), and the id of every detector registered in
src/detect/rules/ appears in no other source file: a hazard seen by several
commands has one detector, fed by their facts (issue 16).
"""
import os
import re
import sys

SRC = os.environ.get("MLD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
ID = re.compile(r'"([A-Z]{2,5}[0-9]{3})"')
# Literals of that shape that are not rule ids: GPU model names.
NOT_RULES = {"GB200", "GH200"}

rules = {f[:-5] for f in os.listdir(os.path.join(SRC, "rules")) if f.endswith(".toml")}
detectors = {f[:-3] for f in os.listdir(os.path.join(SRC, "src", "detect", "rules")) if f.endswith(".cc")}


def code_of(line):
    """The line without its // comment (a // inside a string literal stays)."""
    in_string = False
    i = 0
    while i < len(line):
        c = line[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif line.startswith("//", i):
            return line[:i]
        i += 1
    return line


failures = []
where = {}
for root, _, files in os.walk(os.path.join(SRC, "src")):
    for name in files:
        if not name.endswith((".cc", ".h", ".c")):
            continue
        path = os.path.join(root, name)
        rel = os.path.relpath(path, SRC)
        with open(path, encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                code = code_of(line)
                for m in ID.finditer(code):
                    rid = m.group(1)
                    if rid in NOT_RULES:
                        continue
                    where.setdefault(rid, set()).add(rel)
                    if rid not in rules:
                        failures.append(f"{rel}:{no}: \"{rid}\" has no rules/{rid}.toml")
for rid in sorted(detectors):
    if rid not in rules:
        failures.append(f"src/detect/rules/{rid}.cc: no rules/{rid}.toml")
    others = sorted(p for p in where.get(rid, ()) if p != f"src/detect/rules/{rid}.cc")
    if others:
        failures.append(f"{rid} has a registered detector but is also written in: {', '.join(others)}")
for f in failures:
    print("FAIL", f)
print(f"rules-ids-in-source: {len(where)} ids in src, {len(detectors)} detectors, {len(failures)} problems")
sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""Checks the [[source]] citations of rules/*.toml against git mirrors of the
cited repositories: the file exists at the tag, and the cited line (or the two
lines around it, for a message split over lines) holds words of the format.

    tools/check-rule-sources.py [--mirrors DIR]

DIR holds mirrors as `owner+name/repo` (what the project's `fetch` tool writes
under /work/.mirror). Sources whose repository has no mirror there are counted
as not checked. Not a test: it needs the mirrors, which CI does not have.
Exit 1 when a checked source does not hold its message.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))


def words_of(fmt):
    """Runs of literal words of the format (placeholders and the emitter's
    own prefix fields removed), each at least two words long."""
    lit = re.sub(r"%[-+ #0'0-9.$*hlLqjzZt]*[a-zA-Z%]|%\([^)]*\)[a-z]|\{[^{}]*\}", "\0", fmt)
    runs = []
    for piece in re.split(r"[\0\n]", lit):
        ws = re.findall(r"[A-Za-z][A-Za-z_'/-]+", piece)
        for i in range(len(ws) - 1):
            runs.append((ws[i], ws[i + 1]))
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mirrors", default="/work/.mirror")
    args = ap.parse_args()
    ok = bad = unchecked = 0
    for path in sorted(glob.glob(os.path.join(HERE, "..", "rules", "*.toml"))):
        rule = tomllib.load(open(path, "rb"))
        for s in rule.get("source", []):
            repo = os.path.join(args.mirrors, s["repository"].replace("/", "+"), "repo")
            if not os.path.isdir(repo):
                unchecked += 1
                continue
            p = subprocess.run(["git", "-C", repo, "show", "%s:%s" % (s["tag"], s["path"])],
                               capture_output=True, text=True, errors="replace")
            where = "%s: %s %s:%d at %s" % (rule["id"], s["repository"], s["path"], s["line"],
                                           s["tag"])
            if p.returncode != 0:
                bad += 1
                print("no such file at the tag: " + where)
                continue
            lines = p.stdout.split("\n")
            window = " ".join(lines[max(0, s["line"] - 3):s["line"] + 2])
            text = " ".join(re.findall(r"[A-Za-z][A-Za-z_'/-]+", window))
            runs = words_of(s["format"])
            if not runs or any("%s %s" % r in text for r in runs):
                ok += 1
            else:
                bad += 1
                print("line does not hold the message: %s\n    %s" % (where, lines[s["line"] - 1].strip()
                                                                       if s["line"] <= len(lines) else "(past the end)"))
    print("%d sources hold their message at the cited line, %d do not, %d not checked (no mirror)"
          % (ok, bad, unchecked))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

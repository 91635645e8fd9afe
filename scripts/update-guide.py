#!/usr/bin/env python3
"""Keeps the outputs shown in docs/guide.md those of real runs.

Every output in the guide sits under a marker naming a golden case of
test/golden/ (whose expected.txt test/e2e/golden-reports.py checks against
the program at every `make test`):

    <!-- output: CASE -->
    ```console
    $ [VAR=value ...] mldoctor ARGS        (or a launcher: mpirun ... mldoctor ...)
    OUTPUT
    ```

  scripts/update-guide.py MLDOCTOR    runs the cases and writes each one's real
                                      output (before the case's filters) into
                                      the guide (`make guide`)
  scripts/update-guide.py --check     the guide is current: each output, with
                                      the case's filters applied, is the
                                      case's expected.txt; the command shown
                                      is the case's (same words, paths by their
                                      last component; variables from its env);
                                      every command and seed has an example

In the guide the scratch directory of a case is the current directory: a
path "%t/x" of a golden output reads "x".
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "docs", "guide.md")
GOLDEN = os.path.join(ROOT, "test", "golden")
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))

BLOCK = re.compile(r"<!-- output: ([\w.-]+) -->\n```console\n(\$ [^\n]*)\n(.*?)```\n", re.S)
COMMANDS = ("check", "fix", "fleet", "diff", "run", "logs", "jit", "snapshot", "libs", "rules", "explain")
SEEDS = ("000", "001", "002", "003", "004")


def shown(text):
    """A golden output as the guide shows it."""
    return text.replace("%t/", "").replace("%t", ".")


def case_words(case):
    """The words of the case's command line (mldoctor and its arguments, or
    the launcher line of cmd.sh), paths by their last component."""
    cdir = os.path.join(GOLDEN, case)
    if os.path.exists(os.path.join(cdir, "cmd")):
        words = ["mldoctor"] + shlex.split(open(os.path.join(cdir, "cmd")).read().strip())
    else:
        lines = [l for l in open(os.path.join(cdir, "cmd.sh")).read().splitlines() if '"$MLDOCTOR"' in l]
        words = ["mldoctor" if w == "$MLDOCTOR" else w for w in shlex.split(lines[-1])]
    return comparable(words)


def comparable(words):
    """Words with paths (also in comma lists) by their last component, and
    no redirections."""
    return [",".join(p.rstrip("/").rsplit("/", 1)[-1] for p in w.split(",")) for w in words if w != "2>&1"]


def check_guide():
    golden = __import__("golden-reports")
    text = open(GUIDE).read()
    problems = []
    blocks = BLOCK.findall(text)
    if len(re.findall(r"^<!-- output:", text, re.M)) != len(blocks):
        problems.append("a <!-- output: --> marker not followed by a ```console block starting with '$ '")
    for case, command, output in blocks:
        cdir = os.path.join(GOLDEN, case)
        exp_file = os.path.join(cdir, "expected.txt")
        if not os.path.exists(exp_file):
            problems.append("%s: no golden case test/golden/%s" % (case, case))
            continue
        filtered, unused = golden.apply_filters(output, cdir)
        for pattern in unused:
            problems.append("%s: filter %r matches nothing in the guide's output" % (case, pattern))
        expected = shown(open(exp_file).read())
        if filtered != expected:
            import difflib
            problems.append("%s: the guide's output is not the golden one (make guide):\n%s" % (
                case, "".join(difflib.unified_diff(expected.splitlines(True), filtered.splitlines(True),
                                                   "expected.txt", "docs/guide.md"))))
        words = shlex.split(command[2:])
        env_words = []
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            env_words.append(words.pop(0))
        env_file = os.path.join(cdir, "env")
        env_lines = open(env_file).read().splitlines() if os.path.exists(env_file) else []
        for w in env_words:
            if w not in env_lines:
                problems.append("%s: the guide sets %s, the case's env does not" % (case, w))
        if comparable(words) != case_words(case):
            problems.append("%s: the guide shows `%s`, the case runs `%s`" % (
                case, " ".join(words), " ".join(case_words(case))))
    for c in COMMANDS:
        if not any(re.search(r"\bmldoctor %s\b" % c, cmd) for _, cmd, _ in blocks):
            problems.append("no example output of `mldoctor %s`" % c)
    for s in SEEDS:
        if not re.search(r"^## .*[Ss]eed %s" % s, text, re.M):
            problems.append("no section for seed %s" % s)
    for p in problems:
        print("docs/guide.md: " + p)
    print("update-guide --check: %d examples, %d problems" % (len(blocks), len(problems)))
    return 1 if problems else 0


def update_guide(mldoctor):
    text = open(GUIDE).read()
    cases = sorted({case for case, _, _ in BLOCK.findall(text)})
    with tempfile.TemporaryDirectory() as raw:
        env = dict(os.environ, MLDOCTOR=mldoctor, MLD_SOURCE_DIR=ROOT, GOLDEN_RAW_DIR=raw,
                   GOLDEN_CASES=",".join(cases))
        subprocess.run([sys.executable, os.path.join(ROOT, "test", "e2e", "golden-reports.py")], env=env)

        def replace(m):
            path = os.path.join(raw, m.group(1) + ".txt")
            if not os.path.exists(path):
                return m.group(0)
            return "<!-- output: %s -->\n```console\n%s\n%s```\n" % (m.group(1), m.group(2), shown(open(path).read()))

        text = BLOCK.sub(replace, text)
    with open(GUIDE, "w") as f:
        f.write(text)
    return check_guide()


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check_guide())
    if len(sys.argv) == 2:
        sys.exit(update_guide(os.path.abspath(sys.argv[1])))
    print(__doc__)
    sys.exit(2)

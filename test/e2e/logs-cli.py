#!/usr/bin/env python3
"""`mldoctor logs` as a user runs it: files, standard input, gzip, --json,
--markdown, --fail-on, --context, --follow on a growing file with a stall,
and bad input (a directory, a missing file, a binary file, a broken user
rule) — each a clear error while the other inputs are still reported.

Uses its own rules (--rules-dir) so it tests the command, not the knowledge
base; the knowledge base's examples are tested by rules-test.
"""
import gzip
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, finish, scratch  # noqa: E402


def ok(name, cond, detail=""):
    check(cond, name + ("\n" + detail[-2000:] if not cond and detail else ""))


def eq(name, actual, expected):
    check_eq(actual, expected, name)

RULE = '''id = "USR010"
severity = "error"
title = "Duplicate OpenMP runtime"
explanation = "Two OpenMP runtimes were initialised in one process."
references = ["https://example.org/omp"]
[fix]
text = "Use one OpenMP runtime."
env = ["MKL_THREADING_LAYER=GNU"]
[[signature]]
pattern = 'OMP: Error #15: Initializing (\\S+), but found (\\S+) already initialized'
message = "{1} initialised while {2} already was"
[[example]]
log = "OMP: Error #15: Initializing a.so, but found b.so already initialized."
source = "https://example.org/omp"
[[negative]]
log = "OMP: Info #1"
why = "info"
'''
STALL = '''id = "USR011"
severity = "warning"
title = "Extension build stalled"
explanation = "The log ends while torch waits for an extension build lock."
references = ["https://example.org/jit"]
[fix]
text = "mldoctor jit --fix"
[[signature]]
pattern = 'Using (\\S+) as PyTorch extensions root'
message = "stalled in {1}"
at_end = true
[[example]]
log = "Using /x as PyTorch extensions root..."
source = "https://example.org/jit"
[[negative]]
log = "Loading extension module x..."
why = "the build finished"
'''
OMP = "OMP: Error #15: Initializing libiomp5.so, but found libomp.so already initialized."


def run(args, **kw):
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([MLDOCTOR] + args, capture_output=True, text=True, env=env, **kw)


def main():
    t = scratch()
    rules = os.path.join(t, "rules")
    os.mkdir(rules)
    open(os.path.join(rules, "USR010.toml"), "w").write(RULE)
    open(os.path.join(rules, "USR011.toml"), "w").write(STALL)
    R = ["--no-builtin-rules", "--rules-dir", rules]

    log = os.path.join(t, "train.log")
    with open(log, "w") as f:
        for i in range(2000):
            f.write("step %d loss 0.1\n" % i)
            if i in (500, 900):
                f.write("[rank%d]:%s\n" % (i // 100, OMP))
    p = run(["logs"] + R + [log])
    eq("file: exit 1 on an error finding", p.returncode, 1)
    ok("file: message with captures", "libiomp5.so initialised while libomp.so already was" in p.stdout, p.stdout)
    ok("file: first line number", "%s:502: [rank5]:OMP" % log in p.stdout, p.stdout)
    ok("file: count and ranks", "seen 2 times, lines 502–903, ranks 5,9" in p.stdout, p.stdout)
    ok("file: fix and env", "fix: Use one OpenMP runtime." in p.stdout and "export MKL_THREADING_LAYER=GNU" in p.stdout,
          p.stdout)
    ok("file: summary", "1 error · mldoctor explain USR010" in p.stdout, p.stdout)

    p = run(["logs"] + R + ["--fail-on", "error", "-"], input="nothing here\n")
    eq("stdin: clean log exits 0", p.returncode, 0)
    ok("stdin: named <stdin>", "<stdin>: 1 lines, 0 findings" in p.stdout, p.stdout)

    gz = log + ".gz"
    with open(log, "rb") as src, gzip.open(gz, "wb") as dst:
        dst.write(src.read())
    p = run(["logs"] + R + ["--json", gz])
    doc = json.loads(p.stdout)
    eq("gzip: schema", doc["schema"], "mldoctor.logs/1")
    f0 = doc["inputs"][0]["findings"][0]
    eq("gzip: json finding", (f0["rule"], f0["count"], f0["evidence"][0]["line"], f0["ranks"]),
             ("USR010", 2, 502, [5, 9]))
    eq("gzip: lines", doc["inputs"][0]["lines"], 2002)

    p = run(["logs"] + R + ["--markdown", log])
    ok("markdown: heading and fenced evidence", "### ✗ `USR010`" in p.stdout and "```\n" in p.stdout, p.stdout)

    p = run(["logs"] + R + ["-C", "1", log])
    ok("context: lines around, grep-style", "%s:501- step 500 loss 0.1" % log in p.stdout and
          "%s:503- step 501 loss 0.1" % log in p.stdout, p.stdout)

    # Bad inputs: each a clear error, the good input still reported, exit 2.
    binary = os.path.join(t, "core.bin")
    with open(binary, "wb") as f:
        f.write(os.urandom(1 << 20) + b"\n" + OMP.encode() + b"\x00\xff\n")
    p = run(["logs"] + R + [t, os.path.join(t, "missing.log"), binary, log])
    eq("bad inputs: exit 2", p.returncode, 2)
    ok("bad inputs: directory named", "%s: is a directory" % t in p.stderr, p.stderr)
    ok("bad inputs: missing file named", "missing.log: cannot open: No such file or directory" in p.stderr, p.stderr)
    ok("bad inputs: binary file still scanned", "%s: " % binary in p.stdout and p.stdout.count("USR010") >= 2,
          p.stdout)
    ok("bad inputs: no raw control bytes printed", "\x00" not in p.stdout and "\x1b" not in p.stdout)

    os.chmod(log, 0)
    if os.geteuid() != 0:
        p = run(["logs"] + R + [log])
        ok("unreadable: permission error", "Permission denied" in p.stderr, p.stderr)
    os.chmod(log, 0o644)

    broken = os.path.join(t, "broken")
    os.mkdir(broken)
    open(os.path.join(broken, "USR012.toml"), "w").write(RULE.replace("USR010", "USR012").replace("(\\S+), but", "(\\S+, but"))
    p = run(["logs", "--rules-dir", broken, log])
    eq("broken user rule: exit 2", p.returncode, 2)
    ok("broken user rule: file and problem named", "USR012.toml" in p.stderr and "missing closing parenthesis" in p.stderr,
          p.stderr)

    # --follow: findings appear as the file grows; a stall after the build
    # line is reported once the input is idle for --stall seconds.
    grow = os.path.join(t, "grow.log")
    open(grow, "w").close()
    proc = subprocess.Popen([MLDOCTOR, "logs"] + R + ["--follow", "--stall", "1", grow], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, NO_COLOR="1"))
    try:
        with open(grow, "a") as f:
            f.write("epoch 1\n%s\n" % OMP)
            f.flush()
            time.sleep(1.0)
            f.write("Using /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...\n")
            f.flush()
        time.sleep(3.5)
    finally:
        proc.terminate()
    out, err = proc.communicate(timeout=30)
    ok("follow: finding printed live", "libiomp5.so initialised while libomp.so already was" in out, out + err)
    ok("follow: stall reported", "stalled in /root/.cache/torch_extensions/py311_cpu" in out, out + err)
    eq("follow: stall reported once", out.count("stalled in"), 1)
    finish("logs-cli")


if __name__ == "__main__":
    main()

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
import select
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
    ok("stdin: named <stdin>", "<stdin>: 1 line, 0 findings" in p.stdout, p.stdout)

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

    # rules --check on a user's rules: a rule whose cited format string its
    # pattern matches after every prefix passes; one anchored at the line start
    # fails after the prefixes logs carry, named with the line it missed, exit 1.
    SOURCE = '''
[[source]]
repository = "llvm/llvm-project"
path = "openmp/runtime/src/i18n/en_US.txt"
line = 177
tag = "llvmorg-18.1.8"
format = "OMP: Error #%1$d: Initializing %2$s, but found %3$s already initialized."
values = ["15", "libiomp5.so", "libomp.so"]
'''
    good = os.path.join(t, "checked-good")
    os.mkdir(good)
    open(os.path.join(good, "USR010.toml"), "w").write(RULE + SOURCE)
    p = run(["rules", "--check", "--no-builtin-rules", "--rules-dir", good])
    eq("rules --check: a sourced rule passes", p.returncode, 0)
    ok("rules --check: counts", "checked 1 log rules: 1 examples, 1 negatives, 1 cited format strings "
       "(10 lines with their prefixes): 0 problems" in p.stdout, p.stdout + p.stderr)
    doc = json.loads(run(["rules", "--json", "--no-builtin-rules", "--rules-dir", good]).stdout)
    src = doc["rules"][0]["sources"][0]
    eq("rules --json: the source and its url", (src["tag"], src["url"]),
       ("llvmorg-18.1.8", "https://github.com/llvm/llvm-project/blob/llvmorg-18.1.8/openmp/runtime/"
        "src/i18n/en_US.txt#L177"))
    p = run(["explain", "USR010", "--no-builtin-rules", "--rules-dir", good])
    ok("explain: printed by", "Printed by" in p.stdout and src["url"] in p.stdout, p.stdout)
    bad = os.path.join(t, "checked-bad")
    os.mkdir(bad)
    open(os.path.join(bad, "USR010.toml"), "w").write(
        RULE.replace("pattern = 'OMP: Error", "pattern = '^OMP: Error") + SOURCE)
    p = run(["rules", "--check", "--no-builtin-rules", "--rules-dir", bad])
    eq("rules --check: an anchored pattern fails", p.returncode, 1)
    ok("rules --check: names the prefixes and the line", "USR010: source llvm/llvm-project "
       "openmp/runtime/src/i18n/en_US.txt:177 (llvmorg-18.1.8) fails after the prefix(es) torchrun rank, "
       in p.stdout and "not matched (got nothing):\n[rank3]:OMP: Error #15: Initializing libiomp5.so"
       in p.stdout and "0 problems" not in p.stdout, p.stdout + p.stderr)
    unsourced = json.loads(run(["rules", "--check", "--json", "--no-builtin-rules", "--rules-dir",
                                rules]).stdout)
    eq("rules --check --json: unsourced rules named", (unsourced["ok"], unsourced["unsourced"]),
       (True, ["USR010", "USR011"]))

    # A log PowerShell wrote (`python train.py > train.log`: UTF-16LE with a
    # byte-order mark, CRLF), gzip'd too, and UTF-16BE without a mark: read
    # as their text, said so, line numbers kept.
    text = "PS C:\\work> python train.py\r\n" + "".join(
        "step %d loss 0.1\r\n" % i for i in range(300)) + OMP + "\r\n"
    ps = os.path.join(t, "powershell.log")
    with open(ps, "wb") as f:
        f.write(b"\xff\xfe" + text.encode("utf-16-le"))
    with open(ps, "rb") as src, gzip.open(ps + ".gz", "wb") as dst:
        dst.write(src.read())
    be = os.path.join(t, "utf16be.log")
    with open(be, "wb") as f:
        f.write(text.encode("utf-16-be"))
    for path in (ps, ps + ".gz", be):
        p = run(["logs"] + R + [path])
        name = os.path.basename(path)
        eq(name + ": exit 1 on the finding", p.returncode, 1)
        enc = "UTF-16BE" if path == be else "UTF-16LE"
        ok(name + ": decoded and said so", "%s: 302 lines of %s text, 1 finding" % (path, enc)
           in p.stdout, p.stdout + p.stderr)
        ok(name + ": line number of the text", "%s:302: OMP: Error #15" % path in p.stdout, p.stdout)
    doc = json.loads(run(["logs"] + R + ["--json", ps]).stdout)
    eq("utf-16: json encoding", doc["inputs"][0].get("encoding"), "UTF-16LE")

    # A named pipe nobody writes to: said on stderr, not a silent block; a
    # writer that comes later is read to its end.
    fifo = os.path.join(t, "job.fifo")
    os.mkfifo(fifo)
    proc = subprocess.Popen([MLDOCTOR, "logs"] + R + [fifo], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, NO_COLOR="1"))
    deadline = time.time() + 60
    err = ""
    while time.time() < deadline and "no program writes to yet" not in err:
        if select.select([proc.stderr], [], [], 0.5)[0]:
            err += os.read(proc.stderr.fileno(), 4096).decode()
    ok("fifo: the wait for a writer is said", "job.fifo is a named pipe (FIFO) that no program "
       "writes to yet: waiting for one to write and close it (Ctrl-C stops)" in err, err)
    with open(fifo, "w") as w:
        w.write("hello\n" + OMP + "\n")
    out, rest = (b.decode() for b in proc.communicate(timeout=60))
    eq("fifo: exit 1 on the finding", proc.returncode, 1)
    ok("fifo: read to the writer's close", "%s: 2 lines, 1 finding" % fifo in out, out + err + rest)

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

    # An envelope alone: the report says what to collect next (the rule's
    # `collect`), in text and JSON; with the cause in the same log, the
    # envelope is context and no "next:" is printed for it.
    envelope = os.path.join(t, "childfailed.log")
    with open(envelope, "w") as f:
        f.write("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
                "============================================================\n"
                "train.py FAILED\n"
                "------------------------------------------------------------\n"
                "Root Cause (first observed failure):\n"
                "[0]:\n"
                "  time      : 2024-03-01_12:00:00\n"
                "  host      : node1\n"
                "  rank      : 1 (local_rank: 1)\n"
                "  exitcode  : 1 (pid: 12345)\n"
                "  error_file: <N/A>\n"
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
                "============================================================\n")
    p = run(["logs", envelope])
    ok("envelope alone: DIST021 is the cause", " DIST021\n" in p.stdout, p.stdout)
    ok("envelope alone: what to collect next", "\n     next: torchrun's summary only points at the failed worker."
       " Collect that rank's own output" in p.stdout, p.stdout)
    doc = json.loads(run(["logs", "--json", envelope]).stdout)
    found = doc["inputs"][0]["findings"]
    ok("envelope alone: JSON collect", any(f["rule"] == "DIST021" and f.get("collect", "").startswith(
        "torchrun's summary only points") for f in found), json.dumps(found)[:2000])
    with open(envelope, "a") as f:
        f.write("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                "capacity of 79.15 GiB of which 1.02 GiB is free.\n")
    p = run(["logs", envelope])
    ok("with its cause: the cause leads", p.stdout.splitlines()[1].rstrip().endswith("CUDA013"), p.stdout)
    ok("with its cause: no next for the envelope", "torchrun's summary only points" not in p.stdout, p.stdout)
    p = run(["explain", "DIST021"])
    ok("explain: the collect section", "When a log shows only this, collect next" in p.stdout, p.stdout)
    finish("logs-cli")


if __name__ == "__main__":
    main()

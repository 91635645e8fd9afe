#!/usr/bin/env python3
"""First contact without traps (issue 20, item 7): what a new user meets in
the first minutes, each as the real binary answers it.

- `check --python /nonexistent`: the error and exit 2, no report that could
  be read as "✓ no findings" for it.
- `logs missing.log`: the error, no "0 lines, 0 findings" for a file never
  opened; the other inputs are still reported.
- `check --root EMPTYDIR`: refused (it would describe no machine); a root
  tree without a recorded environment is said to borrow this shell's.
- `--markdown`: `explain` prints the rule's section of docs/rules.md;
  `libs`, `run`, `fix`, `stacks`, `snapshot` refuse it (exit 2) instead of
  ignoring it; `snapshot --json` likewise.
- `--import sklearn,tensorflow,foo`: the names that map to nothing are
  reported, not dropped.
- `libs` with nothing to say ends with a summary line all the same.
- `logs` reading a terminal says what it waits for.
(The probe's process group on timeout is tested in pyenv-test; JIT006's
severity in jit-test; `jit --fix`'s summary in the jit-stale-lock golden.)
"""
import os
import pty
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

SRC = os.environ.get("MLD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def run(*args, **kw):
    return subprocess.run([MLDOCTOR] + list(args), capture_output=True, text=True, timeout=120, **kw)


d = scratch()

p = run("check", "--python", "/nonexistent")
check_eq(p.returncode, 2, "check --python /nonexistent: exit 2")
check_eq(p.stdout, "", "check --python /nonexistent: no report beside the error")
check_in("--python /nonexistent: No such file or directory", p.stderr, "check --python /nonexistent: the error")

ok = os.path.join(d, "ok.log")
with open(ok, "w") as f:
    f.write("all good\n")
p = run("logs", os.path.join(d, "missing.log"), ok)
check_eq(p.returncode, 2, "logs with a missing input: exit 2")
check("missing.log: 0 lines" not in p.stdout, "no counts for a file never opened:\n" + p.stdout)
check_in("missing.log: cannot open", p.stderr, "logs: the missing input's error")
check_in("ok.log: 1 line, 0 findings", p.stdout, "logs: the readable input still reported")

empty = os.path.join(d, "empty")
os.makedirs(empty)
p = run("check", "--root", empty)
check_eq(p.returncode, 2, "check --root EMPTYDIR: exit 2")
check_eq(p.stdout, "", "check --root EMPTYDIR: no report")
check_in("holds neither a snapshot nor a root filesystem", p.stderr, "check --root EMPTYDIR: why")
tree = os.path.join(SRC, "test", "fixtures", "hosts", "low-memlock")
p = run("check", "--root", tree)
check_in("records no environment (not a snapshot)", p.stderr, "a root without a recorded environment is said")

p = run("explain", "OMP001", "--markdown")
check_eq(p.returncode, 0, "explain --markdown: exit 0")
check(p.stdout.startswith("## OMP001\n\n**More than one OpenMP runtime in one process** · warning"),
      "explain --markdown: the rule's section of docs/rules.md:\n" + p.stdout[:200])
with open(os.path.join(SRC, "docs", "rules.md")) as f:
    check_in(p.stdout.strip(), f.read(), "explain --markdown is docs/rules.md's section, word for word")
for args in (["libs", "/bin/true"], ["run", "--", "/bin/true"], ["fix"], ["stacks", str(os.getpid())],
             ["snapshot", os.path.join(d, "s.tar.gz")]):
    p = run(*(args[:1] + ["--markdown"] + args[1:]))
    check_eq(p.returncode, 2, "%s --markdown: refused" % args[0])
    check_in("--markdown: `%s`" % args[0], p.stderr, "%s --markdown: said why" % args[0])
check(not os.path.exists(os.path.join(d, "s.tar.gz")), "a refused snapshot wrote nothing")
p = run("snapshot", "--json", os.path.join(d, "s.tar.gz"))
check_eq(p.returncode, 2, "snapshot --json: refused")
check(not os.path.exists(os.path.join(d, "s.tar.gz")), "a refused snapshot wrote nothing")

if os.access("/usr/bin/python3", os.X_OK):
    p = run("check", "--python", "/usr/bin/python3", "--import", "sklearn,tensorflow,foo")
    check_in("tensorflow: not found on the interpreter's sys.path", p.stdout, "--import: an unknown name is reported")
    check_in("foo: not found on the interpreter's sys.path", p.stdout, "--import: every unknown name")

# The summary line's `mldoctor fix` repeats the check's options, so eval
# "$(...)" sets what this report found (it forgot --python before).
if os.access("/usr/bin/python3", os.X_OK):
    # Far more threads than this machine's usable CPUs, whatever their
    # number: a thread-count finding with a setting to fix.
    env = dict(os.environ, OMP_NUM_THREADS=str(16 * len(os.sched_getaffinity(0))), NO_COLOR="1")
    p = run("check", "--python", "/usr/bin/python3", "--import", "torch", env=env)
    line = [l for l in p.stdout.splitlines() if "eval \"$(" in l]
    if check(line, "check with a fixable finding names the fix command:\n" + p.stdout[-600:]):
        fix = line[-1].split('eval "$(', 1)[1].rsplit(')"', 1)[0]
        check_eq(fix, "mldoctor fix --python /usr/bin/python3 --import torch", "the fix command keeps --python and --import")
        q = subprocess.run([MLDOCTOR] + fix.split()[1:], capture_output=True, text=True, env=env, timeout=120)
        check("nothing to set" not in q.stdout and "export " in q.stdout,
              "that fix command sets what the check found:\n" + q.stdout)

p = run("libs", "/bin/true")
check_eq(p.returncode, 0, "libs /bin/true: exit 0")
check(p.stdout.rstrip().endswith("✓ no findings"), "libs ends with a summary line:\n" + p.stdout)

# A terminal on stdin: the hint, then the scan of what was typed.
master, slave = pty.openpty()
proc = subprocess.Popen([MLDOCTOR, "logs"], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
os.close(slave)
err = b""
deadline = time.monotonic() + 20
while b"Ctrl-D" not in err and time.monotonic() < deadline:
    r, _, _ = select.select([proc.stderr], [], [], 0.2)
    if r:
        err += os.read(proc.stderr.fileno(), 4096)
os.write(master, b"hello\n\x04")
out, rest = proc.communicate(timeout=30)
os.close(master)
check_in("reading a log from the terminal", err.decode(), "logs on a terminal says what it waits for")
check_in("<stdin>: 1 line, 0 findings", out.decode(), "then scans what was typed")
finish(os.path.basename(__file__))

#!/usr/bin/env python3
# labels: slow scenario
"""Seed 002: a stale torch.utils.cpp_extension JIT lock hangs every later
load() forever, silently (pytorch/pytorch#59146).

Real half (the oracle): Debian's /usr/bin/python3 runs load_inline("x2", ...,
verbose=True) with TORCH_EXTENSIONS_DIR=T and an empty T/x2/lock left behind,
as a SIGKILLed builder leaves it. torch's FileBaton spins on
`while os.path.exists(lock): sleep(0.1)`: the process must still be running
after the timeout, having printed "... as PyTorch extensions root..." and not
"Building extension module". After mldoctor's fix the same load_inline must
really build, and f() must return 42. While that real build runs, the builder
holds the lock's descriptor open (the live case, seen for real).

mldoctor half: `mldoctor jit` over T reports JIT001 (stale lock, subject the
lock's path); --dry-run --fix changes nothing; --fix removes the lock. A lock
held open by a live process (a second root T2, the holder made the way torch
makes it: os.open(O_CREAT|O_EXCL), then sleep) is JIT002 naming the pid, and
--fix keeps it; once the holder is SIGKILLed it is JIT001.

Safety: --fix never removes a file outside the roots: T/x4/lock is a symlink to
a file outside T. We assert that the target (the victim) still exists with
its content; removing the symlink T/x4/lock itself is acceptable and not
asserted either way.

Every run uses HOME=<scratch> (and cwd=<scratch>), so that `mldoctor jit
--fix` never looks at, let alone removes, a lock in the developer's real
~/.cache/torch_extensions.
"""
import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, fail, finish  # noqa: E402
from scenarios import PY, finding_text, findings, skip_unless, summary  # noqa: E402
from torch_load import (BUILD_TIMEOUT, HANG_TIMEOUT, cleanup, have_headers, kill_group, make_env,  # noqa: E402
                        read, spawn, start_load, tmpdir, wait_for_text, wait_load)

skip_unless("torch", tools=("ninja", "c++"))
HAVE_HEADERS = have_headers()

atexit.register(cleanup)
# ctest's timeout and ^C end the test with a signal: clean up then too.
for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_sig, lambda signum, frame: sys.exit(128 + signum))


HOLDER = r"""
import os, signal, sys, time
signal.alarm(600)
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL)   # exactly FileBaton.try_acquire
print("ready", os.getpid(), flush=True)
time.sleep(600)
"""


def start_holder(lock, env):
    """A live process holding LOCK open, created the way torch creates it."""
    p = spawn([PY, "-c", HOLDER, lock], env, stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], 30)
    line = p.stdout.readline() if ready else ""
    check(line.startswith("ready"), "lock holder did not start (got %r)" % line)
    return p


# ---------------------------------------------------------------- mldoctor half

def run_jit(*args, env, cwd, what, rc=None):
    """`mldoctor jit ARGS`. With --json in ARGS returns (document or None, p),
    else (None, p). Failures to run or parse, and an unexpected exit status
    (RC given), are recorded."""
    cmd = [MLDOCTOR, "jit"] + list(args)
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        fail("%s: cannot run %s: %s" % (what, " ".join(cmd), e))
        return None, None
    if rc is not None:
        check(p.returncode == rc, "%s: %s exited %d, expected %d\nstdout:\n%s\nstderr:\n%s"
              % (what, " ".join(cmd), p.returncode, rc, p.stdout, p.stderr))
    if "--json" not in args:
        return None, p
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("%s: %s: exit %d, stdout is not one JSON object\nstdout:\n%s\nstderr:\n%s"
             % (what, " ".join(cmd), p.returncode, p.stdout, p.stderr))
        return None, p
    if not check(isinstance(doc, dict), "%s: not a JSON object: %r" % (what, doc)):
        return None, p
    check_eq(doc.get("schema"), "mldoctor.jit/1", "%s: schema" % what)
    for key in ("extensions", "findings", "actions"):
        check(isinstance(doc.get(key), list), "%s: no %r list in %s" % (what, key, json.dumps(doc)[:2000]))
    return doc, p


def same_path(a, b):
    return isinstance(a, str) and (a == b or os.path.realpath(a) == os.path.realpath(b))


def lock_findings(doc, rule, lock):
    return [f for f in findings(doc, rule) if same_path(f.get("subject"), lock)]


def extension(doc, name):
    for e in (doc or {}).get("extensions") or []:
        if isinstance(e, dict) and e.get("name") == name:
            return e
    return None


def actions_for(doc, lock):
    return [a for a in (doc or {}).get("actions") or []
            if isinstance(a, dict) and same_path(a.get("path"), lock)]


def has_pid(text, pid):
    return re.search(r"(?<!\d)%d(?!\d)" % pid, text) is not None


def expect_held(doc, lock, pid, what):
    """JIT002 for LOCK naming PID; no JIT001 for it; PID among the holders."""
    if doc is None:
        return
    fs = [f for f in findings(doc, "JIT002") if same_path(f.get("subject"), lock)
          or lock in finding_text(f)] or findings(doc, "JIT002")
    if check(bool(fs), "%s: no JIT002 for %s; findings: %s" % (what, lock, summary(doc))):
        f = fs[0]
        check_eq(f.get("severity"), "info", "%s: JIT002 severity" % what)
        ev = "\n".join(str(e.get("text", "")) if isinstance(e, dict) else str(e)
                       for e in f.get("evidence") or [])
        check(has_pid(ev, pid), "%s: JIT002 evidence does not name pid %d: %r" % (what, pid, ev))
    check(not lock_findings(doc, "JIT001", lock),
          "%s: a held lock reported stale: %s" % (what, summary(doc)))
    ext = extension(doc, os.path.basename(os.path.dirname(lock)))
    lk = ext.get("lock") if isinstance(ext, dict) else None
    if check(isinstance(lk, dict), "%s: extension entry with a lock for %s: %r" % (what, lock, ext)):
        check(same_path(lk.get("path"), lock), "%s: lock.path %r" % (what, lk.get("path")))
        pids = [h.get("pid") for h in lk.get("holders") or [] if isinstance(h, dict)]
        check(pid in pids, "%s: pid %d not among lock.holders %r" % (what, pid, lk.get("holders")))


def expect_stale(doc, lock, what):
    if doc is None:
        return
    fs = lock_findings(doc, "JIT001", lock)
    if check(bool(fs), "%s: no JIT001 with subject %s; findings: %s" % (what, lock, summary(doc))):
        check_eq(fs[0].get("severity"), "error", "%s: JIT001 severity" % what)
    ext = extension(doc, os.path.basename(os.path.dirname(lock)))
    lk = ext.get("lock") if isinstance(ext, dict) else None
    if check(isinstance(lk, dict), "%s: extension entry with a lock for %s: %r" % (what, lock, ext)):
        check(same_path(lk.get("path"), lock), "%s: lock.path %r" % (what, lk.get("path")))
        check_eq(lk.get("holders"), [], "%s: holders of a stale lock" % what)


# ================================================================ test 1: the seed

T = tmpdir()          # TORCH_EXTENSIONS_DIR
HOME = tmpdir()       # HOME and cwd of every run
OUTSIDE = tmpdir()    # outside every root
env = make_env(T, HOME)
lock2 = os.path.join(T, "x2", "lock")
os.makedirs(os.path.dirname(lock2))
open(lock2, "w").close()                      # what a SIGKILLed builder leaves

victim = os.path.join(OUTSIDE, "victim")
with open(victim, "w") as f:
    f.write("not a lock\n")
lock4 = os.path.join(T, "x4", "lock")
os.makedirs(os.path.dirname(lock4))
os.symlink(victim, lock4)

# Real: the load hangs, silently.
p, out, t0 = start_load("x2", env, HOME)
timed_out, rc, text, secs = wait_load(p, out, t0, HANG_TIMEOUT)
print("real: load_inline('x2') with a stale lock: %s after %.1f s; output:\n%s"
      % ("still waiting, killed" if timed_out else "exited %s" % rc, secs, text.rstrip()))
check(timed_out, "load_inline with a stale lock should hang (it exited %s)\n%s" % (rc, text))
check_in("as PyTorch extensions root", text, "waiter's output")
check("Building extension module" not in text, "the waiter must not build:\n%s" % text)
check(os.path.exists(lock2), "the waiter leaves the stale lock in place")

# mldoctor: JIT001, nothing changed without --fix.
doc, _ = run_jit("--json", env=env, cwd=HOME, what="jit (stale)", rc=1)
expect_stale(doc, lock2, "jit (stale)")
if doc is not None:
    check_eq(doc.get("actions"), [], "jit without --fix: actions")
check(os.path.exists(lock2), "jit without --fix leaves the lock")

# --dry-run --fix: the removal is listed, not done.
doc, _ = run_jit("--dry-run", "--fix", "--json", env=env, cwd=HOME, what="jit --dry-run --fix", rc=1)
expect_stale(doc, lock2, "jit --dry-run --fix")
acts = actions_for(doc, lock2)
if doc is not None and check(bool(acts), "--dry-run --fix: no action for %s: %r" % (lock2, doc.get("actions"))):
    check_eq(acts[0].get("action"), "remove", "--dry-run --fix: action")
    check_eq(acts[0].get("done"), False, "--dry-run --fix: done")
check(os.path.exists(lock2), "--dry-run --fix must not remove the lock")
check(os.path.exists(victim), "--dry-run --fix must not remove the symlink's target")

# --fix (text): the lock goes; the file outside the root stays.
_, p = run_jit("--fix", env=env, cwd=HOME, what="jit --fix (text)", rc=0)
if p is not None:
    print("mldoctor jit --fix:\n" + p.stdout.rstrip())
    check_in(lock2, p.stdout, "jit --fix text output")
check(not os.path.exists(lock2), "jit --fix removes the stale lock %s" % lock2)
check(os.path.exists(victim), "jit --fix must not remove %s (target of the symlink %s)" % (victim, lock4))
if os.path.exists(victim):
    check_eq(read(victim), "not a lock\n", "victim's content after --fix")

# Real: now it builds. While it builds, the builder holds the lock (live case).
p, out, t0 = start_load("x2", env, HOME)
if wait_for_text(p, out, "Building extension module", 120) and os.path.exists(lock2):
    doc, _ = run_jit("--json", env=env, cwd=HOME, what="jit (during a real build)")
    if os.path.exists(lock2) and p.poll() is None:   # the build was still on throughout
        print("real: lock held by the builder, pid %d, %.1f s into the load" % (p.pid, time.monotonic() - t0))
        expect_held(doc, lock2, p.pid, "jit (during a real build)")
    else:
        print("note: the build finished while mldoctor ran; live check skipped")
else:
    print("note: no lock seen during the build; live check skipped")
timed_out, rc, text, secs = wait_load(p, out, t0, BUILD_TIMEOUT)
print("real: load_inline('x2') after the fix: %s after %.1f s"
      % ("timed out" if timed_out else "exit %s" % rc, secs))
check(not timed_out, "load_inline after the fix must not hang\n%s" % text)
check_in("Building extension module", text, "build after the fix")
if HAVE_HEADERS:
    check(rc == 0, "load_inline after the fix should build (exit %s)\n%s" % (rc, text))
    check_in("RESULT 42", text, "f() of the built extension")
else:
    print("note: torch/extension.h is missing (Debian: libtorch-dev); the load got past "
          "the lock, the compile result is not checked")
check(not os.path.exists(lock2), "a finished build releases its lock")

doc, _ = run_jit("--json", env=env, cwd=HOME, what="jit (after the build)")
if doc is not None:
    check(not lock_findings(doc, "JIT001", lock2) and not lock_findings(doc, "JIT002", lock2),
          "after the build: nothing about %s; findings: %s" % (lock2, summary(doc)))
    if HAVE_HEADERS:
        # The module just built against the installed torch resolves: no stale build.
        stale = [f for f in doc.get("findings", []) if f.get("rule") == "JIT004"]
        check(not stale, "a fresh build is not stale: %s" % summary(doc))

# ================================================================ test 2: a live holder

T2 = tmpdir()
env2 = make_env(T2, HOME)
lock3 = os.path.join(T2, "x3", "lock")
os.makedirs(os.path.dirname(lock3))
holder = start_holder(lock3, env2)

doc, _ = run_jit("--fix", "--json", env=env2, cwd=HOME, what="jit --fix (held)", rc=0)
expect_held(doc, lock3, holder.pid, "jit --fix (held)")
acts = actions_for(doc, lock3)
if doc is not None and check(bool(acts), "--fix (held): no action for %s: %r" % (lock3, doc.get("actions"))):
    check_eq(acts[0].get("action"), "keep", "--fix (held): action")
    check_eq(acts[0].get("done"), False, "--fix (held): done")
    check(has_pid(str(acts[0].get("reason", "")), holder.pid),
          "--fix (held): reason %r does not name pid %d" % (acts[0].get("reason"), holder.pid))
check(os.path.exists(lock3), "--fix must keep a lock a live process holds")
check(holder.poll() is None, "the holder is still alive")

kill_group(holder)     # SIGKILL, as the OOM killer or scancel would
check(os.path.exists(lock3), "a SIGKILLed holder leaves its lock")
doc, _ = run_jit("--json", env=env2, cwd=HOME, what="jit (holder killed)", rc=1)
expect_stale(doc, lock3, "jit (holder killed)")

finish("scenario-seed002-jit-lock")

#!/usr/bin/env python3
"""`mldoctor stacks PID` on a live process of each Debian test root's own
CPython equals faulthandler, frame for frame, and the process runs on
(issue 32, item 2f): bullseye's, trixie's and sid's python3 (3.9, 3.13 and
3.14 today; the version is read from the root's python3 link, never
assumed), Debian's own builds of them.

The roots: scripts/make-test-roots.sh's ($MLD_TEST_ROOTS/SUITE, by default
/var/cache/mldoctor/test-roots/SUITE). This machine (Debian 12) has no 3.14
and sid's needs glibc 2.43, so each interpreter runs chrooted in its root, in
a mount namespace of its own (the root untouched, a scratch directory on its
/tmp, /proc and /dev bound in); mldoctor reads it from outside, by its pid.
A root without its python3 is a FAILURE that says so, never a skip. Each
root's debug build (python3.Xd, package python3-dbg) is read the same way
from 3.13 on (trixie, sid: through _Py_DebugOffsets); bullseye's 3.9d must
be refused with the reason (Py_TRACE_REFS's two more pointers per object),
never read with the release layout.

The target: threads stopped in C calls whose Python stacks cannot move
until the test lets them (each blocked in os.read() on a pipe of its own,
one in time.sleep(), the main thread in signal.sigwait()): deep recursion,
a generator, a coroutine driven by hand, an asyncio task under
asyncio.run(), a method, a lambda, a class's __init__ called often enough
to be specialised (CPython then puts a trampoline frame under it),
functions named with Latin-1 and CJK letters, a module whose path holds a
character outside the BMP. The test waits, through /proc/PID/task/TID/syscall,
until every thread is inside its blocking system call (a thread waiting for
the GIL waits in futex, never in these), so every reader sees the same
frames without any sleep.

Two oracles. faulthandler, registered for SIGUSR1 with all_threads=True,
walks the interpreter's frames in the process; and each thread's stack as
Python itself gives it (traceback.extract_stack, recorded by the thread on
the line it blocks on). `mldoctor stacks --json` and `mldoctor stacks` read
first; then SIGUSR1 makes the process dump itself. The stacks must be the
same, thread by thread (threading.get_ident() for faulthandler, the kernel
thread id for Python's own), frame for frame (file, line, function), and
the text output must show the JSON's frames. One exception, CPython's own:
3.14.10's faulthandler stops a thread's dump with "<invalid frame>" right
after the trampoline under a specialised __init__ (which it prints as
`File "__init__", line ???`); there what it printed before must be ours, and
the whole stack must be Python's own. 3.13's faulthandler prints that
trampoline as a frame and goes on: it is left out of faulthandler's list for
that one thread, whose whole stack must be Python's own. Then the target must still be
running, and SIGUSR2 lets it finish: it prints what it prints without us
and exits 0.
"""
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from faulthandler_dump import INVALID, json_frames, parse_dump  # noqa: E402
from mldtest import MLDOCTOR, check, check_eq, fail, finish, scratch  # noqa: E402

ROOTS = os.environ.get("MLD_TEST_ROOTS") or "/var/cache/mldoctor/test-roots"
SUITES = ("bullseye", "trixie", "sid")
WORKERS = 9  # the kinds of Worker.run below
# The frame faulthandler prints for CPython's trampoline under a specialised
# __init__ (no code of the program's own; Python's traceback never shows it).
SHIM = ("__init__", 0, "__init__")
DEADLINE = 300  # seconds for any one wait: generous for a loaded 2-core machine

# The system calls each thread blocks in, by architecture.
SYSCALLS = {
    # time.sleep() is select() before CPython 3.11 (pselect6 where glibc
    # implements it so), clock_nanosleep() since.
    "x86_64": {"read": (0,), "clock_nanosleep": (230,), "select": (23, 270), "rt_sigtimedwait": (128,)},
    "aarch64": {"read": (63,), "clock_nanosleep": (115,), "select": (72,), "rt_sigtimedwait": (137,)},
}

TARGET = r'''
import asyncio, faulthandler, json, os, signal, sys, threading, time, traceback
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import helper_mod
out = sys.argv[1]
faulthandler.register(signal.SIGUSR1, file=open(out + ".fh", "w"), all_threads=True)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
plan_lock = threading.Lock()
# native thread id -> [system call, its first argument, the thread's stack
# as Python itself gives it (innermost first), or None]
plan = {}
pipes = []

def announce(call, arg=0, frame=None):
    stack = None
    if frame is not None:
        stack = [[f.filename, f.lineno, f.name] for f in reversed(traceback.extract_stack(frame))]
    with plan_lock:
        plan[threading.get_native_id()] = [call, arg, stack]

# Each announces on the line it blocks on: the stack it records is the one
# it blocks with.
def block(fd):
    announce("read", fd, sys._getframe()); return os.read(fd, 1)

def deep(n, fd):
    if n == 0:
        return block(fd)
    return deep(n - 1, fd)

def café(fd):
    return block(fd)

def 函数(fd):
    return café(fd)

def gen(fd):
    yield block(fd)

async def coro(fd):
    return block(fd)

async def task_body(fd):
    return await asyncio.get_running_loop().create_task(coro(fd))

class Opened:
    def __init__(self, fd):
        self.data = block(fd) if fd >= 0 else b""

class Worker:
    def run(self, kind, fd):
        if kind == 0:
            deep(30, fd)
        elif kind == 1:
            函数(fd)
        elif kind == 2:
            list(gen(fd))
        elif kind == 3:
            c = coro(fd)
            try:
                c.send(None)
            except StopIteration:
                pass
        elif kind == 4:
            asyncio.run(task_body(fd))
        elif kind == 5:
            (lambda: block(fd))()
        elif kind == 6:
            helper_mod.wait_in_module(block, fd)
        elif kind == 7:
            # Called enough times to be specialised, then the last blocks.
            for i in range(200):
                Opened(fd if i == 199 else -1)
        else:
            block(fd)

def sleeper():
    announce("clock_nanosleep" if sys.version_info >= (3, 11) else "select", None, sys._getframe()); time.sleep(10 ** 6)

threads = []
for kind in range(%WORKERS%):
    r, w = os.pipe()
    pipes.append(w)
    threads.append(threading.Thread(target=Worker().run, args=(kind, r), name="w%d" % kind))
for t in threads:
    t.start()
threading.Thread(target=sleeper, name="sleeper", daemon=True).start()

def block_main():
    announce("rt_sigtimedwait")
    while True:
        with plan_lock:
            if len(plan) == %WORKERS% + 2:
                break
        time.sleep(0.01)
    with open(out + ".plan.tmp", "w") as f:
        json.dump(plan, f)
    os.rename(out + ".plan.tmp", out + ".plan")
    signal.sigwait([signal.SIGUSR2])

block_main()
for w in pipes:
    os.write(w, b"x")
for t in threads:
    t.join()
print("finished %d threads" % len(threads))
'''.replace("%WORKERS%", str(WORKERS))

HELPER = '''
def wait_in_module(block, fd):
    return inner(block, fd)

def inner(block, fd):
    return block(fd)
'''

TEXT_THREAD = re.compile(r'^  Thread (\d+) ')
TEXT_FRAME = re.compile(r'^    (\S.*)$')

# In the new mount namespace: the scratch directory on the root's /tmp, the
# kernel's trees bound in; then the interpreter, chrooted. `exec` all the way:
# the pid Popen sees is the interpreter's.
IN_ROOT = r'''
set -e
r=$1; tmp=$2; shift 2
mount --bind "$tmp" "$r/tmp"
mount --rbind /proc "$r/proc"
mount --rbind /dev "$r/dev"
exec chroot "$r" /usr/bin/env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME=/tmp "$@"
'''


def parse_text(text):
    """{tid: ["function (file:line)", ...]} of `mldoctor stacks`' text."""
    threads, current = {}, None
    for line in text.splitlines():
        m = TEXT_THREAD.match(line)
        if m:
            current = threads.setdefault(int(m.group(1)), [])
            continue
        m = TEXT_FRAME.match(line)
        if m and current is not None:
            current.append(m.group(1))
        elif not line.strip():
            current = None
    return threads


def text_shows(shown, frame):
    """Whether a text line "function (file:line)" shows the JSON frame
    (file, line, function): the text shortens the files of the standard
    library and of installed packages to their tail."""
    m = re.match(r"^(.*) \((.+?)(?::(\d+))?\)$", shown)
    if not m:
        return False
    file, line, function = frame
    return (m.group(1) == function and int(m.group(3) or 0) == (line or 0)
            and (m.group(2) == file or file.endswith("/" + m.group(2))))


def wait_for(what, ready, proc, name):
    """Polls `ready()` until it holds; fails (and returns False) when the
    target exits or DEADLINE passes."""
    deadline = time.monotonic() + DEADLINE
    while not ready():
        if proc.poll() is not None:
            fail("%s: the target exited while the test waited for %s: status %s\n%s"
                 % (name, what, proc.returncode, proc.stderr.read().decode(errors="replace")))
            return False
        if time.monotonic() > deadline:
            fail("%s: %s not within %d s" % (name, what, DEADLINE))
            return False
        time.sleep(0.02)
    return True


def in_syscall(pid, tid, number, arg):
    try:
        with open("/proc/%d/task/%d/syscall" % (pid, tid)) as f:
            fields = f.read().split()
    except OSError:
        return False
    return len(fields) >= 2 and fields[0] in {str(n) for n in number} and \
        (arg is None or int(fields[1], 16) == arg)


def one(name, python, root, minor, refusal=None):
    """`refusal`: the reason `stacks` must give instead of reading (a debug
    build it does not read), with no frame claimed."""
    calls = SYSCALLS[platform.machine()]
    d = scratch()
    os.chmod(d, 0o755)
    # The module's directory holds a character outside the BMP (a 4-byte
    # code point in co_filename).
    pkg = os.path.join(d, "mod\U0001f600")
    os.makedirs(pkg)
    with open(os.path.join(pkg, "target.py"), "w", encoding="utf-8") as f:
        f.write(TARGET)
    with open(os.path.join(pkg, "helper_mod.py"), "w") as f:
        f.write(HELPER)
    out = os.path.join(d, "t")
    inside = "/tmp/mod\U0001f600/target.py"
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", IN_ROOT, "sh",
                             root, d, python, inside, "/tmp/t"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if not wait_for("the target's plan", lambda: os.path.exists(out + ".plan"), proc, name):
            return
        with open(out + ".plan") as f:
            plan = {int(tid): (call, arg, stack) for tid, (call, arg, stack) in json.load(f).items()}
        check_eq(len(plan), WORKERS + 2, "%s: threads in the target's plan" % name)
        # Every thread inside its blocking call: no frame moves from here on.
        if not wait_for("every thread in its blocking system call",
                        lambda: all(in_syscall(proc.pid, tid, calls[c], a if c == "read" else None)
                                    for tid, (c, a, _) in plan.items()), proc, name):
            return

        p = subprocess.run([MLDOCTOR, "stacks", "--json", str(proc.pid)], capture_output=True, text=True,
                           timeout=DEADLINE)
        if not check_eq(p.returncode, 0, "%s: mldoctor stacks --json exit status (stderr %s)" % (name, p.stderr)):
            return
        process = json.loads(p.stdout)["processes"][0]
        version = process.get("python_version")
        check(process["cpython"], "%s: taken for CPython" % name)
        if refusal:
            check(refusal in str(process.get("python_error")),
                  "%s: refused with the reason %r: %s" % (name, refusal, process.get("python_error")))
            check(not [t for t in process["threads"] if t["python"]],
                  "%s: no Python frame claimed when refused" % name)
            p = subprocess.run([MLDOCTOR, "stacks", str(proc.pid)], capture_output=True, text=True,
                               timeout=DEADLINE)
            check(refusal in p.stdout + p.stderr, "%s: the text gives the reason:\n%s%s" % (name, p.stdout, p.stderr))
            print("%s: refused as expected: %s" % (name, process.get("python_error")))
            return
        check(process.get("python_error") is None,
              "%s: read without error: %s" % (name, process.get("python_error")))
        # Before 3.11 `stacks` knows the minor version only (from the library's
        # name); from 3.11 on, the full one the interpreter's debug offsets give.
        check(str(version) == minor or str(version).startswith(minor + "."),
              "%s: read as CPython %s: %s" % (name, minor, version))
        ours, raw = {}, {}
        for t in process["threads"]:
            check("python_note" not in t, "%s: thread %d read whole: %s" % (name, t["tid"], t.get("python_note")))
            if t["python_thread_id"] is not None:
                ours[t["python_thread_id"]] = json_frames(t)
            if t["python"]:
                raw[t["tid"]] = [(f["file"], f["line"], f["function"]) for f in t["python"]]
        check_eq(sorted(raw), sorted(plan), "%s: every thread with Python frames, by kernel thread id" % name)

        p = subprocess.run([MLDOCTOR, "stacks", str(proc.pid)], capture_output=True, text=True,
                           timeout=DEADLINE)
        check_eq(p.returncode, 0, "%s: mldoctor stacks exit status (stderr %s)" % (name, p.stderr))
        check("  CPython %s (" % version in p.stdout, "%s: the text names CPython %s:\n%s" % (name, version, p.stdout))
        text = parse_text(p.stdout)
        check_eq(sorted(text), sorted(raw), "%s: the text shows the same threads" % name)
        for tid, frames in raw.items():
            shown = text.get(tid, [])
            check(len(shown) == len(frames) and all(text_shows(s, f) for s, f in zip(shown, frames)),
                  "%s: thread %d's text shows the JSON's frames:\n  %r\n  %r" % (name, tid, shown, frames))

        # Python's own view of each thread that recorded it as it blocked
        # (traceback.extract_stack: the f_back chain, without incomplete
        # frames such as the trampoline under a specialised __init__).
        own = 0
        for tid, (_, _, stack) in plan.items():
            if stack is not None and check_eq(raw.get(tid), [tuple(f) for f in stack],
                                              "%s: thread %d as Python itself gives it" % (name, tid)):
                own += 1

        # The oracle, dumped by the process itself while it runs.
        os.kill(proc.pid, signal.SIGUSR1)

        def dumped():
            # Complete once every thread is there and the last (the main
            # thread, the oldest thread state) ends at <module>.
            try:
                with open(out + ".fh", encoding="ascii", errors="replace") as f:
                    text = f.read()
            except OSError:
                return False
            return len(parse_dump(text)) >= WORKERS + 2 and text.endswith(" in <module>\n")

        if not wait_for("faulthandler's dump", dumped, proc, name):
            return
        with open(out + ".fh", encoding="ascii", errors="replace") as f:
            theirs = parse_dump(f.read())
        check_eq(len(theirs), WORKERS + 2, "%s: threads in the process's own dump" % name)
        check_eq(sorted(ours), sorted(theirs), "%s: the same threads (by threading.get_ident())" % name)
        same, cut, shims = 0, 0, 0
        for ident, frames in theirs.items():
            mine = ours.get(ident, [])
            # 3.13's faulthandler prints CPython's own trampoline under a
            # specialised __init__ as a frame (File "__init__", line ???) and
            # goes on; Python's own traceback (compared above, thread by
            # thread) has no such frame, and neither has `stacks`.
            if SHIM in frames and frames[-1:] != [INVALID]:
                frames = [f for f in frames if f != SHIM]
                shims += 1
            if frames[-1:] == [INVALID]:
                # faulthandler gave up at a frame: 3.14.10's stops after the
                # trampoline under a specialised __init__ (which it prints as
                # File "__init__", line ???). What it printed before that
                # must be ours; the rest was compared with Python's own view.
                printed = [f for f in frames[:-1] if f[0] != "__init__"]
                check_eq(mine[:len(printed)], printed,
                         "%s: thread 0x%x frame for frame up to faulthandler's <invalid frame>" % (name, ident))
                cut += 1
            elif check_eq(mine, frames, "%s: thread 0x%x frame for frame" % (name, ident)):
                same += 1
        check(cut <= 1, "%s: faulthandler stopped at an invalid frame only under the specialised __init__" % name)
        check(shims <= 1, "%s: faulthandler printed the trampoline only under the specialised __init__" % name)
        # The frames the target was written to have, as mldoctor read them.
        functions = {f[2] for frames in ours.values() for f in frames}
        for expected in ("deep", "caf\\xe9", "\\u51fd\\u6570", "gen", "coro", "_run_once", "run_until_complete",
                         "<lambda>", "inner", "__init__", "sleeper", "block_main", "<module>"):
            check(expected in functions, "%s: a frame of %s read" % (name, expected))
        deepest = max(len(f) for f in ours.values())
        frames = sum(len(f) for f in ours.values())

        # Read and dumped: the target still runs, then finishes as it would.
        with open("/proc/%d/stat" % proc.pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        check(proc.poll() is None and state in "RS", "%s: the target still running after both reads (state %s)"
              % (name, state))
        print("%s (CPython %s): %d threads, %d frames (deepest %d); as faulthandler frame for frame: %d threads, "
              "%d more up to where faulthandler stopped at <invalid frame> (%d with faulthandler's trampoline "
              "frame left out); as Python's own traceback: %d threads"
              % (name, version, len(ours), frames, deepest, same, cut, shims, own))
        os.kill(proc.pid, signal.SIGUSR2)
        stdout, stderr = proc.communicate(timeout=DEADLINE)
        check_eq(proc.returncode, 0, "%s: the target ran on and exited 0 (stderr %s)" % (name, stderr.decode()))
        check_eq(stdout.decode(), "finished %d threads\n" % WORKERS, "%s: the target's output" % name)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(d, ignore_errors=True)


if platform.machine() not in SYSCALLS:
    fail("no system call numbers for %s in this test" % platform.machine())
    finish("stacks-roots")
for suite in SUITES:
    root = os.path.join(ROOTS, suite)
    link = os.path.join(root, "usr/bin/python3")
    target = os.readlink(link) if os.path.islink(link) else ""
    m = re.match(r"^python(3\.\d+)$", os.path.basename(target))
    if not m or not os.access(os.path.join(root, "usr/bin", os.path.basename(target)), os.X_OK):
        failed = os.path.join(ROOTS, suite + ".FAILED")
        why = ""
        if os.path.exists(failed):
            with open(failed, errors="replace") as f:
                why = "\n%s says:\n%s" % (failed, f.read())
        fail("%s: no CPython to test against: %s does not lead to an executable python3.X (the %s "
             "root of scripts/make-test-roots.sh; set MLD_TEST_ROOTS to the directory that holds "
             "%s/)%s" % (suite, link, suite, suite, why))
        continue
    minor = m.group(1)
    one("%s python%s" % (suite, minor), "/usr/bin/python" + minor, root, minor)
    # The debug build (python3-dbg): read through _Py_DebugOffsets from 3.13
    # on; before, its objects carry Py_TRACE_REFS's two pointers, which the
    # release layouts do not, and `stacks` must say so rather than guess.
    debug = "/usr/bin/python%sd" % minor
    if not os.access(os.path.join(root, debug.lstrip("/")), os.X_OK):
        fail("%s: %s is not in the root (package python3-dbg of scripts/make-test-roots.sh)" % (suite, debug))
        continue
    before_offsets = tuple(int(x) for x in minor.split(".")) < (3, 13)
    one("%s python%sd (debug build)" % (suite, minor), debug, root, minor,
        refusal="a debug build of CPython %s (Py_DEBUG: two more pointers in every object): not read by this "
        "mldoctor" % minor if before_offsets else None)
finish("stacks-roots")

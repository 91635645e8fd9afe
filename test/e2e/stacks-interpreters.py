#!/usr/bin/env python3
"""`mldoctor stacks PID` on live CPython 3.8–3.13 processes, compared frame
for frame with the stack each process prints of itself.

Interpreters: Debian's /usr/bin/python3 and every CPython 3.8–3.13 under
~/.pyenv/versions (this machine kind carries them; an absent one is said and
skipped, at least one must be there).

The target: 64 threads blocked on an Event inside a few frames of their own
(deep recursion in one, a generator, a method, a lambda, a function named
with Latin-1 and CJK letters, a module whose path holds a character outside
the BMP: the three widths of CPython strings), the main thread blocked in
sigwait(). The oracle: faulthandler, registered for SIGUSR1 with
all_threads=True, which walks the interpreter's own frames in the process.
mldoctor reads first (the process does not stop: no ptrace, no signal),
then SIGUSR1 makes the process dump itself; the stacks must be the same,
thread by thread (matched by threading.get_ident()), frame for frame (file,
line, function). Then SIGUSR2 lets the target finish: it must print what it
prints without us and exit 0.

Not a timing test: the time `stacks` took on the 64-thread process is
printed (bench/stacks-speed.py measures it).
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from faulthandler_dump import json_frames, parse_dump  # noqa: E402
from mldtest import MLDOCTOR, check, check_eq, fail, finish, scratch  # noqa: E402

THREADS = 64

TARGET = r'''
import faulthandler, os, signal, sys, threading
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import helper_mod
out = sys.argv[1]
# faulthandler writes the dump frame by frame with write(2) and marks no
# end; with chain=True it then raises the signal again to the handler it
# replaced: CPython's own C handler, which writes the signal number to the
# wakeup fd. One byte in out + ".done" therefore means the dump is complete.
done = os.open(out + ".done", os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
signal.signal(signal.SIGUSR1, lambda signum, frame: None)
signal.set_wakeup_fd(done)
faulthandler.register(signal.SIGUSR1, file=open(out + ".fh", "w"), all_threads=True, chain=True)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
go = threading.Event()

def deep(n):
    if n == 0:
        go.wait()
        return 0
    return deep(n - 1) + 1

def café(n):
    go.wait()

def 函数(n):
    café(n)

def gen():
    go.wait()
    yield 1

class Worker:
    def run(self, n):
        kind = n % 6
        if kind == 0:
            deep(40)
        elif kind == 1:
            函数(n)
        elif kind == 2:
            list(gen())
        elif kind == 3:
            (lambda: go.wait())()
        elif kind == 4:
            helper_mod.wait_in_module(go)
        else:
            go.wait()

threads = [threading.Thread(target=Worker().run, args=(i,), name="w%d" % i) for i in range(%THREADS%)]
for t in threads:
    t.start()

def block_main():
    open(out + ".ready", "w").close()
    signal.sigwait([signal.SIGUSR2])

block_main()
go.set()
for t in threads:
    t.join()
print("finished %d threads" % len(threads))
'''.replace("%THREADS%", str(THREADS))

HELPER = '''
def wait_in_module(event):
    return inner(event)

def inner(event):
    event.wait()
'''

def interpreters():
    found = [("/usr/bin/python3", "/usr/bin/python3")]
    home = os.path.expanduser("~/.pyenv/versions")
    for minor in range(8, 14):
        paths = sorted(glob.glob(os.path.join(home, "3.%d.*" % minor, "bin", "python3.%d" % minor)))
        if paths:
            found.append(("3.%d" % minor, paths[-1]))
        else:
            print("CPython 3.%d: not installed under %s, skipped" % (minor, home))
    return [(n, p) for n, p in found if os.access(p, os.X_OK)]


def one(name, python):
    d = scratch()
    # The module's directory holds a character outside the BMP (a 4-byte
    # code point in co_filename).
    pkg = os.path.join(d, "mod\U0001f600")
    os.makedirs(pkg)
    target = os.path.join(pkg, "target.py")
    with open(target, "w", encoding="utf-8") as f:
        f.write(TARGET)
    with open(os.path.join(pkg, "helper_mod.py"), "w") as f:
        f.write(HELPER)
    out = os.path.join(d, "t")
    proc = subprocess.Popen([python, target, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(out + ".ready"):
            if proc.poll() is not None or time.monotonic() > deadline:
                fail("%s: the target did not start: %s" % (name, proc.communicate()[1].decode()))
                return
            time.sleep(0.02)
        # Every worker must be in its wait before either side reads.
        for _ in range(500):
            with open("/proc/%d/status" % proc.pid) as f:
                threads = int(re.search(r"^Threads:\s+(\d+)", f.read(), re.M).group(1))
            if threads >= THREADS + 1:
                break
            time.sleep(0.02)
        time.sleep(0.5)
        start = time.monotonic()
        p = subprocess.run([MLDOCTOR, "stacks", "--json", str(proc.pid)], capture_output=True, text=True)
        took = time.monotonic() - start
        if not check_eq(p.returncode, 0, "%s: mldoctor stacks exit status (stderr %s)" % (name, p.stderr)):
            return
        doc = json.loads(p.stdout)
        process = doc["processes"][0]
        check(process["cpython"], "%s: taken for CPython" % name)
        check(process.get("python_error") is None, "%s: read without error: %s" % (name, process.get("python_error")))
        ours = {}
        for t in process["threads"]:
            if t["python_thread_id"] is not None:
                ours[t["python_thread_id"]] = json_frames(t)
        tids = [t["tid"] for t in process["threads"] if t["python"]]
        check(len(set(tids)) == len(tids) and all(t > 0 for t in tids),
              "%s: every Python thread matched to its own kernel thread: %r" % (name, tids))
        os.kill(proc.pid, signal.SIGUSR1)
        # Read the dump only once it is complete (the target's ".done" byte,
        # written after faulthandler's last write): a thread count alone can
        # be reached while the last thread's frames are still being written.
        deadline = time.monotonic() + 60
        while not (os.path.exists(out + ".done") and os.path.getsize(out + ".done") > 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        check(os.path.exists(out + ".done") and os.path.getsize(out + ".done") > 0,
              "%s: the target said its dump is complete" % name)
        theirs = parse_dump(open(out + ".fh").read())
        check_eq(len(theirs), THREADS + 1, "%s: threads in the process's own dump" % name)
        check_eq(sorted(ours), sorted(theirs), "%s: the same threads (by threading.get_ident())" % name)
        same = 0
        for ident, frames in theirs.items():
            if ident in ours and check_eq(ours[ident], frames, "%s: thread 0x%x frame for frame" % (name, ident)):
                same += 1
        deepest = max((len(f) for f in theirs.values()), default=0)
        print("%s (%s): %d threads the same frame for frame (deepest %d frames); stacks took %.0f ms"
              % (name, process["python_version"], same, deepest, took * 1000))
        os.kill(proc.pid, signal.SIGUSR2)
        stdout, stderr = proc.communicate(timeout=60)
        check_eq(proc.returncode, 0, "%s: the target ran on and exited 0 (stderr %s)" % (name, stderr))
        check_eq(stdout.decode(), "finished %d threads\n" % THREADS, "%s: the target's output" % name)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


found = interpreters()
check(len(found) >= 1, "at least one interpreter to test")
for name, python in found:
    one(name, python)
finish("stacks-interpreters")

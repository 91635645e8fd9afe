#!/usr/bin/env python3
"""`mldoctor stacks` on processes it cannot or must not read fully: each gets
a clear note, never a crash, a hang or a signal to the target.

- CPython 2.7, 3.6 and 3.7 (under ~/.pyenv): "CPython X.Y" named, the
  supported releases said; a debug build and PyPy (fixtures: programs that
  map a libpython3.11.so exporting what a Py_DEBUG build does, and a
  libpypy3.9-c.so); a program that is not Python (sleep); a pid that
  does not exist (exit 2).
- Another user without permission (mldoctor as `nobody` through setpriv,
  the target root's): the reason, with what to do.
- A process inside its own PID namespace (unshare --pid --fork
  --mount-proc): read through the host's pid, paths through /proc/PID/root.
- Reading racing the interpreter: a process whose main thread recurses and
  returns without pause while threads start and end; 40 reads, every frame
  either one of the target's functions on one of its real lines or cut with a
  note.
- `--tree` on a shell that started an interpreter: both, one taken for CPython.
- Processes that exit while being read: 40 short-lived interpreters read as
  they end; every answer is a report (exit 0) or "no such process" (exit 2).
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

PYENV = os.path.expanduser("~/.pyenv/versions")


def stacks(pid, user=None):
    cmd = [MLDOCTOR, "stacks", "--json", str(pid)]
    if user:
        cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    check(p.returncode in (0, 2), "stacks %s: exit 0 or 2, not %d (stderr %s)" % (pid, p.returncode, p.stderr))
    doc = json.loads(p.stdout) if p.stdout.startswith("{") else None
    return p, doc


def started(cmd, ready_marker=None, **kw):
    # No pipes: a grandchild that outlives its parent must not keep us waiting.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    if ready_marker:
        deadline = time.monotonic() + 30
        while not os.path.exists(ready_marker) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
    else:
        time.sleep(0.5)
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=60)


d = scratch()
ready = os.path.join(d, "ready")

# Interpreters this reader does not read.
for version, expect in (("2.7", "CPython 2.7"), ("3.6", "CPython 3.6"), ("3.7", "CPython 3.7")):
    paths = sorted(glob.glob(os.path.join(PYENV, version + ".*", "bin", "python" + version)))
    if not paths:
        print("CPython %s not under %s: skipped" % (version, PYENV))
        continue
    if os.path.exists(ready):
        os.unlink(ready)
    proc = started([paths[-1], "-c", "import time; open(%r, 'w').close(); time.sleep(60)" % ready], ready)
    p, doc = stacks(proc.pid)
    stop(proc)
    if check(doc is not None, "%s: a report" % version):
        err = doc["processes"][0].get("python_error", "")
        check_in(expect, err, "%s: the release is named" % version)
        check_in("3.8–3.14", err, "%s: the releases that are read are said" % version)
        print("%s: %s" % (version, err))

# A debug build and PyPy, as fixtures (neither is installed here): a program
# that maps a libpython3.11.so defining what a Py_DEBUG build exports
# (_Py_NegativeRefcount beside _PyRuntime and the type objects), and one
# that maps PyPy's libpypy3.9-c.so.
def fixture_host(name, source):
    lib = os.path.join(d, name)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, "-xc", "-"], input=source.encode(), check=True)
    host = os.path.join(d, "host%d" % len(name))  # a name that says nothing
    subprocess.run(["gcc", "-o", host, "-xc", "-", "-ldl"], check=True, input=(
        '#include <dlfcn.h>\n#include <stdio.h>\n#include <unistd.h>\n'
        'int main(int c, char** v) { if (!dlopen(v[1], RTLD_NOW)) { puts(dlerror()); return 1; }'
        ' fclose(fopen(v[2], "w")); sleep(60); }\n').encode())
    return host, lib


debug_host, debug_lib = fixture_host("libpython3.11.so", "char _PyRuntime[4096]; char PyCode_Type[512];"
                                     " char PyUnicode_Type[512]; char PyBytes_Type[512];"
                                     " void _Py_NegativeRefcount(void) {}\n")
pypy_host, pypy_lib = fixture_host("libpypy3.9-c.so", "int pypy_main_startup(void) { return 0; }\n")
for host, lib, expect in ((debug_host, debug_lib, "a debug build of CPython 3.11"),
                          (pypy_host, pypy_lib, "a PyPy process")):
    os.unlink(ready) if os.path.exists(ready) else None
    proc = started([host, lib, ready], ready)
    p, doc = stacks(proc.pid)
    stop(proc)
    if check(doc is not None, "%s: a report" % expect):
        err = doc["processes"][0].get("python_error", "")
        check_in(expect, err, "%s: said by name" % expect)
        print("%s: %s" % (os.path.basename(lib), err))

# Not Python at all.
proc = started(["sleep", "60"])
p, doc = stacks(proc.pid)
stop(proc)
check_eq(p.returncode, 0, "sleep: a report")
if doc:
    check(not doc["processes"][0]["cpython"], "sleep is not taken for CPython")
    check_in("not a CPython 3 process", doc["processes"][0].get("python_error", ""), "sleep: said why")

# No such process.
p, _ = stacks(4194303)
check_eq(p.returncode, 2, "a pid that does not exist: exit 2")
check_in("no such process", p.stderr, "a pid that does not exist: said")

# The target: a Python process with threads, for permission and namespaces.
target = os.path.join(d, "target.py")
with open(target, "w") as f:
    f.write("import os, sys, threading, time\n"
            "def idle():\n"
            "    time.sleep(120)\n"
            "threading.Thread(target=idle, daemon=True).start()\n"
            "open(sys.argv[1], 'w').close()\n"
            "idle()\n")

# The text form, as py-spy dump prints a thread: the main thread with its
# wait, then its frames innermost first; the other thread likewise.
os.unlink(ready) if os.path.exists(ready) else None
proc = started(["/usr/bin/python3", target, ready], ready)
time.sleep(0.3)
p = subprocess.run([MLDOCTOR, "stacks", str(proc.pid)], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, NO_COLOR="1"))
stop(proc)
check_eq(p.returncode, 0, "stacks (text): exit 0")
lines = p.stdout.splitlines()
check(lines and lines[0] == "Process %d: /usr/bin/python3 %s %s" % (proc.pid, target, ready),
      "stacks (text): the process line first:\n" + p.stdout)
check_in("  CPython 3.", p.stdout, "stacks (text): the interpreter's release")
# (the kernel's wait channel after "in" is the kernel's own name: not asserted)
main_at = [i for i, l in enumerate(lines)
           if l.startswith("  Thread %d " % proc.pid) and "(main): clock_nanosleep" in l]
check(main_at and lines[main_at[0] + 1:main_at[0] + 3] == ["    idle (%s:3)" % target, "    <module> (%s:6)" % target],
      "stacks (text): the main thread, its wait, then idle <- <module> with their lines:\n" + p.stdout)
check(any(re.match(r"^    run \(threading\.py:\d+\)$", l) for l in lines),
      "stacks (text): the other thread's frames, standard library files shortened:\n" + p.stdout)

if os.geteuid() == 0 and shutil.which("setpriv"):
    os.unlink(ready) if os.path.exists(ready) else None
    proc = started(["/usr/bin/python3", target, ready], ready)
    p, doc = stacks(proc.pid, user=65534)
    stop(proc)
    if check(doc is not None, "as nobody: a report"):
        err = doc["processes"][0].get("python_error", "")
        check_in("permission a debugger needs", err, "as nobody: the reason")
        print("as nobody:", err)
else:
    print("not root or no setpriv: the permission case skipped")

if os.geteuid() == 0 and shutil.which("unshare"):
    os.unlink(ready) if os.path.exists(ready) else None
    outer = started(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "/usr/bin/python3", target, ready],
                    ready)
    # The interpreter is unshare's child; its pid here is the host's.
    inner = None
    for _ in range(100):
        try:
            kids = open("/proc/%d/task/%d/children" % (outer.pid, outer.pid)).read().split()
        except OSError:
            kids = []
        if kids:
            inner = int(kids[0])
            break
        time.sleep(0.05)
    if check(inner is not None, "the namespaced interpreter found"):
        p, doc = stacks(inner)
        frames = [f["function"] for t in doc["processes"][0]["threads"] for f in t["python"]] if doc else []
        check(doc and doc["processes"][0]["cpython"] and "idle" in frames,
              "in a PID namespace: read through the host's pid: %s" % (doc and doc["processes"][0]))
        os.kill(inner, signal.SIGKILL)
    stop(outer)
else:
    print("not root or no unshare: the PID namespace case skipped")

# --tree: a shell and the interpreter it started, both reported, only one
# taken for CPython.
os.unlink(ready) if os.path.exists(ready) else None
outer = started(["/bin/sh", "-c", "/usr/bin/python3 %s %s; true" % (target, ready)], ready)
p = subprocess.run([MLDOCTOR, "stacks", "--tree", "--json", str(outer.pid)], capture_output=True, text=True,
                   timeout=60)
doc = json.loads(p.stdout) if p.stdout.startswith("{") else None
procs = doc["processes"] if doc else []
check_eq([x["cpython"] for x in procs], [False, True], "--tree: the shell, then the interpreter it started")
for x in procs[1:]:
    os.kill(x["pid"], signal.SIGKILL)
stop(outer)

# Racing the interpreter.
racer = os.path.join(d, "racer.py")
with open(racer, "w") as f:
    f.write("import sys, threading\n"
            "def down(n):\n"
            "    return 0 if n == 0 else down(n - 1) + 1\n"
            "def churn():\n"
            "    for _ in range(50):\n"
            "        down(30)\n"
            "def spawn():\n"
            "    while True:\n"
            "        t = threading.Thread(target=churn)\n"
            "        t.start()\n"
            "        t.join()\n"
            "threading.Thread(target=spawn, daemon=True).start()\n"
            "open(sys.argv[1], 'w').close()\n"
            "while True:\n"
            "    down(200)\n")
# The lines of racer.py each function's frames may be on.
allowed = {"down": {2, 3}, "churn": {4, 5, 6}, "spawn": {7, 8, 9, 10, 11}, "<module>": {14, 15}}
# Every function outside racer.py that the interpreter really enters while
# it runs (threading.py's, and what they call: _weakrefset.py's WeakSet.add
# from Thread.start, its _remove when a thread object dies, ...): asked of
# CPython itself, by a profile hook in every thread of the same program for
# 2 s. Frames of those functions are real; anything else is wild. The hook
# is set first thing in each new thread's _bootstrap_inner: threading.py
# installs its own only after the thread has set its _started Event
# (Event.set, Condition.notify_all, notify), which a read may catch.
tracer = os.path.join(d, "racer-traced.py")
with open(tracer, "w") as f:
    f.write("import sys, threading, time\n"
            "seen = set()\n"
            "local = threading.local()\n"
            "def hook(frame, event, arg):\n"
            "    if event == 'call':\n"
            "        seen.add((frame.f_code.co_filename, frame.f_code.co_name))\n"
            "    if not getattr(local, 'walked', False):\n"  # frames entered before the hook was set here
            "        local.walked = True\n"
            "        f = frame.f_back\n"
            "        while f is not None:\n"
            "            seen.add((f.f_code.co_filename, f.f_code.co_name))\n"
            "            f = f.f_back\n"
            "inner = threading.Thread._bootstrap_inner\n"
            "def bootstrap_inner(self):\n"
            "    sys.setprofile(hook)\n"
            "    return inner(self)\n"
            "threading.Thread._bootstrap_inner = bootstrap_inner\n"
            "threading.setprofile(hook)\n"
            "sys.setprofile(hook)\n"
            "end = time.monotonic() + 2\n"
            "sys.argv = [sys.argv[0], sys.argv[1] + '.ready']\n"
            "code = open(%r).read().replace('while True:', 'while time.monotonic() < end:')\n"
            "exec(compile(code, %r, 'exec'), {'__name__': '__main__', 'time': time, 'end': end})\n"
            "time.sleep(0.5)\n"
            "sys.setprofile(None)\n"
            "threading.setprofile(None)\n"
            "open(sys.argv[1][:-6], 'w').write('\\n'.join('%%s\\t%%s' %% s for s in sorted(seen)))\n"
            % (racer, racer))
entered_file = os.path.join(d, "entered")
t = subprocess.run(["/usr/bin/python3", tracer, entered_file], capture_output=True, text=True, timeout=120)
check_eq(t.returncode, 0, "the traced racer ran: " + t.stderr)
entered = {tuple(ln.split("\t", 1)) for ln in open(entered_file).read().splitlines()} if t.returncode == 0 else set()
outside = sorted({(os.path.basename(fn), name) for fn, name in entered if fn != racer})
print("racing: CPython enters %d functions outside racer.py: %s" % (len(outside), outside))
check(("threading.py", "start") in outside, "the profile hook saw Thread.start")
os.unlink(ready) if os.path.exists(ready) else None
proc = started(["/usr/bin/python3", racer, ready], ready)
frames_seen = notes = 0
wild = []
for i in range(40):
    p, doc = stacks(proc.pid)
    if not doc:
        continue
    for t in doc["processes"][0]["threads"]:
        notes += 1 if t.get("python_note") else 0
        for f in t["python"]:
            frames_seen += 1
            if f["file"] == racer:
                if f["line"] not in allowed.get(f["function"], ()):
                    wild.append(f)
            elif (f["file"], f["function"]) not in entered:
                wild.append(f)
check(proc.poll() is None, "the racing target still runs")
stop(proc)
check(frames_seen > 40 * 10, "racing: frames were read (%d)" % frames_seen)
check(not wild, "racing: every frame is a real function on a real line: %r" % wild[:5])
print("racing: %d frames in 40 reads, %d threads cut with a note, none wild" % (frames_seen, notes))

# Processes that exit while they are read.
answers = {0: 0, 2: 0}
for i in range(40):
    proc = subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(%f)" % (0.005 * (i % 8))])
    time.sleep(0.002 * (i % 5))
    p, doc = stacks(proc.pid)
    answers[p.returncode] = answers.get(p.returncode, 0) + 1
    proc.wait()
print("exiting processes: %d reports, %d 'no such process'" % (answers.get(0, 0), answers.get(2, 0)))
check(sum(answers.values()) == 40, "exiting processes: 40 answers, each a report or 'no such process'")
finish(os.path.basename(__file__))

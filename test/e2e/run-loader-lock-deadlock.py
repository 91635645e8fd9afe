#!/usr/bin/env python3
# labels: scenario
"""A real deadlock between the GIL and glibc's loader lock (issue 31 item 1,
the run side), reported by `run --hang-timeout` as RUN007, not as a generic
hang.

The job (Debian's /usr/bin/python3): two threads call libc's dl_iterate_phdr
through ctypes with a Python callback (what threadpoolctl before 3.7 and old
mldoctor.runtimes() did), two threads load and unload tiny libraries built
here with ctypes.CDLL and _ctypes.dlclose (CPython calls dlopen and dlclose with the GIL
held). A callback needs the GIL inside dl_iterate_phdr, which holds the
loader lock; the opener holds the GIL and needs the loader lock. Each thread
stops after a bounded number of rounds, and the job prints "done" and exits
0 if it never deadlocks.

Oracle: the job itself. It deadlocked when it printed "started" but not
"done" and was stopped by --kill-on-hang (SIGTERM). The deadlock depends on
timing: a job that got through is run again, up to 5 times.

mldoctor half (the text a user sees): the report's headline is RUN007 naming
the iterating thread at repro.py's dl_iterate_phdr line (iterate) and the
opening thread at its CDLL line (dlopen) or its _ctypes.dlclose line
(dlclose), whichever call it is blocked in (open_close); the fix says that the code
calls dl_iterate_phdr with a Python callback; RUN002 appears only as its
context ("reported as:"), the summary counts one error, the report is printed
once and the live notice is one line.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import CC, MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import PY, scenario_env  # noqa: E402

t = scratch()
libs = []
for i in range(4):
    src = os.path.join(t, "tiny%d.c" % i)
    with open(src, "w") as f:
        f.write("int tiny%d(void) { return %d; }\n" % (i, i))
    lib = os.path.join(t, "libtiny%d.so" % i)
    subprocess.run([CC, "-shared", "-fPIC", "-o", lib, src], check=True)
    libs.append(lib)

repro = os.path.join(t, "repro.py")
lines = [
    "import ctypes, _ctypes, sys, threading",
    "class Info(ctypes.Structure):",
    "    _fields_ = [('addr', ctypes.c_void_p), ('name', ctypes.c_char_p)]",
    "CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t, ctypes.c_void_p)",
    "libc = ctypes.CDLL(None)",
    "names = []",
    "def visit(info, size, data):",
    "    names.append(info.contents.name)  # Python work: the callback takes the GIL",
    "    return 0",
    "callback = CALLBACK(visit)",
    "ROUNDS = 3000",
    "def iterate():",
    "    for _ in range(ROUNDS):",
    "        libc.dl_iterate_phdr(callback, None)  # ITERATE",
    "        del names[:]",
    "def open_close(paths):",
    "    for _ in range(ROUNDS // 4):",
    "        for p in paths:",
    "            handle = ctypes.CDLL(p)._handle  # OPEN",
    "            _ctypes.dlclose(handle)  # CLOSE",
    "threads = [threading.Thread(target=iterate) for _ in range(2)]",
    "threads += [threading.Thread(target=open_close, args=(sys.argv[1:],)) for _ in range(2)]",
    "print('started', flush=True)",
    "for th in threads:",
    "    th.start()",
    "for th in threads:",
    "    th.join()",
    "print('done', flush=True)",
]
with open(repro, "w") as f:
    f.write("\n".join(lines) + "\n")
iterate_line = next(i for i, l in enumerate(lines, 1) if "# ITERATE" in l)
open_line = next(i for i, l in enumerate(lines, 1) if "# OPEN" in l)
close_line = next(i for i, l in enumerate(lines, 1) if "# CLOSE" in l)
visit_line = next(i for i, l in enumerate(lines, 1) if "names.append" in l)

env = scenario_env()
report = os.path.join(t, "report.txt")
job = None
for attempt in range(1, 6):
    with open(report, "w") as rep:
        job = subprocess.run([MLDOCTOR, "run", "--no-color", "--hang-timeout", "5", "--kill-on-hang", "--",
                              PY, repro] + libs, env=env, stdout=subprocess.PIPE, stderr=rep, text=True,
                             timeout=600)
    print("attempt %d: exit %d, stdout %r" % (attempt, job.returncode, job.stdout))
    if "done" not in job.stdout:
        break
text = open(report).read()
print(text)
check_in("started", job.stdout, "the job started its threads")
check("done" not in job.stdout, "the job deadlocked in one of 5 runs (it never finished its rounds)")
check_eq(job.returncode, -15, "mldoctor stopped the job and ended as it did (SIGTERM)")

# The report, once: one live line, then the report after the job ended.
live = [l for l in text.splitlines() if "looks hung" in l]
check_eq(len(live), 1, "one live notice")
check(live and "stopping it (--kill-on-hang)" in live[0], "the notice says the job is being stopped: %r" % live)
check("keeps running" not in text, "no 'keeps running' for a job that is being stopped")
check_eq(text.count("mldoctor run: %s" % PY), 1, "the report is printed once")

heads = [l for l in text.splitlines() if re.match(r"^ [✗!·] ", l)]
print("headlines:", heads)
check(heads and heads[0].rstrip().endswith("RUN007"), "the headline is RUN007: %r" % heads[:1])
check(not any(h.rstrip().endswith("RUN002") for h in heads), "RUN002 is no finding of its own: %r" % heads)
if heads:
    h = heads[0]
    check_in("is inside dl_iterate_phdr, which holds glibc's loader lock, and its callback waits for the GIL",
             h, "the iterating thread's half")
    # The walker is either waiting to enter the callback (its innermost
    # Python frame is iterate's call) or was made to drop the GIL inside it
    # (another thread asked for it) and waits to take it back in visit.
    check("at repro.py:%d (iterate)" % iterate_line in h or "at repro.py:%d (visit)" % visit_line in h,
          "the iterating thread's Python line (iterate's call or the callback's): %s" % h)
    # The opener holds the GIL in both of its calls: CDLL's dlopen and
    # _ctypes.dlclose (neither releases it), so the deadlock happens in
    # either; the report must name the one the thread is in, at its line
    # (and the library frame it is in, when CDLL's __init__ is the innermost).
    opener = re.search(r"thread \d+ at repro\.py:(\d+) \(open_close\)(?:, in [^()]* \([^)]*\))? holds the GIL and waits "
                       r"for the loader lock "
                       r"in (dlopen|dlclose)\b", h)
    check(opener is not None, "the opening thread's half: %s" % h)
    if opener:
        want = open_line if opener.group(2) == "dlopen" else close_line
        check_eq(int(opener.group(1)), want, "the opening thread's Python line is its %s call" % opener.group(2))
check(re.search(r"\n     fix: your code calls dl_iterate_phdr with a Python callback \((iterate \(%s:%d\)|visit \(%s:%d\))\): "
                r"never run Python in that callback" % (re.escape(repro), iterate_line, re.escape(repro), visit_line),
                text) is not None,
      "the fix names the callback's caller (or the callback) and the rule")
check(re.search(r"\n     reported as: no CPU progress, no output and no events for \d+ s .*RUN002\n", text) is not None,
      "the hang itself is context of the deadlock")
check_in("\n1 error · mldoctor explain RUN007\n", text, "one cause, one error")
finish(os.path.basename(__file__))

#!/usr/bin/env python3
"""`mldoctor run` names the signal that killed its command (the report's
status.signal and the human "killed by SIGxxx" line) with the name the
platform gives that number: each signal whose default action ends a process
is raised by a real child (os.kill on itself, cores off), and the name is
compared with Python's signal.Signals, which takes its numbers from the C
library's <signal.h> of this machine. A real-time signal has no such name:
SIG<number>. (signal_text() replaced glibc's sigabbrev_np(), which the
portable build's glibc 2.31 lacks.)"""
import json
import os
import resource
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402

# Default action "terminate" or "core" (signal(7)); the ones that stop,
# continue or are ignored by default do not end the child.
FATAL = ["SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE",
         "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGXCPU",
         "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR", "SIGSYS"]


def no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main():
    d = mldtest.scratch()
    cases = [(getattr(signal, n), signal.Signals(getattr(signal, n)).name)
             for n in FATAL if hasattr(signal, n)]
    cases.append((signal.SIGRTMIN + 2, "SIG%d" % (signal.SIGRTMIN + 2)))
    for number, want in cases:
        report = os.path.join(d, "report-%d.json" % number)
        # Python ignores SIGPIPE and SIGXFSZ itself: the default action first.
        code = "import os, signal; signal.signal(%d, signal.SIG_DFL); os.kill(os.getpid(), %d)" % (number, number)
        for fmt in ("--json", "--no-color"):
            p = subprocess.run([mldtest.MLDOCTOR, "run", fmt, "--report", report, "--", sys.executable, "-c",
                                code], capture_output=True, text=True, cwd=d, preexec_fn=no_core, timeout=120)
            if not mldtest.check_eq(p.returncode, -number, "run ends killed by %s like its command" % want):
                continue
            text = open(report).read()
            if fmt == "--json":
                mldtest.check_eq(json.loads(text)["status"].get("signal"), want,
                                 "the report's status.signal for signal %d" % number)
            else:
                mldtest.check_in("killed by %s after" % want, text, "the human status line for signal %d"
                                 % number)
    mldtest.finish("run-signal-names")


main()

#!/usr/bin/env python3
# labels: slow scenario
"""`mldoctor run -- CMD` is transparent: it can stand in for `CMD`.

Each case of a matrix runs twice, once as CMD and once as
`$MLDOCTOR run --report FILE -- CMD`, under the same environment, working
directory, umask, descriptors and signal dispositions, and the two runs must
give the same stdout bytes, the same stderr bytes and the same end (exit code,
or the signal that killed it, as subprocess's returncode says). Every
mldoctor run must also have written its report to FILE ("mldoctor run:" in
it), which proves the report went there and not into the command's streams.

The matrix: exit codes (0, 1, 2, 42, 126, 255, sh `exit`, sys.exit,
os._exit with unflushed output); deaths by SIGSEGV (a real null dereference
in C and `kill -SEGV $$`), SIGABRT, SIGKILL, SIGTERM, SIGINT (with Python's
KeyboardInterrupt traceback), SIGPIPE (a pipefail pipeline, a writer whose
reader closed before or while it writes), SIGFPE, a real-time signal; 50 MB of
seeded random bytes on stdout and stderr interleaved and a 50 MB file through
cat; stdin passed through to cat, wc -c and sha256sum; isatty and the window
size seen on a pseudo-terminal and on pipes, Ctrl-C and a window resize typed
on the terminal; process trees (sh subshells and waited background jobs,
subprocess chains 3 deep, multiprocessing pools with fork and spawn, waited
grandchildren); a statically linked program (no ld.so, so no shims);
pthreads and Python threads; the environment (all of it but the three
variables mldoctor adds) and argv with spaces, quotes, newlines, empty and
non-UTF-8 arguments; cwd, umask, rlimits, process group, open descriptors,
an extra inherited descriptor, blocked and ignored signals, SIGCHLD ignored;
signals sent with kill(2) to mldoctor reaching the command (a SIGTERM handler
that prints "got TERM" and exits 5, SIGUSR1, SIGHUP and SIGINT unhandled);
and commands that cannot start (127 not found, 126 not executable).

C fixtures are compiled here with gcc (skipped without it; the static one is
skipped alone where static linking is unavailable). Exit 0: all cases passed,
1: some failed, 77: no mldoctor binary to test.
"""
import fcntl
import os
import pty
import random
import resource
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MLDOCTOR = os.environ.get("MLDOCTOR") or os.path.join(SOURCE_DIR, "build", "mldoctor")
PY = "/usr/bin/python3"
CC = os.environ.get("CC", "gcc")
TIMEOUT = 120
BIG = 50_000_000

if not (os.path.isfile(MLDOCTOR) and os.access(MLDOCTOR, os.X_OK)):
    print("skip: no mldoctor binary at %s" % MLDOCTOR)
    sys.exit(77)

# A clean start for every child of either kind: no core files (the crash
# cases would write them into the working directory), no signal ignored or
# blocked by whoever started this test (a `cmd &` from a script ignores
# SIGINT, which would make the SIGINT cases prove nothing).
resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
for _s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
           signal.SIGALRM, signal.SIGWINCH, signal.SIGCHLD):
    if signal.getsignal(_s) == signal.SIG_IGN:
        signal.signal(_s, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_SETMASK, [])

# The environment of both runs. mldoctor adds LD_AUDIT and
# MLDOCTOR_TRACE_DIR to its child's (that is how the shims get in), and
# before glibc 2.35 LD_PRELOAD and MLDOCTOR_LIBC_CALLS; nothing
# else may differ.
SHIM_VARS = ("LD_AUDIT", "LD_PRELOAD", "MLDOCTOR_TRACE_DIR", "MLDOCTOR_LIBC_CALLS")
ENV = {k: v for k, v in os.environ.items() if k not in SHIM_VARS}
ENV.update(MLD_E2E_MARKER="marker: spaces, 'quotes', \"double\", $dollar and \u00fcn\u00efc\u00f6d\u00e9",
           MLD_E2E_PGRP=str(os.getpgrp()), MLD_E2E_SID=str(os.getsid(0)), PYTHONDONTWRITEBYTECODE="1")


def py(code, *args):
    return [PY, "-c", code] + list(args)


def sh(script, *args):
    return ["/bin/sh", "-c", script] + list(args)


# ---- fixtures ---------------------------------------------------------------

C_SOURCE = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_long counter;
static long plain_sum[8];

static void* worker(void* arg) {
  long id = (long)arg;
  for (long i = 0; i < 200000; i++) {
    atomic_fetch_add(&counter, 1);
    plain_sum[id] += i % 7;
  }
  return NULL;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "segv")) {
    printf("about to dereference NULL\n");
    fflush(stdout);
    volatile int* p = NULL;
    *p = 42;
    return 0;
  }
  if (!strcmp(mode, "abort")) {
    printf("buffered, never flushed\n");
    fprintf(stderr, "about to abort\n");
    abort();
  }
  if (!strcmp(mode, "fpe")) {
    volatile int seven = 7, zero = 0;
    printf("about to divide by zero\n");
    fflush(stdout);
    printf("%d\n", seven / zero);
    return 0;
  }
  if (!strcmp(mode, "threads")) {
    pthread_t t[8];
    for (long i = 0; i < 8; i++) pthread_create(&t[i], NULL, worker, (void*)i);
    long total = 0;
    for (int i = 0; i < 8; i++) {
      pthread_join(t[i], NULL);
      total += plain_sum[i];
    }
    printf("counter %ld sum %ld\n", (long)atomic_load(&counter), total);
    fprintf(stderr, "8 threads joined\n");
    return 3;
  }
  if (!strcmp(mode, "argv")) {
    for (int i = 2; i < argc; i++) {
      fputc('[', stdout);
      fwrite(argv[i], 1, strlen(argv[i]), stdout);
      fputs("]\n", stdout);
    }
    fprintf(stderr, "%d args\n", argc - 2);
    return argc - 2;
  }
  if (!strcmp(mode, "exit")) {
    printf("exit %s\n", argv[2]);
    return atoi(argv[2]);
  }
  fprintf(stderr, "unknown mode %s\n", mode);
  return 99;
}
"""

TTY_PROBE = r"""
import os, sys, termios
for fd in (0, 1, 2):
    try:
        size = tuple(os.get_terminal_size(fd))
    except OSError as e:
        size = "none (errno %d)" % e.errno
    print("fd%d isatty=%s size=%s" % (fd, os.isatty(fd), size))
try:
    print("foreground", os.tcgetpgrp(0) == os.getpgrp())
except OSError as e:
    print("foreground: errno", e.errno)
try:
    print("termios", termios.tcgetattr(0))
except termios.error as e:
    print("termios:", e.args[0])
print("TERM", os.environ.get("TERM"))
sys.stdout.flush()
sys.stderr.write("stderr line\n")
"""

MP_SCRIPT = r"""
import multiprocessing as mp
import os
import sys


def work(x):
    return x * x + 1


def child(tag, code):
    print("child", tag, "says", work(code), flush=True)
    sys.exit(code)


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    with ctx.Pool(2) as pool:
        print(pool.map(work, range(40)))
        print(sum(pool.imap_unordered(work, range(100))))
    p = ctx.Process(target=child, args=(sys.argv[1], 3))
    p.start()
    p.join()
    print("process exitcode", p.exitcode)
    q = ctx.Queue()
    p = ctx.Process(target=q.put, args=(("from", "queue", 7),))
    p.start()
    print(q.get())
    p.join()
    print("done", file=sys.stderr)
    sys.exit(4)
"""

CHAIN_SCRIPT = r"""
import subprocess
import sys

d = int(sys.argv[1])
print("depth %d start" % d, flush=True)
if d < 3:
    cmd = [sys.executable, __file__, str(d + 1)]
    if d == 1:
        r = subprocess.run(cmd)  # inherits stdout/stderr
    else:
        r = subprocess.run(cmd, capture_output=True)
        sys.stdout.write(r.stdout.decode().upper())
        sys.stderr.write("captured stderr: " + r.stderr.decode())
    print("depth %d: child exited %d" % (d, r.returncode))
    sys.exit(r.returncode + 1)
print("depth 3 leaf", file=sys.stderr)
sys.exit(10)
"""

SH_TREE = r"""
echo start
( echo sub1; ( echo sub2; exit 3 ); echo "inner=$?" )
echo "outer=$?"
( sleep 0.3; echo slow-bg; exit 4 ) > "$1/slow.out" & p1=$!
( sleep 0.1; exit 5 ) & p2=$!
{ (echo bg-x) & (echo bg-y) & (echo bg-z >&2) & wait; } | sort
wait $p1; r1=$?
wait $p2; r2=$?
echo "bg=$r1,$r2"; cat "$1/slow.out"; rm -f "$1/slow.out"
x=$(echo cmdsub; exit 2); echo "cmdsub=$? $x"
echo "a b c" | while read -r one rest; do echo "read $one / $rest"; done
exit 9
"""

# How a Python child says "ready" and waits (up to 30 s) for a signal.
# "ready\n" in one write(): print() writes the text and the newline
# separately, and a handler that runs between the two would end the output
# with no newline. The wait on one line: a KeyboardInterrupt traceback names
# the same line wherever the signal lands. Short sleeps: a signal that
# arrives between Python's check for pending signals and the start of a
# sleep is only acted on when that sleep ends (a race of Python's, not of
# mldoctor's), so no sleep may be long.
WAIT_FOR_SIGNAL = ("import os, sys, time\nsys.stdout.flush()\n"
                   "for i in range(600): i or os.write(1, b'ready\\n'); time.sleep(0.05)")

BIG_INTERLEAVED = r"""
import os, random
data = random.Random(20240601).randbytes(%d)
sizes = random.Random(7)
pos = 0
while pos < len(data):
    k = sizes.randint(1, 1 << 17)
    fd = sizes.choice((1, 2))
    chunk = memoryview(data)[pos:pos + k]
    while chunk:
        chunk = chunk[os.write(fd, chunk):]
    pos += k
""" % BIG


def compile_fixtures(t):
    """(dynamic, static) C programs, each None with the reason why."""
    if not shutil.which(CC):
        return (None, "no %s" % CC), (None, "no %s" % CC)
    src = os.path.join(t, "fixture.c")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    out = []
    for name, flags in (("fixture", []), ("fixture-static", ["-static"])):
        exe = os.path.join(t, name)
        p = subprocess.run([CC, "-O1", "-pthread"] + flags + ["-o", exe, src], capture_output=True, text=True)
        out.append((exe, None) if p.returncode == 0 else (None, "%s %s failed: %s" % (CC, " ".join(flags),
                                                                                   p.stderr.strip()[-300:])))
    return out[0], out[1]


# ---- running one side --------------------------------------------------------

def simple(argv, input=None, stdin=None, cwd=None, umask=-1, preexec=None, pass_fds=(), env=None,
           stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    """Runs argv; (stdout bytes, stderr bytes, returncode)."""
    p = subprocess.run(argv, input=input, stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd, umask=umask,
                       preexec_fn=preexec, pass_fds=pass_fds, env=env or ENV, timeout=TIMEOUT)
    return p.stdout or b"", p.stderr or b"", p.returncode


def plain(argv, **kw):
    """A case that runs argv, or the mldoctor prefix + argv."""
    return lambda prefix: simple(prefix + argv, **kw)


def kill_later(p, seconds=TIMEOUT):
    t = threading.Timer(seconds, lambda: p.poll() is None and p.kill())
    t.daemon = True
    t.start()
    return t


def interrupted(argv, sig):
    """Starts argv, waits for its "ready" line, sends `sig` to the process
    started (the command itself, or mldoctor), collects the rest."""
    def fn(prefix):
        p = subprocess.Popen(prefix + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=ENV)
        timer = kill_later(p, 60)
        first = p.stdout.readline()
        if first == b"ready\n":
            os.kill(p.pid, sig)
        out, err = p.communicate(timeout=TIMEOUT)
        timer.cancel()
        return first + out, err, p.returncode
    return fn


def reader_closed(argv):
    """stdout is a pipe whose read end is closed before the command starts."""
    def fn(prefix):
        r, w = os.pipe()
        os.close(r)
        try:
            return simple(prefix + argv, stdin=subprocess.DEVNULL, stdout=w)
        finally:
            os.close(w)
    return fn


def reader_goes_away(argv, n):
    """stdout is a pipe whose reader takes n bytes and closes it."""
    def fn(prefix):
        p = subprocess.Popen(prefix + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=ENV)
        timer = kill_later(p)
        got = b""
        while len(got) < n:
            chunk = os.read(p.stdout.fileno(), n - len(got))
            if not chunk:
                break
            got += chunk
        p.stdout.close()
        err = p.stderr.read()
        p.wait(timeout=TIMEOUT)
        timer.cancel()
        return got, err, p.returncode
    return fn


def winsize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def on_pty(argv, rows=37, cols=101, interact=None):
    """Runs argv with a new pseudo-terminal as its controlling terminal and
    stdin/stdout/stderr (echo off, the window rows x cols). `interact(master)`
    is called once the output holds "ready". stdout and stderr arrive merged
    in the terminal's output."""
    def fn(prefix):
        cmd = prefix + argv
        pid, master = pty.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                winsize(0, rows, cols)
                attrs = termios.tcgetattr(0)
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(0, termios.TCSANOW, attrs)
                os.execvpe(cmd[0], cmd, ENV)
            finally:
                os._exit(127)
        out = b""
        deadline = time.monotonic() + 60
        done = False
        try:
            while True:
                left = deadline - time.monotonic()
                ready = select.select([master], [], [], max(left, 0))[0]
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                    out += b"\n<<timed out>>"
                    break
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every slave descriptor is closed
                    break
                if not chunk:
                    break
                out += chunk
                if interact and not done and b"ready" in out:
                    done = True
                    interact(master)
        finally:
            os.close(master)
        _, status = os.waitpid(pid, 0)
        return out, b"", os.waitstatus_to_exitcode(status)
    return fn


def stdin_is_pty(argv, rows=25, cols=64):
    """Only stdin is a terminal (not the controlling one); stdout and stderr
    are pipes."""
    def fn(prefix):
        master, slave = os.openpty()
        try:
            winsize(slave, rows, cols)
            return simple(prefix + argv, stdin=slave)
        finally:
            os.close(slave)
            os.close(master)
    return fn


def to_one_file(argv, path):
    """stdout and stderr are one regular file (2>&1 > FILE); its content is
    compared as stdout."""
    def fn(prefix):
        with open(path, "wb") as f:
            _, _, rc = simple(prefix + argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with open(path, "rb") as f:
            return f.read(), b"", rc
    return fn


def extra_fd(argv, path, fd):
    """The file at `path` open on descriptor `fd` (not 0-2), inherited."""
    def fn(prefix):
        f = os.open(path, os.O_RDONLY)
        os.dup2(f, fd)
        os.close(f)
        try:
            return simple(prefix + argv, pass_fds=(fd,))
        finally:
            os.close(fd)
    return fn


# ---- comparing ---------------------------------------------------------------

def status_text(rc):
    if rc is None:
        return "no status"
    if rc < 0:
        try:
            return "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit %d" % rc


def first_difference(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 65536):
        if a[i:i + 65536] != b[i:i + 65536]:
            for j in range(i, min(i + 65536, n)):
                if a[j] != b[j]:
                    return j
    return n


def describe(what, a, b):
    i = first_difference(a, b)
    return ("%s differs at byte %d (direct %d bytes, via mldoctor %d bytes): direct %r, via mldoctor %r"
            % (what, i, len(a), len(b), a[max(0, i - 16):i + 48], b[max(0, i - 16):i + 48]))


class Case:
    def __init__(self, name, fn, streams=True, expect=None, skip=None, logs=False):
        self.logs = logs        # run as `mldoctor run --logs` (output through mldoctor)
        self.name = name
        self.fn = fn
        self.streams = streams  # False: compare the exit status only
        self.expect = expect    # the status the direct run must have (the fixture works)
        self.skip = skip


def run_case(case, t):
    report = os.path.join(t, "report-%s.txt" % case.name)
    if os.path.exists(report):
        os.unlink(report)
    try:
        direct = case.fn([])
        via = case.fn([MLDOCTOR, "run"] + (["--logs"] if case.logs else []) + ["--report", report, "--"])
    except Exception as e:  # a timeout, a fixture that broke
        return ["%s: %s" % (type(e).__name__, e)]
    problems = []
    if case.expect is not None and direct[2] != case.expect:
        problems.append("the direct run itself gave %s, not %s (fixture broken?); stderr %r"
                        % (status_text(direct[2]), status_text(case.expect), direct[1][-300:]))
    if direct[2] != via[2]:
        problems.append("status: direct %s, via mldoctor %s" % (status_text(direct[2]), status_text(via[2])))
    if case.streams:
        for what, a, b in (("stdout", direct[0], via[0]), ("stderr", direct[1], via[1])):
            if a != b:
                problems.append(describe(what, a, b))
    try:
        with open(report, "rb") as f:
            text = f.read()
        if b"mldoctor run:" not in text:
            problems.append("report file %s has no \"mldoctor run:\": %r" % (report, text[:200]))
    except OSError as e:
        problems.append("no report file: %s" % e)
    if problems and not case.streams:
        problems.append("(stderr, not compared: direct %r, via mldoctor %r)" % (direct[1][-200:], via[1][-200:]))
    return problems


# ---- the matrix ----------------------------------------------------------------

def cases(t, cprog, cprog_skip, static, static_skip):
    big_file = os.path.join(t, "big.bin")
    with open(big_file, "wb") as f:
        f.write(random.Random(3).randbytes(BIG))
    stdin_data = random.Random(11).randbytes(8 << 20)
    mp_script = os.path.join(t, "mp_pool.py")
    chain_script = os.path.join(t, "chain.py")
    for path, text in ((mp_script, MP_SCRIPT), (chain_script, CHAIN_SCRIPT)):
        with open(path, "w") as f:
            f.write(text)
    work = os.path.join(t, "work dir with spaces")
    os.makedirs(work)
    show = os.path.join(work, "show-cwd.sh")
    with open(show, "w") as f:
        f.write('#!/bin/sh\necho "pwd=$(pwd)"\necho "pwd -P=$(pwd -P)"\necho "umask=$(umask)"\necho "0=$0"\n'
                ': > created-file\nstat -c "%a %n" created-file\nrm created-file\n')
    os.chmod(show, 0o755)
    no_shebang = os.path.join(t, "no-shebang")
    with open(no_shebang, "w") as f:
        f.write('echo "script without #! run by /bin/sh: $#"\nexit 4\n')
    os.chmod(no_shebang, 0o755)
    not_exec = os.path.join(t, "not-executable")
    with open(not_exec, "w") as f:
        f.write("#!/bin/sh\necho should not run\n")
    os.chmod(not_exec, 0o644)
    fd_file = os.path.join(t, "fd-content.txt")
    with open(fd_file, "wb") as f:
        f.write(b"content read from an inherited descriptor\n\xff\x00end\n")

    weird_args = [b"plain", b"two words", b"", b"'single'", b'"double"', b"new\nline", b"tab\there",
                  b"\xff\xfe not utf-8 \x80", b"caf\xc3\xa9", b"--", b"-x", b"--report", b"$HOME `id` *",
                  b"back\\slash"]
    big_args = ["arg%03d-" % i + "x" * 4000 for i in range(200)]
    need_c = dict(skip=cprog_skip)
    need_static = dict(skip=static_skip)
    C = [cprog or "/nonexistent"]
    S = [static or "/nonexistent"]

    def not_startable(target):
        # Direct: a shell exec'ing it (subprocess would raise instead of
        # giving a status); via mldoctor: mldoctor exec'ing it. Only the exit
        # status is compared: the shell's "sh: 1: exec: X: not found" and
        # mldoctor's "mldoctor: error: cannot run X: ..." differ in wording.
        return lambda prefix: simple(prefix + [target] if prefix else sh('exec "$0"', target))

    return [
        # exit codes
        Case("exit-0", plain(sh("echo out; echo err >&2; exit 0")), expect=0),
        Case("exit-1", plain(sh("echo one; exit 1")), expect=1),
        Case("exit-2", plain(sh("echo two >&2; exit 2")), expect=2),
        Case("exit-42", plain(sh("exit 42")), expect=42),
        Case("exit-126", plain(sh("echo like-126; exit 126")), expect=126),
        Case("exit-255", plain(sh("exit 255")), expect=255),
        Case("exit-c-13", plain(C + ["exit", "13"]), expect=13, **need_c),
        Case("py-sys-exit-3", plain(py("import sys; print('bye'); sys.exit(3)")), expect=3),
        Case("py-sys-exit-message", plain(py("import sys; sys.exit('fatal: message to stderr')")), expect=1),
        Case("py-os-exit-7", plain(py("import os; print('buffered, lost'); os.write(1, b'written\\n'); "
                                      "os._exit(7)")), expect=7),
        # deaths by signal
        Case("segv-c-null-deref", plain(C + ["segv"]), expect=-signal.SIGSEGV, **need_c),
        Case("segv-kill-self", plain(sh("echo before; kill -SEGV $$; echo after")), expect=-signal.SIGSEGV),
        Case("abrt-c-abort", plain(C + ["abort"]), expect=-signal.SIGABRT, **need_c),
        Case("abrt-py-os-abort", plain(py("import os; print('x', flush=True); os.abort()")),
             expect=-signal.SIGABRT),
        Case("kill-self", plain(sh("echo before; kill -KILL $$; echo after")), expect=-signal.SIGKILL),
        Case("term-self", plain(sh("echo before >&2; kill -TERM $$; echo after")), expect=-signal.SIGTERM),
        Case("int-self-sh", plain(sh("kill -INT $$; echo after")), expect=-signal.SIGINT),
        Case("int-self-py-keyboardinterrupt",
             plain(py("import os, signal, time\nprint('before', flush=True)\n"
                      "for i in range(100): i or os.kill(os.getpid(), signal.SIGINT); time.sleep(0.05)")),
             expect=-signal.SIGINT),
        Case("quit-self", plain(sh("kill -QUIT $$")), expect=-signal.SIGQUIT),
        Case("fpe-c-divide-by-zero", plain(C + ["fpe"]), expect=-signal.SIGFPE, **need_c),
        Case("fpe-kill-self", plain(sh("kill -FPE $$")), expect=-signal.SIGFPE),
        Case("rt-signal-self", plain(py("import os, signal; os.kill(os.getpid(), signal.SIGRTMIN + 2)")),
             expect=-(signal.SIGRTMIN + 2)),
        Case("pipe-pipefail-yes-head", plain(["/usr/bin/bash", "-c", "set -o pipefail; yes | head -c 10"]),
             expect=141),
        Case("pipe-reader-closed-before", reader_closed(["yes"]), expect=-signal.SIGPIPE),
        Case("pipe-reader-closed-before-sh", reader_closed(sh("echo hi; echo not reached >&2")),
             expect=-signal.SIGPIPE),
        Case("pipe-reader-closed-before-py", reader_closed(py("import sys; sys.stdout.write('x' * 200000)"))),
        Case("pipe-reader-goes-away", reader_goes_away(["yes", "abc"], 10), expect=-signal.SIGPIPE),
        # large output
        Case("big-random-stdout-stderr-interleaved", plain(py(BIG_INTERLEAVED)), expect=0),
        Case("big-file-cat", plain(["cat", big_file]), expect=0),
        # stdin
        Case("stdin-cat", plain(["cat"], input=stdin_data), expect=0),
        Case("stdin-wc-c", plain(["wc", "-c"], input=stdin_data), expect=0),
        Case("stdin-sha256sum", plain(["sha256sum", "-", big_file], input=stdin_data), expect=0),
        Case("stdin-empty", plain(py("import sys; d = sys.stdin.buffer.read(); print(len(d), sys.stdin.isatty())"),
                                  input=b""), expect=0),
        Case("stdin-devnull", plain(py("import sys; print(repr(sys.stdin.read()))"), stdin=subprocess.DEVNULL),
             expect=0),
        # terminals and pipes
        Case("isatty-pipes", plain(py(TTY_PROBE), input=b""), expect=0),
        Case("isatty-pty-all", on_pty(py(TTY_PROBE)), expect=0),
        Case("isatty-pty-stdin-only", stdin_is_pty(py(TTY_PROBE)), expect=0),
        Case("tty-ctrl-c-handled", on_pty(py(
            "import signal, sys, time\n"
            "def h(*a):\n    print('got INT', flush=True)\n    sys.exit(4)\n"
            "signal.signal(signal.SIGINT, h)\n" + WAIT_FOR_SIGNAL + "\nprint('no signal')"),
            interact=lambda m: os.write(m, b"\x03")), expect=4),
        Case("tty-ctrl-c-default", on_pty(sh("echo ready; exec sleep 30"), interact=lambda m: os.write(m, b"\x03")),
             expect=-signal.SIGINT),
        Case("tty-window-resize", on_pty(py(
            "import os, signal, sys, time\n"
            "def h(*a):\n    print('winch', tuple(os.get_terminal_size(0)), flush=True)\n    sys.exit(0)\n"
            "signal.signal(signal.SIGWINCH, h)\nprint('size', tuple(os.get_terminal_size(0)))\n"
            + WAIT_FOR_SIGNAL + "\nprint('no signal')"),
            interact=lambda m: winsize(m, 50, 132)), expect=0),
        Case("tty-window-resize-stdout", on_pty(py(
            "import os, signal, sys, time\n"
            "def h(*a):\n    time.sleep(0.2)\n    print('winch', tuple(os.get_terminal_size(1)), flush=True)\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGWINCH, h)\nprint('size', tuple(os.get_terminal_size(1)))\n"
            + WAIT_FOR_SIGNAL + "\nprint('no signal')"),
            interact=lambda m: winsize(m, 50, 132)), expect=0),
        # process trees
        Case("sh-subshells-background-jobs", plain(sh(SH_TREE, "sh", t)), expect=9),
        Case("sh-grandchildren-waited", plain(sh(
            "sh -c %s; echo \"top saw $?\"; (sleep 0.1; echo late grandchild) & wait; exit 8"
            % shlex.quote("sh -c %s; echo \"child saw $?\"; exit 7"
                          % shlex.quote("echo grandchild; echo grandchild-err >&2; exit 6")))), expect=8),
        Case("py-subprocess-chain-3", plain([PY, chain_script, "1"]), expect=12),
        Case("py-multiprocessing-fork-pool", plain([PY, mp_script, "fork"]), expect=4),
        Case("py-multiprocessing-spawn-pool", plain([PY, mp_script, "spawn"]), expect=4),
        # static binaries and threads
        Case("static-c-exit", plain(S + ["exit", "9"]), expect=9, **need_static),
        Case("static-c-threads", plain(S + ["threads"]), expect=3, **need_static),
        Case("static-c-segv", plain(S + ["segv"]), expect=-signal.SIGSEGV, **need_static),
        Case("pthreads-c", plain(C + ["threads"]), expect=3, **need_c),
        Case("py-threading", plain(py(
            "import threading\ntotal = [0]\nlock = threading.Lock()\n"
            "def add(n):\n    for i in range(20000):\n        with lock: total[0] += n\n"
            "ts = [threading.Thread(target=add, args=(k,)) for k in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\nprint('total', total[0])")), expect=0),
        # environment and arguments
        Case("env-marker", plain(py("import os; print(os.environ['MLD_E2E_MARKER']); "
                                    "print(os.environ.get('LD_LIBRARY_PATH'))"),
                                 env=dict(ENV, LD_LIBRARY_PATH="/nonexistent-mld-e2e")), expect=0),
        Case("env-all-but-shim-variables", plain(py(
            "import os\nfor k, v in sorted(os.environb.items()):\n"
            "    if k not in (b'LD_AUDIT', b'LD_PRELOAD', b'MLDOCTOR_TRACE_DIR', b'MLDOCTOR_LIBC_CALLS'):\n"
            "        os.write(1, k + b'=' + v + b'\\0')")), expect=0),
        Case("argv-weird-py", plain([PY.encode(), b"-c", b"import os, sys\nfor a in sys.argv[1:]: "
                                     b"os.write(1, b'[' + os.fsencode(a) + b']\\n')"] + weird_args), expect=0),
        Case("argv-weird-c", plain([C[0].encode(), b"argv"] + weird_args), expect=len(weird_args), **need_c),
        Case("argv-weird-sh", plain([b"/bin/sh", b"-c", b'printf "<%s>\\n" "$0" "$@"'] + weird_args), expect=0),
        Case("argv-800k", plain(py("import sys, hashlib; a = sys.argv[1:]; "
                                   "print(len(a), hashlib.sha256('|'.join(a).encode()).hexdigest())", *big_args)),
             expect=0),
        # process attributes
        Case("cwd-umask-relative-exec", plain(["./show-cwd.sh"], cwd=work, umask=0o027), expect=0),
        Case("process-attributes", plain(py(
            "import os, resource\n"
            "print('pgrp', os.getpgrp() == int(os.environ['MLD_E2E_PGRP']))\n"
            "print('sid', os.getsid(0) == int(os.environ['MLD_E2E_SID']))\n"
            "print('ids', os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups()))\n"
            "print('nice', os.nice(0), 'affinity', sorted(os.sched_getaffinity(0)))\n"
            "print('rlimits', [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) "
            "if n.startswith('RLIMIT_')])\n"
            "m = os.umask(0); print('umask', oct(m)); print('cwd', os.getcwd())"),
            cwd=work, umask=0o022), expect=0),
        Case("open-descriptors", plain(py("import os; print(sorted(int(x) for x in os.listdir('/proc/self/fd')))")),
             expect=0),
        Case("stdin-closed", plain(py("import os\nfor fd in range(4):\n    try:\n        os.fstat(fd); "
                                      "print(fd, 'open')\n    except OSError as e:\n        print(fd, 'closed')"),
                                   preexec=lambda: os.close(0)), expect=0),
        Case("inherited-extra-descriptor", extra_fd(py("import os; os.write(1, os.read(19, 4096)); "
                                                       "print(os.get_inheritable(19))"), fd_file, 19), expect=0),
        Case("stdout-stderr-one-file", to_one_file(sh("echo 1; echo 2 >&2; echo 3; echo 4 >&2; exit 5"),
                                                   os.path.join(t, "both.out")), expect=5),
        Case("signals-ignored-blocked", plain(["grep", "-E", "^Sig(Blk|Ign|Cgt)", "/proc/self/status"],
                                              preexec=lambda: (signal.signal(signal.SIGHUP, signal.SIG_IGN),
                                                               signal.pthread_sigmask(signal.SIG_BLOCK,
                                                                                      [signal.SIGUSR2]))),
             expect=0),
        Case("signals-default", plain(["grep", "-E", "^Sig(Blk|Ign|Cgt)", "/proc/self/status"]), expect=0),
        # SIGCHLD ignored by whoever starts the command (a disposition
        # inherited through exec on Linux; daemons and some supervisors start
        # jobs that way). The kernel then reaps mldoctor's child by itself
        # and discards its status, so mldoctor must take SIGCHLD back to
        # SIG_DFL for its own wait (and give the command the SIG_IGN it
        # inherited); the command's status must still come through.
        Case("sigchld-ignored-exit", plain(sh("echo hi; exit 3"),
                                           preexec=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN)),
             expect=3),
        Case("sigchld-ignored-killed", plain(sh("kill -TERM $$"),
                                             preexec=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN)),
             expect=-signal.SIGTERM),
        # signals sent with kill(2) to the process started
        Case("forward-term-handled", interrupted(py(
            "import signal, sys, time\n"
            "def h(*a):\n    print('got TERM', flush=True)\n    sys.exit(5)\n"
            "signal.signal(signal.SIGTERM, h)\n" + WAIT_FOR_SIGNAL + "\nprint('no signal')"),
            signal.SIGTERM), expect=5),
        Case("forward-usr1-handled", interrupted(py(
            "import signal, sys, time\n"
            "def h(*a):\n    print('got USR1', flush=True)\n    sys.exit(6)\n"
            "signal.signal(signal.SIGUSR1, h)\n" + WAIT_FOR_SIGNAL + "\nprint('no signal')"),
            signal.SIGUSR1), expect=6),
        Case("forward-hup-default", interrupted(py("import time\n" + WAIT_FOR_SIGNAL + "\nprint('no signal')"),
                                                signal.SIGHUP), expect=-signal.SIGHUP),
        Case("forward-int-keyboardinterrupt", interrupted(py(
            "import time\n" + WAIT_FOR_SIGNAL + "\nprint('no signal')"), signal.SIGINT), expect=-signal.SIGINT),
        # commands that cannot start (exit status only; see not_startable)
        Case("not-found-path", not_startable(os.path.join(t, "no-such-program")), streams=False, expect=127),
        Case("not-found-on-path", not_startable("no-such-program-mld-e2e"), streams=False, expect=127),
        Case("not-executable", not_startable(not_exec), streams=False, expect=126),
        Case("is-a-directory", not_startable(t), streams=False, expect=126),
        Case("script-without-shebang", lambda prefix: simple(prefix + [no_shebang] if prefix
                                                             else sh('exec "$0"', no_shebang)), expect=4),
    ]


# The cases run once more as `mldoctor run --logs`, where the output passes
# through mldoctor (a pty for a terminal, a pipe otherwise, one for both
# streams when they lead to one place): the bytes, their order, the
# terminal the child sees and its size must still be the same.
# (Not "pipe-reader-closed-before-*": with --logs the child writes into
# mldoctor's pipe and learns that the real reader is gone one pipe buffer
# later, as behind `| tee`; docs/design.md.)
LOGS_CASES = ("exit-42", "segv-kill-self", "pipe-pipefail-yes-head", "pipe-reader-goes-away",
              "big-random-stdout-stderr-interleaved", "stdin-cat", "isatty-pipes",
              "isatty-pty-all", "isatty-pty-stdin-only", "tty-ctrl-c-handled", "tty-window-resize",
              "tty-window-resize-stdout", "py-multiprocessing-spawn-pool", "stdout-stderr-one-file",
              "forward-term-handled")


def with_logs(all_cases):
    out = list(all_cases)
    for c in all_cases:
        if c.name in LOGS_CASES:
            out.append(Case("logs-" + c.name, c.fn, streams=c.streams, expect=c.expect, skip=c.skip, logs=True))
    return out


def main():
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mld-e2e-transparency-") as t:
        (cprog, cskip), (static, sskip) = compile_fixtures(t)
        if cskip and not sskip:
            sskip = cskip
        failed, skipped, total = [], [], 0
        for case in with_logs(cases(t, cprog, cskip, static, sskip)):
            total += 1
            if case.skip:
                skipped.append(case.name)
                print("skip %s: %s" % (case.name, case.skip))
                continue
            t0 = time.monotonic()
            problems = run_case(case, t)
            if problems:
                failed.append(case.name)
                print("FAIL %s: %s" % (case.name, "; ".join(problems)))
            else:
                print("ok %s (%.2f s)" % (case.name, time.monotonic() - t0))
            sys.stdout.flush()
    print("%d cases, %d failed%s (%.1f s)" % (total, len(failed),
                                             ", %d skipped" % len(skipped) if skipped else "",
                                             time.monotonic() - start))
    if failed:
        print("failed: " + " ".join(failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

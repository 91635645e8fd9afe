#!/usr/bin/env python3
"""`run --logs` returns when the job does, not when a daemon it left running
closes the job's output (issue 31 item 5).

The job prints two lines and exits 3 at once, after starting a daemon (fork,
setsid, fork) that keeps stdout and stderr: it prints "daemon up", then waits
for a file this test creates only after mldoctor has returned (at most 60 s),
then prints one more line to each stream and exits.

Oracle: the daemon itself. Its pid is alive, running the job's script, when
mldoctor has returned: mldoctor did not wait for it. Its late lines, written
after mldoctor returned, still reach the file and the terminal mldoctor's
output went to, byte for byte: the job's output is unchanged.

mldoctor half (the text a user sees): exit status 3 (the job's), "status
exit 3", and an "output" line that says a daemon the job left running kept
the output open, with the daemon's pid and command. Two legs: stdout and
stderr to files, and stdout on a terminal (a pseudo-terminal this test
reads).
"""
import os
import pty
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import PY, scenario_env  # noqa: E402

t = scratch()
job = os.path.join(t, "job.py")
with open(job, "w") as f:
    f.write("""import os, sys, time
go, pidfile = sys.argv[1], sys.argv[2]
print("job up", flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print("daemon up", flush=True)
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        for _ in range(600):
            if os.path.exists(go):
                break
            time.sleep(0.1)
        print("daemon late line", flush=True)
        print("daemon late error", file=sys.stderr, flush=True)
        os._exit(0)
    os._exit(0)
os.wait()
while not os.path.exists(pidfile):
    time.sleep(0.005)
print("job done", flush=True)
sys.exit(3)
""")
env = scenario_env()


def alive(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return job.encode() in f.read()
    except OSError:
        return False


def wait_until(cond, what, limit=120):
    """Waits (bounded) for something the daemon does after mldoctor returned."""
    for _ in range(limit * 20):
        if cond():
            return True
        time.sleep(0.05)
    check(False, what)
    return False


def leg(name, terminal):
    go = os.path.join(t, name + ".go")
    pidfile = os.path.join(t, name + ".pid")
    out_path = os.path.join(t, name + ".out")
    report_path = os.path.join(t, name + ".report")
    argv = [MLDOCTOR, "run", "--logs", "--no-color", "--", PY, job, go, pidfile]
    got = bytearray()
    with open(report_path, "wb") as report:
        if terminal:
            master, slave = pty.openpty()
            p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=report)
            os.close(slave)

            def read_terminal():
                while True:
                    try:
                        chunk = os.read(master, 4096)
                    except OSError:  # EIO: every holder of the terminal closed it
                        return
                    if not chunk:
                        return
                    got.extend(chunk)
            reader = threading.Thread(target=read_terminal)
            reader.start()
        else:
            with open(out_path, "wb") as out:
                p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=report)
        rc = p.wait(timeout=300)
    daemon = int(open(pidfile).read()) if os.path.exists(pidfile) else -1
    # The oracle: the daemon still runs now that mldoctor has returned.
    running = alive(daemon)
    check(running, "%s: the daemon (pid %d) still runs when mldoctor has returned" % (name, daemon))
    text = open(report_path, "rb").read().decode(errors="replace")
    print("%s: mldoctor exit %d\n%s" % (name, rc, text))
    check_eq(rc, 3, "%s: mldoctor ends as the job did" % name)
    check_in("\nstatus    exit 3 after ", text, "%s: the job's own exit" % name)
    check_in("\noutput    still open after the job exited: a daemon the job left running, pid %d (%s %s %s %s)"
             % (daemon, PY, job, go, pidfile), text, "%s: the daemon is named with its pid and command" % name)
    check_in("kept it open; mldoctor stopped reading 2 s after the exit and passes the rest on unread\n", text,
             "%s: what mldoctor did about it" % name)
    # Let the daemon finish; its late lines still reach the job's output.
    open(go, "w").close()
    wait_until(lambda: not alive(daemon), "%s: the daemon ends once told to" % name)
    if terminal:
        reader.join(timeout=120)
        check(not reader.is_alive(), "%s: the terminal is closed once the daemon is gone" % name)
        os.close(master)
        # The terminal's own ONLCR turns each "\n" into "\r\n" once: not twice.
        check_eq(bytes(got), b"job up\r\ndaemon up\r\njob done\r\ndaemon late line\r\n",
                 "%s: the terminal got the job's and the daemon's lines, byte for byte" % name)
    else:
        wait_until(lambda: b"daemon late line" in open(out_path, "rb").read(),
                   "%s: the daemon's late line reaches the file" % name)
        check_eq(open(out_path, "rb").read(), b"job up\ndaemon up\njob done\ndaemon late line\n",
                 "%s: stdout is the job's and the daemon's, byte for byte" % name)
        wait_until(lambda: b"daemon late error" in open(report_path, "rb").read(),
                   "%s: the daemon's late stderr line reaches stderr" % name)


leg("files", terminal=False)
leg("terminal", terminal=True)
finish(os.path.basename(__file__))

#!/usr/bin/env python3
"""`mldoctor stacks` of a zombie and of a kernel thread (issue 31, item 8):
each is named as what it is, root is never told to "run as root", and when
no requested process has stacks the command fails (exit 2) with one error
line per process and no report. Beside a live interpreter, they are noted
in its report (exit 0).

The zombie is a child of this test that has exited and is not waited for;
the kernel thread is the first pid whose /proc/PID/stat flags hold
PF_KTHREAD (kthreadd, pid 2, outside a PID namespace).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

PF_KTHREAD = 0x00200000


def stat_fields(pid):
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    return text[text.rfind(")") + 2:].split()


said = []  # every output, for the "run as root" check at the end


def stacks(*args):
    p = subprocess.run([MLDOCTOR, "stacks"] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, NO_COLOR="1"))
    print("$ mldoctor stacks %s  (exit %d)\n%s%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    said.append(p.stdout + p.stderr)
    return p


# A zombie: forked, exited, not reaped.
zombie = os.fork()
if zombie == 0:
    os._exit(0)
for _ in range(500):
    if stat_fields(zombie)[0] == "Z":
        break
    time.sleep(0.01)
check_eq(stat_fields(zombie)[0], "Z", "the child is a zombie")
zombie_text = ("mldoctor: error: pid %d is a zombie: it has exited and its parent has not reaped it; "
               "there are no stacks to read\n" % zombie)
p = stacks(zombie)
check_eq(p.returncode, 2, "a zombie alone: exit 2")
check_eq(p.stderr, zombie_text, "a zombie alone: what it is, as the error")
check_eq(p.stdout, "", "a zombie alone: no report")

kthread = None
for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
    if name.isdigit():
        try:
            if int(stat_fields(int(name))[6]) & PF_KTHREAD:
                kthread = int(name)
                break
        except (OSError, IndexError, ValueError):
            continue
if kthread is None:
    print("no kernel thread visible (a PID namespace): that case skipped")
else:
    p = stacks(kthread)
    check_eq(p.returncode, 2, "a kernel thread alone: exit 2")
    check_eq(p.stderr, "mldoctor: error: pid %d is a kernel thread: it runs no Python\n" % kthread,
             "a kernel thread alone: what it is, as the error")
    check_eq(p.stdout, "", "a kernel thread alone: no report")
    p = stacks(zombie, kthread)
    check_eq(p.returncode, 2, "both: exit 2")
    check_eq(p.stderr, zombie_text + "mldoctor: error: pid %d is a kernel thread: it runs no Python\n" % kthread,
             "both: one error line each, in the order asked")

# Beside a process with stacks: a report, the zombie noted in it.
d = scratch()
ready = os.path.join(d, "ready")
live = subprocess.Popen(["/usr/bin/python3", "-c",
                         "import time; open(%r, 'w').close(); time.sleep(120)" % ready])
for _ in range(3000):
    if os.path.exists(ready):
        break
    time.sleep(0.01)
p = stacks(live.pid, zombie)
check_eq(p.returncode, 0, "a live interpreter and a zombie: exit 0")
check_in("Process %d: \n  pid %d is a zombie: it has exited and its parent has not reaped it; there are no "
         "stacks to read\n" % (zombie, zombie), p.stdout, "the zombie's section says what it is")
check_in("  CPython 3.", p.stdout, "the live interpreter is read")
p = subprocess.run([MLDOCTOR, "stacks", "--json", str(live.pid), str(zombie)], capture_output=True, text=True,
                   timeout=120)
doc = json.loads(p.stdout)
by_pid = {x["pid"]: x for x in doc["processes"]}
check_eq(by_pid[zombie].get("without_stacks"), zombie_text[len("mldoctor: error: "):-1],
         "JSON: without_stacks of the zombie")
check("without_stacks" not in by_pid[live.pid], "JSON: the live process has stacks")
live.kill()
live.wait()

said.append(p.stdout)
check(not any("as root" in out for out in said), "never 'run as root'")
os.waitpid(zombie, 0)
finish(os.path.basename(__file__))

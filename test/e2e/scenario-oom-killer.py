#!/usr/bin/env python3
# labels: scenario roots
"""A job really killed by the kernel's OOM killer, read by `mldoctor logs`
(issue 33, item 2): torch's launcher (`python3 -m torch.distributed.launch`
of the bullseye test root's torch 1.7: Debian 12's torchrun fails on CPython
3.11 before it starts a worker, and trixie's and sid's are built without
libuv, which their torchrun needs) starts one worker that
allocates until the memory limit of its cgroup (768 MiB, made for the test,
under this process's own cgroup, v1 or v2) is reached and the kernel kills it.

1. The launcher's own output: the launcher saw its worker die of SIGKILL and
   nothing more; the top incident is HOST011 (killed with SIGKILL, most
   likely for memory), never a cause the log does not show.
2. The kernel's log of the kill (the lines of /dev/kmsg since the start that
   name the worker's pid): HOST012, the OOM killer.
3. Both in one log, as a user pastes them: HOST012 leads, HOST011 is its
   context.

The cgroup is removed at the end. Needs root (a cgroup and /dev/kmsg); the
test fails, never skips, when either cannot be had.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

check, check_eq = mldtest.check, mldtest.check_eq

LIMIT = 768 << 20  # above the launcher's own footprint (torch imported), so the worker is the biggest

WORKER = r'''
import os, sys
print("worker pid %d allocating" % os.getpid(), flush=True)
hold = []
while True:
    hold.append(bytearray(8 << 20))
'''


def make_cgroup():
    """A child cgroup of ours with a 64 MiB limit: (dir, file to join it)."""
    own = {}
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        for c in controllers.split(","):
            own[c] = path
    name = "mldoctor-test-oom-%d" % os.getpid()
    if "memory" in own and os.path.isdir("/sys/fs/cgroup/memory"):  # v1
        d = "/sys/fs/cgroup/memory" + own["memory"].rstrip("/") + "/" + name
        os.mkdir(d)
        open(os.path.join(d, "memory.limit_in_bytes"), "w").write(str(LIMIT))
        swap = os.path.join(d, "memory.memsw.limit_in_bytes")  # with swap accounting: no swap
        if os.path.exists(swap):
            open(swap, "w").write(str(LIMIT))
        return d
    d = "/sys/fs/cgroup" + own.get("", "/").rstrip("/") + "/" + name  # v2
    os.mkdir(d)
    open(os.path.join(d, "memory.max"), "w").write(str(LIMIT))
    if os.path.exists(os.path.join(d, "memory.swap.max")):  # only with swap accounting
        open(os.path.join(d, "memory.swap.max"), "w").write("0")
    return d


def kernel_lines_since(fd, pid):
    """The /dev/kmsg records read from `fd` that name `pid`, as dmesg prints them."""
    out = []
    while True:
        try:
            rec = os.read(fd, 8192).decode(errors="replace")
        except BlockingIOError:
            break
        except OSError:  # EPIPE: records overwritten while reading; go on
            continue
        head, _, text = rec.partition(";")
        fields = head.split(",")
        if len(fields) >= 3 and re.search(r"\b%d\b" % pid, text):
            usec = int(fields[2])
            out.append("[%5d.%06d] %s" % (usec // 1000000, usec % 1000000, text.split("\n")[0]))
    return out


def top(log):
    p = subprocess.run([mldtest.MLDOCTOR, "logs", "--json", log], capture_output=True, text=True,
                       timeout=120)
    doc = json.loads(p.stdout)["inputs"][0]
    inc = doc["incidents"]
    return (inc[0]["rule"] if inc else None), [f["rule"] for f in doc["findings"]]


def main():
    t = mldtest.scratch()
    worker = os.path.join(t, "worker.py")
    open(worker, "w").write(WORKER)
    try:
        cg = make_cgroup()
    except OSError as e:
        mldtest.fail("cannot make a memory cgroup for the test (root needed): %s" % e)
        mldtest.finish("scenario-oom-killer")
        return
    try:
        kmsg = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(kmsg, 0, os.SEEK_END)
    except OSError as e:
        mldtest.fail("cannot read the kernel log /dev/kmsg (root needed): %s" % e)
        os.rmdir(cg)
        mldtest.finish("scenario-oom-killer")
        return
    try:
        env = mldtest.clean_env()
        env.pop("MAKEFLAGS", None)
        join = "echo $$ > %s/cgroup.procs && exec \"$@\"" % cg
        torchrun = roots.command(roots.root("bullseye"),
                                 ["python3", "-m", "torch.distributed.launch",
                                  "--nproc_per_node=1", "/tmp/job/worker.py"],
                                 binds=[(t, "/tmp/job")])
        p = subprocess.run(["sh", "-c", join, "sh"] + torchrun, capture_output=True, text=True,
                           timeout=600, env=env, cwd=t)
        launcher = p.stdout + p.stderr
        m = re.search(r"worker pid (\d+) allocating", launcher)
        check(m, "the worker never started:\n" + launcher[-3000:])
        check(p.returncode != 0, "the launcher did not fail:\n" + launcher[-3000:])
        time.sleep(0.5)
        kernel = kernel_lines_since(kmsg, int(m.group(1))) if m else []
        check(any("Killed process" in k for k in kernel),
              "the kernel logged no OOM kill of the worker:\n" + "\n".join(kernel))
    finally:
        os.close(kmsg)
        for _ in range(50):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.1)

    launcher_log = os.path.join(t, "launcher.log")
    open(launcher_log, "w").write(launcher)
    kernel_log = os.path.join(t, "dmesg.log")
    open(kernel_log, "w").write("\n".join(kernel) + "\n")
    both = os.path.join(t, "both.log")
    open(both, "w").write(launcher + "\n".join(kernel) + "\n")
    got, found = top(launcher_log)
    check_eq(got, "HOST011", "the launcher's output: top incident (findings %s)\n%s"
             % (found, launcher[-3000:]))
    got, found = top(kernel_log)
    check_eq(got, "HOST012", "the kernel's lines: top incident (findings %s)\n%s"
             % (found, "\n".join(kernel)))
    got, found = top(both)
    check_eq(got, "HOST012", "both: top incident (findings %s)" % found)
    mldtest.finish("scenario-oom-killer")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`mldoctor run` explains a command that died of a signal from what the
machine recorded, for real:

  * SIGKILL by the kernel's OOM killer: the command runs in a memory cgroup
    of its own (cgroup v1 or v2, created under this process's one) limited to
    512 MiB, and allocates more (mldoctor runs in the cgroup with it, as in a
    container; the limit leaves a sanitizer build of mldoctor, ~90 MiB, the
    smaller process, so the OOM killer picks the command). Oracle: the cgroup's own oom_kill counter and
    the kernel log line naming the pid. RUN003 must say "OOM killer", with the
    limit. Where no cgroup can be created here, the command kills itself with
    SIGKILL instead and RUN003 must say the OOM killer did not send it (the
    cgroup's counter did not move);
  * SIGBUS on a full small tmpfs: in a private mount namespace /dev/shm is a
    1 MiB tmpfs and the command maps and touches a 4 MiB file there. RUN004
    must report /dev/shm full;
  * SIGILL: a library executing an instruction this CPU lacks (SSE4a's
    `extrq`, AVX512-FP16's `vaddph` or AMX's `tilerelease`: the first whose
    feature /proc/cpuinfo does not list and that kills a process run without
    mldoctor with SIGILL; a VM may hide a feature its CPU still executes).
    Oracle: the kernel's own trap line names the library. RUN005 must name it;
  * SIGSEGV in the C library (ctypes.string_at(0)): RUN006 names libc.so.6 and
    says the bad pointer came from its caller.

Each time the command's own death is preserved: `run` ends with the same
signal. The kernel log is read only where this test may read it (root, or
kernel.dmesg_restrict=0); elsewhere RUN003/RUN005 must say it could not be read.
"""
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import CC, MLDOCTOR, check, fail, finish  # noqa: E402

PY = "/usr/bin/python3"


def run(argv, prefix=(), timeout=120):
    p = subprocess.run(list(prefix) + [MLDOCTOR, "run", "--"] + argv, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def dies_of(rc, sig):
    # run ends the way its child did: killed by the same signal (or, behind a
    # shell, 128 + signal).
    return rc == -sig or rc == 128 + sig


def kernel_log_readable():
    try:
        with open("/dev/kmsg", "rb", buffering=0) as f:
            os.set_blocking(f.fileno(), False)
            f.read(8192)
        return True
    except (OSError, BlockingIOError) as e:
        return isinstance(e, BlockingIOError)


def dmesg_lines(pattern):
    p = subprocess.run(["dmesg"], capture_output=True, text=True)
    return [l for l in p.stdout.splitlines() if re.search(pattern, l)]


def own_memory_cgroup():
    """(kind, directory) of a memory cgroup this process may create children in."""
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        if "memory" in controllers.split(","):
            d = "/sys/fs/cgroup/memory" + (path if path != "/" else "")
            if os.path.exists(os.path.join(d, "memory.limit_in_bytes")):
                return "v1", d
        if controllers == "":
            for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                d = mount + (path if path != "/" else "")
                if os.path.exists(os.path.join(d, "cgroup.controllers")):
                    ctl = open(os.path.join(d, "cgroup.subtree_control")).read()
                    if "memory" in ctl.split():
                        return "v2", d
    return None, None


readable = kernel_log_readable()
print("kernel log readable here: %s" % readable)

# ─── SIGKILL: the OOM killer in a memory cgroup of its own ───────────────────
kind, parent = own_memory_cgroup()
cg = None
if parent:
    cg = os.path.join(parent, "mldoctor-test-oom-%d" % os.getpid())
    try:
        os.mkdir(cg)
        limit_file = "memory.limit_in_bytes" if kind == "v1" else "memory.max"
        with open(os.path.join(cg, limit_file), "w") as f:
            f.write(str(512 << 20))
        if kind == "v1" and os.path.exists(os.path.join(cg, "memory.memsw.limit_in_bytes")):
            try:
                with open(os.path.join(cg, "memory.memsw.limit_in_bytes"), "w") as f:
                    f.write(str(512 << 20))
            except OSError:
                pass
    except OSError as e:
        print("cannot create a memory cgroup under %s: %s" % (parent, e))
        if os.path.isdir(cg):
            os.rmdir(cg)
        cg = None
if cg:
    print("OOM case: %s memory cgroup %s, limit 512 MiB" % (kind, cg))
    events = os.path.join(cg, "memory.oom_control" if kind == "v1" else "memory.events")
    hog = "a = [bytearray(1 << 20) for _ in range(2048)]\nprint('survived')\n"
    # The shell moves itself into the cgroup, then becomes mldoctor.
    shell = ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec "$0" run -- "$2" -c "$3"',
             MLDOCTOR, cg, PY, hog]
    p = subprocess.run(shell, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    oom_kills = int(re.search(r"oom_kill (\d+)", open(events).read()).group(1))
    check(oom_kills >= 1, "oracle: the cgroup counted an OOM kill (oom_kill %d)" % oom_kills)
    check(dies_of(p.returncode, signal.SIGKILL), "run ends killed by SIGKILL like its command "
          "(rc %d)\n%s" % (p.returncode, out[-2000:]))
    check("RUN003" in out and "OOM killer" in out and "limit 512 MiB" in out,
          "RUN003 names the OOM killer and the limit:\n%s" % out[-3000:])
    check("0 before the job, 1 after" in out, "the cgroup's count before and after is evidence")
    if readable:
        pid = re.search(r"pid (\d+) was killed", out)
        lines = dmesg_lines(r"Killed process %s \(" % (pid.group(1) if pid else "x"))
        check(bool(lines), "oracle: the kernel log names the killed pid")
        check("Killed process" in out, "the kernel's line is in the report")
    try:
        os.rmdir(cg)
    except OSError as e:
        fail("could not remove the test cgroup %s: %s" % (cg, e))
else:
    print("SIGKILL case without a cgroup of its own: the command kills itself")
    rc, out = run([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    check(dies_of(rc, signal.SIGKILL), "run ends killed by SIGKILL (rc %d)" % rc)
    check("RUN003" in out, "RUN003 reports the SIGKILL:\n%s" % out[-2000:])
    if readable:
        check("not by the OOM killer" in out, "no OOM kill recorded, so not the OOM killer:\n%s"
              % out[-2000:])

# ─── SIGBUS: a full 1 MiB /dev/shm in a private mount namespace ──────────────
toucher = ("import mmap, os\n"
           "fd = os.open('/dev/shm/mldoctor-test', os.O_RDWR | os.O_CREAT)\n"
           "os.ftruncate(fd, 4 << 20)\n"
           "m = mmap.mmap(fd, 4 << 20)\n"
           "for i in range(0, 4 << 20, 4096): m[i] = 1\n")
if shutil.which("unshare"):
    script = 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$0" run -- "$1" -c "$2"'
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, MLDOCTOR, PY, toucher],
                       capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    if "mount" in out and ("permission denied" in out.lower() or "operation not permitted" in out.lower()):
        fail("no private mount namespace with a small /dev/shm here: %s" % out[-500:])
    else:
        check(dies_of(p.returncode, signal.SIGBUS), "run ends killed by SIGBUS (rc %d)\n%s"
              % (p.returncode, out[-1500:]))
        check("RUN004" in out and "/dev/shm full" in out, "RUN004 reports /dev/shm full:\n%s"
              % out[-2000:])
else:
    fail("unshare(1) is missing: util-linux should be installed")

# ─── SIGILL: an instruction this CPU lacks ───────────────────────────────────
flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        break
# The first instruction of a feature /proc/cpuinfo does not list that really
# faults here, without mldoctor (the oracle): a virtual machine may hide a
# feature from CPUID that its CPU still executes (sse4a on an AMD EPYC guest).
candidates = [("extrq $4, $8, %%xmm0", "sse4a"), ("vaddph %%zmm0, %%zmm0, %%zmm0", "avx512_fp16"),
              ("tilerelease", "amx_tile")]
with tempfile.TemporaryDirectory() as t:
    insn = feature = lib = None
    for i, (candidate, name) in enumerate(candidates):
        if name in flags:
            continue
        path = os.path.join(t, "%d" % i, "libmissing-isa.so")
        os.makedirs(os.path.dirname(path))
        src = ('__attribute__((visibility("default"))) void run_it(void) '
               '{ __asm__ volatile("%s" ::: "xmm0"); }\n' % candidate)
        subprocess.run([CC, "-shared", "-fPIC", "-o", path, "-xc", "-"], input=src.encode(), check=True)
        alone = subprocess.run([PY, "-c", "import ctypes; ctypes.CDLL(%r).run_it()" % path],
                               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
        print("%s (%s): alone, the process ends with %d" % (candidate, name, alone.returncode))
        if alone.returncode == -signal.SIGILL:
            insn, feature, lib = candidate, name, path
            break
    if insn:
        rc, out = run([PY, "-c", "import ctypes; ctypes.CDLL(%r).run_it()" % lib])
        check(dies_of(rc, signal.SIGILL), "run ends killed by SIGILL (rc %d)\n%s" % (rc, out[-1500:]))
        check("RUN005" in out and "SIGILL" in out, "RUN005 reports the SIGILL:\n%s" % out[-2000:])
        check(feature in out, "the CPU's missing %s is evidence" % feature)
        if readable:
            check(bool(dmesg_lines(r"trap invalid opcode .* in libmissing-isa\.so")),
                  "oracle: the kernel's trap line names the library")
            check("died of SIGILL in libmissing-isa.so" in out, "RUN005 names the library:\n%s"
                  % out[-2000:])
        else:
            check("not readable" in out, "RUN005 says the kernel log could not be read")
    else:
        fail("none of sse4a, avx512_fp16 and amx_tile faults on this CPU: no known instruction to make "
             "SIGILL with")

# ─── SIGSEGV in the C library ────────────────────────────────────────────────
rc, out = run([PY, "-c", "import ctypes; ctypes.string_at(0)"])
check(dies_of(rc, signal.SIGSEGV), "run ends killed by SIGSEGV (rc %d)" % rc)
check("RUN006" in out, "RUN006 reports the segmentation fault:\n%s" % out[-2000:])
if readable:
    check("in libc.so.6 (the C runtime" in out, "RUN006 names libc.so.6 and its caller:\n%s"
          % out[-2000:])

finish("run-deaths")

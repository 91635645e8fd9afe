#!/usr/bin/env python3
"""`check` inside a real chroot whose /dev/shm is a plain directory of the
root filesystem (issue 31, item 8): the report must not print the disk's
size as /dev/shm's, says it is no tmpfs and what holds it, and HOST004 says
what that does to DataLoader workers.

The chroot (root and unshare needed; else skipped): /usr bind-mounted, /proc
mounted, the build directory bind-mounted to run this mldoctor, /dev/shm an
empty directory. Twice: once as a plain directory (the chroot's mount table
lists no mount of its root: the filesystem comes from another mount of the
same device, or statfs), once with the chroot's root bind-mounted on itself
(then its table lists "/", and the mount point is named). The oracle for the
filesystem is the outer mount table's entry for the chroot's directory.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("chroot"):
    print("SKIP: needs root, unshare and chroot")
    sys.exit(77)


def holding_fstype(path):
    """The fstype of the outer mount that holds `path` (longest mount point)."""
    best, fstype = "", None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            w = line.split()
            dash = w.index("-")
            mp = w[4].replace("\\040", " ")
            if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
                best, fstype = mp, w[dash + 1]
    return fstype


c = os.path.join(scratch(), "chroot")
for d in ("proc", "dev/shm", "usr", "tmp", "build"):
    os.makedirs(os.path.join(c, d))
for name in ("bin", "lib", "lib64", "sbin"):
    if os.path.islink("/" + name):
        os.symlink(os.readlink("/" + name).lstrip("/"), os.path.join(c, name))
build = os.path.dirname(os.path.realpath(MLDOCTOR))
fstype = holding_fstype(c)
if fstype in ("tmpfs", "ramfs"):
    print("SKIP: %s is on %s: its /dev/shm would be shared memory" % (c, fstype))
    sys.exit(77)

inside = "/build/" + os.path.basename(MLDOCTOR)
env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp", "NO_COLOR": "1"}


def run_in_chroot(self_mount, *args):
    script = ("mount --make-rprivate / && %s mount --bind /usr {c}/usr && mount -t proc proc {c}/proc && "
              "mount --bind {b} {c}/build && exec chroot {c} {m} %s"
              % ("mount --bind {c} {c} && " if self_mount else "", " ".join(args)))
    p = subprocess.run(["unshare", "-m", "sh", "-c", script.format(c=c, b=build, m=inside)], env=env,
                       capture_output=True, text=True, timeout=300)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    return p


for self_mount, where in ((False, ""), (True, " at /")):
    tag = "root bind-mounted on itself" if self_mount else "a plain directory"
    p = run_in_chroot(self_mount, "check", "--python-timeout", "60")
    check(p.returncode in (0, 1), "%s: a report (exit %d)" % (tag, p.returncode))
    memory = [l for l in p.stdout.splitlines() if l.startswith("Memory ")]
    if check(len(memory) == 1, "%s: the Memory row" % tag):
        check_in("/dev/shm not a tmpfs (a directory on %s%s)" % (fstype, where), memory[0],
                 "%s: /dev/shm is said to be no tmpfs, on the chroot's filesystem" % tag)
    check_in("/dev/shm is not a tmpfs but a directory on %s%s: PyTorch DataLoader workers' batches, "
             "torch.multiprocessing queues and NCCL's shared-memory buffers become files of that disk, "
             "bounded by its free space" % (fstype, where), p.stdout, "%s: HOST004" % tag)
    check_in("HOST004", p.stdout, "%s: HOST004's id" % tag)
    p = run_in_chroot(self_mount, "check", "--json", "--python-timeout", "60")
    shm = json.loads(p.stdout)["host"]["shm"] if p.stdout.startswith("{") else {}
    check_eq((shm.get("present"), shm.get("size_bytes"), shm.get("disk_backed"), shm.get("fstype"),
              shm.get("mount_point")),
             (True, None, True, fstype, "/" if self_mount else None),
             "%s: JSON host.shm: no size, disk-backed, its filesystem" % tag)
finish(os.path.basename(__file__))

#!/usr/bin/env python3
"""`mldoctor snapshot`: the archive holds what check read (no other process's
/proc/<pid>, no device but /dev/shm, libraries as the ranges read of them) and
the environment with secrets masked; unpacked, it
gives `check --root` the same host facts as the live `check` (the CPUID leaves
the cpuinfo model used are in it, so torch's thread count replays too); an
existing file is never overwritten."""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, clean_env, finish, scratch  # noqa: E402

SECRETS = {"HF_TOKEN": "hf_s3cr3tvalue0123456789", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI0s3cr3t",
           "DATABASE_URL": "postgres://alice:pa55w0rd@db.example/x", "GH": "ghp_0123456789abcdefghij0123"}


def run(args, env, cwd=None):
    return subprocess.run([MLDOCTOR] + args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def main():
    t = scratch()
    try:
        env = clean_env(OMP_NUM_THREADS="3", **SECRETS)
        out = os.path.join(t, "snap.tar.gz")
        p = run(["snapshot", out, "--python", "/usr/bin/python3"], env)
        check_eq(p.returncode, 0, "snapshot exit status: " + p.stderr)
        check_in("variables masked", p.stdout, "snapshot summary")

        with tarfile.open(out) as tar:
            names = tar.getnames()
            # What check read: the kernel's trees, the interpreter's metadata, the
            # libraries as the ranges the loader model read of them — never another
            # process's /proc/<pid>, never a device but /dev/shm, never a library whole.
            devices = [n for n in names if n.startswith("dev/") and n != "dev/shm" and not n.startswith("dev/shm/")]
            check(not devices, "no device but /dev/shm: %s" % devices[:5])
            pids = [n for n in names if n.startswith("proc/") and n.split("/")[1].isdigit()
                    and not (n.split("/")[1] == "1" and "/fd" not in n)]
            check(not pids, "no other process's /proc/<pid>: %s" % pids[:5])
            check(".mldoctor/python-probe/usr/bin/python3" in names, "the probe's answer is kept")
            sparse = [m for m in tar.getmembers() if m.issparse()]
            check(sparse, "libraries are kept as ranges (sparse members)")
            whole = [m.name for m in sparse if sum(n for _, n in m.sparse) >= m.size > (1 << 20)]
            check(not whole, "no library over 1 MiB kept whole: %s" % whole[:5])
            environ = tar.extractfile(".mldoctor/environ").read().decode()
            blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
            root = os.path.join(t, "root")
            tar.extractall(root)
        for name, value in SECRETS.items():
            check(value.encode() not in blob, "%s's value must not be in the archive" % name)
        check_in("OMP_NUM_THREADS=3\0", environ, "plain variables are kept")
        check_in("DATABASE_URL=postgres://alice:***@db.example/x\0", environ, "URL credentials masked")

        live = json.loads(run(["check", "--python", "/usr/bin/python3", "--json"], env).stdout)["host"]
        p = run(["check", "--root", root, "--json"], {"PATH": "/usr/bin:/bin"})
        check(p.returncode in (0, 1), "check --root on the snapshot: exit %d %s" % (p.returncode, p.stderr))
        doc = json.loads(p.stdout)
        snap = doc["host"]
        if os.uname().machine == "x86_64":
            check(os.path.exists(os.path.join(root, ".mldoctor", "cpuid")), "the CPUID leaves are in the snapshot")
        check(snap["cpuinfo"]["unknown"] is None, "cpuinfo's counts replay from the snapshot: %s"
              % snap["cpuinfo"]["unknown"])
        # The steps name the CPU that answered CPUID, whichever the scheduler chose.
        cpu = lambda steps: [re.sub(r"CPU \d+", "CPU n", s) for s in steps]  # noqa: E731
        check_eq(cpu(snap["cpuinfo"]["steps"]), cpu(live["cpuinfo"]["steps"]), "snapshot vs live: cpuinfo.steps")
        for key in ("processors", "cores", "initialised"):
            check_eq(snap["cpuinfo"][key], live["cpuinfo"][key], "snapshot vs live: cpuinfo." + key)
        for key in ("kernel_release", "glibc_version", "physical_cores", "numa_nodes", "container", "os", "cpu_model",
                    "architecture"):
            if key == "numa_nodes":
                # A node's MemTotal moves on a VM whose balloon driver lends memory back and
                # forth (seen: 0.9 GiB between two reads a few seconds apart): the same to 10 %.
                strip = lambda ns: [(n["id"], n["cpus"]) for n in ns]  # noqa: E731
                check_eq(strip(snap[key]), strip(live[key]), "snapshot vs live: " + key)
                for a, b in zip(snap[key], live[key]):
                    check(abs(a["mem_total_bytes"] - b["mem_total_bytes"]) <= b["mem_total_bytes"] // 10,
                          "snapshot vs live: node %s memory %s vs %s" % (a["id"], a["mem_total_bytes"],
                                                                       b["mem_total_bytes"]))
            else:
                check_eq(snap[key], live[key], "snapshot vs live: " + key)
        for key in ("online", "affinity", "usable", "usable_basis"):
            check_eq(snap["cpus"][key], live["cpus"][key], "snapshot vs live: cpus." + key)
        for key in ("memlock", "nofile", "nproc"):
            check_eq((snap["limits"][key] or {}).get("soft"), (live["limits"][key] or {}).get("soft"),
                     "snapshot vs live: limits." + key)
        check_eq(snap["shm"]["size_bytes"], live["shm"]["size_bytes"], "snapshot vs live: /dev/shm size")
        variables = doc["environment"]["variables"]
        check_eq(variables.get("OMP_NUM_THREADS"), "3", "the snapshot's environment is the one analysed")

        before = open(out, "rb").read()
        p = run(["snapshot", out], env)
        check_eq(p.returncode, 2, "an existing file is a tool error")
        check_in("File exists", p.stderr, "the error says why")
        check(open(out, "rb").read() == before, "the existing file is unchanged")
    finally:
        shutil.rmtree(t, ignore_errors=True)
    finish("snapshot-roundtrip")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Bytes `mldoctor fleet` gathers at 64 real MPI ranks, by number of differing groups.

Eight emulated nodes of eight ranks each (`mpirun --oversubscribe`, MPMD, every node a copy of
the 8-GPU fixture host with its own hostname under --root); node 5 is made to differ in 0..3
fact groups (driver, an HCA port, an environment variable). Prints, per case, the digest, plan
and detail bytes the run reports in its --json `protocol` object, the bytes the full reports
would have been, and the wall time of the whole mpirun.

  bench/fleet-protocol.py build/mldoctor
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

mld = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/mldoctor")
src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
base = os.path.join(src, "test/fixtures/hosts/gpu-8x-two-socket")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader", NO_COLOR="1")

with tempfile.TemporaryDirectory() as t:
    roots = []
    for n in range(8):
        r = os.path.join(t, "gpu%03d" % n)
        shutil.copytree(base, r, symlinks=True)
        os.makedirs(os.path.join(r, "proc/sys/kernel"), exist_ok=True)
        open(os.path.join(r, "proc/sys/kernel/hostname"), "w").write("gpu%03d\n" % n)
        roots.append(r)
    odd = roots[5]
    print("| differing groups | digest B | plan B | detail B | full reports B | mpirun wall s |")
    print("|---|---|---|---|---|---|")
    for k in range(4):
        if k >= 1:
            p = os.path.join(odd, "proc/driver/nvidia/version")
            open(p, "w").write(open(p).read().replace("535.104.05", "550.54.15"))
        if k >= 2:
            for dp, dn, fn in os.walk(os.path.join(odd, "sys/devices")):
                if dp.endswith("infiniband/mlx5_1/ports/1") and "state" in fn:
                    open(os.path.join(dp, "state"), "w").write("1: DOWN\n")
        cmd = ["mpirun", "--oversubscribe"]
        for i, r in enumerate(roots):
            extra = ["NCCL_IB_HCA=mlx5_0"] if (k >= 3 and i == 5) else ["NCCL_IB_HCA=mlx5"]
            cmd += ["-np", "8", "env"] + extra + [mld, "fleet", "--json", "--root", r]
            if i + 1 < len(roots):
                cmd.append(":")
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        wall = time.time() - t0
        doc = json.loads(p.stdout)
        pr = doc["protocol"]
        differs = sum(1 for g in doc["groups"] if g["differs"])
        assert differs == k, (differs, k)
        assert len(doc["members"]) == 64 and len(doc["nodes"]) == 8
        print("| %d | %d | %d | %d | %d | %.1f |" % (k, pr["digest_bytes"], pr["plan_bytes"], pr["detail_bytes"],
                                                  pr["full_report_bytes"], wall))

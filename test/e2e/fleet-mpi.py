#!/usr/bin/env python3
"""`mldoctor fleet` under a real `mpirun --oversubscribe` with 8 ranks.

The ranks are grouped into three emulated nodes: each reads its own fixture
root (`--root`, a copy of the 8-GPU two-socket host with its own hostname),
and an MPMD launch gives the groups different environments:
  node-a  ranks 0-2   driver 535.104.05, NCCL_IB_HCA=mlx5 (rank 2: mlx5_0)
  node-b  ranks 3-5   driver 550.54.15
  node-c  ranks 6-7   HCA mlx5_1 port 1 DOWN, NCCL_IB_HCA=mlx5_0
The report must name exactly these differences and node groups, count node
facts once per node, and fetch details only for what differs. Also: one
rank's error aborts the job instead of hanging it, and fleet without its MPI
plugin says how to get it (exit 2).
On the live machine (issue 21): ranks bound to a core each are not told
that they oversubscribe (THR001), while unbound ranks and bound ranks with
more threads than CPUs still are; and `mpirun ... fleet > file`, whose ranks
write to a pty, puts no colour codes in the file unless --color always.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_in, finish  # noqa: E402

SRC = os.environ.get("MLD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BASE = os.path.join(SRC, "test", "fixtures", "hosts", "gpu-8x-two-socket")
BUILD = os.environ.get("MLD_BUILD_DIR", os.path.dirname(MLDOCTOR))

if not shutil.which("mpirun") or not os.path.exists(os.path.join(BUILD, "libmldoctor-mpi.so")):
    print("fleet-mpi: skipped (no mpirun or no libmldoctor-mpi.so: install libopenmpi-dev openmpi-bin)")
    sys.exit(77)


def make_root(t, name, driver=None, port_down=None):
    root = os.path.join(t, name)
    shutil.copytree(BASE, root, symlinks=True)
    os.makedirs(os.path.join(root, "proc/sys/kernel/random"), exist_ok=True)
    with open(os.path.join(root, "proc/sys/kernel/hostname"), "w") as f:
        f.write(name + "\n")
    if driver:
        p = os.path.join(root, "proc/driver/nvidia/version")
        text = open(p).read().replace("535.104.05", driver)
        open(p, "w").write(text)
    if port_down:
        state = subprocess.run(["find", root, "-path", "*infiniband/%s/ports/1/state" % port_down],
                               capture_output=True, text=True, check=True).stdout.split()
        for p in state:
            if not os.path.islink(p):
                open(p, "w").write("1: DOWN\n")
    return root


with tempfile.TemporaryDirectory() as t:
    a = make_root(t, "node-a")
    b = make_root(t, "node-b", driver="550.54.15")
    c = make_root(t, "node-c", port_down="mlx5_1")

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "NCCL_", "OMP_")) and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", NO_COLOR="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1")

    def app(n, root, *assign, fmt="--json"):
        return ["-np", str(n), "env"] + list(assign) + [MLDOCTOR, "fleet", "--root", root, fmt]

    def launch(fmt):
        cmd = ["mpirun", "--oversubscribe"] + app(2, a, "NCCL_IB_HCA=mlx5", fmt=fmt) + [":"] + \
            app(1, a, "NCCL_IB_HCA=mlx5_0", fmt=fmt) + [":"] + app(3, b, "NCCL_IB_HCA=mlx5", fmt=fmt) + \
            [":"] + app(2, c, "NCCL_IB_HCA=mlx5_0", fmt=fmt)
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)

    p = launch("--json")
    check(p.returncode == 1, "fleet exits 1 on an error-level difference (got %d)\n%s" % (p.returncode, p.stderr))
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = None
        check(False, "fleet --json prints one JSON document from rank 0 only:\n" + p.stdout[:2000] + p.stderr)
    if doc:
        check(doc["schema"] == "mldoctor.fleet/1" and doc["source"] == "mpi", "schema and source")
        check(len(doc["members"]) == 8, "8 ranks reported")
        nodes = {n["name"]: [doc["members"][m]["rank"] for m in n["members"]] for n in doc["nodes"]}
        check(nodes == {"node-a": [0, 1, 2], "node-b": [3, 4, 5], "node-c": [6, 7]},
              "ranks grouped into the emulated nodes: %s" % nodes)
        groups = {g["name"]: g for g in doc["groups"]}
        differing = sorted(n for n, g in groups.items() if g["differs"])
        check(differing == ["environment", "gpu-driver", "infiniband"],
              "exactly the driver, the IB port and the environment differ: %s" % differing)

        def holders(group, key):
            out = {}
            for k in groups[group]["keys"]:
                if k["key"] == key:
                    for v in k["values"]:
                        out[v["value"]] = [doc["members"][m]["rank"] for m in v["members"]]
            return out

        check(holders("gpu-driver", "driver") == {"535.104.05": [0, 1, 2, 6, 7], "550.54.15": [3, 4, 5]},
              "driver holders: %s" % holders("gpu-driver", "driver"))
        check(holders("infiniband", "mlx5_1 port 1") == {"InfiniBand 4: ACTIVE": [0, 1, 2, 3, 4, 5],
                                                        "InfiniBand 1: DOWN": [6, 7]},
              "IB port holders: %s" % holders("infiniband", "mlx5_1 port 1"))
        check(holders("environment", "NCCL_IB_HCA") == {"mlx5": [0, 1, 3, 4, 5], "mlx5_0": [2, 6, 7]},
              "environment holders: %s" % holders("environment", "NCCL_IB_HCA"))
        rules = sorted(f["rule"] for f in doc["findings"])
        check(rules == ["FLEET001", "FLEET004", "FLEET005"], "findings: %s" % rules)
        drv = [f for f in doc["findings"] if f["rule"] == "FLEET001"]
        check(drv and drv[0]["severity"] == "error" and "node-b" in drv[0]["message"]
              and "node-a, node-c" in drv[0]["message"], "FLEET001 names the nodes: %s" % drv)
        proto = doc["protocol"]
        # Details: 2 variants of 3 differing groups, minus rank 0's own → 3 answers.
        check(0 < proto["detail_bytes"] < proto["full_report_bytes"] / 20,
              "details fetched only for what differs: %s" % proto)
        check(proto["digest_bytes"] < proto["full_report_bytes"] / 10, "digests are small: %s" % proto)
        check(doc["max_clock_offset_s"] is not None and abs(doc["max_clock_offset_s"]) < 0.5,
              "clock offsets measured between the emulated nodes: %s" % doc["max_clock_offset_s"])
        # GPU007 (8 GPUs visible, no binding) holds on every rank of every node.
        nf = {f["rule"]: f for f in doc["node_findings"]}
        check("GPU007" in nf and len(nf["GPU007"]["members"]) == 8, "every node's own findings summarised")

    p = launch("--no-color")
    out = p.stdout
    check_in("mldoctor fleet · 8 ranks on 3 nodes", out, "text header")
    check_in("  node-b           3-5", out, "node table")
    check_in("Nodes differ in NVIDIA driver: driver is 535.104.05 on node-a, node-c; 550.54.15 on node-b  FLEET001",
             out, "driver difference in text")
    check_in("NCCL_IB_HCA is mlx5 on node-b, node-a (ranks 0,1); mlx5_0 on node-c, node-a (rank 2)", out,
             "a per-process difference names ranks where a node is split")
    check_in("Findings of check on each node:", out, "node findings section")
    check(out.count("mldoctor fleet ·") == 1, "only rank 0 prints")

    # One rank's tool error (a bad --glibc) while the others wait in the
    # gather: the job is aborted with the rank's message, never left hanging.
    cmd = ["mpirun", "--oversubscribe", "-np", "3", MLDOCTOR, "fleet", "--root", a, ":",
           "-np", "1", MLDOCTOR, "fleet", "--root", a, "--glibc", "bogus"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        check(p.returncode != 0 and "mldoctor: error: fleet (rank 3): --glibc bogus: expected a release like 2.36"
              in p.stderr and "mldoctor fleet ·" not in p.stdout,
              "a failing rank aborts the job with its message: rc=%d\n%s" % (p.returncode, p.stderr[-2000:]))
    except subprocess.TimeoutExpired:
        check(False, "a failing rank left the job hanging")

    # THR001 per rank on the live machine: the ranks' masks are gathered
    # before check, so ranks bound to a core each have that core to
    # themselves; unbound ranks share the node.
    live = dict(env)
    del live["OMPI_MCA_rmaps_base_oversubscribe"]
    cpus = len(os.sched_getaffinity(0))

    def thr001(bind, *extra):
        cmd = ["mpirun", "-np", "2", "--bind-to", bind] + list(extra) + [MLDOCTOR, "fleet", "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=live, timeout=600)
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            check(False, "%s: one JSON document (rc=%d)\n%s" % (" ".join(cmd[:6]), p.returncode, p.stderr[-2000:]))
            return None
        return [f for f in doc["node_findings"] if f["rule"] == "THR001"]

    if cpus >= 2:
        bound = thr001("core")
        check(bound == [], "ranks bound to a core each: no THR001 (%s)" % bound)
        many = thr001("core", "-x", "OMP_NUM_THREADS=%d" % (2 * cpus))
        check(many and "the rank oversubscribes its CPUs" in many[0]["message"]
              and len(many[0]["members"]) == 2,
              "bound ranks with more threads than their CPUs: THR001 per rank (%s)" % many)
        shared = thr001("none")
        check(shared and "2 rank(s) × %d threads" % cpus in shared[0]["message"]
              and "the ranks oversubscribe the node" in shared[0]["message"],
              "unbound ranks share the node: THR001 (%s)" % shared)

    # mpirun gives each rank a pty: a report redirected to a file has no
    # colour codes (no NO_COLOR here), unless --color always asks for them.
    plain = {k: v for k, v in env.items() if k != "NO_COLOR"}
    for extra, coloured in (([], False), (["--color", "always"], True)):
        out_path = os.path.join(t, "fleet-out.txt")
        with open(out_path, "wb") as f:
            p = subprocess.run(["mpirun", "-np", "2", MLDOCTOR, "fleet", "--root", a] + extra,
                               stdout=f, stderr=subprocess.PIPE, env=plain, timeout=600)
        data = open(out_path, "rb").read()
        check(b"mldoctor fleet \xc2\xb7 2 ranks" in data, "report written to the file (rc=%d): %r"
              % (p.returncode, data[:300]))
        check((b"\x1b[" in data) == coloured, "mpirun ... fleet %s> file: colour codes %s"
              % (" ".join(extra), "present" if coloured else "absent"))

    # Without the plugin: a clear message, exit 2, nothing else.
    e = dict(env, MLDOCTOR_SHIM_DIR=t)
    p = subprocess.run([MLDOCTOR, "fleet"], capture_output=True, text=True, env=e, timeout=120)
    # This build made the plugin: the advice is the package that carries it.
    check(p.returncode == 2 and "fleet needs its MPI plugin" in p.stderr and "mldoctor-mpi package" in p.stderr
          and not p.stdout,
          "fleet without its MPI plugin says how to get it: rc=%d %s" % (p.returncode, p.stderr))

finish("fleet-mpi")

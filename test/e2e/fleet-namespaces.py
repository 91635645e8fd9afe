#!/usr/bin/env python3
"""`mldoctor fleet` across three "nodes" on one machine, under one mpirun.

Each rank runs in its own UTS and mount namespaces (unshare(1)) that make it
a node of its own as fleet sees one, on the live machine with no --root: its
own hostname (node1, node2, node3), its own kernel boot id bind-mounted over
/proc/sys/kernel/random/boot_id, its own /etc/os-release. node3 runs another
OS release and answers the clock probe 5 s ahead (MLDOCTOR_TEST_CLOCK_SKEW_S,
the documented test hook: every namespace shares the kernel's realtime
clock). The report must group the 5 ranks into the 3 nodes, compress the
node names into a Slurm-style host range, name the OS difference on node3
alone (FLEET003), and measure node3's clock offset (FLEET006).
Skipped (77) without root, unshare, mpirun or the MPI plugin.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_in, finish  # noqa: E402

BUILD = os.environ.get("MLD_BUILD_DIR", os.path.dirname(MLDOCTOR))
if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mpirun") \
        or not os.path.exists(os.path.join(BUILD, "libmldoctor-mpi.so")):
    print("fleet-namespaces: skipped (needs root, unshare, mpirun and libmldoctor-mpi.so)")
    sys.exit(77)

probe = subprocess.run(["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
                        "hostname probe && mount --bind /etc/hostname /etc/hostname"],
                       capture_output=True, text=True)
if probe.returncode != 0:
    print("fleet-namespaces: skipped (unshare --uts --mount is not allowed here: %s)" % probe.stderr.strip())
    sys.exit(77)

os_release = open("/etc/os-release").read()
OTHER_OS = "Emulated Linux 99 (node3)"

with tempfile.TemporaryDirectory() as t:
    def node(name, os_text, skew=None):
        d = os.path.join(t, name)
        os.makedirs(d)
        open(os.path.join(d, "boot_id"), "w").write(str(uuid.uuid4()) + "\n")
        open(os.path.join(d, "os-release"), "w").write(os_text)
        # The rank's own namespaces; the bind mounts are seen by it alone.
        script = os.path.join(d, "rank.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexec unshare --uts --mount --propagation private sh -c '"
                    "hostname %s && mount --bind %s/boot_id /proc/sys/kernel/random/boot_id && "
                    "mount --bind %s/os-release /etc/os-release && exec \"$@\"' rank %s\"$@\"\n"
                    % (name, d, d, ("env MLDOCTOR_TEST_CLOCK_SKEW_S=%s " % skew) if skew else ""))
        os.chmod(script, 0o755)
        return script

    n1 = node("node1", os_release)
    n2 = node("node2", os_release)
    n3 = node("node3", os_release.replace(
        [line for line in os_release.splitlines() if line.startswith("PRETTY_NAME=")][0],
        'PRETTY_NAME="%s"' % OTHER_OS), skew="5")

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "SLURM_", "NCCL_", "OMP_", "MLDOCTOR_TEST_"))}
    # One thread per rank: the nodes' own findings (THR001 for 2 unbound
    # ranks on node1 and node2, not for node3's one) stay alike.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", NO_COLOR="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1",
               OMP_NUM_THREADS="1")

    def launch(*fmt):
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none"]
        for i, (script, n) in enumerate(((n1, 2), (n2, 2), (n3, 1))):
            cmd += ([":"] if i else []) + ["-np", str(n), script, MLDOCTOR, "fleet"] + list(fmt)
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)

    p = launch("--json")
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = None
        check(False, "one JSON document (rc=%d):\n%s\n%s" % (p.returncode, p.stdout[:2000], p.stderr[-3000:]))
    if doc:
        nodes = {n["name"]: [doc["members"][m]["rank"] for m in n["members"]] for n in doc["nodes"]}
        check(nodes == {"node1": [0, 1], "node2": [2, 3], "node3": [4]},
              "5 ranks grouped by their namespaces' hostname and boot id: %s" % nodes)
        groups = {g["name"]: g for g in doc["groups"]}
        differing = sorted(n for n, g in groups.items() if g["differs"])
        check(differing == ["os"], "only the OS differs: %s" % differing)
        rules = sorted(f["rule"] for f in doc["findings"])
        check(rules == ["FLEET003", "FLEET006"], "FLEET003 and FLEET006: %s" % rules)
        os_f = [f for f in doc["findings"] if f["rule"] == "FLEET003"]
        check(os_f and "node[1-2]" in os_f[0]["message"] and OTHER_OS + " on node3" in os_f[0]["message"],
              "FLEET003 names node3 and the others as a host range: %s" % os_f)
        clock = [f for f in doc["findings"] if f["rule"] == "FLEET006"]
        # The offset is measured over a round trip (4.991 s under load once):
        # the text must show it near 5 s, as the JSON's figure below.
        node3 = [re.match(r"node3: \+(\d+\.\d+) s from node1", e["text"]) for e in clock[0]["evidence"]] if clock else []
        check(any(m and 4.5 < float(m.group(1)) < 5.5 for m in node3)
              and any(e["text"] == "node1: +0.000 s from node1" for e in clock[0]["evidence"]),
              "FLEET006 shows node3 about 5 s ahead of node1: %s" % clock)
        off = doc["max_clock_offset_s"]
        check(off is not None and 4.5 < abs(off) < 5.5, "node3's offset measured near 5 s: %s" % off)

    p = launch("--no-color")
    check_in("mldoctor fleet · 5 ranks on 3 nodes", p.stdout, "text header")
    check_in("node[1-2]", p.stdout, "host range in the text report")
    check(p.returncode == 0, "warnings only: exit 0 (got %d)" % p.returncode)

finish("fleet-namespaces")

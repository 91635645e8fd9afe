#!/usr/bin/env python3
# labels: slow
"""`mldoctor fleet` under a real single-node Slurm (Debian's slurm-wlm 22.05
and munge), the way a cluster admin launches it (issue 21).

The test starts its own munged, slurmctld and slurmd from the packages with a
private configuration in a scratch directory: its own munge key and socket,
state and spool directories, free ports, and `SlurmdParameters=
config_overrides` so a node of 4 CPUs fits on a 2-CPU machine. It stops
exactly the daemons it started, by pid. Then:
  1. `srun --mpi=pmix -n 4 mldoctor fleet` with rank 3 given another
     NCCL_IB_HCA: 4 ranks, the environment differs on rank 3 only.
  2. plain `srun -n 2` under `MpiDefault=none`, and `srun --mpi=pmi2`: exit 2
     with the advice (srun --mpi=pmix, MpiDefault=pmix, mpirun), before
     Open MPI can abort the tasks with status 1.
  3. `salloc -n 2 mldoctor fleet` (no launcher): exit 2, the world of one
     contradicts SLURM_NTASKS=2.
  4. an sbatch script whose step is `srun --mpi=pmix mldoctor fleet --json`.
Skipped (77) without root, the packages (scripts/install-deps.sh) or the
MPI plugin.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_in, finish  # noqa: E402

BUILD = os.environ.get("MLD_BUILD_DIR", os.path.dirname(MLDOCTOR))
NEEDED = ["munged", "mungekey", "slurmctld", "slurmd", "srun", "salloc", "sbatch", "sinfo"]
missing = [p for p in NEEDED if not shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
if os.geteuid() != 0 or missing or not os.path.exists(os.path.join(BUILD, "libmldoctor-mpi.so")):
    print("fleet-slurm: skipped (needs root, slurm-wlm and munge: scripts/install-deps.sh; "
          "missing: %s)" % (", ".join(missing) or "root or libmldoctor-mpi.so"))
    sys.exit(77)


START = time.monotonic()


def sbin(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_for(what, cond, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    check(False, "%s within %ds" % (what, timeout))
    return False


daemons = []  # Popen objects of the daemons this test started


def start(argv, log):
    p = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    daemons.append(p)
    return p


def stop_daemons():
    # Exactly what we started, newest first (slurmd before slurmctld before munged).
    for p in reversed(daemons):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def show_logs(t):
    for name in sorted(os.listdir(os.path.join(t, "log"))):
        text = open(os.path.join(t, "log", name), errors="replace").read()
        print("--- %s (last 3000 bytes)\n%s" % (name, text[-3000:]))


t = tempfile.mkdtemp(prefix="mld-slurm-")
try:
    for d in ("munge", "state", "spool", "log", "out"):
        os.makedirs(os.path.join(t, d))
    os.chmod(t, 0o755)
    os.chmod(os.path.join(t, "munge"), 0o755)
    key = os.path.join(t, "munge", "munge.key")
    subprocess.run([sbin("mungekey"), "--create", "--keyfile=" + key], check=True)
    os.chmod(key, 0o600)
    sock = os.path.join(t, "munge", "munge.socket")
    start([sbin("munged"), "-F", "--force", "--key-file=" + key, "--socket=" + sock,
           "--pid-file=" + os.path.join(t, "munge", "munged.pid"),
           "--log-file=" + os.path.join(t, "log", "munged.log"),
           "--seed-file=" + os.path.join(t, "munge", "seed")], os.path.join(t, "log", "munged.out"))
    wait_for("munged's socket", lambda: os.path.exists(sock))

    host = socket.gethostname()
    ctld_port, slurmd_port = free_ports(2)
    conf = os.path.join(t, "slurm.conf")

    def write_conf(mpi_default):
        with open(conf, "w") as f:
            f.write("""ClusterName=mldtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/slurmd.pid
SlurmctldLogFile={t}/log/slurmctld.log
SlurmdLogFile={t}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
TaskPluginParam=None
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault={mpi_default}
SwitchType=switch/none
SchedulerType=sched/builtin
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
NodeName={host} NodeAddr=127.0.0.1 CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=500 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""".format(host=host, ctld_port=ctld_port, slurmd_port=slurmd_port, sock=sock, t=t,
                   mpi_default=mpi_default))

    write_conf("none")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "NCCL_", "OMP_"))}
    env.update(SLURM_CONF=conf, NO_COLOR="1", OMPI_MCA_btl="self,vader")
    start([sbin("slurmctld"), "-D", "-i", "-f", conf], os.path.join(t, "log", "slurmctld.out"))
    start([sbin("slurmd"), "-D", "-f", conf], os.path.join(t, "log", "slurmd.out"))

    def node_idle():
        p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env)
        return p.returncode == 0 and p.stdout.strip() == "idle"

    if not wait_for("the node idle in sinfo", node_idle, timeout=90):
        show_logs(t)
        raise SystemExit(finish("fleet-slurm"))
    started = time.monotonic() - START

    def run(argv, timeout=300, **kw):
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, **kw)

    # 1. srun --mpi=pmix -n 4, rank 3 with another NCCL_IB_HCA.
    per_rank = ('if [ "$SLURM_PROCID" = 3 ]; then export NCCL_IB_HCA=mlx5_1; '
                'else export NCCL_IB_HCA=mlx5_0; fi; exec "$0" fleet --json')
    p = run(["srun", "--mpi=pmix", "-n", "4", "sh", "-c", per_rank, MLDOCTOR])
    check(p.returncode in (0, 1), "srun --mpi=pmix: fleet ran (rc=%d)\n%s" % (p.returncode, p.stderr[-3000:]))
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = None
        check(False, "srun --mpi=pmix: one JSON document from rank 0:\n%s\n%s" % (p.stdout[:2000], p.stderr[-3000:]))
    if doc:
        check(len(doc["members"]) == 4 and len(doc["nodes"]) == 1, "4 ranks on 1 node: %s" % doc["nodes"])
        groups = {g["name"]: g for g in doc["groups"]}
        differing = sorted(n for n, g in groups.items() if g["differs"])
        # Rank 3's own check also names its HCA (NCCL rules): its findings differ too.
        check(differing == ["environment", "findings"], "only the environment differs: %s" % differing)
        fkeys = [k["key"] for k in groups["findings"]["keys"]]
        check(fkeys and all(k.startswith("NCCL") for k in fkeys), "findings differ in NCCL rules only: %s" % fkeys)
        holders = {}
        for k in groups["environment"]["keys"]:
            if k["key"] == "NCCL_IB_HCA":
                for v in k["values"]:
                    holders[v["value"]] = [doc["members"][m]["rank"] for m in v["members"]]
        check(holders == {"mlx5_0": [0, 1, 2], "mlx5_1": [3]}, "NCCL_IB_HCA holders: %s" % holders)
        check([f["rule"] for f in doc["findings"]] == ["FLEET005"], "FLEET005: %s" % doc["findings"])
        check("Open MPI" in (doc.get("mpi_library") or ""), "the MPI library named: %s" % doc.get("mpi_library"))
    pmix_s = time.monotonic() - START - started

    # 2. Plain srun under MpiDefault=none, and --mpi=pmi2: refused before MPI_Init.
    for argv, why in ((["srun", "-n", "2", MLDOCTOR, "fleet"], "without PMIx (--mpi=pmix)"),
                      (["srun", "--mpi=pmi2", "-n", "2", MLDOCTOR, "fleet"],
                       "no PMI-1/PMI-2 component (its pmix components: ext3x")):
        p = run(argv)
        check(p.returncode == 2, "%s: exit 2, the tool failed (got %d)" % (" ".join(argv[:3]), p.returncode))
        check_in(why, p.stderr, "%s: why" % " ".join(argv[:3]))
        check_in("srun --mpi=pmix mldoctor fleet", p.stderr, "%s: advice" % " ".join(argv[:3]))
        check_in("MpiDefault=pmix", p.stderr, "%s: slurm.conf advice" % " ".join(argv[:3]))
        check("OPAL ERROR" not in p.stderr and not p.stdout, "%s: no MPI abort, no report:\n%s" % (argv[:3], p.stderr))

    # 3. salloc without a launcher: a world of one against SLURM_NTASKS=2.
    p = run(["salloc", "-n", "2", MLDOCTOR, "fleet"])
    check(p.returncode == 2, "salloc -n2 mldoctor fleet: exit 2 (got %d)\n%s" % (p.returncode, p.stderr[-2000:]))
    check_in("MPI made a world of 1 rank(s), but SLURM_NTASKS=2 says the job has 2", p.stderr, "salloc: mismatch")
    check("no differences" not in p.stdout and "1 rank" not in p.stdout, "salloc: no report: %s" % p.stdout)

    # 4. An sbatch script, its step started with srun --mpi=pmix.
    script = os.path.join(t, "fleet.sbatch")
    out = os.path.join(t, "out", "fleet.json")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n#SBATCH --ntasks=4\n#SBATCH --output=%s/out/batch.log\n"
                "srun --mpi=pmix %s fleet --json > %s\n" % (t, MLDOCTOR, out))
    p = run(["sbatch", "--wait", script])
    check(p.returncode == 0, "sbatch --wait: the job succeeded (rc=%d)\n%s\n%s" % (
        p.returncode, p.stderr, open(os.path.join(t, "out", "batch.log")).read()[-2000:]
        if os.path.exists(os.path.join(t, "out", "batch.log")) else ""))
    try:
        doc = json.load(open(out))
        check(len(doc["members"]) == 4 and doc["findings"] == [], "sbatch: 4 ranks, nothing differs: %s"
              % doc["findings"])
    except (OSError, ValueError) as e:
        check(False, "sbatch: fleet's JSON written by the step: %s" % e)

    # 5. MpiDefault=pmix: plain srun works (reconfigured in place).
    write_conf("pmix")
    subprocess.run(["scontrol", "reconfigure"], env=env, check=True)
    p = run(["srun", "-n", "2", MLDOCTOR, "fleet", "--json"])
    check(p.returncode == 0 and len(json.loads(p.stdout or "{}").get("members", [])) == 2,
          "MpiDefault=pmix: plain srun works (rc=%d)\n%s" % (p.returncode, p.stderr[-2000:]))
    print("fleet-slurm: daemons up in %.1fs, srun --mpi=pmix -n 4 in %.1fs, total %.1fs"
          % (started, pmix_s, time.monotonic() - START))
finally:
    stop_daemons()
    if not any(p.poll() is None for p in daemons):
        shutil.rmtree(t, ignore_errors=True)

finish("fleet-slurm")

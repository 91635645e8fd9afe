#!/usr/bin/env python3
# labels: slow scenario
"""`mldoctor run` follows the whole process tree.

The job is a Python launcher that starts, the way a training job's helpers
do:
  * a multiprocessing worker with the 'fork' start method and one with
    'spawn' (a fresh interpreter started through _posixsubprocess);
  * a subprocess.run() child;
  * two "ranks" launched the way torchrun starts its workers (RANK,
    WORLD_SIZE, MASTER_ADDR/PORT in the environment, one process each; the
    Debian torch's own torchrun is broken, research/reproductions.md) that
    each set their thread count and run a gloo all_reduce on CPU.
Each process calls omp_set_num_threads (through ctypes on libgomp, or
torch.set_num_threads for the ranks) with a value of its own.

Assertions: the report lists every one of these processes with its own
thread-count call (value, caller, runtime), the fork child is marked as
forked from the launcher, the exec'd children carry their argv and their
parent's pid, and the job's output and status are what they are without
`mldoctor run`.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, finish  # noqa: E402
from scenarios import PY, run_traced, scenario_env, skip_unless  # noqa: E402

skip_unless("torch")
JOB = r'''
import ctypes, multiprocessing as mp, os, socket, subprocess, sys

def set_threads(n):
    ctypes.CDLL("libgomp.so.1").omp_set_num_threads(n)
    return n

def worker(n, q):
    q.put(set_threads(n))

RANK = """
import os, torch, torch.distributed as dist
torch.set_num_threads(int(os.environ["RANK"]) + 5)
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
os.write(1, ("rank %d sum %d\\n" % (dist.get_rank(), int(t.item()))).encode())  # one write: ranks share the pipe
dist.destroy_process_group()
"""

if __name__ == "__main__":
    set_threads(2)
    for method, n in (("fork", 3), ("spawn", 4)):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=worker, args=(n, q))
        p.start()
        print(method, q.get(), flush=True)
        p.join()
    subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libgomp.so.1').omp_set_num_threads(9)"],
                   check=True)
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ranks = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        ranks.append(subprocess.Popen([sys.executable, "-c", RANK], env=env))
    sys.exit(max(p.wait() for p in ranks))
'''

with tempfile.TemporaryDirectory() as d:
    script = os.path.join(d, "launcher.py")
    with open(script, "w") as f:
        f.write(JOB)
    env = scenario_env()
    plain = subprocess.run([PY, script], env=env, capture_output=True, text=True, timeout=300)
    print("real: exit %d, %r" % (plain.returncode, plain.stdout))
    check(plain.returncode == 0, "the job runs without mldoctor:\n" + plain.stderr)
    doc, job = run_traced([PY, script], env)
    check(job.returncode == plain.returncode and sorted(job.stdout.splitlines()) == sorted(plain.stdout.splitlines()),
          "same status and output lines under run: exit %d, %r (without: exit %d, %r)\n%s"
          % (job.returncode, job.stdout, plain.returncode, plain.stdout, job.stderr[-2000:]))
    if doc:
        procs = {p["pid"]: p for p in doc["processes"]}
        launcher = [p for p in procs.values() if p["images"] and p["images"][0]["argv"][-1:] == [script]]
        check(len(launcher) == 1, "the launcher is in the report")

        def calls(p):
            return [c["value"] for c in p["thread_calls"] if c["fn"] == "omp_set_num_threads"]

        if launcher:
            lp = launcher[0]
            check(2 in calls(lp), "the launcher's own call (2): %r" % calls(lp))
            fork = [p for p in procs.values() if p["forked_from"] == lp["pid"] and not p["images"]]
            check(fork and 3 in calls(fork[0]), "the fork worker, forked from the launcher, set 3: %r"
                  % [(p["pid"], calls(p)) for p in fork])
            if fork:
                ev = [f for f in lp["forks"] if f["child"] == fork[0]["pid"]]
                check(ev and ev[0]["threads"] >= 1 and any(o.endswith("libgomp.so.1") for o in ev[0]["openmp"]),
                      "the launcher's fork event names libgomp, loaded before it forked: %r" % ev)
            spawned = [p for p in procs.values() if p["images"] and p["images"][0]["ppid"] == lp["pid"]]
            argvs = [" ".join(p["images"][0]["argv"]) for p in spawned]
            spawn = [p for p in spawned if "multiprocessing.spawn" in " ".join(p["images"][0]["argv"])]
            check(spawn and 4 in calls(spawn[0]), "the spawn worker (a new interpreter) set 4: %r" % argvs)
            sub = [p for p in spawned if 9 in calls(p)]
            check(len(sub) == 1, "the subprocess.run child set 9: %r" % argvs)
            ranks = [p for p in spawned if any(c["caller"].endswith("libtorch_cpu.so.1.13") and c["value"] in (5, 6)
                                               for c in p["thread_calls"])]
            check(len(ranks) == 2, "both ranks are traced with torch's own call (5, 6): %r"
                  % [(argv[:60], calls(p)) for p, argv in zip(spawned, argvs)])
            for p in [lp] + spawned:
                for c in p["thread_calls"]:
                    check(c["runtime"].endswith("libgomp.so.1"), "every call lands in libgomp: %r" % c)
finish(os.path.basename(__file__))

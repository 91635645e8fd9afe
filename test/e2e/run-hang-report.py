#!/usr/bin/env python3
# labels: slow scenario
"""The hang report as a user reads it (issue 31 item 6): one cause, one
finding, printed once, with evidence that says where it came from.

Three real hangs, each under `mldoctor run --hang-timeout 10 --kill-on-hang`
with the text report on stderr:
  * seed 002: load_inline() of Debian's torch waits on a stale build lock
    (TORCH_EXTENSIONS_DIR/x2/lock left by a killed build);
  * a 2-rank gloo job of Debian's torch started by a launcher that sets RANK
    (as torchrun does): rank 1 sleeps before all_reduce, rank 0 waits in it
    (the jobs of run-seed002-jit-hang.py and run-gloo-odd-rank.py, whose
    JSON those tests check);
  * the same job started by torch.multiprocessing.spawn, which sets no rank
    variable: the launcher waits in spawn()'s join, worker 1 sleeps.

Oracle: the jobs themselves. Each prints what it reached ("loading", "rank R
up pid P"); a job is hung when it never prints what comes after ("loaded",
"rank R done") and mldoctor stopped it.

mldoctor half:
  * the live notice is one line ("stopping it (--kill-on-hang)"), never
    "keeps running", and the report comes once, after the job ended;
  * seed 002: the headline is JIT001 (the stale lock); RUN002 and JIT023
    appear only as its context ("reported as:"); the summary counts 1 error;
  * gloo: the headline is DIST019 naming the sleeping rank (or, under
    spawn, the sleeping worker's pid) with its line, and the waiting one with
    all_reduce and its line; never the launcher's spawn(); the fix names the
    sleeper's line and pid; no NCCL setting anywhere for a gloo job;
  * evidence of stacks says "mldoctor read the stacks of pid N", never
    "(py-spy dump)" or a line number of a dump nobody wrote.
"""
import os
import re
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import PY, gloo_rank_job, scenario_env, skip_unless, stale_lock_job  # noqa: E402

skip_unless("torch")
HANG = 10
t = scratch()


def hung_run(name, argv, env, cwd=None):
    """Runs ARGV under mldoctor run; returns (job stdout, report text)."""
    report = os.path.join(t, name + ".report")
    with open(report, "w") as rep:
        p = subprocess.run([MLDOCTOR, "run", "--no-color", "--hang-timeout", str(HANG), "--kill-on-hang",
                            "--"] + argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=rep, text=True,
                           timeout=HANG + 600)
    text = open(report).read()
    print("=== %s: exit %d, stdout %r\n%s" % (name, p.returncode, p.stdout, text))
    check(p.returncode != 0, "%s: the job was stopped (status %d)" % (name, p.returncode))
    return p.stdout, text


def headlines(text):
    return [l for l in text.splitlines() if re.match(r"^ [✗!·] ", l)]


def common_checks(name, text, cmd_start):
    live = [l for l in text.splitlines() if "looks hung" in l]
    check_eq(len(live), 1, "%s: one live notice" % name)
    check(bool(live) and live[0].endswith("stopping it (--kill-on-hang), the report follows"),
          "%s: the notice is one line saying the job is being stopped: %r" % (name, live))
    check("keeps running" not in text, "%s: no 'keeps running' for a job being stopped" % name)
    check_eq(text.count("\nmldoctor run: " + cmd_start), 1, "%s: the report is printed once" % name)
    check_in("(stopped by mldoctor after", text, "%s: the status says mldoctor stopped the job" % name)
    check("(py-spy dump)" not in text, "%s: stacks mldoctor read are not called a py-spy dump" % name)
    check(re.search(r"pid \d+:\d+:", text) is None, "%s: no line number of a dump mldoctor wrote itself" % name)
    heads = headlines(text)
    check(not any(h.rstrip().endswith("RUN002") for h in heads),
          "%s: the hang as such is context, not a finding of its own: %r" % (name, heads))
    check(re.search(r"\n     reported as: no CPU progress, no output and no events for \d+ s \(.*RUN002\n", text)
          is not None, "%s: RUN002 is shown as context" % name)
    return heads


# --- seed 002: a stale build lock ---------------------------------------------
argv, env, home, lock = stale_lock_job(t)
out, text = hung_run("seed002", argv, env, cwd=home)
check_in("loading", out, "seed002: the job got to load_inline")
check("loaded" not in out, "seed002: the job never got past the lock (the real hang)")
heads = common_checks("seed002", text, PY + " -c ")
check(bool(heads) and heads[0].startswith(" ✗ stale lock %s: no process holds it" % lock)
      and heads[0].rstrip().endswith("JIT001"), "seed002: the headline is the stale lock (JIT001): %r" % heads)
check(not any(h.rstrip().endswith(("JIT023", "RUN002")) for h in heads),
      "seed002: the lock's wait and the hang are no findings of their own: %r" % heads)
check(re.search(r"\n     reported as: a thread waits in torch's FileBaton\.wait\(\).*JIT023\n", text) is not None,
      "seed002: the FileBaton wait (JIT023) is context of the lock")
check(re.search(r"Thread \d+ \((idle|active)\): \"MainThread\" \(mldoctor read the stacks of pid \d+\): wait "
                r"\(torch/utils/file_baton\.py:\d+\)", text) is not None,
      "seed002: the stack evidence says mldoctor read it")
check_in("\n1 error · mldoctor explain JIT001\n", text, "seed002: one cause, one error")
check(os.path.exists(lock), "seed002: run never removes anything: the lock is still there")

def gloo_leg(name, argv, env, odd, waiting, sleep_at, wait_at):
    """A 2-process gloo job whose second process sleeps before all_reduce:
    ODD/WAITING name the processes from the job's "rank R up pid P" lines."""
    out, text = hung_run(name, argv, env)
    up = dict((int(r), int(p)) for r, p in re.findall(r"rank (\d+) up pid (\d+)", out))
    check(sorted(up) == [0, 1], "%s: both ranks got through init_process_group: %r" % (name, out))
    check("done" not in out, "%s: no rank got through all_reduce (the real hang)" % name)
    heads = common_checks(name, text, " ".join(argv[:2]))
    odd_name, waiting_name = odd(up), waiting(up)
    check(bool(heads) and heads[0].startswith(
        " ✗ %s is asleep (clock_nanosleep) at %s while %s waits in all_reduce at %s"
        % (odd_name, sleep_at, waiting_name, wait_at)) and heads[0].rstrip().endswith("DIST019"),
          "%s: the headline names the sleeper and its line, and the waiting one's, not the launcher's "
          "spawn(): %r" % (name, heads))
    check_in("\n     fix: look at what %s does at %s (pid %d; its whole stack: mldoctor stacks %d)"
             % (odd_name, sleep_at, up.get(1, -1), up.get(1, -1)), text,
             "%s: the fix names the sleeper's line and pid" % name)
    check_in("\n          export TORCH_DISTRIBUTED_DEBUG=DETAIL\n", text, "%s: the debug setting of gloo" % name)
    check("NCCL_DEBUG" not in text, "%s: no NCCL setting for a gloo job" % name)
    check(re.search(r"Thread \d+ \((idle|active)\): \"MainThread\" \(mldoctor read the stacks of pid %d\): "
                    r"all_reduce" % up.get(0, -1), text) is not None,
          "%s: the waiting rank's stack, said to be read by mldoctor" % name)


# --- gloo: rank 1 sleeps before all_reduce --------------------------------------
rank_py, launch_py = gloo_rank_job(t)
gloo_leg("gloo-ranks", [PY, launch_py, "2", "1", rank_py], scenario_env(),
         lambda up: "rank 1", lambda up: "rank 0", "rank.py:9 (<module>)", "rank.py:11 (<module>)")

# --- gloo under torch.multiprocessing.spawn: no rank variable -------------------
spawn_py = os.path.join(t, "spawn.py")
with open(spawn_py, "w") as f:
    f.write("import os, time\n"
            "import torch\n"
            "import torch.distributed as dist\n"
            "import torch.multiprocessing as mp\n"
            "def run(rank, world):\n"
            "    dist.init_process_group('gloo', rank=rank, world_size=world)\n"
            "    print('rank %d up pid %d' % (rank, os.getpid()), flush=True)\n"
            "    if rank == 1:\n"
            "        time.sleep(600)\n"
            "    t = torch.ones(4)\n"
            "    dist.all_reduce(t)\n"
            "    print('rank %d done' % rank, flush=True)\n"
            "if __name__ == '__main__':\n"
            "    mp.spawn(run, args=(2,), nprocs=2)\n")
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
gloo_leg("gloo-spawn", [PY, spawn_py], scenario_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
         lambda up: "pid %d" % up.get(1, -1), lambda up: "pid %d" % up.get(0, -1), "spawn.py:9 (run)",
         "spawn.py:11 (run)")
finish(os.path.basename(__file__))

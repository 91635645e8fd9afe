#!/usr/bin/env python3
# labels: slow scenario
"""A distributed job where one rank never reaches the collective (issue 19):
2 and 4 ranks of Debian's torch with the gloo backend, started by a small
launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
as torchrun does, and 2 ranks under Open MPI's mpirun (ranks known to
mldoctor by OMPI_COMM_WORLD_RANK) (Debian's torch 1.13 torchrun fails on Python 3.11 in
`to_map`, with or without mldoctor). The odd rank sleeps before all_reduce;
the others wait in it.

Oracle: the job itself. Every rank prints "rank R up" after
init_process_group and "rank R done" after all_reduce; the odd rank is the
one the launcher told to sleep, so the job is hung when every rank is up and
none is done.

mldoctor half: `run --hang-timeout 10 --kill-on-hang` reports RUN002 naming
the odd rank as not where the others wait in a collective, with its Python
line (rank.py:9, the sleep) and theirs (all_reduce at rank.py:11), read from
the ranks' interpreters; lists it first with its pid (the pid the job gave
it), groups the waiting ranks in one line, and the fix names the odd rank,
its line and its pid. DIST019 (the collective wait) says the same in its
message and leads the report, RUN002 as its context, and asks a gloo job for
no NCCL setting.
"""
import os
import re
import shutil
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import PY, expect_finding, gloo_rank_job, run_traced, scenario_env, skip_unless  # noqa: E402

skip_unless("torch")
HANG = 10
t = scratch()
rank_py, launch_py = gloo_rank_job(t)
env = scenario_env()
legs = [("launcher", 2, 1), ("launcher", 4, 2)]
if shutil.which("mpirun"):
    legs.append(("mpirun", 2, 1))
else:
    print("no mpirun: the Open MPI leg skipped")
for launcher, n, odd in legs:
    if launcher == "mpirun":
        # Open MPI's ranks (OMPI_COMM_WORLD_RANK) set torch's variables themselves.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        menv = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1",
                    MASTER_PORT=str(port), ODD_RANK=str(odd))
        cmd = ["mpirun", "--oversubscribe", "-np", str(n), PY, rank_py]
        doc, job = run_traced(cmd, menv, timeout=HANG + 300, extra=["--hang-timeout", str(HANG), "--kill-on-hang"])
    else:
        doc, job = run_traced([PY, launch_py, str(n), str(odd), rank_py], env, timeout=HANG + 300,
                              extra=["--hang-timeout", str(HANG), "--kill-on-hang"])
    up = dict((int(r), int(p)) for r, p in re.findall(r"rank (\d+) up pid (\d+)", job.stdout))
    print("%d ranks: exit %d, up %r" % (n, job.returncode, sorted(up)))
    check(sorted(up) == list(range(n)), "%d ranks: every rank got through init_process_group: %r" % (n, job.stdout))
    check("done" not in job.stdout, "%d ranks: no rank got through all_reduce (the real hang)" % n)
    hang = expect_finding(doc, "RUN002", "%d ranks: the hang" % n)
    if not hang:
        continue
    print("RUN002:", hang["message"])
    waiting = [r for r in range(n) if r != odd]
    names = {2: "rank 0", 4: "ranks 0–1, 3"}[n]
    texts = [e.get("text", "") for e in hang.get("evidence") or [] if isinstance(e, dict)]
    # The Python stacks are read from outside (no ptrace): the odd rank is
    # named with its line, the waiting ones with the collective and theirs.
    check_in("rank %d is not where %s wait%s in a collective" % (odd, names, "s" if n == 2 else ""),
             hang["message"], "%d ranks: the odd rank and the waiting ones are named" % n)
    check_in("rank %d: at rank.py:9 (<module>), main thread in clock_nanosleep" % odd, hang["message"],
             "%d ranks: the odd rank's Python line (time.sleep at rank.py:9)" % n)
    check_in("%s: all_reduce at rank.py:11 (<module>)" % names, hang["message"],
             "%d ranks: the waiting ranks' collective and line" % n)
    check(texts and texts[0].startswith("rank %d (pid %d), main thread: clock_nanosleep" % (odd, up.get(odd, -1))),
          "%d ranks: the odd rank comes first, with the pid the job gave it: %r" % (n, texts[:2]))
    check(len(texts) > 1 and texts[1].startswith("%s (pid %s), main thread:" % (
        names, ", ".join(str(up.get(r, -1)) for r in waiting))),
          "%d ranks: the waiting ranks are one line: %r" % (n, texts[1:2]))
    check(len(texts) > 1 and "all_reduce (torch/distributed/distributed_c10d.py:" in texts[1],
          "%d ranks: they wait in torch.distributed's all_reduce: %r" % (n, texts[1:2]))
    check(any("c10d::Work::wait(" in x for x in texts) or any("no native stacks" in x for x in texts),
          "%d ranks: native frames in c10d::Work::wait (demangled), or the report says why there are none" % n)
    check(any(x.startswith("    Python: <module> (") and "rank.py:9)" in x for x in texts),
          "%d ranks: the odd rank's main thread's Python stack is shown" % n)
    # The same stack signature as a pasted dump (DIST019), from the live
    # frames of each waiting rank: one finding, every waiting rank's frame.
    coll = expect_finding(doc, "DIST019", "%d ranks: the collective wait, from the stack rule logs use" % n)
    if coll:
        ev = " ".join(e.get("text", "") for e in coll.get("evidence") or [] if isinstance(e, dict))
        for r in waiting:
            check_in("[rank%d]:     all_reduce (torch/distributed/distributed_c10d.py:" % r, ev,
                     "%d ranks: DIST019 shows waiting rank %d's frame" % (n, r))
        check("[rank%d]:" % odd not in ev, "%d ranks: not the odd rank's" % n)
        # The collective wait worded with what the sample holds: the odd
        # rank asleep at its line; a gloo job gets no NCCL setting.
        check_in("rank %d is asleep (clock_nanosleep) at rank.py:9 (<module>) while %s wait%s in all_reduce at "
                 "rank.py:11 (<module>)" % (odd, names, "s" if n == 2 else ""), coll.get("message", ""),
                 "%d ranks: DIST019 names the odd rank with its line" % n)
        check("NCCL_DEBUG=INFO" not in coll.get("env_fix", []), "%d ranks: gloo: no NCCL_DEBUG in %r"
              % (n, coll.get("env_fix")))
        incidents = doc.get("incidents") or []
        rules_of = [f.get("rule") for f in doc["findings"]]
        check(bool(incidents) and incidents[0].get("rule") == "DIST019" and
              "RUN002" in [rules_of[i] for i in incidents[0].get("context", [])],
              "%d ranks: DIST019 leads, the hang is its context: %r" % (n, incidents[:1]))
    fix = hang.get("fix", "")
    check_in("look at what rank %d is doing at rank.py:9 (<module>) instead of joining the others in "
             "all_reduce at rank.py:11 (<module>) (pid %d; its whole stack: mldoctor stacks %d)"
             % (odd, up.get(odd, -1), up.get(odd, -1)), fix, "%d ranks: the fix names the odd rank, its line and pid" % n)
finish(os.path.basename(__file__))

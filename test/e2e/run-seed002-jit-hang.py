#!/usr/bin/env python3
# labels: slow scenario
"""Seed 002 under `mldoctor run --hang-timeout`: a stale torch extension
build lock makes load_inline() wait forever, silently.

Setup: TORCH_EXTENSIONS_DIR=T with an empty T/x2/lock (what a SIGKILLed
builder leaves); HOME and cwd are scratch directories so nothing of the
developer's own caches is looked at.

Oracle: the job (load_inline("x2", ...)) is still running when the
watchdog fires (it never gets past torch's FileBaton, which polls
os.path.exists(lock) every 0.1 s).

mldoctor half: `run --hang-timeout 20 --kill-on-hang` reports RUN002 (no
progress, the job waiting for a build lock no process holds, with where its
threads sleep, with their native stacks and the Python stack read from the
interpreter: file_baton's wait under _jit_compile under the script's line),
JIT023 (the same stack signature a pasted py-spy dump matches) and JIT001 whose subject is T/x2/lock, with the fix
`mldoctor jit --fix`, as one incident led by JIT001 (RUN002 and JIT023 its
context); the job is then stopped (SIGTERM) and the report says so. The hang must be reported within the timeout plus the job's start-up.
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import expect_finding, finding_text, run_traced, skip_unless, stale_lock_job  # noqa: E402

skip_unless("torch")
HANG = 20
t = scratch()
argv, env, home, lock = stale_lock_job(t)
os.chdir(home)
start = time.monotonic()
doc, job = run_traced(argv, env, timeout=HANG + 240,
                      extra=["--hang-timeout", str(HANG), "--kill-on-hang"])
took = time.monotonic() - start
print("job: exit %d after %.1f s, stdout %r" % (job.returncode, took, job.stdout))
check_in("loading", job.stdout, "the job got to load_inline")
check("loaded" not in job.stdout, "the job never got past the lock (the real hang)")
check(took < HANG + 120, "the hang was reported and the job stopped in time (%.1f s)" % took)
check(job.returncode != 0, "the job was stopped (status %d)" % job.returncode)
if doc:
    check(doc["status"].get("killed_on_hang") is True, "the report says the job was stopped: %r" % doc["status"])
hang = expect_finding(doc, "RUN002", "the hang")
if hang:
    text = finding_text(hang)
    print("RUN002:", hang["message"])
    check_in("lock that no process holds", hang["message"], "the likely cause is named")
    check(any(w in text for w in ("clock_nanosleep", "nanosleep", "select")),
          "the sample shows the job sleeping between polls:\n" + text)
    check_in("mldoctor jit --fix", hang.get("fix", ""), "the fix")
    check("(libc.so.6)" in text or "no native stacks:" in text,
          "native stacks of the waiting thread, or the reason there are none:\n" + text)
    # The Python stack read from the job's interpreter: FileBaton.wait under
    # _jit_compile under the script's own line (`python -c`: "<string>", line 3).
    py = [l for l in text.splitlines() if "Python: " in l]
    check(any(re.search(r"wait \(torch/utils/file_baton\.py:\d+\) <- _jit_compile \(torch/utils/cpp_extension\.py:\d+\)", l)
              and re.search(r"<- <module> \(<string>:3\)$", l) for l in py),
          "the main thread's Python stack: file_baton wait under _jit_compile under the script's line 3:\n" + "\n".join(py))
stack = expect_finding(doc, "JIT023", "the wait, from the same stack signature as in a pasted dump")
if stack:
    check_in("file_baton.py", finding_text(stack), "JIT023's evidence is the live frame")
stale = expect_finding(doc, "JIT001", "the stale lock")
if stale:
    check(stale["subject"] == lock, "JIT001 names the lock path %s: %r" % (lock, stale["subject"]))
# One cause, one incident: the stale lock leads, the hang and the wait are
# its context.
if doc:
    incidents = doc.get("incidents") or []
    rules_of = [f.get("rule") for f in doc["findings"]]
    check(bool(incidents) and incidents[0].get("rule") == "JIT001",
          "the first incident is the stale lock: %r" % incidents[:1])
    if incidents:
        context = sorted(rules_of[i] for i in incidents[0].get("context", []))
        check(context == ["JIT023", "RUN002"], "the hang and the FileBaton wait are its context: %r" % context)
        check(not any(inc.get("rule") in ("RUN002", "JIT023") for inc in incidents),
              "neither leads an incident of its own: %r" % incidents)
check(os.path.exists(lock), "run never removes anything: the lock is still there")
finish(os.path.basename(__file__))

#!/usr/bin/env python3
# labels: slow scenario
"""Seed 003: importing numba and starting its OpenMP pool resets torch's
intra-op thread count (numba/numba#9387).

Real half (the oracle): Debian's /usr/bin/python3 imports torch, records
torch.get_num_threads(), imports numba, calls numba.get_num_threads() (which
launches the omp layer's pool: omp_set_num_threads(NUMBA_NUM_THREADS) on the
libgomp.so.1 torch shares), and records torch's count again.

mldoctor half: `check --import torch,numba` in the same environment and under
the same CPU affinity. For every case of OMP_NUM_THREADS in {unset, 1} x
NUMBA_NUM_THREADS in {unset, 1} (plus MKL_NUM_THREADS=1, OMP_NUM_THREADS=3,
OMP_NUM_THREADS=2 with MKL_NUM_THREADS=3, and all of it again
under `taskset -c 0` when the machine has more than one CPU):
  * torch's predicted count (python.torch_threads.count) is what the real
    torch started with on this machine;
  * THR002 is present exactly when the real count changed, with "from BEFORE
    to AFTER" in its message;
  * the fix it proposes (env_fix), applied for real, keeps torch's count, and
    check then no longer reports THR002.
The 2 x 2 matrix runs again with other machines' CPU lists and /proc/cpuinfo
presented to both halves through bind mounts (1, 6 and 80 online CPUs from
test/fixtures/cpus), where the real torch then starts with another count.
Nothing here assumes a CPU topology: every expectation is what the real
process did on the machine the test runs on.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_in, finish  # noqa: E402
from scenarios import PY, expect_no_finding, scenario_env, skip_unless  # noqa: E402
from inroot import cpu_list  # noqa: E402

skip_unless("torch", "numba")

SCRIPT = """
import torch; print(torch.get_num_threads())
import numba; numba.get_num_threads(); print(torch.get_num_threads())
print(numba.config.NUMBA_NUM_THREADS); print(numba.threading_layer())
"""


def run(argv, env, prefix, **kw):
    return subprocess.run(prefix + argv, env=env, capture_output=True, text=True, timeout=300, **kw)


def real(env, prefix):
    p = run([PY, "-c", SCRIPT], env, prefix)
    lines = p.stdout.split()
    if not check(p.returncode == 0 and len(lines) == 4,
                 "real run failed (exit %d)\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr)):
        return None
    return int(lines[0]), int(lines[1]), int(lines[2]), lines[3]


def mldoctor_check(env, prefix):
    import json
    p = run([MLDOCTOR, "check", "--python", PY, "--import", "torch,numba", "--json"],
            env, prefix)
    if not check(p.returncode in (0, 1) and p.stdout, "mldoctor check failed (%d): %s" % (p.returncode, p.stderr[-2000:])):
        return None
    return json.loads(p.stdout)


def thr002(doc):
    return [f for f in doc.get("findings", []) if f["rule"] == "THR002"]


affinities = [("", [])]
if len(os.sched_getaffinity(0)) > 1 and shutil.which("taskset"):
    first = min(os.sched_getaffinity(0))
    affinities.append(("taskset -c %d" % first, ["taskset", "-c", str(first)]))
else:
    print("one usable CPU: no affinity variant")

# Other machines' topologies, presented to both halves: a private mount
# namespace bind-mounts a CPU fixture's /sys/devices/system/cpu files and
# /proc/cpuinfo over this machine's, so the real glibc (get_nprocs), the real
# torch and mldoctor all read them. CPUID and the affinity mask stay this
# machine's. Needs CAP_SYS_ADMIN (root); skipped with a line otherwise.
SRC = os.environ.get("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PRESENT = ("sys/devices/system/cpu/online", "sys/devices/system/cpu/possible", "sys/devices/system/cpu/present",
           "sys/devices/system/cpu/kernel_max", "proc/cpuinfo")


def presenting(fixture):
    root = os.path.join(SRC, "test", "fixtures", "cpus", fixture)
    mounts = " && ".join("mount --bind %s /%s" % (os.path.join(root, f), f) for f in PRESENT
                         if os.path.exists(os.path.join(root, f)) and os.path.exists("/" + f))
    prefix = ["unshare", "-m", "sh", "-c", mounts + ' && exec "$@"', "sh"]
    # A real kernel never lets a task's mask hold an offline CPU: where the
    # presented online list is smaller than this machine's, the job runs on
    # the CPUs both have, as it would on that machine.
    with open(os.path.join(root, "sys/devices/system/cpu/online")) as f:
        allowed = sorted(cpu_list(f.read()) & os.sched_getaffinity(0))
    if set(allowed) != os.sched_getaffinity(0) and allowed and shutil.which("taskset"):
        prefix += ["taskset", "-c", ",".join(map(str, allowed))]
    return prefix


probe = subprocess.run(presenting("kvm-qemu64-6vcpu") + ["cat", "/sys/devices/system/cpu/online"],
                       capture_output=True, text=True)
if probe.returncode == 0 and probe.stdout.strip() == "0-5":
    for fixture in ("kvm-intel-1vcpu-nohtt", "kvm-qemu64-6vcpu", "intel-clx-6230-2s-smt"):
        affinities.append(("presenting %s" % fixture, presenting(fixture)))
else:
    print("SKIP presented topologies: no private mount namespace here (%s)" % probe.stderr.strip()[:200])

# The 2 x 2 matrix, then two cases that tell the precedence of torch's
# variables apart (3 is no machine's default here: the count must come from
# the variable, and MKL_NUM_THREADS wins over OMP_NUM_THREADS).
settings = [{}, {"OMP_NUM_THREADS": 1}, {"NUMBA_NUM_THREADS": 1}, {"OMP_NUM_THREADS": 1, "NUMBA_NUM_THREADS": 1},
            {"MKL_NUM_THREADS": 1}, {"OMP_NUM_THREADS": 3}, {"OMP_NUM_THREADS": 2, "MKL_NUM_THREADS": 3}]
changed_cases = 0
for aff_name, prefix in affinities:
    # Presented topologies: the 2 x 2 matrix only.
    for extra in (settings if not aff_name.startswith("presenting") else settings[:4]):
        name = ", ".join("%s=%s" % kv for kv in sorted(extra.items())) or "nothing set"
        if aff_name:
            name += ", " + aff_name
        env = scenario_env(**extra)
        r = real(env, prefix)
        if r is None:
            continue
        before, after, numba_threads, layer = r
        changed = before != after
        changed_cases += changed
        print("real [%s]: torch before=%d after=%d NUMBA_NUM_THREADS=%d layer=%s"
              % (name, before, after, numba_threads, layer))
        doc = mldoctor_check(env, prefix)
        if doc is None:
            continue
        predicted = (doc.get("python", {}).get("torch_threads") or {})
        check(predicted.get("count") == before,
              "[%s] torch's predicted count %r (rule %r, basis %r, unknown %r) is not the real %d"
              % (name, predicted.get("count"), predicted.get("rule"), predicted.get("basis"),
                 predicted.get("unknown"), before))
        check(doc.get("imports", {}).get("numba_layer") == layer,
              "[%s] numba layer predicted %r, real %r" % (name, doc.get("imports", {}).get("numba_layer"), layer))
        found = thr002(doc)
        if not changed:
            check(not found, "[%s] torch's count did not change for real, yet THR002: %s"
                  % (name, found and found[0].get("message")))
            continue
        if not check(found, "[%s] torch's count changed for real (%d -> %d), no THR002; findings: %s"
                     % (name, before, after, [f["rule"] for f in doc.get("findings", [])])):
            continue
        f = found[0]
        check_in("from %d to %d" % (before, after), f.get("message", ""), "[%s] THR002 message" % name)
        # The proposed fix, for real and through check.
        fix = dict(env)
        for setting in f.get("env_fix") or []:
            k, _, v = setting.partition("=")
            fix[k] = v
        check(fix != env, "[%s] THR002 proposes no environment setting" % name)
        fixed = real(fix, prefix)
        if fixed is not None:
            print("real [%s] with %s: torch before=%d after=%d" % (name, " ".join(f.get("env_fix") or []),
                                                                  fixed[0], fixed[1]))
            check(fixed[0] == fixed[1], "[%s] the fix %s does not keep torch's count (%d -> %d)"
                  % (name, f.get("env_fix"), fixed[0], fixed[1]))
        doc = mldoctor_check(fix, prefix)
        if doc is not None:
            expect_no_finding(doc, "THR002", "[%s] with %s set" % (name, f.get("env_fix")))

# The machine decides which cases change; OMP_NUM_THREADS=1 with numba's
# default changes torch's count on any machine with more than one usable CPU.
if len(os.sched_getaffinity(0)) > 1:
    check(changed_cases > 0, "no case changed torch's count on a machine with several CPUs")
finish("scenario-seed003-numba-torch")

#!/usr/bin/env python3
# labels: slow scenario roots
"""torch's default intra-op thread count in every Debian generation (issue 32
item 2c): the real torch.get_num_threads() of a fresh `import torch` (the
oracle) against mldoctor's prediction (check --import torch --json,
python.torch_threads.count) for the same environment, in the bullseye,
trixie and sid test roots (torch 1.7, 2.6, 2.14) and on this machine
(torch 1.13):
  * plain;
  * under `taskset -c` of the first usable CPU;
  * with other machines' CPU lists and /proc/cpuinfo bind-mounted over this
    machine's (test/fixtures/cpus: 1, 6 and 80 online CPUs), as issue 15's
    tests do, the task's mask cut to the CPUs the presented machine has;
  * with the 6-CPU machine's APIC ids 256 apart, plain and under taskset:
    cpuinfo then counts one core per CPU whatever this machine's CPUID says
    of SMT (at most 8 bits everywhere we know), so the rules tell apart:
    torch < 2.2 takes half the online CPUs, 2.4-2.13 cpuinfo's 6 cores, 2.14
    those capped by the affinity mask.
mldoctor runs inside each root (through this machine's ld.so where the
root's glibc is older than the binary needs: lib/inroot.py), so it sees the
root's interpreter and torch with the same /proc, /sys, CPUID and affinity
as the real process. Nothing here assumes a CPU: the expectation is always
what the real torch did. Each case prints the rule mldoctor applied (its
torch version bracket in check/torch-threads.cc) and its basis."""
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import inroot  # noqa: E402
import mldtest  # noqa: E402
import roots  # noqa: E402

SRC = os.environ.get("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MLD = os.path.abspath(shutil.which(mldtest.MLDOCTOR) or mldtest.MLDOCTOR)
HOST_PY = "/usr/bin/python3"
REAL = "import torch; print(torch.__version__); print(torch.get_num_threads())"
FIXTURES = ("kvm-intel-1vcpu-nohtt", "kvm-qemu64-6vcpu", "intel-clx-6230-2s-smt")
SPREAD = "kvm-qemu64-6vcpu"


def spread_cpuinfo(tmp):
    """The 6-CPU fixture's /proc/cpuinfo with each `apicid` line times 256."""
    out = os.path.join(tmp, "cpuinfo-apic-256")
    with open(os.path.join(SRC, "test/fixtures/cpus", SPREAD, "proc/cpuinfo")) as f, open(out, "w") as o:
        for line in f:
            m = re.match(r"(apicid\s*:\s*)(\d+)\s*$", line)
            o.write("%s%d\n" % (m.group(1), int(m.group(2)) * 256) if m else line)
    return out


def presentations(tmp):
    """[(name, binds, cpus for taskset or None)]."""
    first = min(os.sched_getaffinity(0))
    out = [("plain", [], None), ("taskset -c %d" % first, [], [first])]
    for fx in FIXTURES:
        binds, allowed = inroot.presenting(os.path.join(SRC, "test/fixtures/cpus", fx))
        out.append(("presenting %s" % fx, binds,
                    allowed if set(allowed) != os.sched_getaffinity(0) else None))
    binds, allowed = inroot.presenting(os.path.join(SRC, "test/fixtures/cpus", SPREAD), spread_cpuinfo(tmp))
    out.append(("presenting %s, APIC ids 256 apart" % SPREAD, binds,
                allowed if set(allowed) != os.sched_getaffinity(0) else None))
    out.append(("presenting %s, APIC ids 256 apart, taskset -c %d" % (SPREAD, allowed[0]), binds, allowed[:1]))
    return out


def run_case(where, root, pres):
    """(real version, real count, check's JSON or None, problems)."""
    name, binds, cpus = pres
    taskset = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    check_args = ["check", "--import", "torch", "--json"]
    if root is None:
        prefix = inroot.host_prefix(binds, cpus)
        env = {"PATH": roots.PATH, "HOME": "/tmp", "LANG": "C.UTF-8"}
        real = subprocess.run(prefix + [HOST_PY, "-c", REAL], capture_output=True, text=True, env=env, timeout=300)
        pred = subprocess.run(prefix + [MLD] + check_args[:1] + ["--python", HOST_PY] + check_args[1:],
                              capture_output=True, text=True, env=env, timeout=300)
    else:
        real = roots.run(root, taskset + ["python3", "-c", REAL], binds=binds, timeout=300)
        pred = roots.run(root, taskset + inroot.mldoctor_argv(MLD, check_args),
                         binds=list(binds) + inroot.mldoctor_binds(MLD), timeout=300)
    problems = []
    lines = real.stdout.split()
    if real.returncode != 0 or len(lines) != 2:
        problems.append("the real torch failed (exit %d): %s%s" % (real.returncode, real.stdout, real.stderr[-1500:]))
        version, count = None, None
    else:
        version, count = lines[0], int(lines[1])
    doc = None
    if pred.returncode not in (0, 1):
        problems.append("mldoctor check exit %d: %s" % (pred.returncode, pred.stderr[-1500:]))
    else:
        try:
            doc = json.loads(pred.stdout)
        except ValueError:
            problems.append("mldoctor check printed no JSON: %s" % pred.stdout[:500])
    return version, count, doc, problems


def alternatives(doc):
    """What each rule would give with the facts check read (printed only, to
    show which rule the real count tells apart; the oracle is the real torch)."""
    h = doc["host"]
    ci, cpus = h["cpuinfo"], h["cpus"]
    online, aff = cpus.get("online_count"), cpus.get("affinity_count")
    p, c = ci.get("processors"), ci.get("cores")
    r24 = (c if c and p and c < p else p) if ci.get("initialised") and p else online
    return "hc/2=%s 2.2:%s 2.4:%s 2.14:%s" % (online // 2 if online else None, p if p else online, r24,
                                             min(r24, aff) if r24 and aff else r24)


def main():
    envs = [("this machine", None)] + [(s, roots.root(s)) for s in roots.SUITES]
    tmp = mldtest.scratch()
    try:
        pres = presentations(tmp)
        cases = [(w, r, p) for w, r in envs for p in pres]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda c: run_case(*c), cases))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    agree = {}
    for (where, _, (name, _, _)), (version, count, doc, problems) in zip(cases, done):
        tag = "[%s, %s]" % (where, name)
        for p in problems:
            mldtest.fail("%s %s" % (tag, p))
        if problems or doc is None:
            continue
        t = doc.get("python", {}).get("torch_threads") or {}
        print("%s torch %s: real %d, predicted %s; rule: %s; basis: %s%s; %s"
              % (tag, version, count, t.get("count"), t.get("rule"), t.get("basis"),
                 "; unknown: %s" % t["unknown"] if t.get("unknown") else "", alternatives(doc)))
        ok = mldtest.check(t.get("count") == count, "%s torch %s started %d threads, mldoctor predicted %r (rule %r, "
                           "basis %r, unknown %r)" % (tag, version, count, t.get("count"), t.get("rule"),
                                                      t.get("basis"), t.get("unknown")))
        mldtest.check_in("torch " + version, t.get("rule") or "", "%s the rule names the real torch's version" % tag)
        a = agree.setdefault((where, version), [0, 0, set()])
        a[0] += ok
        a[1] += 1
        a[2].add(re.sub(r"^torch \S+ ", "", t.get("rule") or ""))
    for (where, version), (ok, n, rules) in agree.items():
        print("%s: torch %s: %d/%d agree; rule: %s" % (where, version, ok, n, "; ".join(sorted(rules))))
    mldtest.finish("roots-torch-threads")


main()

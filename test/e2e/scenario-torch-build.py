#!/usr/bin/env python3
# labels: slow scenario
"""How `check` recognises the installed torch build, against the real torch.

Debian's torch, and two shadow copies of it (a directory first on PYTHONPATH
whose entries link to the real package, so the real interpreter imports it
from there):
  * as installed: ATen/Config.h says no MKL; the rule is torch < 2.2's, the
    predicted count is what the real torch starts with here, and the text
    report's Threads row says so;
  * without torch/include: the MKL switch comes from the "MKL not found"
    string of libtorch_cpu's .rodata instead, the count is the same;
  * with version.py claiming 2.4.1: the version and libc10 (which exports no
    defaultNumThreads) disagree, so the count is unknown and said to be; with
    numba, THR002 still appears ("not certain") and pins both pools, and that
    fix, applied for real, keeps torch's count through numba's first
    parallel call.
Every count is compared with the real process on the machine the test runs
on."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_in, finish, scratch  # noqa: E402
from scenarios import PY, scenario_env, skip_unless  # noqa: E402

skip_unless("torch", "numba")

REAL = subprocess.run([PY, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                      capture_output=True, text=True, env=scenario_env()).stdout.strip()
COUNTS = """
import torch; print(torch.__file__); print(torch.get_num_threads())
import numba; numba.get_num_threads(); print(torch.get_num_threads())
"""


def shadow(root, drop=(), version=None):
    """root/torch: a link per entry of the real package, minus `drop`; a
    version.py of its own when `version` is given."""
    pkg = os.path.join(root, "torch")
    os.makedirs(pkg)
    for name in os.listdir(REAL):
        if name in drop or (version and name == "version.py"):
            continue
        os.symlink(os.path.join(REAL, name), os.path.join(pkg, name))
    if version:
        with open(os.path.join(REAL, "version.py")) as f:
            text = f.read()
        with open(os.path.join(pkg, "version.py"), "w") as f:
            f.write("\n".join("__version__ = '%s'" % version if line.startswith("__version__") else line
                              for line in text.splitlines()) + "\n")
    return root


def real(env):
    p = subprocess.run([PY, "-c", COUNTS], env=env, capture_output=True, text=True, timeout=300)
    lines = p.stdout.split("\n")
    if not check(p.returncode == 0 and len(lines) >= 3, "real run failed: %s" % p.stderr[-1500:]):
        return None
    return lines[0], int(lines[1]), int(lines[2])


def mldoctor(env, imports, *extra):
    p = subprocess.run([MLDOCTOR, "check", "--python", PY, "--import", imports] + list(extra), env=env,
                       capture_output=True, text=True, timeout=300)
    check(p.returncode in (0, 1), "check failed (%d): %s" % (p.returncode, p.stderr[-1500:]))
    return p.stdout


def torch_threads(env, imports="torch"):
    out = mldoctor(env, imports, "--json")
    try:
        doc = json.loads(out)
    except ValueError:
        check(False, "no JSON from check")
        return {}, []
    return doc.get("python", {}).get("torch_threads") or {}, doc.get("findings", [])


t = scratch()
try:
    # As installed.
    env = scenario_env()
    r = real(env)
    tt, _ = torch_threads(env)
    if r:
        check(tt.get("count") == r[1], "installed: predicted %r, the real torch starts with %d" % (tt, r[1]))
    check_in("before 2.2", tt.get("rule", ""), "installed: the rule of torch < 2.2")
    check_in("Config.h: AT_MKL_ENABLED() 0", " ".join(tt.get("evidence", [])), "installed: MKL from Config.h")
    if r:
        check_in("Threads   torch starts with %d (" % r[1], mldoctor(env, "torch"), "the Threads row")

    # Without torch/include: the binary says there is no MKL.
    env = scenario_env(pythonpath=shadow(os.path.join(t, "noinclude"), drop=("include",)))
    r = real(env)
    if r:
        check(r[0].startswith(t), "the real interpreter imports the shadow torch: %s" % r[0])
    tt, _ = torch_threads(env)
    check_in("MKL not found", " ".join(tt.get("evidence", [])), "no Config.h: MKL from libtorch_cpu's .rodata")
    if r:
        check(tt.get("count") == r[1], "no Config.h: predicted %r, real %d" % (tt, r[1]))

    # A version that contradicts libc10: unknown, said so, and THR002 anyway.
    env = scenario_env(pythonpath=shadow(os.path.join(t, "lying"), version="2.4.1"))
    tt, findings = torch_threads(env, "torch,numba")
    check(tt.get("count") is None, "a version contradicting libc10 gives no count: %r" % tt)
    check_in("disagree", tt.get("unknown") or "", "... and says why")
    thr = [f for f in findings if f["rule"] == "THR002"]
    if check(thr, "torch's count unknown, numba shares libgomp: THR002 all the same; findings %s"
             % [f["rule"] for f in findings]):
        f = thr[0]
        check_in("not certain", f["message"], "THR002 says it is not certain")
        fix = f.get("env_fix") or []
        check(any(s.startswith("OMP_NUM_THREADS=") for s in fix) and any(s.startswith("NUMBA_NUM_THREADS=")
                                                                         for s in fix),
              "the fix pins both pools: %s" % fix)
        fixed = dict(env)
        for s in fix:
            k, _, v = s.partition("=")
            fixed[k] = v
        r = real(fixed)
        if r:
            check(r[1] == r[2], "the pin-both fix %s keeps torch's count for real (%d -> %d)" % (fix, r[1], r[2]))
finally:
    shutil.rmtree(t, ignore_errors=True)
finish("scenario-torch-build")

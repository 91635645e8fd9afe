#!/usr/bin/env python3
# labels: slow scenario
"""Issue 20's snapshot round trip: a snapshot carries the Python side, so
`check --root SNAP` on the unpacked archive reproduces the findings `check`
made on this machine — here a TLS finding and an OpenMP finding — with the
environment itself gone.

Fixture, from real ELF files (test/e2e/lib): a `--system-site-packages` venv
V (Debian's torch) with the wheel-shaped `pkg` whose module vendors a renamed
GNU OpenMP copy (OMP001 beside torch's libgomp), and eight extension modules
with 400 bytes of initial-exec TLS each (seed 001's TLS001 after torch).

1. `check --python V/bin/python --import torch,pkg,tlsmod1..8 --json` live:
   OMP001 and TLS001 among its findings (so the round trip has both).
2. `snapshot OUT --python V/bin/python --import …` with a secret in the
   environment; the archive keeps the libraries as the ranges read of them
   (GNU sparse members: the largest object's stored bytes are a small part
   of its size), the probe's answer, the dist-info metadata.
3. V is moved away, the archive unpacked twice — by GNU tar and by Python's
   tarfile — and `check --root R --python V/bin/python --import … --json` run
   on each: findings (rule, severity, message, evidence), the replay's steps,
   objects and OpenMP runtimes and the interpreter facts equal the live ones
   (paths compared inside the root).
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, finish, scratch  # noqa: E402
from scenarios import build_tls_modules, scenario_env, skip_unless  # noqa: E402
from wheels import GOMP, pip_torch_venv  # noqa: E402

skip_unless("torch", tools=("patchelf", "readelf", GOMP))

t = scratch()
fx = pip_torch_venv(t)
build_tls_modules(fx["site"], 8)
IMPORTS = ",".join(["torch", "pkg"] + ["tlsmod%d" % k for k in range(1, 9)])
env = scenario_env(OMP_NUM_THREADS=3, HF_TOKEN="hf_roundtripsecret0123456789")
python = fx["python"]


def check_json(*args):
    p = subprocess.run([MLDOCTOR, "check", "--python", python, "--import", IMPORTS, "--json"]
                       + list(args), env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode in (0, 1), "check %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    try:
        return json.loads(p.stdout)
    except ValueError:
        check(False, "check %s printed no JSON: %s" % (" ".join(args), p.stdout[-500:]))
        return {}


def findings(doc):
    return sorted((f.get("rule"), f.get("severity"), f.get("message"), json.dumps(f.get("evidence"), sort_keys=True))
                  for f in doc.get("findings", []))


def replay(doc):
    imports = doc.get("imports") or {}
    steps = [(s.get("path"), s.get("ok"), s.get("failure")) for s in imports.get("steps") or []]
    objects = sorted(o.get("path") for o in imports.get("objects") or [])
    runtimes = json.dumps(imports.get("openmp_runtimes"), sort_keys=True)
    return steps, objects, runtimes


def python_facts(doc):
    p = doc.get("python") or {}
    return {k: p.get(k) for k in ("version", "executable", "prefix", "sys_path")}


live = check_json()
rules = {f["rule"] for f in live.get("findings", [])}
check("OMP001" in rules and "TLS001" in rules,
      "the live check has an OpenMP and a TLS finding: %s" % sorted(rules))

out = os.path.join(t, "snap.tar.gz")
p = subprocess.run([MLDOCTOR, "snapshot", out, "--python", python, "--import", IMPORTS],
                   env=env, capture_output=True, text=True, timeout=300)
check_eq(p.returncode, 0, "snapshot exit status: " + p.stderr)
print(p.stdout.strip())

with tarfile.open(out) as tar:
    members = tar.getmembers()
    names = {m.name for m in members}
    blob = b"".join(tar.extractfile(m).read() for m in members if m.isfile() and m.size < (1 << 20))
    sparse = [m for m in members if m.issparse()]
    check(sparse, "libraries are kept as the ranges read of them (sparse members)")
    biggest = max(sparse, key=lambda m: m.size)
    stored = sum(n for _, n in biggest.sparse)
    print("largest object: %s, %d of %d bytes kept (%.2f %%)"
          % (biggest.name, stored, biggest.size, 100.0 * stored / biggest.size))
    check(stored < biggest.size // 10, "%s is not copied whole: %d of %d bytes"
          % (biggest.name, stored, biggest.size))
    probe = ".mldoctor/python-probe" + python
    check(probe in names, "the probe's answer is in the archive (%s)" % probe)
    check(any(n.endswith("pkg-1.0.dist-info/RECORD") for n in names), "pkg's RECORD is in the archive")
    check(b"hf_roundtripsecret0123456789" not in blob, "the secret's value is not in the archive")

# Nothing of the environment is left to read.
os.rename(fx["root"], fx["root"] + ".gone")
for how in ("tar", "tarfile"):
    root = os.path.join(t, "root-" + how)
    os.makedirs(root)
    if how == "tar":
        subprocess.run(["tar", "-xzf", out, "-C", root], check=True)
    else:
        with tarfile.open(out) as tar:
            tar.extractall(root)
    snap = check_json("--root", root)
    check_eq(findings(snap), findings(live), "findings of check --root (unpacked by %s)" % how)
    check_eq(replay(snap), replay(live), "the replay's steps, objects and runtimes (%s)" % how)
    check_eq(python_facts(snap), python_facts(live), "the interpreter's facts (%s)" % how)
    check_eq(sorted(f["rule"] for f in snap.get("findings", [])), sorted(f["rule"] for f in live["findings"]),
             "rules (%s)" % how)

shutil.rmtree(t, ignore_errors=True)
finish("snapshot-python-roundtrip")

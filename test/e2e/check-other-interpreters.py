#!/usr/bin/env python3
"""Which interpreter (issue 20, item 5): `check` of an interpreter that has
none of the known native packages lists the machine's other interpreters that
have them, and each real interpreter is the oracle for what is said of it.

- A venv without system site packages (`/usr/bin/python3 -m venv
  --without-pip`) is checked with HOME set to a scratch home that holds two
  virtualenvs: one with system site packages, one with a hand-made
  distribution "numpy" 0.0.0 (a dist-info and a package: the same on every
  machine). PATH is /usr/bin:/bin, so /usr/bin/python3 is found too.
- For every interpreter listed, the real interpreter agrees: each package
  named is found by importlib.util.find_spec, its distribution is the one
  importlib.metadata.packages_distributions() gives for the import name (none
  for a package without metadata, like Debian's cv2), its version
  importlib.metadata's. And nothing is left out: every known package the
  interpreter can import is listed, and an interpreter that can import none
  of them is not listed (on a machine whose /usr/bin/python3 has no torch,
  that is what is asserted).
- The checked venv is not listed; two paths of one environment
  (/usr/bin/python3, /usr/bin/python3.11) are listed once; the summary is
  not a bare "✓ no findings"; the pointer at torch names an interpreter
  that has it.
- A venv that has a package is not surveyed when it is the one checked (no
  other interpreters in the text or the JSON).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

PYTHON = "/usr/bin/python3"
# pyenv::known_packages() (src/pyenv/packages.cc): the import names asked of
# each real interpreter. A name the report gives that is not here fails below.
KNOWN = ["torch", "numpy", "scipy", "sklearn", "cv2", "numba", "llvmlite", "tensorflow", "jax",
         "jaxlib", "mkl", "faiss", "deepspeed", "triton", "nvidia"]

# Run by each interpreter: the known packages it can import (found, never
# imported), their distributions and versions as importlib.metadata says.
ORACLE = r"""
import importlib.util, importlib.metadata as m, json, sys
names = json.loads(sys.argv[1])
owners = m.packages_distributions()
out = {}
for n in names:
    try:
        spec = importlib.util.find_spec(n)
    except Exception:
        spec = None
    if spec is None:
        continue
    dists = owners.get(n, [])
    out[n] = {"distributions": dists, "versions": {d: m.version(d) for d in dists}}
print(json.dumps(out))
"""

d = scratch()
home = os.path.join(d, "home")
envs = os.path.join(home, ".virtualenvs")
os.makedirs(envs)
env = {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"}


def make_venv(path, system_site=False):
    cmd = [PYTHON, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if system_site else []) + [path]
    subprocess.run(cmd, env=env, check=True)
    return os.path.join(path, "bin", "python")


def oracle(python):
    p = subprocess.run([python, "-c", ORACLE, json.dumps(KNOWN)], env=env, capture_output=True, text=True,
                       timeout=120)
    check_eq(p.returncode, 0, "the oracle ran in %s: %s" % (python, p.stderr[-400:]))
    return json.loads(p.stdout) if p.returncode == 0 else {}


def run_check(*args):
    p = subprocess.run([MLDOCTOR, "check", "--no-color"] + list(args), env=env, capture_output=True, text=True,
                       timeout=300)
    check(p.returncode in (0, 1), "check %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p


bare = make_venv(os.path.join(d, "bare"))
syssite = make_venv(os.path.join(envs, "syssite"), system_site=True)
fake = make_venv(os.path.join(envs, "fake"))
xy = "%d.%d" % sys.version_info[:2]
site = os.path.join(envs, "fake", "lib", "python" + xy, "site-packages")
os.makedirs(os.path.join(site, "numpy"))
os.makedirs(os.path.join(site, "numpy-0.0.0.dist-info"))
with open(os.path.join(site, "numpy", "__init__.py"), "w") as f:
    f.write("__version__ = '0.0.0'\n")
with open(os.path.join(site, "numpy-0.0.0.dist-info", "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.0\n")
with open(os.path.join(site, "numpy-0.0.0.dist-info", "top_level.txt"), "w") as f:
    f.write("numpy\n")

check_eq(oracle(bare), {}, "the bare venv can import none of the known packages")

# The check of the bare venv, as JSON and as text.
doc = json.loads(run_check("--python", bare, "--json").stdout or "{}")
py = doc.get("python", {})
check("other_interpreters" in py, "the bare venv's check surveys the other interpreters: %s" % sorted(py))
listed = py.get("other_interpreters", [])
by_path = {o["path"]: o for o in listed}
check(bare not in by_path, "the checked venv is not listed")
print("listed: %s" % ", ".join("%s (%s)" % (o["path"], o["kind"]) for o in listed))

# Each listed interpreter against itself.
seen_envs = set()
for o in listed:
    key = (os.path.realpath(o["prefix"]), o["version"])
    check(key not in seen_envs, "one entry per environment: %s repeats %s" % (o["path"], key))
    seen_envs.add(key)
    names = [p["name"] for p in o["packages"]]
    for n in names:
        check(n in KNOWN, "%s: %s is a known package (update KNOWN in this test)" % (o["path"], n))
    real = oracle(o["path"])
    check_eq(sorted(names), sorted(real), "%s: the known packages it can import" % o["path"])
    for p in o["packages"]:
        r = real.get(p["name"])
        if r is None:
            continue
        if p["distribution"] is None:
            check_eq(r["distributions"], [], "%s: %s has no distribution" % (o["path"], p["name"]))
            continue
        check_in(p["distribution"], r["distributions"], "%s: %s's distribution" % (o["path"], p["name"]))
        check_eq(p["version"], r["versions"].get(p["distribution"]),
                 "%s: %s %s's version" % (o["path"], p["name"], p["distribution"]))
    check_eq(o["command"], "mldoctor check --python " + o["path"], "%s: the command that checks it" % o["path"])

# The places of this test: what each real interpreter can import decides
# whether it is listed.
system = [o for o in listed if o["kind"] == "system" and os.path.realpath(o["prefix"]) == "/usr"]
system_real = oracle(PYTHON)
if system_real:
    check_eq(len(system), 1, "/usr/bin/python3 (it can import %s) is listed once" % ", ".join(sorted(system_real)))
else:
    check_eq(system, [], "/usr/bin/python3 can import no known package and is not listed")
syssite_real = oracle(syssite)
check_eq(syssite in by_path, bool(syssite_real), "the system-site venv is listed when it can import one")
check(fake in by_path, "the venv with the hand-made numpy is listed")
if fake in by_path:
    check_eq(by_path[fake]["kind"], "virtualenv", "its kind")
    check_eq(by_path[fake]["packages"], [{"name": "numpy", "distribution": "numpy", "version": "0.0.0"}],
             "its package, as its interpreter says (checked above)")

# The text: the list, the commands, and no bare "✓ no findings".
p = run_check("--python", bare)
out = p.stdout
check_in("Packages  none of the known native packages; other interpreters here have them:", out, "the text")
for o in listed:
    check_in("          %s (%s, %s): " % (o["path"], o["kind"], o["version"]), out, "the text lists " + o["path"])
    check_in("            mldoctor check --python %s\n" % o["path"], out, "the text's command for " + o["path"])
check("\n✓ no findings\n" not in out, "not a bare '✓ no findings':\n" + out)
best = listed[0] if listed else None
if best:
    what = "torch" if any(x["name"] == "torch" for x in best["packages"]) else \
        ", ".join(x["name"] for x in best["packages"][:3])
    pointer = "for %s: mldoctor check --python %s" % (what, best["path"])
    check_in(pointer, out, "the summary points at the best interpreter")
    if p.returncode == 0:
        check_in("✓ no findings (%s, which has none of the known native packages) · %s" % (bare, pointer), out,
                 "no findings, for which interpreter")
    if any("torch" in oracle(o["path"]) for o in listed):
        check_eq(what, "torch", "an interpreter with torch is preferred")

# A venv with a package, checked itself: no survey.
for venv, has in ((fake, True), (syssite, bool(syssite_real))):
    doc = json.loads(run_check("--python", venv, "--json").stdout or "{}")
    check_eq("other_interpreters" in doc.get("python", {}), not has,
             "%s (%s): surveyed only without known packages" % (venv, "has one" if has else "has none"))
    text = run_check("--python", venv).stdout
    check_eq("other interpreters here have them" in text, not has, "%s: the text agrees" % venv)

finish("check-other-interpreters")

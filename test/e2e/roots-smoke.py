#!/usr/bin/env python3
# labels: slow
"""The Debian test roots (scripts/make-test-roots.sh) are usable: in each of
bullseye, trixie and sid the root's own python3 imports torch, numpy, numba,
scikit-learn, OpenCV, scipy and threadpoolctl, and each module's version is
the one the root's dpkg database records (read from the root, never written
here). The built mldoctor runs `check --json` inside every root whose glibc
has the symbol versions the binary needs, and reads that root's interpreter
and packages; in a root whose glibc is older (bullseye's 2.31, the binary
needs 2.34; `make portable`'s binary runs there) it fails with the loader's own message naming the missing version
(for `make test-sanitize`'s build, the GCC 12 libasan.so.8 bullseye lacks), not
with a crash; trixie's and sid's libasan.so.8 run that build. A root that is not there FAILS this test with what could not
be made. Commands in one root side by side see their own /tmp and leave no
mount behind."""
import concurrent.futures
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

MODULES = {"torch": "python3-torch", "numpy": "python3-numpy", "numba": "python3-numba",
           "sklearn": "python3-sklearn", "cv2": "python3-opencv", "scipy": "python3-scipy",
           "threadpoolctl": "python3-threadpoolctl"}
PROBE = r"""
import importlib, json, sys
out = {"python": "%d.%d.%d" % sys.version_info[:3]}
for m in MODULES:
    try:
        out[m] = importlib.import_module(m).__version__
    except Exception as e:
        out[m] = "ERROR %s: %s" % (type(e).__name__, e)
import importlib.metadata
for d in DISTRIBUTIONS:
    try:
        out["dist " + d] = importlib.metadata.version(d)
    except importlib.metadata.PackageNotFoundError:
        out["dist " + d] = None
print(json.dumps(out))
""".replace("MODULES", repr(list(MODULES))).replace("DISTRIBUTIONS", repr(["numpy", "numba", "scikit-learn", "threadpoolctl"]))


def upstream(debian_version):
    """The upstream part of a Debian version: no epoch, no revision, no
    repack suffix (+dfsg, +ds, ~rc)."""
    v = re.sub(r"^\d+:", "", debian_version)
    if "-" in v:
        v = v.rsplit("-", 1)[0]
    return re.split(r"[+~]", v)[0]


def public(module_version):
    """A module's version without a local part (+cpu, +git...)."""
    return module_version.split("+")[0]


def vtuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def glibc_needs(binary):
    """The GLIBC_x.y[.z] versions the binary's version needs name."""
    out = subprocess.run(["readelf", "--version-info", "--wide", binary],
                         capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(r"Name: (GLIBC_\d+\.\d+(?:\.\d+)?)\s", out)), key=lambda s: vtuple(s[6:]))


def needed_libs(binary):
    out = subprocess.run(["readelf", "-d", "--wide", binary], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", out)


def smoke(suite, mld, needs):
    why = roots.problem(suite)
    if why:
        mldtest.fail(why)
        return
    root = os.path.join(roots.cache(), suite)
    dpkg = roots.versions(root)

    p = roots.run(root, ["python3", "-c", PROBE], timeout=600)
    if not mldtest.check(p.returncode == 0, "%s: python3 probe exit %d\n%s%s"
                         % (suite, p.returncode, p.stdout, p.stderr)):
        return
    got = json.loads(p.stdout.strip().splitlines()[-1])
    print("%s: %s" % (suite, " ".join("%s %s" % kv for kv in got.items() if not kv[0].startswith("dist "))))
    minor = "python3.%d" % vtuple(got["python"])[1]
    mldtest.check(minor in dpkg, "%s: dpkg of the root has no %s for Python %s" % (suite, minor, got["python"]))
    if minor in dpkg:
        mldtest.check_eq(got["python"], upstream(dpkg[minor]), "%s: Python's version vs dpkg's %s %s"
                         % (suite, minor, dpkg[minor]))
    for mod, pkg in MODULES.items():
        if not mldtest.check(not got[mod].startswith("ERROR"), "%s: import %s: %s" % (suite, mod, got[mod])):
            continue
        want = upstream(dpkg.get(pkg, "?"))
        if mod == "torch" and re.fullmatch(r"\d+\.\d+\.0a0", public(got[mod])) \
                and vtuple(got[mod]) == vtuple(want):
            # A torch built from its source tarball without PYTORCH_BUILD_VERSION
            # reports the release branch's version.txt, X.Y.0a0 (Debian 11's
            # 1.7.1 says 1.7.0a0, Debian 12's 1.13.1 1.13.0a0): same release.
            print("%s: torch says %s, dpkg %s: a source build's version.txt" % (suite, got[mod], dpkg[pkg]))
            mldtest.check(True, "")
            continue
        mldtest.check_eq(public(got[mod]), want,
                         "%s: %s.__version__ %s vs dpkg's %s %s" % (suite, mod, got[mod], pkg, dpkg.get(pkg)))

    # mldoctor inside the root: it runs where the root's glibc provides every
    # version it needs, and otherwise the loader refuses it by name.
    glibc = upstream(dpkg["libc6"])
    missing = [n for n in needs if vtuple(n[6:]) > vtuple(glibc)]
    p = roots.run(root, ["/tmp/mld/mldoctor", "check", "--json"], binds=[(mld, "/tmp/mld/mldoctor", "ro")],
                  timeout=600)
    # A sanitizer build also needs its runtime (libasan.so.8 of GCC 12): a
    # root without that soname stops the loader before it checks versions.
    absent = [n for n in needed_libs(mld)
              if not any(os.path.exists(os.path.join(root, d, n))
                         for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib", "lib"))]
    if missing and absent:
        mldtest.check(0 < p.returncode < 128 and any(
            "error while loading shared libraries: %s: cannot open shared object file" % n in p.stderr
            for n in absent),
                      "%s: mldoctor needs %s, which the root lacks: the loader should say so; exit %d, "
                      "stderr:\n%s" % (suite, ", ".join(absent), p.returncode, p.stderr))
        print("%s: lacks %s: %s" % (suite, ", ".join(absent), p.stderr.strip()))
        return
    if missing:
        unnamed = [n for n in missing if "version `%s' not found" % n not in p.stderr]
        mldtest.check(0 < p.returncode < 128 and not unnamed,
                      "%s (glibc %s): mldoctor, which needs %s, should be refused by the loader "
                      "(an exit status, not a signal; \"version `GLIBC_...' not found\" for each); "
                      "exit %d, stderr:\n%s" % (suite, glibc, ", ".join(missing), p.returncode, p.stderr))
        print("%s: glibc %s lacks %s: %s" % (suite, glibc, ", ".join(missing), p.stderr.strip()))
        return
    if not mldtest.check(p.returncode in (0, 1), "%s: mldoctor check --json exit %d\n%s"
                         % (suite, p.returncode, p.stderr)):
        return
    doc = json.loads(p.stdout)
    py = doc["python"]
    mldtest.check_eq(py["version"], got["python"], "%s: check's Python version" % suite)
    mldtest.check(py["executable"].startswith("/usr/bin/python3"),
                  "%s: check chose %s, not the root's /usr/bin/python3" % (suite, py["executable"]))
    dists = {d["name"].lower().replace("_", "-"): d["version"] for d in py["distributions"]}
    for name, mod in (("numpy", "numpy"), ("numba", "numba"), ("scikit-learn", "sklearn"),
                      ("threadpoolctl", "threadpoolctl")):
        # The oracle is the interpreter's own view of its distributions
        # (importlib.metadata): Debian 11 ships threadpoolctl 2.1.0 as a bare
        # module without metadata, which no tool can list as a distribution.
        mldtest.check_eq(dists.get(name), got["dist " + name],
                         "%s: check's version of %s vs importlib.metadata's" % (suite, name))
        if got["dist " + name] is not None:
            mldtest.check_eq(got["dist " + name], got[mod], "%s: %s's metadata vs %s.__version__"
                             % (suite, name, mod))
        else:
            print("%s: %s %s has no distribution metadata (importlib.metadata finds none)"
                  % (suite, mod, got[mod]))
    print("%s: mldoctor check: Python %s at %s, %d distributions, %d findings"
          % (suite, py["version"], py["executable"], len(dists), len(doc["findings"])))


def mounts_under(path):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if (line.split()[4] + "/").startswith(path.rstrip("/") + "/")]


def parallel(suite):
    """Commands run side by side in one root each see their own /tmp, and
    leave no mount behind."""
    if roots.problem(suite):
        return
    root = os.path.join(roots.cache(), suite)
    code = "import os, time; open('/tmp/mine-%d', 'w').close(); time.sleep(1); print(sorted(os.listdir('/tmp')))"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda i: roots.run(root, ["python3", "-c", code % i], timeout=300), range(4)))
    for i, p in enumerate(done):
        mldtest.check_eq((p.returncode, p.stdout.strip()), (0, "['mine-%d']" % i),
                         "%s: command %d of 4 in parallel: its own /tmp (stderr: %s)" % (suite, i, p.stderr))
    mldtest.check_eq(mounts_under(roots.cache()), [], "mounts left under %s" % roots.cache())


def main():
    mld = os.path.abspath(mldtest.MLDOCTOR)
    needs = glibc_needs(mld)
    for suite in roots.SUITES:
        smoke(suite, mld, needs)
    parallel("trixie")
    mldtest.finish("roots-smoke")


main()

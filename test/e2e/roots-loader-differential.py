#!/usr/bin/env python3
# labels: slow scenario roots
"""The loader model against each Debian generation's own ld.so (issue 32, 2a).

For bullseye (glibc 2.31), trixie (2.41) and sid (2.43): every native object
(extension modules and the libraries beside them, symlinks included) of
torch, OpenCV's cv2, numpy, scipy, numba, llvmlite and scikit-learn in the
root. The oracle is the root's own loader run inside the root
(`LD_TRACE_LOADED_OBJECTS=1 /lib64/ld-linux-x86-64.so.2 FILE`, what `ldd` and
`ld.so --list` do): every object it loads, its path and the load order, its
version complaints and whether it fails. The model is `mldoctor libs --root
ROOT --glibc X.Y --json FILE...` run from outside (the binary needs glibc
2.34, so it cannot run in bullseye), X.Y being the root's libc6 version read
from its dpkg database; without --glibc the model must detect that release
itself. Each root is compared twice: with no LD_LIBRARY_PATH, and with one
made of the root's own directories: lapack/ and blas/ (the reference builds
that Debian's alternatives otherwise reach through ld.so.cache), a missing
directory, an empty element (the working directory), LLVM's lib directory and
/usr/lib/x86_64-linux-gnu itself (every system library then resolves there
rather than to the cache's /lib/x86_64-linux-gnu path). The second
environment must change at least one resolution per root, or it would test
nothing new.

Every file is compared; a root with fewer than 100 objects fails (the test
would prove nothing). Figures: agreements/total per root and environment.
"""
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

PACKAGES = ("torch", "numpy", "scipy", "numba", "llvmlite", "sklearn")
DIST = "/usr/lib/python3/dist-packages"
BATCH = 150

# mldtest's counters are thread-safe: the roots run side by side.
check, check_eq, fail = mldtest.check, mldtest.check_eq, mldtest.fail


# Runs inside the root: the root's loader in trace mode on each file named on
# stdin, in the environment given as JSON on the first line.
PROBE = r'''
import json, os, subprocess, sys
lines = sys.stdin.read().split("\n")
env = json.loads(lines[0])
env["PATH"] = os.environ["PATH"]
env["LD_TRACE_LOADED_OBJECTS"] = "1"
out = {}
for f in lines[1:]:
    if f:
        p = subprocess.run(["/lib64/ld-linux-x86-64.so.2", f], env=env, capture_output=True, cwd="/tmp")
        out[f] = [p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")]
print(json.dumps(out))
'''


def native_objects(root):
    """Paths (inside the root) of the packages' shared objects: regular files
    and symlinks to files ($ORIGIN is the symlink's directory), sorted."""
    files = []
    dirs = [os.path.join(root, DIST.lstrip("/"), p) for p in PACKAGES]
    for top in dirs:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if re.search(r"\.so(\.|$)", name) and os.path.isfile(path):
                    files.append(path)
    files += sorted(glob.glob(os.path.join(root, DIST.lstrip("/"), "cv2*.so")))
    files += sorted(glob.glob(os.path.join(root, DIST.lstrip("/"), "cv2", "**", "*.so"), recursive=True))
    return ["/" + os.path.relpath(f, root) for f in files]


def real(root, files, env):
    p = roots.run(root, ["python3", "-c", PROBE], input=json.dumps(env) + "\n" + "\n".join(files),
                  timeout=900)
    if p.returncode != 0:
        raise RuntimeError("the probe in %s failed (exit %d): %s" % (root, p.returncode, p.stderr[-2000:]))
    out = {}
    for f, (rc, stdout, stderr) in json.loads(p.stdout).items():
        versions = sorted(line[len(f) + 2:].strip() for line in stderr.splitlines()
                          if line.startswith(f + ": ") and ("version `" in line or "version information" in line))
        fatal = (stderr.strip().splitlines() or ["exit %d" % rc])[-1] if rc != 0 else None
        out[f] = {"objects": mldtest.parse_trace(stdout), "versions": versions, "fatal": fatal, "rc": rc}
    return out


def model(root, files, env, glibc):
    result, loaders = {}, []
    for i in range(0, len(files), BATCH):
        argv = [mldtest.MLDOCTOR, "libs", "--root", root, "--json"] + (["--glibc", glibc] if glibc else []) \
            + files[i:i + BATCH]
        p = subprocess.run(argv, env=mldtest.clean_env(**env), capture_output=True, text=True, timeout=600)
        if p.returncode not in (0, 1) or not p.stdout:
            raise RuntimeError("%s: exit %d: %s" % (" ".join(argv[:6]), p.returncode, p.stderr[-2000:]))
        doc = json.loads(p.stdout)
        loaders += doc["loaders"]
        for inp in doc["inputs"]:
            if "objects" not in inp:
                result[inp["path"]] = {"objects": [], "versions": [], "fatal": inp.get("error")}
                continue
            result[inp["path"]] = {"objects": [(o["name"], o["path"]) for o in inp["objects"][1:]],
                                   "versions": sorted(v["message"] for v in inp["version_problems"]),
                                   "fatal": (inp["errors"] or [None])[0]}
    return result, loaders


def compare(suite, root, files, env, glibc):
    """(agreements, total, [disagreement text], the real result)."""
    r = real(root, files, env)
    m, _ = model(root, files, env, glibc)
    bad = []
    for f in files:
        a, b = r.get(f), m.get(f)
        if a is None or b is None:
            bad.append("%s: no %s output" % (f, "real" if a is None else "model"))
        elif bool(a["fatal"]) != bool(b["fatal"]):
            bad.append("%s: ld.so %s, the model %s" % (f, a["fatal"] or "loads it", b["fatal"] or "loads it"))
        elif a["fatal"]:
            continue
        elif a["objects"] != b["objects"]:
            first = next(i for i, (x, y) in enumerate(zip(a["objects"] + [None] * 999, b["objects"] + [None] * 999))
                         if x != y)
            bad.append("%s: objects differ at %d:\n    ld.so: %s\n    model: %s"
                       % (f, first, a["objects"][first:first + 4], b["objects"][first:first + 4]))
        elif a["versions"] != b["versions"]:
            bad.append("%s: version problems differ:\n    ld.so: %s\n    model: %s" % (f, a["versions"], b["versions"]))
    return len(files) - len(bad), len(files), bad, r


def one_root(suite):
    why = roots.problem(suite)
    if why:
        fail(why)
        return []
    root = os.path.join(roots.cache(), suite)
    glibc = ".".join(re.match(r"(\d+)\.(\d+)", roots.versions(root, ["libc6"])["libc6"]).groups())
    files = native_objects(root)
    counts = {p: sum(1 for f in files if "/%s/" % p in f or os.path.basename(f).startswith(p))
              for p in PACKAGES + ("cv2",)}
    check(len(files) >= 100 and all(counts.values()),
          "%s: too few native objects to compare (%d; per package %s)" % (suite, len(files), counts))

    # The release the model detects from the root by itself.
    _, loaders = model(root, files[:1], {}, None)
    check([lo["glibc"] for lo in loaders] == [glibc],
          "%s: the model detects glibc %s, the root's libc6 is %s" % (suite, [lo["glibc"] for lo in loaders], glibc))

    llvm = sorted(glob.glob(os.path.join(root, "usr/lib/llvm-*/lib")))
    lib = "/usr/lib/x86_64-linux-gnu"
    llp = ":".join([lib + "/lapack", "/nonexistent", "", lib + "/blas"]
                   + ["/" + os.path.relpath(d, root) for d in llvm[-1:]] + [lib])
    lines, seen = [], []
    for name, env in (("no LD_LIBRARY_PATH", {}), ("LD_LIBRARY_PATH", {"LD_LIBRARY_PATH": llp})):
        try:
            ok, total, bad, r = compare(suite, root, files, env, glibc)
        except RuntimeError as e:
            check(False, "%s: %s" % (suite, e))
            continue
        seen.append(r)
        lines.append("%-8s glibc %s  %-18s %4d/%d objects agree with ld.so" % (suite, glibc, name, ok, total))
        for b in bad[:10]:
            check(False, "%s (glibc %s, %s): %s" % (suite, glibc, name, b))
        check(not bad, "%s: %d of %d objects disagree with the root's ld.so" % (suite, len(bad), total))
    if len(seen) == 2:
        moved = sum(1 for f in files if seen[0][f]["objects"] != seen[1][f]["objects"])
        check(moved > 0, "%s: LD_LIBRARY_PATH=%s changes no resolution of the real loader" % (suite, llp))
        lines.append("%-8s LD_LIBRARY_PATH=%s changes what %d of %d objects load" % (suite, llp, moved, len(files)))
    return lines


def main():
    with concurrent.futures.ThreadPoolExecutor(len(roots.SUITES)) as pool:
        for lines in pool.map(one_root, roots.SUITES):
            for line in lines:
                print(line)
    mldtest.finish("roots-loader-differential")


main()

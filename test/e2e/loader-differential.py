#!/usr/bin/env python3
"""Loader differential test: the model against the real ld.so.

For every ELF executable and shared object under /usr/lib/x86_64-linux-gnu,
/usr/bin and the system Python's dist-packages, compares the objects that
`mldoctor libs --json` predicts (name, resolved path or "not found", in load
order) with what the real loader prints for `ld.so --list FILE`, once with no
LD_LIBRARY_PATH and once with a non-trivial one that shadows system libraries
(plain copies, a glibc-hwcaps subdirectory, files of the wrong ELF class and
machine, a missing directory and an empty element). Every file is compared or
listed as excluded with its reason; any disagreement fails the test.

Environment: MLDOCTOR (the binary). Optional: MLD_DIFF_LIMIT (check only the
first N files, for quick runs), MLD_DIFF_REPORT (write a JSON summary there).
"""
import concurrent.futures
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import ldso_trace, parse_trace  # noqa: E402

ROOTS = ["/usr/lib/x86_64-linux-gnu", "/usr/bin", "/usr/lib/python3/dist-packages"]
MLDOCTOR = os.environ.get("MLDOCTOR", "mldoctor")
BATCH = 150


def elf_kind(path):
    """(ok, reason) for a file: ok when the x86_64 ld.so can list it."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF":
                return None
            if head[4] != 2 or head[5] != 1:
                return (False, "not ELFCLASS64 little-endian: another architecture's loader")
            e_type, e_machine = struct.unpack_from("<HH", head, 16)
            if e_machine != 62:
                return (False, "not x86-64: another architecture's loader")
            if e_type not in (2, 3):
                return None  # relocatable objects and core files are not loadable at all
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
            types = [struct.unpack_from("<I", ph, i * phentsize)[0] for i in range(phnum)
                     if len(ph) >= (i + 1) * phentsize]
            if 2 not in types:
                return (False, "no PT_DYNAMIC: statically linked, ld.so --list has nothing to list")
            if 3 not in types and e_type == 2:
                return (False, "ET_EXEC without PT_INTERP")
            return (True, "")
    except OSError as e:
        return (False, "unreadable: %s" % e.strerror)


def collect():
    files, excluded = [], {}
    seen = set()
    for root in ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                st = os.stat(path)
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                k = elf_kind(path)
                if k is None:
                    continue
                if k[0]:
                    files.append(path)
                else:
                    excluded[path] = k[1]
    return files, excluded


def run_ldso(path, env, cwd):
    rc, out, err = ldso_trace(path, env, cwd)
    objs, versions = parse_trace(out), []
    # In trace mode version problems go to stderr as "<main>: <text>".
    for line in err.splitlines():
        if line.startswith(path + ": ") and ("version `" in line or "version information" in line):
            versions.append(line[len(path) + 2:].strip())
    versions.sort()
    fatal = None
    if rc != 0:
        fatal = err.strip().splitlines()[-1] if err.strip() else "exit %d" % rc
    return {"objects": objs, "versions": sorted(versions), "fatal": fatal, "rc": rc, "signal": rc < 0}


def run_model(paths, env, cwd):
    p = subprocess.run([MLDOCTOR, "libs", "--json", "--fail-on", "error"] + paths, env=env, cwd=cwd,
                       capture_output=True, timeout=600)
    if p.returncode not in (0, 1, 2) or not p.stdout:
        raise SystemExit("mldoctor failed (%d): %s" % (p.returncode, p.stderr.decode()[-2000:]))
    doc = json.loads(p.stdout)
    result = {}
    for inp in doc["inputs"]:
        if "objects" not in inp:
            result[inp["path"]] = {"objects": [], "versions": [], "fatal": inp.get("error")}
            continue
        objs = [(o["name"], o["path"]) for o in inp["objects"][1:]]
        versions = [v["message"] for v in inp["version_problems"]]
        result[inp["path"]] = {"objects": objs, "versions": versions, "fatal": (inp["errors"] or [None])[0]}
    return result


def make_llp(tmp):
    """A non-trivial LD_LIBRARY_PATH that shadows some system libraries."""
    lib = "/usr/lib/x86_64-linux-gnu"
    llp = os.path.join(tmp, "llp")
    hw = os.path.join(tmp, "hw")
    os.makedirs(llp)
    os.makedirs(os.path.join(hw, "glibc-hwcaps", "x86-64-v2"))
    os.makedirs(os.path.join(tmp, "cwd"))
    for name in ("libz.so.1", "libgomp.so.1", "libstdc++.so.6", "libffi.so.8", "libexpat.so.1"):
        if os.path.exists(os.path.join(lib, name)):
            shutil.copy(os.path.join(lib, name), os.path.join(llp, name))
    # A copy only in a glibc-hwcaps subdirectory: found there, not in hw/.
    for name in ("libbz2.so.1.0", "liblzma.so.5"):
        if os.path.exists(os.path.join(lib, name)):
            shutil.copy(os.path.join(lib, name), os.path.join(hw, "glibc-hwcaps", "x86-64-v2", name))
    # Wrong machine and wrong class under real names: skipped silently.
    with open(os.path.join(lib, "libcrypt.so.1"), "rb") as f:
        data = bytearray(f.read())
    wm = bytearray(data)
    struct.pack_into("<H", wm, 18, 183)  # EM_AARCH64
    with open(os.path.join(llp, "libcrypt.so.1"), "wb") as f:
        f.write(wm)
    with open(os.path.join(lib, "libpcre2-8.so.0"), "rb") as f:
        wc = bytearray(f.read())
    wc[4] = 1  # ELFCLASS32
    with open(os.path.join(hw, "libpcre2-8.so.0"), "wb") as f:
        f.write(wc)
    return ":".join([os.path.join(tmp, "missing"), llp, "", hw + "/"]) + ";" + llp


def compare(name, files, env, cwd, report):
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        real = dict(zip(files, ex.map(lambda f: run_ldso(f, env, cwd), files)))
    model = {}
    for i in range(0, len(files), BATCH):
        model.update(run_model(files[i:i + BATCH], env, cwd))
    bad = []
    compared = resolutions = 0
    for f in files:
        r, m = real[f], model.get(f)
        if r["signal"]:
            report["excluded"][f] = "ld.so --list crashed (signal %d)" % -r["rc"]
            continue
        if m is None:
            bad.append((f, "no model output"))
            continue
        compared += 1
        if r["fatal"]:
            if not m["fatal"]:
                bad.append((f, "ld.so failed (%s) but the model did not" % r["fatal"]))
            continue
        if m["fatal"]:
            bad.append((f, "model failed (%s) but ld.so did not" % m["fatal"]))
            continue
        if r["objects"] != m["objects"]:
            bad.append((f, "objects differ:\n    ld.so: %s\n    model: %s" % (r["objects"], m["objects"])))
            continue
        real_v = r["versions"]
        if sorted(real_v) != sorted(m["versions"]):
            bad.append((f, "version problems differ:\n    ld.so: %s\n    model: %s" % (real_v, m["versions"])))
            continue
        resolutions += len(r["objects"])
    report["environments"][name] = {"files": compared, "resolutions": resolutions, "disagreements": len(bad)}
    return bad


def main():
    files, excluded = collect()
    limit = int(os.environ.get("MLD_DIFF_LIMIT", "0"))
    if limit:
        files = files[:limit]
    report = {"excluded": dict(excluded), "environments": {}}
    tmp = tempfile.mkdtemp(prefix="mld-diff-")
    try:
        base_env = {k: v for k, v in os.environ.items()
                    if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "GLIBC_TUNABLES", "LD_AUDIT")}
        llp_env = dict(base_env, LD_LIBRARY_PATH=make_llp(tmp))
        cwd = os.path.join(tmp, "cwd")
        bad = compare("no LD_LIBRARY_PATH", files, base_env, cwd, report)
        bad += compare("LD_LIBRARY_PATH=" + llp_env["LD_LIBRARY_PATH"], files, llp_env, cwd, report)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    reasons = {}
    for r in report["excluded"].values():
        reasons[r] = reasons.get(r, 0) + 1
    for env, s in report["environments"].items():
        print("%-40.40s %5d files %6d resolutions %d disagreements" % (env, s["files"], s["resolutions"],
                                                                       s["disagreements"]))
    print("excluded %d files:" % len(report["excluded"]))
    for r, n in sorted(reasons.items()):
        print("  %5d  %s" % (n, r))
    if os.environ.get("MLD_DIFF_REPORT"):
        with open(os.environ["MLD_DIFF_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    for f, why in bad[:30]:
        print("DISAGREE %s: %s" % (f, why))
    if bad:
        print("loader-differential: %d disagreements" % len(bad))
        return 1
    total = sum(s["files"] for s in report["environments"].values())
    print("loader-differential: %d file loads compared, all agree with ld.so" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())

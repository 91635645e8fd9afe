#!/usr/bin/env python3
"""Builds dist/mldoctor-<version>-py3-none-manylinux_<glibc>_<arch>.whl from a
build tree with the standard library only (zipfile, hashlib): no network, no
setuptools. The wheel holds the package python/mldoctor and, in
mldoctor/_bin/, the binary with its debug information stripped, its shims
and the MPI plugin when built. The binary finds its shims next to itself
(find_shim_dir's first rule), so pip's layout needs no variable; the
`mldoctor` console script execs it. The platform tag is read from the
objects themselves: the newest GLIBC_x.y any of them needs (readelf -V),
the machine from the ELF header. The archive is reproducible: sorted
entries, fixed time stamps.

    scripts/build-wheel.py [BUILD_DIR [OUT_DIR]]     (make wheel)"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJECTS = ("mldoctor", "libmldoctor-audit.so", "libmldoctor-preload.so")
OPTIONAL = ("libmldoctor-mpi.so",)
MACHINES = {62: "x86_64", 183: "aarch64"}
SUMMARY = "Finds, explains and fixes the native-layer failures of Python ML jobs (OpenMP/MKL, static TLS, JIT, NCCL)"


def die(msg):
    sys.stderr.write("build-wheel: error: %s\n" % msg)
    sys.exit(2)


def project_version():
    text = open(os.path.join(SOURCE, "CMakeLists.txt")).read()
    m = re.search(r"project\(\s*mldoctor\s+VERSION\s+([0-9][0-9.]*)", text)
    if not m:
        die("no project(mldoctor VERSION ...) in CMakeLists.txt")
    return m.group(1)


def glibc_needed(path):
    out = subprocess.run(["readelf", "-V", "--wide", path], capture_output=True, text=True, check=True).stdout
    versions = [tuple(int(x) for x in v.split(".")) for v in re.findall(r"Name: GLIBC_(\d+\.\d+(?:\.\d+)?)", out)]
    return max(versions)[:2] if versions else (2, 17)


def machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF":
        die("%s is not an ELF file" % path)
    order = "little" if head[5] == 1 else "big"
    e_machine = int.from_bytes(head[18:20], order)
    if e_machine not in MACHINES:
        die("%s: no wheel platform tag for ELF machine %d" % (path, e_machine))
    return MACHINES[e_machine]


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata(version):
    return ("Metadata-Version: 2.1\nName: mldoctor\nVersion: %s\nSummary: %s\n"
            "Requires-Python: >=3.8\nClassifier: Operating System :: POSIX :: Linux\n"
            "Classifier: Programming Language :: Python :: 3\nClassifier: Typing :: Typed\n"
            "Description-Content-Type: text/markdown\n\n"
            "`mldoctor` names the real cause of the native-layer failures that break Python machine-learning\n"
            "jobs (clashing OpenMP/MKL runtimes, exhausted static TLS, hung JIT builds, NCCL hangs), with\n"
            "evidence and the exact fix. This wheel holds the binary (`mldoctor check`, `run`, `logs`, ...),\n"
            "`python -m mldoctor`, and a typed API: `mldoctor.check()`, `mldoctor.logs(text)`,\n"
            "`mldoctor.explain(rule_id)`.\n") % (version, SUMMARY)


def main(argv):
    build = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(SOURCE, "build"))
    out_dir = os.path.abspath(argv[2] if len(argv) > 2 else os.path.join(SOURCE, "dist"))
    version = project_version()
    exe = os.path.join(build, "mldoctor")
    for name in OBJECTS:
        if not os.path.isfile(os.path.join(build, name)):
            die("%s is missing: build first (make build)" % os.path.join(build, name))
    first = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    if first.split()[1:2] != [version]:
        die("%s --version says %r, CMakeLists.txt %s: rebuild" % (exe, first, version))

    tmp = tempfile.mkdtemp(prefix="mld-wheel-")
    try:
        files = []  # (archive name, bytes, mode)
        objects = [n for n in OBJECTS] + [n for n in OPTIONAL if os.path.isfile(os.path.join(build, n))]
        glibc = (2, 17)
        for name in objects:
            stripped = os.path.join(tmp, name)
            subprocess.run(["strip", "--strip-debug", "-o", stripped, os.path.join(build, name)], check=True)
            glibc = max(glibc, glibc_needed(stripped))
            files.append(("mldoctor/_bin/" + name, open(stripped, "rb").read(), 0o755))
        arch = machine(exe)
        pkg = os.path.join(SOURCE, "python", "mldoctor")
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py") or name == "py.typed":
                files.append(("mldoctor/" + name, open(os.path.join(pkg, name), "rb").read(), 0o644))
    finally:
        shutil.rmtree(tmp)

    tag = "py3-none-manylinux_%d_%d_%s" % (glibc[0], glibc[1], arch)
    info = "mldoctor-%s.dist-info" % version
    files += [
        (info + "/METADATA", metadata(version).encode(), 0o644),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: mldoctor scripts/build-wheel.py\n"
                           "Root-Is-Purelib: false\nTag: %s\n" % tag).encode(), 0o644),
        (info + "/entry_points.txt", b"[console_scripts]\nmldoctor = mldoctor.__main__:console\n", 0o644),
        (info + "/top_level.txt", b"mldoctor\n", 0o644),
    ]
    record = "".join("%s,%s,%d\n" % (n, record_hash(d), len(d)) for n, d, _ in files) + info + "/RECORD,,\n"
    files.append((info + "/RECORD", record.encode(), 0o644))

    os.makedirs(out_dir, exist_ok=True)
    wheel = os.path.join(out_dir, "mldoctor-%s-%s.whl" % (version, tag))
    part = wheel + ".part"
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in files:
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data, compresslevel=9)
    os.replace(part, wheel)
    print(wheel)


if __name__ == "__main__":
    main(sys.argv)

#!/usr/bin/env python3
"""Builds dist/mldoctor-<version>-py3-none-manylinux_<glibc>_<arch>.whl from a
build tree, and beside it dist/mldoctor-<version>-py3-none-any.whl, with Debian's own packaging tool, `python3 -m wheel pack`
(python3-wheel: it writes RECORD and the archive from an unpacked wheel
laid out here), offline. The wheel holds the package python/mldoctor and, in
mldoctor/_bin/, the binary with its debug information stripped, its shims
and the MPI plugin when built. The binary finds its shims next to itself
(find_shim_dir's first rule), so pip's layout needs no variable; the
`mldoctor` console script execs it. The platform tag is read from the
objects themselves: the newest GLIBC_x.y any of them needs (readelf -V),
the machine from the ELF header. The archive is reproducible: `wheel pack`
writes entries sorted and stamped SOURCE_DATE_EPOCH (set to 1980-01-01).

The py3-none-any wheel holds the Python package alone: pip prefers the
platform wheel wherever its tag fits, and installs this one where it does
not (an older glibc, another CPU), so that mldoctor.runtimes() and
mldoctor.guard(), which need no binary, install everywhere; its commands
then say that this installation has no binary and what to do. Both paths
are printed, the platform wheel's last.

    scripts/build-wheel.py [BUILD_DIR [OUT_DIR]]     (make wheel)"""
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJECTS = ("mldoctor", "libmldoctor-audit.so", "libmldoctor-preload.so", "mldoctor-tls-probe") + tuple(
    "libmldoctor-tls-reserve-%d.so" % (16 << k) for k in range(6))
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


PURE_NOTE = ("\nThis is the pure-Python wheel: pip installs it where the wheel with the binary does not fit the\n"
             "machine (an older glibc, another CPU). `mldoctor.runtimes()` and `mldoctor.guard()` work; the\n"
             "commands say that this installation has no binary.\n")


def metadata(version, pure=False):
    return ("Metadata-Version: 2.1\nName: mldoctor\nVersion: %s\nSummary: %s\n"
            "Requires-Python: >=3.8\nClassifier: Operating System :: POSIX :: Linux\n"
            "Classifier: Programming Language :: Python :: 3\nClassifier: Typing :: Typed\n"
            "Description-Content-Type: text/markdown\n\n"
            "`mldoctor` names the real cause of the native-layer failures that break Python machine-learning\n"
            "jobs (clashing OpenMP/MKL runtimes, exhausted static TLS, hung JIT builds, NCCL hangs), with\n"
            "evidence and the exact fix. This wheel holds the binary (`mldoctor check`, `run`, `logs`, ...),\n"
            "`python -m mldoctor`, and a typed API: `mldoctor.check()`, `mldoctor.logs(text)`,\n"
            "`mldoctor.explain(rule_id)`.\n") % (version, SUMMARY) + (PURE_NOTE if pure else "")


def copy_package(stage):
    pkg = os.path.join(SOURCE, "python", "mldoctor")
    os.makedirs(os.path.join(stage, "mldoctor"), exist_ok=True)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            shutil.copyfile(os.path.join(pkg, name), os.path.join(stage, "mldoctor", name))
            os.chmod(os.path.join(stage, "mldoctor", name), 0o644)


def pack(stage, version, tag, pure, out_dir):
    """Writes the dist-info of the unpacked wheel `stage` and packs it."""
    info = os.path.join(stage, "mldoctor-%s.dist-info" % version)
    os.makedirs(info)
    for name, text in (
            ("METADATA", metadata(version, pure)),
            ("WHEEL", "Wheel-Version: 1.0\nGenerator: mldoctor scripts/build-wheel.py\n"
                      "Root-Is-Purelib: %s\nTag: %s\n" % ("true" if pure else "false", tag)),
            ("entry_points.txt", "[console_scripts]\nmldoctor = mldoctor.__main__:console\n"),
            ("top_level.txt", "mldoctor\n")):
        with open(os.path.join(info, name), "w") as f:
            f.write(text)
    os.makedirs(out_dir, exist_ok=True)
    wheel = os.path.join(out_dir, "mldoctor-%s-%s.whl" % (version, tag))
    env = dict(os.environ, SOURCE_DATE_EPOCH="315532800")
    p = subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", out_dir, stage], env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        die("python3 -m wheel pack failed (Debian's python3-wheel: scripts/install-deps.sh "
            "installs it): %s" % (p.stderr.strip() or p.stdout.strip()))
    if not os.path.isfile(wheel):
        die("wheel pack wrote no %s: %s" % (wheel, p.stdout.strip()))
    return wheel


def main(argv):
    build = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(SOURCE, "build"))
    out_dir = os.path.abspath(argv[2] if len(argv) > 2 else os.path.join(SOURCE, "dist"))
    version = project_version()
    exe = os.path.join(build, "mldoctor")
    for name in OBJECTS:
        if not os.path.isfile(os.path.join(build, name)):
            die("%s is missing: build first (make build)" % os.path.join(build, name))
    # A cross build's binary (make portable-arm64) runs under qemu-user
    # against the sysroot it was linked with.
    runner = []
    if machine(exe) != platform.machine():
        runner = ["qemu-%s-static" % machine(exe), "-L", os.path.join(build, "sysroot", "root")]
    first = subprocess.run(runner + [exe, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    if first.split()[1:2] != [version]:
        die("%s --version says %r, CMakeLists.txt %s: rebuild" % (exe, first, version))

    tmp = tempfile.mkdtemp(prefix="mld-wheel-")
    try:
        stage = os.path.join(tmp, "mldoctor-%s" % version)  # the unpacked wheel
        bin_dir = os.path.join(stage, "mldoctor", "_bin")
        os.makedirs(bin_dir)
        objects = [n for n in OBJECTS] + [n for n in OPTIONAL if os.path.isfile(os.path.join(build, n))]
        glibc = (2, 17)
        for name in objects:
            stripped = os.path.join(bin_dir, name)
            strip = "strip" if not runner else "%s-linux-gnu-strip" % machine(exe)
            subprocess.run([strip, "--strip-debug", "-o", stripped, os.path.join(build, name)], check=True)
            os.chmod(stripped, 0o755)
            glibc = max(glibc, glibc_needed(stripped))
        arch = machine(exe)
        copy_package(stage)
        wheel = pack(stage, version, "py3-none-manylinux_%d_%d_%s" % (glibc[0], glibc[1], arch), False, out_dir)
        pure_stage = os.path.join(tmp, "pure", "mldoctor-%s" % version)
        copy_package(pure_stage)
        pure = pack(pure_stage, version, "py3-none-any", True, out_dir)
    finally:
        shutil.rmtree(tmp)
    print(pure)
    print(wheel)


if __name__ == "__main__":
    main(sys.argv)

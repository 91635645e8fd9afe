#!/usr/bin/env python3
"""`mldoctor check --root` on the CPU fixtures (test/fixtures/cpus: real
machines; test/fixtures/cpus-derived: one documented change each;
test/fixtures/cpus-qemu: snapshots of QEMU guests) and on
damaged copies of them: the real binary reports the architecture and
PyTorch's cpuinfo counts that the real cpuinfo code gave on the same tree
(each fixture's `expected`), and when it cannot count it says why in the
text report and in the JSON, never a guess, never a crash.

Bad input covered: an x86 tree without CPUID leaves, a damaged CPUID dump, a
/proc/cpuinfo that cannot be read (a directory), no apicid lines, offline
CPUs, CPU lists with gaps, a tree of another architecture (aarch64) analysed
here, and a kernel_max no list cuts down."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

SRC = os.environ.get("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def expected(d):
    kv = {}
    for line in open(os.path.join(d, "expected")):
        if "=" in line and not line.startswith("#"):
            k, v = line.strip().split("=", 1)
            kv[k] = v
    return kv


def run_check(root, *extra):
    p = subprocess.run([MLDOCTOR, "check", "--root", root] + list(extra), capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
    check(p.returncode in (0, 1), "check --root %s %s: exit %d\n%s" % (root, " ".join(extra), p.returncode,
                                                                        p.stderr[-1500:]))
    return p


def cpuinfo_of(root):
    p = run_check(root, "--json")
    try:
        host = json.loads(p.stdout)["host"]
    except ValueError:
        check(False, "check --root %s --json printed no JSON" % root)
        return None, None
    return host, run_check(root).stdout


fixtures = []
for kind in ("cpus", "cpus-derived", "cpus-qemu"):
    base = os.path.join(SRC, "test", "fixtures", kind)
    for name in sorted(os.listdir(base)):
        if os.path.exists(os.path.join(base, name, "expected")):
            fixtures.append(os.path.join(base, name))
check(len(fixtures) >= 15, "the CPU fixtures are there (%d)" % len(fixtures))

for d in fixtures:
    name = os.path.basename(d)
    kv = expected(d)
    host, text = cpuinfo_of(d)
    if host is None:
        continue
    check_eq(host["architecture"], kv["arch"], name + ": architecture")
    c = host["cpuinfo"]
    if kv["processors"] == "unknown":
        check(c["unknown"] and c["cores"] is None, name + ": cpuinfo's counts are unknown, and said so")
        check_in("cores unknown: ", text, name + ": the text report says why")
        check_in("CPUID", text, name + ": ... naming the missing CPUID data")
        continue
    check(c["unknown"] is None, "%s: counted (%s)" % (name, c["unknown"]))
    check_eq(c["processors"], int(kv["processors"]), name + ": cpuinfo's processors")
    check_eq(c["cores"], int(kv["cpuinfo_cores"]), name + ": cpuinfo's cores")
    check_eq(host["physical_cores"], int(kv["cpuinfo_cores"]), name + ": physical_cores")
    check_in("%d core" % int(kv["cpuinfo_cores"]), text, name + ": the CPUs row")

# Damaged copies.
t = scratch()
try:
    src = os.path.join(SRC, "test", "fixtures", "cpus", "kvm-qemu64-6vcpu")

    def copy(tag):
        root = os.path.join(t, tag)
        shutil.copytree(src, root, symlinks=True)
        return root

    root = copy("bad-dump")
    with open(os.path.join(root, ".mldoctor", "cpuid"), "w") as f:
        f.write("CPU 0:\n   0x00000000 0x00: eax=0x0000000d ebx=0x68747541 ecx=garbage edx=0x69746e65\n")
    host, text = cpuinfo_of(root)
    if host:
        check_in("line 2", host["cpuinfo"]["unknown"] or "", "a damaged dump names its line")
        check_in("cores unknown", text, "a damaged dump: the text says the cores are unknown")

    root = copy("binary-dump")
    with open(os.path.join(root, ".mldoctor", "cpuid"), "wb") as f:
        f.write(bytes(range(256)) * 64)
    host, text = cpuinfo_of(root)
    if host:
        check(host["cpuinfo"]["unknown"], "a binary dump: unknown, not a crash")

    root = copy("cpuinfo-dir")
    os.remove(os.path.join(root, "proc", "cpuinfo"))
    os.mkdir(os.path.join(root, "proc", "cpuinfo"))
    host, text = cpuinfo_of(root)
    if host:
        check(host["cpuinfo"]["unknown"] is None and not host["cpuinfo"]["initialised"],
              "an unreadable /proc/cpuinfo: cpuinfo_initialize() fails (torch then uses hardware_concurrency)")
        check_in("cpuinfo would fail to initialise", text, "... and the text says so")

    root = copy("huge-kernel-max")
    for f in ("possible", "present"):
        os.remove(os.path.join(root, "sys", "devices", "system", "cpu", f))
    with open(os.path.join(root, "sys", "devices", "system", "cpu", "kernel_max"), "w") as f:
        f.write("4000000000\n")
    host, text = cpuinfo_of(root)
    if host:
        check_in("kernel_max", host["cpuinfo"]["unknown"] or "", "an absurd kernel_max: unknown, with the reason")
finally:
    shutil.rmtree(t, ignore_errors=True)
finish("check-cpu-fixtures")

#!/usr/bin/env python3
# labels: scenario
"""`mldoctor check` and `mldoctor fix` on small fixture environments built here:
CUDA001 (two majors of one CUDA library), MKL001 as an error under
MKL_THREADING_LAYER=INTEL and as a warning when MKL loads before libgomp,
TLS001's GLIBC_TUNABLES merged into the user's and checked by the real
imports, ENV findings turned into `fix` output for bash and
fish (including an unset), --markdown, and an unusable --python (exit 2).
Also the facts fleet and diff compare: the GPU stack's libraries against a
real dlopen() of each soname (its fixture libnccl.so.2 on LD_LIBRARY_PATH,
a name that does not exist), the node identity against the kernel's, and an
interpreter reached through a launcher script (pyenv's shims) simulated as
its sys.executable, not as the script."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import (PY, build_ext_module, build_mkl_env, build_so, build_tls_modules,  # noqa: E402
                       expect_finding, expect_no_finding, finding_text, run_check, run_python, scenario_env,
                       skip_unless)


def run(args, env):
    return subprocess.run([MLDOCTOR] + args, env=env, capture_output=True, text=True, timeout=120)


def two_cuda_majors(t):
    # Two "packages", each an extension module whose RUNPATH holds its own
    # libcudart: one built for CUDA 11, one for CUDA 12.
    for major, soname in (("11", "libcudart.so.11.0"), ("12", "libcudart.so.12")):
        lib = os.path.join(t, "cu" + major)
        os.makedirs(lib)
        build_so(os.path.join(lib, soname), "int cudart_v%s(void) { return %s; }\n" % (major, major),
                 soname=soname)
        build_ext_module(t, "ext_cu" + major, needed=["-L" + lib, "-l:" + soname], runpath=lib)
    env = scenario_env(pythonpath=t)
    doc, _ = run_check("--import", "ext_cu11,ext_cu12", env=env)
    f = expect_finding(doc, "CUDA001", "two CUDA majors")
    if f:
        text = finding_text(f)
        check_in("libcudart.so.11.0", text, "CUDA001 names the CUDA 11 runtime")
        check_in("libcudart.so.12", text, "CUDA001 names the CUDA 12 runtime")
        check_in("import ext_cu12", text, "CUDA001 names the import that brings the second")
    doc, _ = run_check("--import", "ext_cu12", env=env)
    expect_no_finding(doc, "CUDA001", "one CUDA major")


def mkl_layer_intel(t):
    site = os.path.join(t, "site")
    os.makedirs(site)
    build_mkl_env(site)
    env = scenario_env(pythonpath=site, MKL_THREADING_LAYER="INTEL")
    doc, p = run_check("--import", "torch,mklnumpy", env=env)
    f = expect_finding(doc, "MKL001", "MKL_THREADING_LAYER=INTEL after torch")
    if f:
        check_eq(f.get("severity"), "error", "MKL001 severity with INTEL and libgomp loaded first")
        check_in("MKL_THREADING_LAYER=GNU", f.get("env_fix") or [], "MKL001 fix")
        check_in("libgomp.so.1", f.get("message", ""), "MKL001 names the GNU runtime")
    check_eq(p.returncode if p else None, 1, "exit status with an error finding")


def mkl_before_gnu(t):
    # numpy-with-MKL imported before torch: MKL starts first and picks its
    # INTEL layer; libgomp comes after it.
    site = os.path.join(t, "site")
    os.makedirs(site)
    build_mkl_env(site)
    doc, _ = run_check("--import", "mklnumpy,torch", env=scenario_env(pythonpath=site))
    f = expect_finding(doc, "MKL001", "libmkl_rt before libgomp")
    if f:
        check_eq(f.get("severity"), "warning", "MKL001 severity when MKL comes first")
        check_in("libmkl_rt is loaded before libgomp.so.1", f.get("message", ""), "MKL001 names the order")
        check_in("MKL_THREADING_LAYER=GNU", f.get("env_fix") or [], "MKL001 fix")


def tls_fix_merges_and_works(t):
    # The user already has a tunable: TLS001's setting keeps it, adds the
    # static TLS one, and with it the real imports succeed.
    build_tls_modules(t)
    mods = ",".join("tlsmod%d" % k for k in range(1, 9))
    imports = "import " + mods.replace(",", ", ")
    env = scenario_env(pythonpath=t, GLIBC_TUNABLES="glibc.malloc.arena_max=2")
    real = run_python(imports, env)
    check_in("cannot allocate memory in static TLS block", real.stderr, "the imports fail without the fix")
    doc, _ = run_check("--import", mods, env=env)
    f = expect_finding(doc, "TLS001", "static TLS with a user tunable")
    if not f:
        return
    fixes = [e for e in f.get("env_fix") or [] if e.startswith("GLIBC_TUNABLES=")]
    check_eq(len(fixes), 1, "one GLIBC_TUNABLES setting: %s" % f.get("env_fix"))
    if not fixes:
        return
    value = fixes[0].split("=", 1)[1]
    check(value.startswith("glibc.malloc.arena_max=2:glibc.rtld.optional_static_tls="),
          "the user's tunable is kept and the static TLS one added: %s" % value)
    fixed = run_python(imports + "; print('IMPORTED')", dict(env, GLIBC_TUNABLES=value))
    check_in("IMPORTED", fixed.stdout, "with the predicted setting the real imports succeed (%s)" % fixed.stderr)


def fix_output(t):
    env = scenario_env(OMP_NUM_THREADS="four", KMP_DUPLICATE_LIB_OK="TRUE")
    p = run(["fix", "--python", PY, "--import", "numpy"], env)
    check_eq(p.returncode, 0, "fix exit status: " + p.stderr)
    check_in("unset KMP_DUPLICATE_LIB_OK\n", p.stdout, "fix unsets KMP_DUPLICATE_LIB_OK")
    check_in("export OMP_NUM_THREADS='", p.stdout, "fix sets OMP_NUM_THREADS")
    p = run(["fix", "--shell", "fish", "--python", PY, "--import", "numpy"], env)
    check_in("set -e KMP_DUPLICATE_LIB_OK\n", p.stdout, "fish unset")
    check_in("set -gx OMP_NUM_THREADS '", p.stdout, "fish set")
    p = run(["fix", "--json", "--python", PY, "--import", "numpy"], env)
    settings = {s["name"]: s for s in json.loads(p.stdout)["settings"]}
    check_eq(settings.get("KMP_DUPLICATE_LIB_OK", {}).get("value", "absent"), None, "--json: unset is a null value")
    check_eq(settings.get("KMP_DUPLICATE_LIB_OK", {}).get("rules"), ["ENV003"], "--json: the rule asking for it")
    check(str(settings.get("OMP_NUM_THREADS", {}).get("value", "")).isdigit(), "--json: OMP_NUM_THREADS value")
    # The bash output, evaluated by bash, leaves the settings it printed.
    bash = subprocess.run(["bash", "-c", 'eval "$("$MLDOCTOR" fix --python %s --import numpy)"; '
                           'echo "${KMP_DUPLICATE_LIB_OK-unset} $OMP_NUM_THREADS"' % PY],
                          env=dict(env, MLDOCTOR=MLDOCTOR), capture_output=True, text=True)
    words = bash.stdout.split()
    check(len(words) == 2 and words[0] == "unset" and words[1].isdigit(),
          "eval \"$(mldoctor fix)\" gives %r (stderr %r)" % (bash.stdout, bash.stderr))


def markdown_and_errors(t):
    env = scenario_env()
    p = run(["check", "--markdown", "--python", PY, "--import", "numpy"], env)
    check(p.returncode in (0, 1), "markdown exit %d: %s" % (p.returncode, p.stderr))
    check(p.stdout.startswith("## mldoctor check\n\n| | |\n|---|---|\n"), "markdown header table:\n" + p.stdout[:300])
    check_in("| Python | 3.", p.stdout, "markdown Python row")
    p = run(["check", "--python", os.path.join(t, "no-such-python")], env)
    check_eq(p.returncode, 2, "an unusable --python is a tool error")
    check_in("no-such-python", p.stderr, "the error names the interpreter")


def stack_libraries_and_identity(t):
    # A fixture libnccl.so.2 (a versioned file behind the soname link) first on
    # LD_LIBRARY_PATH; the oracle is the real dlopen() in a child process.
    lib = os.path.join(t, "nccl")
    os.makedirs(lib)
    build_so(os.path.join(lib, "libnccl.so.2.99.1"), "int nccl_fixture(void) { return 2; }\n", soname="libnccl.so.2")
    os.symlink("libnccl.so.2.99.1", os.path.join(lib, "libnccl.so.2"))
    env = scenario_env(LD_LIBRARY_PATH=lib)
    doc, _ = run_check("--import", "numpy", env=env)
    if not doc:
        return
    libs = {entry["soname"]: entry for entry in doc["libraries"]}
    check("libnccl.so.2" in libs and "libcudart.so.11.0" in libs, "check lists the stack's sonames: %s" % sorted(libs))
    probe = r"""
import ctypes, json, os, sys
out = {}
for name in sys.argv[1:]:
    try:
        ctypes.CDLL(name)
    except OSError:
        out[name] = None
        continue
    base = name.split(".so")[0] + ".so"
    for line in open("/proc/self/maps"):
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if os.path.basename(path).startswith(base):
            out[name] = os.path.realpath(path)
            break
print(json.dumps(out))
"""
    names = [n for n, e in libs.items() if e["path"] is None or n in ("libnccl.so.2", "libgomp.so.1", "libstdc++.so.6")]
    p = subprocess.run([PY, "-c", probe] + names, env=env, capture_output=True, text=True, timeout=120)
    real = json.loads(p.stdout) if p.returncode == 0 else {}
    check(real, "the dlopen oracle ran: %s" % p.stderr)
    for name in names:
        if name not in real:
            continue
        got = libs[name]["path"]
        got_real = os.path.realpath(got) if got else None
        check(got_real == real[name], "%s: check says %s, dlopen() loads %s" % (name, got_real, real[name]))
        if got:
            check(libs[name]["file"] == os.path.basename(real[name]) and libs[name]["size"] == os.path.getsize(real[name]),
                  "%s: file and size of what dlopen loads: %s" % (name, libs[name]))
    check(libs["libnccl.so.2"]["file"] == "libnccl.so.2.99.1", "the fixture NCCL is the one found: %s" % libs["libnccl.so.2"])
    check(doc["host"]["boot_id"] == open("/proc/sys/kernel/random/boot_id").read().strip(), "the node's boot id")
    check(doc["host"]["hostname"] == open("/proc/sys/kernel/hostname").read().strip(), "the node's hostname")


def launcher_script_interpreter(t):
    # `python3` on PATH is a shell script that execs the real interpreter, as
    # pyenv's and asdf's shims are: the import set is simulated for what runs.
    bindir = os.path.join(t, "shims")
    os.makedirs(bindir)
    shim = os.path.join(bindir, "python3")
    with open(shim, "w") as f:
        f.write('#!/bin/sh\nexec %s "$@"\n' % PY)
    os.chmod(shim, 0o755)
    env = scenario_env()
    env["PATH"] = bindir + ":" + env.get("PATH", "/usr/bin:/bin")
    p = run(["check", "--json", "--import", "numpy"], env)
    doc = json.loads(p.stdout) if p.stdout.startswith("{") else {}
    check(doc.get("python", {}).get("interpreter") == shim, "the script is what PATH chose: %s" % doc.get("python"))
    check(doc.get("imports", {}).get("program") == PY, "the simulated program is sys.executable: %s"
          % doc.get("imports", {}).get("program"))
    check(not [f for f in doc.get("findings", []) if f["rule"] == "LD005"],
          "no 'invalid ELF header' for the script: %s" % [f["message"] for f in doc.get("findings", [])])


def main():
    skip_unless("torch", tools=("patchelf", "/usr/lib/x86_64-linux-gnu/libomp.so.5"))
    t = scratch()
    try:
        for step in (two_cuda_majors, mkl_layer_intel, mkl_before_gnu, tls_fix_merges_and_works, fix_output,
                     markdown_and_errors, stack_libraries_and_identity, launcher_script_interpreter):
            d = os.path.join(t, step.__name__)
            os.makedirs(d)
            step(d)
    finally:
        shutil.rmtree(t, ignore_errors=True)
    finish("check-cli")


if __name__ == "__main__":
    main()

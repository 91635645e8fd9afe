#!/usr/bin/env python3
# labels: slow scenario
"""Seed 000 under `mldoctor run`: several OpenMP runtimes in one process.

Case 1 (GNU + Intel-named LLVM runtime): `import torch; import mklnumpy`
(fixture from scenarios.build_mkl_env: mklnumpy NEEDED libmkl_rt.so.2
NEEDED libiomp5.so, LLVM's libomp under Intel's name). Oracle: both files
are mapped (/proc/self/maps). The report's OMP001 names both runtimes and
the chain of loads that brought each (libtorch_global_deps for libgomp,
libmkl_rt.so.2 <- mklnumpy for libiomp5.so).

Case 2 (two copies of LLVM's runtime): ompa NEEDED libomp.so.5 (Debian's)
and ompb NEEDED libompcopy.so (a copy with another soname); each module's
init calls omp_get_max_threads(), which starts its runtime. Oracle: the
real process dies with "OMP: Error #15" on stderr. The report's OMP001 is
an error that says the second copy aborted it, with both paths, and the
child's status (SIGABRT) is the status of `mldoctor run` itself. With
--logs the child's stderr passes through mldoctor byte for byte and its
"OMP: Error #15" line gives OMP010 from the log rules.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_in, finish, scratch  # noqa: E402
from scenarios import (PY, build_ext_module, build_mkl_env, build_omp_runtime_copy,  # noqa: E402
                       expect_finding, finding_text, run_traced, scenario_env, skip_unless)
import subprocess  # noqa: E402

skip_unless("torch", tools=("patchelf", "/usr/lib/x86_64-linux-gnu/libomp.so.5"))
t = scratch()
d = os.path.join(t, "site")
os.makedirs(d)
fx = build_mkl_env(d)
env = scenario_env(pythonpath=d)

# ---- case 1
code = ("import torch, mklnumpy\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('libgomp' in maps, 'libiomp5.so' in maps)\n")
plain = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=300)
check(plain.stdout.strip() == "True True", "real: both runtimes mapped: %r %s" % (plain.stdout, plain.stderr))
doc, traced = run_traced([PY, "-c", code], env)
check(traced.stdout == plain.stdout, "same output under run")
f = expect_finding(doc, "OMP001", "GNU + LLVM runtimes")
if f:
    text = finding_text(f)
    print("OMP001:", f["message"])
    check(f["severity"] == "warning", "one GNU and one LLVM copy: a warning (no Error #15)")
    check_in("libgomp.so.1", text, "names libgomp")
    check_in(fx["iomp"], text, "names the libiomp5.so copy by path")
    check_in("needed by libmkl_rt.so.2", text, "libiomp5 came with libmkl_rt.so.2")
    check_in("mklnumpy", text, "... which came with mklnumpy")
    check_in("libtorch_global_deps.so", text, "libgomp came with torch's global deps")
    gomp = [e["text"] for e in f["evidence"] if "libgomp.so.1" in e["text"]]
    check(gomp and "(OMP_" in gomp[0], "the runtime's OpenMP interface version from its ELF: %r" % gomp)

# ---- case 2
copy = os.path.join(d, "lib", "libompcopy.so")
build_omp_runtime_copy(copy, "libompcopy.so")
start = "omp_get_max_threads();"
decl = "int omp_get_max_threads(void);\n"
build_ext_module(d, "ompa", body=decl, init=start, needed=["-l:libomp.so.5"])
build_ext_module(d, "ompb", body=decl, init=start, runpath="$ORIGIN/lib",
                 needed=["-L" + os.path.join(d, "lib"), "-l:libompcopy.so"])
code = "import ompa, ompb\nprint('both started')\n"
plain = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=120)
print("real: exit %d, %s" % (plain.returncode, plain.stderr.strip().splitlines()[:1]))
check_in("OMP: Error #15", plain.stderr, "the real process aborts on the second LLVM copy")
doc, traced = run_traced([PY, "-c", code], env)
check(traced.returncode == plain.returncode, "same status under run (%d vs %d)" % (traced.returncode, plain.returncode))
check_in("OMP: Error #15", traced.stderr, "the child's own message still reaches its stderr")
f = expect_finding(doc, "OMP001", "two LLVM copies")
if f:
    text = finding_text(f)
    print("OMP001:", f["message"])
    check(f["severity"] == "error", "two LLVM/Intel copies: an error")
    check_in("aborted", f["message"], "the report says the second copy aborted the process")
    check_in("libomp.so.5", text, "names Debian's libomp")
    check_in(copy, text, "names the copy")
    check_in("ompb", text, "and the module that brought the copy")
if doc:
    check(doc["status"].get("signal") == "SIGABRT", "the report has the child's SIGABRT: %r" % doc["status"])
# --logs: the child's stderr passes through mldoctor unchanged and its
# Error #15 line is matched live (OMP010, from the knowledge base).
doc, logged = run_traced([PY, "-c", code], env, extra=["--logs"])
check(logged.stderr == plain.stderr and logged.stdout == plain.stdout and logged.returncode == plain.returncode,
      "--logs changes neither the output bytes nor the status")
f = expect_finding(doc, "OMP010", "Error #15 seen in the job's stderr")
if f:
    check_in("stderr:1: OMP: Error #15", "\n".join(
        "%s:%s: %s" % (e.get("file"), e.get("line"), e.get("text")) for e in f.get("evidence", [])),
        "the evidence is the job's stderr line")
finish(os.path.basename(__file__))

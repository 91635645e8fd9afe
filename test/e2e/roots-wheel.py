#!/usr/bin/env python3
# labels: slow scenario roots
"""The wheel, installed with each Debian root's own pip into a venv, run by
that root's processes (issue 34 item 2). The oracles are the root's own
tools: its pip (which decides whether the wheel's tag fits its glibc), its
python3 and torch, its ld.so, the real outcome of the job.

The wheel is built from the build next to $MLDOCTOR (scripts/build-wheel.py:
the tag is computed from the objects). With a build for glibc 2.34 (`make`'s)
bullseye's pip must refuse it as "not a supported wheel on this platform" and
install nothing; with `make portable`'s (run as `make test-portable`) every
root installs it. In each root that installed it, with
`python3 -m venv --system-site-packages` (the root's torch and numba visible)
and `pip install --no-index --no-deps`:
  1. `mldoctor --version` from the venv's console script names the wheel's
     version;
  2. `mldoctor check --json` of the venv's python names the root's torch
     with the version torch itself reports, and the thread count it predicts
     for torch is the one torch.get_num_threads() really returns;
  3. seed 003: `check --import torch,numba` with NUMBA_THREADING_LAYER=omp and
     NUMBA_NUM_THREADS=1 has THR002 exactly when numba's first parallel call
     really changes torch's count;
  4. static TLS (seed 001): four extension modules with 400 bytes of
     initial-exec TLS each, then `import torch`: plainly and under the
     venv's `mldoctor run` the job fails the same way, and run's TLS001
     quotes the loader's message;
  5. `mldoctor stacks` of a sleeping python3 process (once it says it is
     in the function) names the function and line it sleeps in;
  6. `mldoctor libs --json` of the root's libtorch_cpu.so resolves every
     object the root's ldd lists to the same file.
"""
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

SOURCE = os.environ.get("MLD_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
check, check_eq = mldtest.check, mldtest.check_eq
W, OUT = "/tmp/w", "/tmp/out"

TLSMOD = r'''#define PY_SSIZE_T_CLEAN
#include <Python.h>
static __thread char b[400] __attribute__((tls_model("initial-exec")));
char *tlsmod@K@_buf(void) { b[0] = @K@; return b; }
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "tlsmod@K@", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_tlsmod@K@(void) { return PyModule_Create(&def); }
'''
TLS_JOB = "import tlsmod1, tlsmod2, tlsmod3, tlsmod4, torch\nprint('imported')\n"
# The real half of seed 003: torch's count, numba's first parallel call, again.
SEED3_JOB = r'''
import json, torch
before = torch.get_num_threads()
import numba
numba.get_num_threads()
print(json.dumps({"before": before, "after": torch.get_num_threads(),
                  "torch": torch.__version__, "layer": numba.threading_layer()}))
'''
# Says it is inside waiter() before it sleeps there (line 4), so that the
# stacks are read while it waits, however slow the start under load.
SLEEPER = "import time\ndef waiter():\n    open('/tmp/sleeper-ready', 'w').close()\n    time.sleep(120)\nwaiter()\n"

SCRIPT = r'''
cd /tmp
python3 -m venv --system-site-packages /tmp/venv >$OUT/venv.log 2>&1; echo $? >$OUT/venv.rc
/tmp/venv/bin/pip install --no-index --no-deps $W/$WHEEL >$OUT/pip.out 2>$OUT/pip.err; echo $? >$OUT/pip.rc
[ "$(cat $OUT/pip.rc)" = 0 ] || exit 0
M=/tmp/venv/bin/mldoctor
$M --version >$OUT/version.out 2>&1
$M check --python /tmp/venv/bin/python3 --json >$OUT/check.json 2>$OUT/check.err
/tmp/venv/bin/python3 -c 'import torch; print(torch.get_num_threads())' >$OUT/threads.out 2>&1
NUMBA_THREADING_LAYER=omp NUMBA_NUM_THREADS=1 /tmp/venv/bin/python3 -c "$SEED3_JOB" >$OUT/seed3.out 2>$OUT/seed3.err
NUMBA_THREADING_LAYER=omp NUMBA_NUM_THREADS=1 $M check --python /tmp/venv/bin/python3 --import torch,numba --json \
  >$OUT/seed3.json 2>$OUT/seed3-check.err
inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suf=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
mkdir -p /tmp/site
for k in 1 2 3 4; do
  sed "s/@K@/$k/g" $OUT/tlsmod.c >/tmp/m.c
  gcc -shared -fPIC -O0 -I"$inc" -o /tmp/site/tlsmod$k$suf /tmp/m.c
done
PYTHONPATH=/tmp/site /tmp/venv/bin/python3 -c "$TLS_JOB" >$OUT/plain.out 2>$OUT/plain.err; echo $? >$OUT/plain.rc
PYTHONPATH=/tmp/site $M run --json --report $OUT/tls.json -- /tmp/venv/bin/python3 -c "$TLS_JOB" \
  >$OUT/tls.out 2>$OUT/tls.err; echo $? >$OUT/tls.rc
/tmp/venv/bin/python3 -c "$SLEEPER" & sleeper=$!
for i in $(seq 1200); do [ -e /tmp/sleeper-ready ] && break; sleep 0.1; done
$M stacks $sleeper --json >$OUT/stacks.json 2>$OUT/stacks.err
kill $sleeper
lib=$(/tmp/venv/bin/python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))')
echo "$lib" >$OUT/lib.txt
ldd "$lib" >$OUT/ldd.out 2>&1
$M libs --json "$lib" >$OUT/libs.json 2>$OUT/libs.err
exit 0
'''


def read(d, name):
    try:
        with open(os.path.join(d, name)) as f:
            return f.read()
    except OSError:
        return ""


def load(d, name, suite):
    try:
        return json.loads(read(d, name))
    except ValueError as e:
        check(False, "%s: %s is not JSON (%s): %r" % (suite, name, e, read(d, name)[:500]))
        return None


def glibc_of(root):
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", roots.versions(root, ["libc6"])["libc6"]).groups())


def installed_parts(suite, d, version, figures):
    check(version in read(d, "version.out"), "%s: mldoctor --version from the venv: %r" % (suite, read(d, "version.out")))
    # 2. check: the root's torch and its thread count.
    doc = load(d, "check.json", suite)
    real_threads = read(d, "threads.out").strip()
    seed3 = re.search(r"^\{.*\}$", read(d, "seed3.out"), re.M)
    real = json.loads(seed3.group(0)) if seed3 else None
    if doc:
        py = doc.get("python") or {}
        torch = [p for p in py.get("packages", []) if p.get("import") == "torch"]
        ok = check(len(torch) == 1 and real and torch[0]["version"] == real["torch"],
                   "%s: check names torch %s: %s" % (suite, real and real["torch"], torch[:1]))
        predicted = (py.get("torch_threads") or {}).get("count")
        ok &= check_eq(str(predicted), real_threads, "%s: torch's thread count check predicts vs the real one" % suite)
        figures["check"] = (int(ok), 1)
        print("%s: check: torch %s, threads predicted %s, real %s" % (suite, torch and torch[0]["version"], predicted,
                                                                      real_threads))
    # 3. seed 003.
    doc = load(d, "seed3.json", suite)
    if check(real is not None, "%s: the seed 003 job did not finish: %s" % (suite, read(d, "seed3.err")[-800:])) and doc:
        changed = real["before"] != real["after"]
        thr002 = [f for f in doc["findings"] if f["rule"] == "THR002"]
        ok = check(bool(thr002) == changed, "%s: THR002 %s, torch's count really went %d -> %d (layer %s)"
                   % (suite, "present" if thr002 else "absent", real["before"], real["after"], real["layer"]))
        figures["seed 003"] = (int(ok), 1)
        print("%s: seed 003: torch %d -> %d under numba's %s layer; THR002 %s" % (
            suite, real["before"], real["after"], real["layer"], "present" if thr002 else "absent"))
    # 4. static TLS under the venv's run.
    err_re = re.compile(r"(?:ImportError|OSError): (\S+): cannot allocate memory in static TLS block")
    m, mt = err_re.search(read(d, "plain.err")), err_re.search(read(d, "tls.err"))
    if check(m is not None, "%s: the plain static TLS job should fail: %s" % (suite, read(d, "plain.err")[-800:])):
        ok = check_eq((read(d, "tls.rc").strip(), mt.group(0) if mt else None),
                      (read(d, "plain.rc").strip(), m.group(0)), "%s: under the venv's run the job ends as plainly" % suite)
        doc = load(d, "tls.json", suite)
        tls = [f for f in (doc or {}).get("findings", []) if f["rule"] == "TLS001"]
        ok &= check(len(tls) == 1 and m.group(1) in tls[0]["message"],
                    "%s: run's TLS001 quotes the loader's message: %s" % (suite, [f["message"][:200] for f in tls]))
        figures["static TLS"] = (int(ok), 1)
        print("%s: static TLS: plain %s; under run %s; reserve %s" % (
            suite, m.group(0), mt.group(0) if mt else "no error", (doc or {}).get("static_tls_room")))
    # 5. stacks.
    doc = load(d, "stacks.json", suite)
    if doc:
        frames = [(f["function"], f["line"]) for p in doc.get("processes", []) for t in p.get("threads", [])
                  if t.get("main") for f in t.get("python", [])]
        # Line 3 (the marker written, the sleep not yet entered) is as true.
        ok = check(any(f in frames for f in (("waiter", 3), ("waiter", 4))) and ("<module>", 5) in frames,
                   "%s: stacks of the sleeper: %s %s" % (suite, frames, read(d, "stacks.err")[-500:]))
        figures["stacks"] = (int(ok), 1)
    # 6. libs against the root's ldd.
    doc = load(d, "libs.json", suite)
    if doc:
        real_paths = {}
        for line in read(d, "ldd.out").splitlines():
            mm = re.match(r"\s*(\S+) => (/\S+) \(0x", line)
            if mm:
                real_paths[mm.group(1)] = mm.group(2)
        text = json.dumps(doc)
        missing = [n for n, p in real_paths.items() if p not in text]
        ok = check(real_paths and not missing, "%s: libs of %s misses what ldd resolves: %s"
                   % (suite, read(d, "lib.txt").strip(), missing[:5]))
        figures["libs"] = (len(real_paths) - len(missing), len(real_paths))


def one_root(suite, wheel, tag_glibc, version):
    why = roots.problem(suite)
    if why:
        mldtest.fail(why)
        return None
    root = os.path.join(roots.cache(), suite)
    figures = {}
    glibc = glibc_of(root)
    scratch = tempfile.mkdtemp(prefix="mld-roots-wheel-")
    os.chmod(scratch, 0o777)
    try:
        with open(os.path.join(scratch, "tlsmod.c"), "w") as f:
            f.write(TLSMOD)
        p = roots.run(root, ["sh", "-c", SCRIPT], binds=[(os.path.dirname(wheel), W, "ro"), (scratch, OUT)],
                      env={"OUT": OUT, "W": W, "WHEEL": os.path.basename(wheel), "TLS_JOB": TLS_JOB,
                           "SEED3_JOB": SEED3_JOB, "SLEEPER": SLEEPER}, timeout=1200)
        if not check(p.returncode == 0, "%s: the script in the root failed (exit %d): %s"
                     % (suite, p.returncode, p.stderr[-2000:])):
            return glibc, figures
        check_eq(read(scratch, "venv.rc").strip(), "0", "%s: python3 -m venv: %s" % (suite, read(scratch, "venv.log")[-500:]))
        pip_rc, pip_err = read(scratch, "pip.rc").strip(), read(scratch, "pip.err")
        if tag_glibc > glibc:
            ok = check(pip_rc != "0" and "is not a supported wheel on this platform" in pip_err,
                       "%s: the root's pip should refuse a wheel for glibc %d.%d on glibc %d.%d: exit %s, %s"
                       % ((suite,) + tag_glibc + glibc + (pip_rc, pip_err[-500:])))
            figures["pip refuses"] = (int(ok), 1)
            print("%s: pip refuses the manylinux_%d_%d wheel on glibc %d.%d" % ((suite,) + tag_glibc + glibc))
            return glibc, figures
        if not check(pip_rc == "0", "%s: pip install of the wheel: exit %s\n%s" % (suite, pip_rc, pip_err[-1500:])):
            return glibc, figures
        print("%s: pip installed %s" % (suite, os.path.basename(wheel)))
        installed_parts(suite, scratch, version, figures)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return glibc, figures


def main():
    build = os.path.dirname(os.path.abspath(mldtest.MLDOCTOR))
    dist = tempfile.mkdtemp(prefix="mld-wheel-dist-")
    os.chmod(dist, 0o755)
    try:
        p = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "build-wheel.py"), build, dist],
                           capture_output=True, text=True)
        wheels = [w for w in p.stdout.split() if "manylinux" in w]
        if not check(p.returncode == 0 and len(wheels) == 1, "build-wheel.py %s: %s %s" % (build, p.stdout, p.stderr)):
            mldtest.finish("roots-wheel")
        wheel = wheels[0]
        m = re.search(r"-(\d+\.\d+\.\d+)-py3-none-manylinux_(\d+)_(\d+)_", os.path.basename(wheel))
        version, tag_glibc = m.group(1), (int(m.group(2)), int(m.group(3)))
        print("wheel: %s" % os.path.basename(wheel))
        suites = [s for s in roots.wanted_suites() if s != "host"]
        with concurrent.futures.ThreadPoolExecutor(len(suites)) as pool:
            results = list(pool.map(lambda s: one_root(s, wheel, tag_glibc, version), suites))
        for suite, res in zip(suites, results):
            if res:
                print("%-8s glibc %d.%d  %s" % (suite, res[0][0], res[0][1], "  ".join(
                    "%s %d/%d" % (k, v[0], v[1]) for k, v in res[1].items())))
    finally:
        shutil.rmtree(dist, ignore_errors=True)
    mldtest.finish("roots-wheel")


main()

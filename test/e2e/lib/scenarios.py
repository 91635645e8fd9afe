"""Fixture builders and runners for the `mldoctor check` scenario tests
(test/e2e/scenario-*.py; not a test itself).

Each scenario has two halves run in the same environment:
  * the real half (the oracle): Debian's /usr/bin/python3 really imports the
    modules, and the test records what happened (thread counts, mapped
    runtimes, the loader's error);
  * the mldoctor half: `mldoctor check --python /usr/bin/python3 --json`
    must predict it.

Fixture extension modules are built with gcc directly (-O0, small), against
the headers of the interpreter under test.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mldtest import CC, MLDOCTOR, check, clean_env, fail  # noqa: E402

PY = "/usr/bin/python3"

# Variables that steer thread pools and the loader; the scenarios set what they
# need on top of an environment without them.
STEERING = ("OMP_", "KMP_", "MKL_", "NUMBA_", "OPENBLAS_NUM_THREADS", "GOMP_",
            "TORCH_", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")

_py_info = {}


def py_info():
    """EXT_SUFFIX and include directory of /usr/bin/python3 (asked, not assumed)."""
    if not _py_info:
        out = subprocess.run(
            [PY, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX')); "
             "print(sysconfig.get_paths()['include'])"],
            capture_output=True, text=True, check=True).stdout.split("\n")
        _py_info["suffix"], _py_info["include"] = out[0], out[1]
    return _py_info


def ext_suffix():
    return py_info()["suffix"]


def has_modules(*names):
    """Whether /usr/bin/python3 can import all of `names` (prerequisites)."""
    code = "import importlib.util,sys; sys.exit(0 if all(importlib.util.find_spec(n) for n in %r) else 1)" % (names,)
    return os.path.exists(PY) and subprocess.run([PY, "-c", code]).returncode == 0


def skip_unless(*modules, tools=()):
    """Exits 77 (ctest: skipped) with a SKIP line when a prerequisite is missing."""
    missing = [m for m in modules if not has_modules(m)]
    missing += [t for t in tools if shutil.which(t) is None and not os.path.exists(t)]
    if missing:
        print("SKIP: %s lacks %s" % (PY, ", ".join(missing)))
        sys.exit(77)


def scenario_env(pythonpath=None, **extra):
    """The environment both halves run in: no loader overrides, no thread or
    layer variables inherited from the caller, plus `extra`."""
    env = {k: v for k, v in clean_env().items() if not k.startswith(STEERING)}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(code, env, timeout=120):
    """Runs /usr/bin/python3 -c CODE; returns the CompletedProcess (text)."""
    return subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------- fixtures

def test_debs_libdir(*files):
    """The library directory of the non-free Debian packages that
    scripts/fetch-test-debs.sh unpacked (make test runs it) into
    $MLD_BUILD_DIR/test-debs, checked to hold FILES. When they are missing the
    test FAILS (exit 1) with what could not be fetched: `make test` is
    supposed to provide them, so this is never a skip."""
    dest = os.environ.get("MLD_TEST_DEBS") or os.path.join(os.environ.get("MLD_BUILD_DIR", "build"), "test-debs")
    libdir = os.path.join(dest, "root", "usr", "lib", "x86_64-linux-gnu")
    missing = [f for f in files if not os.path.exists(os.path.join(libdir, f))]
    if missing:
        why = ""
        try:
            with open(os.path.join(dest, "FETCH-FAILED")) as f:
                why = f.read()
        except OSError:
            why = "(no %s/FETCH-FAILED: was scripts/fetch-test-debs.sh %s run? make test runs it)\n" % (dest, dest)
        print("FAIL: %s lacks %s; what could not be fetched:\n%s" % (libdir, ", ".join(missing), why))
        sys.exit(1)
    return libdir


MODULE_TEMPLATE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
%(body)s
static struct PyModuleDef def_%(name)s = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(name)s(void) { %(init)s return PyModule_Create(&def_%(name)s); }
"""


def build_ext_module(directory, name, body="", init="", needed=(), runpath=None, flags=()):
    """Builds DIRECTORY/NAME<EXT_SUFFIX>, a real single-file extension module
    (PyInit_NAME returns a trivial module; `init` runs first, `body` is extra C
    at file scope). `needed` are linker arguments (e.g. "-L/x", "-l:libfoo.so.1")."""
    path = os.path.join(directory, name + ext_suffix())
    src = MODULE_TEMPLATE % dict(name=name, body=body, init=init)
    cmd = [CC, "-shared", "-fPIC", "-O0", "-I" + py_info()["include"], "-o", path,
           "-xc", "-", "-xnone", "-Wl,--no-as-needed"]
    if runpath is not None:
        cmd += ["-Wl,--enable-new-dtags", "-Wl,-rpath," + runpath]
    cmd += list(flags) + list(needed)
    subprocess.run(cmd, input=src.encode(), check=True)
    return path


def build_so(path, source, soname=None, needed=(), runpath=None, version_script=None, flags=()):
    """A plain fixture shared object from C source."""
    cmd = [CC, "-shared", "-fPIC", "-O0", "-o", path, "-xc", "-", "-xnone", "-Wl,--no-as-needed"]
    if soname:
        cmd.append("-Wl,-soname," + soname)
    if runpath is not None:
        cmd += ["-Wl,--enable-new-dtags", "-Wl,-rpath," + runpath]
    if version_script is not None:
        vs = path + ".map"
        with open(vs, "w") as f:
            f.write(version_script)
        cmd.append("-Wl,--version-script=" + vs)
    cmd += list(flags) + list(needed)
    subprocess.run(cmd, input=source.encode(), check=True)
    return path


def build_omp_runtime_copy(path, soname, src="/usr/lib/x86_64-linux-gnu/libomp.so.5"):
    """A copy of LLVM's OpenMP runtime under another soname (e.g. libiomp5.so),
    as wheels ship it."""
    shutil.copy(os.path.realpath(src), path)
    subprocess.run(["patchelf", "--set-soname", soname, path], check=True)
    return path


def build_mkl_env(d):
    """Seed 000 fixture: D/mklnumpy<EXT> (NEEDED libmkl_rt.so.2, RUNPATH
    $ORIGIN/lib); D/lib/libmkl_rt.so.2 (soname libmkl_rt.so.2, NEEDED
    libiomp5.so, RUNPATH $ORIGIN, as the runtime's own RUNPATH is what finds
    it: the module's RUNPATH does not apply to its dependencies' NEEDED);
    D/lib/libiomp5.so (LLVM libomp, soname libiomp5.so). Returns the paths."""
    lib = os.path.join(d, "lib")
    os.makedirs(lib, exist_ok=True)
    iomp = build_omp_runtime_copy(os.path.join(lib, "libiomp5.so"), "libiomp5.so")
    mkl = build_so(os.path.join(lib, "libmkl_rt.so.2"),
                   "int omp_get_max_threads(void);\n"
                   "int MKL_Get_Max_Threads(void){return omp_get_max_threads();}\n"
                   "int mkl_set_threading_layer(int l){return l;}\n",
                   soname="libmkl_rt.so.2", runpath="$ORIGIN",
                   needed=["-L" + lib, "-l:libiomp5.so"])
    mod = build_ext_module(d, "mklnumpy", body="int MKL_Get_Max_Threads(void);\n"
                           "int mklnumpy_threads(void){return MKL_Get_Max_Threads();}\n",
                           runpath="$ORIGIN/lib", needed=["-L" + lib, "-l:libmkl_rt.so.2"])
    return dict(module=mod, mkl_rt=mkl, iomp=iomp, lib=lib)


def build_tls_modules(d, count=8, size=400):
    """Seed 001 fixture: tlsmod1..tlsmodCOUNT, each with SIZE bytes of
    initial-exec TLS used by a function (so DF_STATIC_TLS is set)."""
    paths = []
    for k in range(1, count + 1):
        body = ('static __thread char b[%d] __attribute__((tls_model("initial-exec")));\n'
                "char *tlsmod%d_buf(void){ b[0] = %d; return b; }\n" % (size, k, k))
        paths.append(build_ext_module(d, "tlsmod%d" % k, body=body))
    return paths


def glibcxx_versions(last):
    """GLIBCXX_3.4, GLIBCXX_3.4.1, ... GLIBCXX_3.4.<last>."""
    return ["GLIBCXX_3.4"] + ["GLIBCXX_3.4.%d" % i for i in range(1, last + 1)]


# One real libstdc++ symbol of a version (GCC 12's libstdc++ defines it), so
# a module built against the stub also links against the real library.
REAL_GLIBCXX_SYMBOLS = {
    "GLIBCXX_3.4.30": "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE",
}


def glibcxx_symbol(version):
    """The stub's symbol at VERSION (a real one where known)."""
    return REAL_GLIBCXX_SYMBOLS.get(version, "stub_" + version.lower().replace(".", "_"))


def build_libstdcxx_stub(directory, last):
    """A stub libstdc++.so.6 (soname libstdc++.so.6) whose version definitions
    are GLIBCXX_3.4 .. GLIBCXX_3.4.<last>, each with one symbol."""
    os.makedirs(directory, exist_ok=True)
    vers = glibcxx_versions(last)
    src, script, prev = [], [], None
    for v in vers:
        sym = glibcxx_symbol(v)
        src.append("int %s(void){return 0;}" % sym)
        script.append("%s { global: %s; %s}%s;" % (v, sym, "local: *; " if prev is None else "",
                                                   " " + prev if prev else ""))
        prev = v
    return build_so(os.path.join(directory, "libstdc++.so.6"), "\n".join(src) + "\n",
                    soname="libstdc++.so.6", version_script="\n".join(script) + "\n")


def build_glibcxx_env(d, needs="GLIBCXX_3.4.30", new_last=30, old_last=28):
    """glibcxx fixture: D/new/libstdc++.so.6 (up to 3.4.NEW_LAST; link time
    only), D/old/libstdc++.so.6 (up to 3.4.OLD_LAST), D/mods/newcxx<EXT> linked
    against the new stub, using a symbol at NEEDS, with DT_RUNPATH D/old."""
    new = build_libstdcxx_stub(os.path.join(d, "new"), new_last)
    old = build_libstdcxx_stub(os.path.join(d, "old"), old_last)
    mods = os.path.join(d, "mods")
    os.makedirs(mods, exist_ok=True)
    sym = glibcxx_symbol(needs)
    mod = build_ext_module(mods, "newcxx", body="int %s(void);\nint newcxx_f(void){return %s();}\n" % (sym, sym),
                           runpath=os.path.dirname(old),
                           needed=["-L" + os.path.dirname(new), "-l:libstdc++.so.6"])
    return dict(module=mod, new=new, old=old, mods=mods)


def mapped_objects(maps_text):
    """Distinct file paths in a /proc/PID/maps text."""
    seen = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and parts[5] not in seen:
            seen.append(parts[5])
    return seen


# ---------------------------------------------------------------- mldoctor half

def run_check(*args, env):
    """`mldoctor check --python /usr/bin/python3 ARGS --json` in ENV.
    Returns (document or None, CompletedProcess or None); failures to run or
    to parse are recorded as test failures."""
    cmd = [MLDOCTOR, "check", "--python", PY] + list(args) + ["--json"]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except OSError as e:
        fail("cannot run %s: %s" % (" ".join(cmd), e))
        return None, None
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("%s: exit %d, stdout is not one JSON object\nstdout:\n%s\nstderr:\n%s"
             % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
        return None, p
    check(p.returncode in (0, 1), "%s: exit %d (0 or 1 expected)\nstderr:\n%s"
          % (" ".join(cmd), p.returncode, p.stderr))
    check(isinstance(doc, dict) and isinstance(doc.get("findings"), list),
          "%s: no \"findings\" list in %r" % (" ".join(cmd), doc))
    return doc, p


def run_traced(argv, env, timeout=300, extra=()):
    """`mldoctor run --json --report FILE EXTRA -- ARGV` in ENV. Returns
    (report document or None, CompletedProcess of the job). The job's own
    output stays in the CompletedProcess: the report goes to the file."""
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as rep:
        cmd = [MLDOCTOR, "run", "--json", "--report", rep.name] + list(extra) + ["--"] + list(argv)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        try:
            with open(rep.name) as f:
                doc = json.load(f)
        except ValueError:
            fail("%s: exit %d, the report is not one JSON object\nstderr:\n%s" % (" ".join(cmd), p.returncode, p.stderr))
            return None, p
    check(isinstance(doc, dict) and isinstance(doc.get("findings"), list) and isinstance(doc.get("processes"), list),
          "%s: no findings/processes in the report" % " ".join(cmd))
    return doc, p


def findings(doc, rule):
    if not isinstance(doc, dict):
        return []
    return [f for f in doc.get("findings") or [] if isinstance(f, dict) and f.get("rule") == rule]


def finding_text(f):
    """Subject, message and evidence texts of one finding, joined."""
    parts = [str(f.get("subject", "")), str(f.get("message", ""))]
    for e in f.get("evidence") or []:
        parts.append(str(e.get("text", "")) if isinstance(e, dict) else str(e))
    return "\n".join(parts)


def expect_finding(doc, rule, what):
    """The one finding RULE (the first if several); records a failure if none."""
    fs = findings(doc, rule)
    if not check(bool(fs), "%s: no %s finding; findings: %s" % (what, rule, summary(doc))):
        return None
    return fs[0]


def expect_no_finding(doc, rule, what):
    fs = findings(doc, rule)
    check(not fs, "%s: unexpected %s finding: %s" % (what, rule, json.dumps(fs, indent=1)))


def summary(doc):
    if not isinstance(doc, dict):
        return "(no document)"
    return json.dumps([(f.get("rule"), f.get("severity"), f.get("subject"), f.get("message"))
                       for f in doc.get("findings") or [] if isinstance(f, dict)], indent=1)


# --- hung jobs of `mldoctor run --hang-timeout` (run-*.py) ---------------------

def stale_lock_job(t):
    """Seed 002: load_inline() of extension x2 with TORCH_EXTENSIONS_DIR=T/ext
    holding an empty x2/lock (what a SIGKILLed builder leaves), HOME a scratch
    directory so the developer's own caches are not looked at. Returns
    (argv, env, cwd, lock path); the job prints "loading", and "loaded" only
    if it gets past the lock."""
    root = os.path.join(t, "ext")
    os.makedirs(os.path.join(root, "x2"))
    lock = os.path.join(root, "x2", "lock")
    open(lock, "w").close()
    home = os.path.join(t, "home")
    os.makedirs(home)
    code = ("import torch.utils.cpp_extension as ce\n"
            "print('loading', flush=True)\n"
            "m = ce.load_inline(name='x2', cpp_sources='int f() { return 42; }', functions=['f'])\n"
            "print('loaded', m.f())\n")
    return [PY, "-c", code], scenario_env(TORCH_EXTENSIONS_DIR=root, HOME=home), home, lock


def gloo_rank_job(t):
    """A gloo job of Debian's torch where rank ODD_RANK sleeps before
    all_reduce (rank.py:9) and the others wait in it (rank.py:11); every rank
    prints "rank R up pid P" after init_process_group and "rank R done" after
    all_reduce. launch.py N ODD rank.py starts N ranks with the variables
    torchrun sets; under mpirun rank.py takes Open MPI's. Returns (rank.py,
    launch.py)."""
    rank_py = os.path.join(t, "rank.py")
    with open(rank_py, "w") as f:
        f.write("import os, time\n"
                "if 'OMPI_COMM_WORLD_RANK' in os.environ: os.environ.update(RANK=os.environ['OMPI_COMM_WORLD_RANK'], "
                "WORLD_SIZE=os.environ['OMPI_COMM_WORLD_SIZE'], MASTER_ADDR='127.0.0.1')\n"
                "import torch\n"
                "import torch.distributed as dist\n"
                "dist.init_process_group('gloo')\n"
                "rank = dist.get_rank()\n"
                "print('rank %d up pid %d' % (rank, os.getpid()), flush=True)\n"
                "if rank == int(os.environ['ODD_RANK']):\n"
                "    time.sleep(600)\n"
                "t = torch.ones(4)\n"
                "dist.all_reduce(t)\n"
                "print('rank %d done' % rank, flush=True)\n")
    launch_py = os.path.join(t, "launch.py")
    with open(launch_py, "w") as f:
        f.write("import os, socket, subprocess, sys\n"
                "n, odd = int(sys.argv[1]), sys.argv[2]\n"
                "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
                "procs = [subprocess.Popen([sys.executable, sys.argv[3]], env=dict(os.environ,\n"
                "    RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), MASTER_ADDR='127.0.0.1',\n"
                "    MASTER_PORT=str(port), ODD_RANK=odd)) for r in range(n)]\n"
                "sys.exit(max(p.wait() for p in procs))\n")
    return rank_py, launch_py

#!/usr/bin/env python3
# labels: slow scenario roots
"""Real messages from real programs, in every Debian generation, read by
`mldoctor logs` (issue 33, item 2): the log rules are written from the
emitters' format strings; here the emitters print them. In this machine's
own Debian 12 and in each test root (bullseye's glibc 2.31, trixie's 2.41,
sid's 2.43), each program runs with that generation's own loader, Python,
LLVM OpenMP and torch, its output goes to a log file, and the top incident
of `mldoctor logs --json` must be the rule that names the cause:

- LD010: dlopen() of a library that is not there (ctypes' OSError).
- LD013: a library whose undefined function no loaded object defines,
  opened with RTLD_NOW.
- TLS010: a library with 1 MiB of initial-exec TLS, dlopen()ed after start.
- LD012: a library that needs GLIBC_2.34 (built here against Debian 12's
  libc), loaded by bullseye's 2.31 — the generation where it fails.
- OMP010: two copies of LLVM's libomp (the root's own, and the same file
  under another name) initialised in one process: the runtime's Error #15.
- JIT010: torch.utils.cpp_extension.load_inline with ninja unusable (an
  empty, non-executable file bound over /usr/bin/ninja).
- JIT016: load_inline of a source that does not compile, with the root's
  g++ and ninja.

Fixtures are built inside each root by its own gcc (one built here would
need GLIBC_2.34 in bullseye), except LD012's, which must need it.
Environment: MLDOCTOR; MLD_ROOT_SUITES limits the roots (comma-separated).
"""
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

check, check_eq = mldtest.check, mldtest.check_eq

FX = "/tmp/fx"  # where the fixture directory is seen inside a root

BUILD = r'''
set -e
cd "$FX"
cat > undef.c <<'EOF'
extern void mld_absent_function(void);
void mld_calls_absent(void) { mld_absent_function(); }
EOF
gcc -shared -fPIC -o libundef.so undef.c
cat > bigtls.c <<'EOF'
__attribute__((tls_model("initial-exec"))) __thread char mld_big_tls[1 << 20];
char *mld_big_tls_at(void) { return mld_big_tls; }
EOF
gcc -shared -fPIC -o libbigtls.so bigtls.c
'''

# Each case: (rule, python code run as `python3 -c`, generations it exists in).
OMP_COPY = r'''
import ctypes, ctypes.util, glob, shutil
real = sorted(glob.glob("/usr/lib/*/libomp.so.5") + glob.glob("/usr/lib/llvm-*/lib/libomp.so.5"))[0]
shutil.copy(real, "{fx}/libomp-copy.so")
for path in (real, "{fx}/libomp-copy.so"):
    ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL).omp_get_max_threads()
print("both runtimes initialised")
'''

JIT = r'''
import os
import torch.utils.cpp_extension as ce
os.makedirs("{fx}/{name}", exist_ok=True)
ce.load_inline(name="mld_log_case", cpp_sources=[{src!r}], functions=["f"],
               build_directory="{fx}/{name}", verbose=True)
'''
BAD_SOURCE = "int f() { return this is not C++; }"
GOOD_SOURCE = "int f() { return 1; }"


def cases(fx):
    return [
        ("LD010", "import ctypes; ctypes.CDLL('libmld-not-installed.so.3')", None),
        ("LD013", "import ctypes; ctypes.CDLL('%s/libundef.so')" % fx, None),
        ("TLS010", "import ctypes; ctypes.CDLL('%s/libbigtls.so')" % fx, None),
        ("LD012", "import ctypes; ctypes.CDLL('%s/libnewglibc.so')" % fx, {"bullseye"}),
        ("OMP010", OMP_COPY.format(fx=fx), None),
        ("JIT010", JIT.format(src=GOOD_SOURCE, fx=fx, name="jit010"), None),
        ("JIT016", JIT.format(src=BAD_SOURCE, fx=fx, name="jit016"), None),
    ]


def top_rule(log_path):
    p = subprocess.run([mldtest.MLDOCTOR, "logs", "--json", log_path], capture_output=True,
                       text=True, timeout=120)
    try:
        doc = json.loads(p.stdout)["inputs"][0]
    except (ValueError, KeyError, IndexError):
        return None, "mldoctor logs exited %d: %s" % (p.returncode, p.stderr)
    return (doc["incidents"][0]["rule"] if doc["incidents"] else None,
            [f["rule"] for f in doc["findings"]])


def build_newglibc(dir_):
    """A library that needs GLIBC_2.34 (pthread_create's version since 2.34),
    built against this machine's glibc 2.36."""
    src = os.path.join(dir_, "newglibc.c")
    with open(src, "w") as f:
        f.write("#include <pthread.h>\nvoid *mld_new_glibc(void) { return (void *)pthread_create; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", os.path.join(dir_, "libnewglibc.so"), src],
                   check=True)
    needs = subprocess.run(["objdump", "-T", os.path.join(dir_, "libnewglibc.so")],
                           capture_output=True, text=True).stdout
    check("GLIBC_2.34" in needs, "the LD012 fixture needs GLIBC_2.34:\n" + needs)


def generation(suite, base):
    """Runs every case of one generation ("host" is this machine's Debian 12)."""
    scratch = os.path.join(base, suite)
    os.makedirs(scratch)
    build_newglibc(scratch)
    if suite == "host":
        fx = scratch
        python = "/usr/bin/python3"  # Debian's, with its torch (not a pyenv one on PATH)

        def run(argv, extra_binds=()):
            env = mldtest.clean_env()
            env.pop("MAKEFLAGS", None)
            if extra_binds:  # the ninja case: hide ninja the same way, in a namespace
                script = ("mount --bind %s /usr/bin/ninja && exec \"$@\"" % extra_binds[0][0])
                argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                        "sh"] + argv
            return subprocess.run(argv, capture_output=True, text=True, cwd=fx, env=env,
                                  timeout=900)
    else:
        root_dir = roots.root(suite)
        fx = FX
        python = "python3"

        def run(argv, extra_binds=()):
            return roots.run(root_dir, argv, binds=[(scratch, FX)] + list(extra_binds),
                             timeout=900, env={"FX": FX})

    built = run(["sh", "-c", BUILD.replace('"$FX"', fx)])
    if not check(built.returncode == 0, "%s: building the fixtures failed:\n%s%s"
                 % (suite, built.stdout, built.stderr)):
        return []
    empty = os.path.join(scratch, "not-ninja")
    open(empty, "w").close()
    os.chmod(empty, 0o644)
    results = []
    for rule, code, where in cases(fx):
        if where is not None and suite not in where:
            continue
        binds = [(empty, "/usr/bin/ninja", "ro")] if rule == "JIT010" else []
        p = run([python, "-c", code], binds)
        log = os.path.join(scratch, rule + ".log")
        with open(log, "w") as f:
            f.write(p.stdout + p.stderr)
        results.append((suite, rule, p.returncode, log))
    return results


def main():
    base = mldtest.scratch()
    wanted = os.environ.get("MLD_ROOT_SUITES")
    suites = ["host"] + [s for s in roots.SUITES if not wanted or s in wanted.split(",")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for results in pool.map(lambda s: generation(s, base), suites):
            for suite, rule, rc, log in results:
                text = open(log, errors="replace").read()
                check(rc != 0, "%s %s: the program did not fail:\n%s" % (suite, rule, text[-3000:]))
                top, found = top_rule(log)
                check_eq(top, rule, "%s: top incident of the real %s message (findings %s)\n%s"
                         % (suite, rule, found, text[-3000:]))
    mldtest.finish("roots-log-messages")


if __name__ == "__main__":
    main()

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
  libc), loaded by bullseye's 2.31 — the generation where it fails; and a
  library built in sid that needs GLIBC_2.43 (free_sized), loaded by Debian
  12's 2.36, bullseye's 2.31 and trixie's 2.41 (sid has it: the message does
  not exist there).
- OMP010: two copies of LLVM's libomp (the root's own, and the same file
  under another name) initialised in one process: the runtime's Error #15.
- JIT010: torch.utils.cpp_extension.load_inline with ninja unusable (an
  empty, non-executable file bound over /usr/bin/ninja).
- JIT016: load_inline of a source that does not compile, with the root's
  g++ and ninja.

Fixtures are built inside each root by its own gcc (one built here would
need GLIBC_2.34 in bullseye), except the two LD012 libraries, which must need a newer glibc.
Environment: MLDOCTOR; MLD_ROOT_SUITES limits the roots (comma-separated).
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

check = mldtest.check

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
        ("LD012-sid", "import ctypes; ctypes.CDLL('%s/libsidglibc.so')" % fx, {"host", "bullseye", "trixie"}),
        ("OMP010", OMP_COPY.format(fx=fx), None),
        ("JIT010", JIT.format(src=GOOD_SOURCE, fx=fx, name="jit010"), None),
        ("JIT016", JIT.format(src=BAD_SOURCE, fx=fx, name="jit016"), None),
    ]


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


def build_sidglibc(base):
    """A library that needs GLIBC_2.43 (free_sized, new in 2.43), built by sid's
    own gcc against its glibc; None when the sid root is not among the roots
    run."""
    out = os.path.join(base, "sid-built")
    os.makedirs(out)
    src = os.path.join(out, "sidglibc.c")
    with open(src, "w") as f:
        f.write("#include <stdlib.h>\nvoid mld_free_sized(void *p, size_t n) { free_sized(p, n); }\n")
    built = roots.run(roots.root("sid"), ["gcc", "-shared", "-fPIC", "-o", FX + "/libsidglibc.so",
                                          FX + "/sidglibc.c"], binds=[(out, FX)], timeout=300)
    if not check(built.returncode == 0, "building libsidglibc.so in sid failed:\n%s%s"
                 % (built.stdout, built.stderr)):
        return None
    lib = os.path.join(out, "libsidglibc.so")
    needs = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True).stdout
    check("GLIBC_2.43" in needs, "the sid LD012 fixture needs GLIBC_2.43:\n" + needs)
    return lib


def generation(suite, base, sid_lib):
    """Runs every case of one generation ("host" is this machine's Debian 12)."""
    scratch = os.path.join(base, suite)
    os.makedirs(scratch)
    build_newglibc(scratch)
    if sid_lib:
        shutil.copy(sid_lib, scratch)
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
    for case, code, where in cases(fx):
        if where is not None and suite not in where:
            continue
        if case == "LD012-sid" and not sid_lib:
            continue
        rule = case.split("-")[0]
        binds = [(empty, "/usr/bin/ninja", "ro")] if rule == "JIT010" else []
        p = run([python, "-c", code], binds)
        results.append(roots.case_result(suite, rule, p, os.path.join(scratch, case + ".log")))
    return results


def main():
    base = mldtest.scratch()
    suites = roots.wanted_suites()
    sid_lib = build_sidglibc(base) if "sid" in suites else None
    roots.check_real_messages(lambda s: generation(s, base, sid_lib), suites, "roots-log-messages")


if __name__ == "__main__":
    main()

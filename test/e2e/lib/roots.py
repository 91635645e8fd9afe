"""The Debian test roots of scripts/make-test-roots.sh, for end-to-end tests
(not a test itself): bullseye, trixie and sid, each a minimal root with
python3, torch, numba, numpy, scipy, scikit-learn, OpenCV, threadpoolctl,
LLVM's libomp, gcc/g++, ninja and torch's C++ headers (libtorch-dev,
pybind11-dev), cached in $MLD_TEST_ROOTS (default
/var/cache/mldoctor/test-roots). `make test` makes them before the tests run.

- root(suite): the root's path, or the test FAILS (exit 1) with why it is not
  usable and what could not be made (SUITE.FAILED): never a skip.
- run(root, argv, ...): a command chrooted into the root in a mount namespace
  of its own (the root read-only, /proc, /sys, /dev bound in, a fresh tmpfs
  on /tmp), so nothing leaks and parallel tests never share or fight over a
  mount.
- versions(root, packages): package versions as the root's dpkg records them,
  to compare with what the root's programs say (never hard-code versions).
"""
import os
import signal
import subprocess
import sys

SUITES = ("bullseye", "trixie", "sid")
SOURCE_DIR = os.environ.get("MLD_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..")
SCRIPT = os.path.join(SOURCE_DIR, "scripts", "make-test-roots.sh")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache():
    return os.environ.get("MLD_TEST_ROOTS") or "/var/cache/mldoctor/test-roots"


def problem(suite):
    """None when the root of `suite` is usable, else why not: the script's own
    check (one source of truth for what a complete root is), which prints
    what SUITE.FAILED says could not be made."""
    p = subprocess.run([SCRIPT, "--check", suite], capture_output=True, text=True,
                       env=dict(os.environ, MLD_TEST_ROOTS=cache()))
    if p.returncode == 0:
        return None
    failed = os.path.join(cache(), suite + ".FAILED")
    why = "" if os.path.exists(failed) else \
        "(no %s: was scripts/make-test-roots.sh run? make test runs it)\n" % failed
    return "the %s test root is not usable:\n%s%s" % (suite, p.stdout + p.stderr, why)


def root(suite):
    """The path of the root of `suite`; the test FAILS when it is not usable."""
    why = problem(suite)
    if why:
        print("FAIL: " + why)
        sys.exit(1)
    return os.path.join(cache(), suite)


def key_packages():
    """The packages whose versions key a root (the script's list)."""
    return subprocess.run([SCRIPT, "--key-packages"], capture_output=True, text=True,
                          check=True).stdout.split()


def versions(root_dir, packages=()):
    """{package: version} of the installed packages of the root (all of them,
    or `packages`), read with dpkg-query from the root's own database."""
    p = subprocess.run(["dpkg-query", "--admindir=" + os.path.join(root_dir, "var/lib/dpkg"), "-W",
                        "-f=${Package}\t${Version}\t${db:Status-Status}\n"] + list(packages),
                       capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        name, version, status = line.split("\t")
        if status == "installed":
            out[name] = version
    return out


# In the new namespace: the root bound read-only onto itself, the kernel's
# trees bound in, a tmpfs on /tmp, then each (source, target, mode) bind;
# targets under /tmp are created on that tmpfs, others must exist in the root.
_IN_ROOT = r'''
set -e
r=$1; cwd=$2; nbinds=$3; shift 3
mount --bind "$r" "$r"
mount -o remount,bind,ro "$r"
mount --rbind /proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=1777 mld-root-tmp "$r/tmp"
while [ "$nbinds" -gt 0 ]; do
  src=$1; target=$2; dst=$r$2; mode=$3; shift 3; nbinds=$((nbinds - 1))
  case "$target" in
    /tmp/*) if [ -d "$src" ]; then mkdir -p "$dst"; else mkdir -p "$(dirname "$dst")"; : >"$dst"; fi ;;
  esac
  mount --bind "$src" "$dst"
  [ "$mode" = ro ] && mount -o remount,bind,ro "$dst"
done
exec chroot "$r" /bin/sh -c 'cd "$0" && exec "$@"' "$cwd" "$@"
'''


def command(root_dir, argv, binds=(), env=None, cwd="/tmp"):
    """The command line (run from this machine) that runs `argv` inside
    `root_dir` as run() does; for wrapping it in another command (`mldoctor
    run -- ...`). Variables of the caller reach the root's first process
    (/usr/bin/env), not `argv`."""
    environment = {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8"}
    environment.update(env or {})
    flat = []
    for b in binds:
        flat += [b[0], b[1], b[2] if len(b) > 2 else "rw"]
    return (["unshare", "--mount", "--propagation", "private", "sh", "-c", _IN_ROOT, "sh",
             root_dir, cwd, str(len(binds))] + flat
            + ["/usr/bin/env", "-i"] + ["%s=%s" % kv for kv in environment.items()] + list(argv))


def run(root_dir, argv, binds=(), env=None, cwd="/tmp", timeout=600, input=None):
    """Runs `argv` inside `root_dir` (see _IN_ROOT) with a clean environment
    (PATH, HOME=/tmp, LANG=C.UTF-8, plus `env`). `binds`: (source, target) or
    (source, target, "ro") pairs, a target being a path in the root. Returns a
    CompletedProcess with text output; on timeout the whole process group is
    killed and its returncode is -9."""
    cmd = command(root_dir, argv, binds, env, cwd)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(input, timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = -9
        err += "\n(killed after %d s)" % timeout
    return subprocess.CompletedProcess(argv, rc, out, err)


def wanted_suites():
    """"host" (this machine's Debian 12) and the test roots MLD_ROOT_SUITES
    names (comma-separated; all of SUITES when unset), in order."""
    wanted = os.environ.get("MLD_ROOT_SUITES")
    return ["host"] + [s for s in SUITES if not wanted or s in wanted.split(",")]


def case_result(suite, rule, proc, log):
    """Writes a finished program's output to `log` and returns the case as
    check_real_messages() takes it."""
    with open(log, "w") as f:
        f.write(proc.stdout + proc.stderr)
    return (suite, rule, proc.returncode, log)


def check_real_messages(generation, suites, name, must_print=None):
    """Runs generation(suite) for every suite, two at a time; each returns
    (suite, rule, exit status, path of the program's output) per case. Checks
    that every program failed, printed `must_print` when given (any of a
    tuple), and that the top incident of `mldoctor logs` on its output is the
    rule. Then finishes the test `name`."""
    import concurrent.futures
    import mldtest
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for results in pool.map(generation, suites):
            for suite, rule, rc, log in results:
                text = open(log, errors="replace").read()
                mldtest.check(rc != 0, "%s %s: the program did not fail:\n%s" % (suite, rule, text[-3000:]))
                if must_print:
                    mldtest.check(any(m in text for m in must_print), "%s %s: the program printed %r:\n%s"
                                  % (suite, rule, must_print, text[-3000:]))
                top, found = mldtest.logs_top_rule(log)
                mldtest.check_eq(top, rule, "%s: top incident of the real %s message (findings %s)\n%s"
                                 % (suite, rule, found, text[-3000:]))
    mldtest.finish(name)

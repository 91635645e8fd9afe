"""Helpers shared by the Python end-to-end tests (not a test itself).

Fixture libraries are built for real with gcc; the oracle is the real loader
(`ld.so --list`) or a real dlopen(), never mldoctor's own model.
"""
import atexit
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading

LDSO = "/lib64/ld-linux-x86-64.so.2"
MLDOCTOR = os.environ.get("MLDOCTOR", "mldoctor")
CC = os.environ.get("CC", "gcc")

_failures = []
_passed = [0]
# The counters may be updated from several threads (tests that run the
# Debian roots side by side).
_lock = threading.RLock()


_scratch_dirs = []
_owner_pid = os.getpid()
_crashed = [False]


def scratch(prefix="mld-e2e-", dir=None):
    """A fresh temporary directory for one test, removed when the test
    passes (kept, and named, when it fails or MLD_KEEP_SCRATCH is set)."""
    d = tempfile.mkdtemp(prefix=prefix, dir=dir)
    with _lock:
        _scratch_dirs.append(d)
    return d


def _mounts_under(d):
    """Mount points at or below d (a test that left a bind mount behind):
    removing through them would delete what the mount shows."""
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                target = line.split()[4].replace("\\040", " ")
                if target == d or target.startswith(d + "/"):
                    found.append(target)
    except OSError:
        pass
    return found


def _remove_tree(d):
    def inside(path):
        return path == d or path.startswith(d + "/")

    def writable_and_retry(func, path, _exc):
        # Tests make unreadable files and directories on purpose; never
        # change a mode outside d (its parent is /tmp).
        try:
            if inside(os.path.dirname(path)):
                os.chmod(os.path.dirname(path), stat.S_IRWXU)
            if inside(path) and os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            func(path)
        except OSError:
            pass
    if os.path.isdir(d) and not os.path.islink(d):
        shutil.rmtree(d, onerror=writable_and_retry)


def _remove_scratch():
    # Only the process that made them (not a forked child calling sys.exit).
    if os.getpid() != _owner_pid or not _scratch_dirs:
        return
    if _failures or _crashed[0] or os.environ.get("MLD_KEEP_SCRATCH"):
        print("scratch kept: " + " ".join(_scratch_dirs))
        return
    for d in _scratch_dirs:
        mounts = _mounts_under(os.path.realpath(d))
        if mounts:
            print("scratch kept: %s (mounted there: %s)" % (d, " ".join(mounts)))
            continue
        _remove_tree(d)


atexit.register(_remove_scratch)
_previous_excepthook = sys.excepthook


def _note_crash(*exc):
    _crashed[0] = True
    _previous_excepthook(*exc)


sys.excepthook = _note_crash


def build_lib(path, soname=None, needed=(), rpath=None, runpath=None, source=None, flags=()):
    """Builds a shared object at `path` linking the given fixture objects."""
    src = source or "int %s_f(void){return 42;}\n" % os.path.basename(path).split(".")[0].replace("-", "_")
    cmd = [CC, "-shared", "-fPIC", "-o", path, "-xc", "-", "-xnone", "-Wl,--no-as-needed"]
    if soname:
        cmd.append("-Wl,-soname," + soname)
    if rpath is not None:
        cmd += ["-Wl,--disable-new-dtags", "-Wl,-rpath," + rpath]
    if runpath is not None:
        cmd += ["-Wl,--enable-new-dtags", "-Wl,-rpath," + runpath]
    cmd += list(flags)
    cmd += list(needed)
    subprocess.run(cmd, input=src.encode(), check=True)
    return path


def build_exe(path, needed=(), rpath=None, runpath=None, flags=()):
    cmd = [CC, "-o", path, "-xc", "-", "-xnone", "-Wl,--no-as-needed"]
    if rpath is not None:
        cmd += ["-Wl,--disable-new-dtags", "-Wl,-rpath," + rpath]
    if runpath is not None:
        cmd += ["-Wl,--enable-new-dtags", "-Wl,-rpath," + runpath]
    cmd += list(flags) + list(needed)
    subprocess.run(cmd, input=b"int main(void){return 0;}\n", check=True)
    return path


def parse_trace(stdout):
    """Objects in the loader's trace output: [(name, path-or-None)] in order."""
    objs = []
    for line in stdout.splitlines():
        if not line.startswith("\t"):
            continue
        s = line[1:]
        if s.startswith("linux-vdso.so") or ": version `" in s or s == "statically linked":
            continue
        if " => not found" in s:
            objs.append((s.split(" => ")[0], None))
        elif " => " in s:
            name, rest = s.split(" => ", 1)
            objs.append((name, rest.rsplit(" (0x", 1)[0]))
        else:
            objs.append((s.rsplit(" (0x", 1)[0],) * 2)
    return objs


def ldso_trace(path, env=None, cwd=None, timeout=60):
    """Runs the real loader in ldd's trace mode on `path`. Unlike `ld.so
    --list`, which stops at the first missing library in glibc 2.36,
    LD_TRACE_LOADED_OBJECTS=1 prints "not found" and goes on."""
    env = dict(env if env is not None else os.environ, LD_TRACE_LOADED_OBJECTS="1")
    p = subprocess.run([LDSO, path], env=env, cwd=cwd, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def ldso_list(path, env=None, cwd=None):
    """What the real loader loads: ([(name, path-or-None)], exit status, stderr)."""
    rc, out, err = ldso_trace(path, env, cwd)
    return parse_trace(out), rc, err


def mldoctor(*args, env=None, cwd=None, check_rc=None):
    p = subprocess.run([MLDOCTOR] + list(args), env=env, cwd=cwd, capture_output=True, text=True)
    if check_rc is not None and p.returncode != check_rc:
        fail("mldoctor %s: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s"
             % (" ".join(args), p.returncode, check_rc, p.stdout, p.stderr))
    return p


def model_list(path, env=None, cwd=None):
    """mldoctor's prediction in the same shape as ldso_list."""
    p = mldoctor("libs", "--json", path, env=env, cwd=cwd)
    doc = json.loads(p.stdout)
    inp = doc["inputs"][0]
    return [(o["name"], o["path"]) for o in inp["objects"][1:]], doc


def fail(msg):
    with _lock:
        _failures.append(msg)
        print("FAIL: " + msg)


def check(cond, msg):
    with _lock:
        if not cond:
            fail(msg)
        else:
            _passed[0] += 1
    return cond


def check_eq(actual, expected, what):
    if actual != expected:
        fail("%s\n  expected: %r\n  actual:   %r" % (what, expected, actual))
        return False
    with _lock:
        _passed[0] += 1
    return True


def check_in(needle, haystack, what):
    if needle not in haystack:
        fail("%s: %r not found in output:\n%s" % (what, needle, haystack))
        return False
    with _lock:
        _passed[0] += 1
    return True


def finish(name, checks=None):
    print("%s: %d passed, %d failed" % (name, _passed[0], len(_failures)))
    sys.exit(1 if _failures else 0)


def logs_top_rule(log_path):
    """The rule of the first incident of `mldoctor logs` on a file (None when
    there is none) and every finding's rule; on a tool failure, None and why."""
    p = subprocess.run([MLDOCTOR, "logs", "--json", log_path], capture_output=True, text=True,
                       timeout=120)
    try:
        doc = json.loads(p.stdout)["inputs"][0]
    except (ValueError, KeyError, IndexError):
        return None, "mldoctor logs exited %d: %s" % (p.returncode, p.stderr)
    return (doc["incidents"][0]["rule"] if doc["incidents"] else None,
            [f["rule"] for f in doc["findings"]])


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "GLIBC_TUNABLES", "LD_AUDIT")}
    env.update(extra)
    return env

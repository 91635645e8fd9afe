"""The real torch.utils.cpp_extension, as the JIT scenario tests run it (not
a test itself): load_inline() in a child of its own process group, its
output in a file, waited for with a bound and killed as a group; whether
torch's headers are there to compile with.

Every child bounds its own life too (SIGALRM's default action ends it), so
none outlives a test that was SIGKILLed before its cleanup could run.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mldtest import scratch  # noqa: E402
from scenarios import PY, run_python, scenario_env  # noqa: E402

HANG_TIMEOUT = 15      # seconds a waiter on a stale lock is given before we call it hung
BUILD_TIMEOUT = 400    # a real build of the tiny extension (~20-40 s on 2 cores)

# Debian's python3-torch ships torch/include/* as symlinks into /usr/include,
# which only libtorch-dev fills (and torch/extension.h needs pybind11-dev).
# Without them a load gets past the lock but fails to compile. The probe
# preprocesses torch/extension.h with torch's own include paths.
PROBE = r"""
import os, subprocess, sys, sysconfig, torch.utils.cpp_extension as ce
inc = ["-isystem" + d for d in ce.include_paths()] + ["-isystem" + sysconfig.get_paths()["include"]]
p = subprocess.run(["c++", "-E", "-xc++", "-", "-o", os.devnull] + inc,
                   input=b"#include <torch/extension.h>\n", capture_output=True)
sys.stderr.write(p.stderr.decode(errors="replace")[-300:])
sys.exit(p.returncode)
"""


def have_headers():
    """Whether torch/extension.h preprocesses; prints why not when it does not."""
    p = run_python(PROBE, scenario_env())
    if p.returncode != 0:
        print("note: cannot preprocess torch/extension.h (Debian: libtorch-dev, pybind11-dev):\n"
              + p.stderr.strip())
    return p.returncode == 0


LOAD = r"""
import signal; signal.alarm(%d)
import torch.utils.cpp_extension as ce
src = '''
int f() { return 42; }
'''
try:
    m = ce.load_inline(name=%r, cpp_sources=src, functions=["f"], verbose=True)
except OSError as e:
    print("RAISED %%s: %%s" %% (type(e).__name__, e), flush=True)
    raise SystemExit(3)
print("RESULT", m.f(), flush=True)
"""

_children = []   # Popen objects, each the leader of its own process group
_dirs = []


def cleanup():
    """Kills every child started here and removes every scratch directory."""
    for p in _children:
        kill_group(p)
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)


def tmpdir():
    """A scratch directory removed by cleanup()."""
    d = scratch()
    _dirs.append(d)
    return d


def spawn(argv, env, **kw):
    """Starts argv in its own session; cleanup() kills its group."""
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True, **kw)
    _children.append(p)
    return p


def kill_group(p):
    """SIGKILLs the whole process group of P (P was started in its own session)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def make_env(ext_root, home):
    """The load's environment: TORCH_EXTENSIONS_DIR=ext_root (None: unset, the
    default cache under home), HOME=home, no XDG_CACHE_HOME."""
    env = scenario_env(HOME=home, PYTHONUNBUFFERED=1)
    env.pop("XDG_CACHE_HOME", None)
    env.pop("TORCH_EXTENSIONS_DIR", None)
    if ext_root is not None:
        env["TORCH_EXTENSIONS_DIR"] = ext_root
    return env


def start_load(name, env, cwd):
    """Starts load_inline(NAME) in its own process group; output (stdout and
    stderr merged) goes to a file. Returns (Popen, output path, start time)."""
    out = os.path.join(cwd, "load-%s-%d.log" % (name, len(_children)))
    with open(out, "wb") as f:
        p = spawn([PY, "-c", LOAD % (BUILD_TIMEOUT + 60, name)], env, cwd=cwd, stdout=f,
                  stderr=subprocess.STDOUT)
    return p, out, time.monotonic()


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def wait_load(p, out, t0, timeout):
    """Waits up to TIMEOUT s for a load started by start_load; on timeout kills
    its whole process group. Returns (timed_out, returncode, output, seconds)."""
    try:
        p.wait(timeout=max(0.0, timeout - (time.monotonic() - t0)))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(p)
    return timed_out, p.returncode, read(out), time.monotonic() - t0


def wait_for_text(p, out, text, timeout):
    """Polls OUT until TEXT appears or P exits; returns whether TEXT appeared."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if text in read(out):
            return True
        if p.poll() is not None:
            return text in read(out)
        time.sleep(0.05)
    return False

#!/usr/bin/env python3
# labels: slow scenario roots
"""`mldoctor jit` against each Debian generation's own
torch.utils.cpp_extension (issue 32, item 2g): bullseye's torch 1.7,
trixie's 2.6 and sid's 2.14, each in its test root with its own g++, ninja
and torch headers.

In each root, with HOME on a scratch directory (never a real cache):
1. Build directory names. torch's own _get_build_directory("x2") gives the
   directory a load of x2 uses (the tag level, py313_cpu, exists since
   torch 1.9; 1.7 builds directly in the cache). `mldoctor jit --json` run
   inside the root must list x2 at exactly that path, with that tag.
2. An empty x2/lock, as a builder SIGKILLed under FileBaton leaves it, then
   the real load_inline(verbose=True). The real outcome is the oracle: a
   torch with FileBaton waits forever (still running after HANG seconds,
   build.ninja never written), and `mldoctor jit` must report JIT001 for the
   lock while it spins; a torch with pytorch#190543 (filelock's OS advisory
   lock; Debian's 2.14) builds through the leftover file, and `mldoctor jit`
   must not report it stale but mark it advisory.
   What the load printed is given to `mldoctor logs`: for a hung load JIT019
   ("log stops after 'Using ... as PyTorch extensions root'") must be found
   exactly when torch printed that line (since pytorch#152260 torch logs it
   with logging.info, which prints nothing unless the job configures
   logging; the test shows which).
3. `mldoctor jit --fix` removes FileBaton's stale lock and keeps an advisory
   one, saying so; then the real load_inline builds (or loads) and f()
   returns 42; `mldoctor jit --json` lists x2's module at the path Python
   imported and no finding at warning or above (a lock file left by a
   successful advisory-lock build included).

0. First contact without setuptools (JIT024): a venv of the root's python3
   (`venv --without-pip`, as uv makes them: no pip, no setuptools) whose
   site-packages links every entry of the root's dist-packages but
   setuptools, pkg_resources and _distutils_hack. The real `import
   torch.utils.cpp_extension` there is the oracle: it fails with "No module
   named 'M'", and `mldoctor jit --python <venv>/bin/python` must report
   JIT024 for exactly M, at the line of cpp_extension.py that imports it,
   with the uv command (the venv has no pip) as the fix; the root's own
   python3, which has setuptools, must not get JIT024. Then M is linked in,
   as installing it would, and both the real import and mldoctor agree it
   works.

mldoctor runs inside each root (test/e2e/lib/inroot.py), so HOME, the
interpreter, its torch and /proc are the ones the real load sees.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import inroot  # noqa: E402
import roots  # noqa: E402
from mldtest import MLDOCTOR, check, check_eq, check_in, fail, finish, scratch  # noqa: E402

HANG = 15          # seconds a waiter on the stale lock is given before we call it hung
BUILD = 600        # a real build of the tiny extension in a root (~1 min on 2 cores)
HOME = "/tmp/h"    # inside each root, bound to a scratch directory here

# torch's own answer: the build directory of a load of argv[1].
PROBE = r'''
import json, sys, torch, torch.utils.cpp_extension as ce
d = ce._get_build_directory(sys.argv[1], False)
print(json.dumps({"build_dir": d, "torch": torch.__version__,
                  "default_root": ce.get_default_build_root()}))
'''

LOAD = r'''
import signal, sys; signal.alarm(%d)
import torch.utils.cpp_extension as ce
print("LOADING", flush=True)
m = ce.load_inline(name=sys.argv[1], cpp_sources="int f() { return 42; }", functions=["f"],
                   verbose=True)
print("RESULT", m.f(), m.__file__, flush=True)
''' % (BUILD + 60)


def host_path(scratch_dir, path):
    """A path under HOME in the root, as this machine reaches it."""
    return os.path.join(scratch_dir, os.path.relpath(path, HOME))


def jit(root, scratch_dir, *args):
    """`mldoctor jit ARGS` inside the root; (exit status, stdout, stderr)."""
    argv = inroot.mldoctor_argv(MLDOCTOR, ["jit", "--python", "/usr/bin/python3"] + list(args))
    p = roots.run(root, argv, binds=[(scratch_dir, HOME)] + inroot.mldoctor_binds(MLDOCTOR),
                  env={"HOME": HOME}, timeout=300)
    return p.returncode, p.stdout, p.stderr


def jit_json(root, scratch_dir, what):
    rc, out, err = jit(root, scratch_dir, "--json")
    try:
        return rc, json.loads(out)
    except ValueError:
        fail("%s: mldoctor jit --json: exit %d, no JSON\n%s" % (what, rc, err[-2000:]))
        return rc, None


def extension(doc, name):
    for e in (doc or {}).get("extensions", []):
        if e.get("name") == name:
            return e
    return None


# A venv whose site-packages links the root's dist-packages but setuptools
# and what comes with it, and pip (the roots have Debian's python3-pip since
# roots-wheel.py: this venv stays one without pip); prints the venv's
# site-packages directory.
NO_SETUPTOOLS = r'''
import os, sys, sysconfig
venv = sys.argv[1]
site = sysconfig.get_path("purelib", vars={"base": venv, "platbase": venv})
dist = "/usr/lib/python3/dist-packages"
left_out = ("setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence", "pip")
for name in sorted(os.listdir(dist)):
    if not name.startswith(left_out):
        os.symlink(os.path.join(dist, name), os.path.join(site, name))
print(site)
'''

IMPORT = "import torch.utils.cpp_extension; print('IMPORTED')"


def without_setuptools(suite, root, d, binds, env):
    """Part 0: torch.utils.cpp_extension in an environment without setuptools."""
    venv = HOME + "/nost"
    python = venv + "/bin/python"
    p = roots.run(root, ["/usr/bin/python3", "-m", "venv", "--without-pip", venv], binds=binds, env=env,
                  timeout=120)
    if not check_eq(p.returncode, 0, "%s: venv --without-pip (stderr %s)" % (suite, p.stderr[-800:])):
        return
    p = roots.run(root, [python, "-c", NO_SETUPTOOLS, venv], binds=binds, env=env, timeout=120)
    if not check_eq(p.returncode, 0, "%s: linking dist-packages into the venv (stderr %s)" % (suite, p.stderr[-800:])):
        return
    site = p.stdout.strip()
    real = roots.run(root, [python, "-c", IMPORT], binds=binds, env=env, timeout=300)
    missing = re.search(r"No module named '([\w.]+)'", real.stderr)
    if not check(real.returncode != 0 and missing, "%s: the real import of torch.utils.cpp_extension without "
                 "setuptools fails with ModuleNotFoundError (exit %d)\n%s"
                 % (suite, real.returncode, (real.stdout + real.stderr)[-1500:])):
        return
    module = missing.group(1).split(".")[0]
    where = re.findall(r'File "([^"]*cpp_extension\.py)", line (\d+)', real.stderr)
    argv = inroot.mldoctor_argv(MLDOCTOR, ["jit", "--python", python, "--json"])
    mld_binds = binds + inroot.mldoctor_binds(MLDOCTOR)
    p = roots.run(root, argv, binds=mld_binds, env=env, timeout=300)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("%s: mldoctor jit --python %s --json: exit %d\n%s" % (suite, python, p.returncode, p.stderr[-1500:]))
        return
    found = [x for x in doc.get("findings", []) if x["rule"] == "JIT024"]
    if check_eq([x.get("subject") for x in found], [module], "%s: JIT024 for the module the real import misses "
                "(its error: %s)" % (suite, missing.group(0))):
        f = found[0]
        check_in("uv pip install --python %s " % python, f.get("fix", ""),
                 "%s: JIT024's fix for a venv without pip" % suite)
        if where:
            lines = [str(e.get("line")) for e in f.get("evidence", []) if e.get("file", "").endswith("cpp_extension.py")]
            check_eq(lines, [where[-1][1]], "%s: JIT024's evidence is the line the real traceback names" % suite)
        check_eq(f.get("severity"), "warning", "%s: JIT024 with no extension build in sight" % suite)
    # The module made importable as an install would (its directory linked in).
    for name in ("setuptools", "pkg_resources", "_distutils_hack"):
        src = "/usr/lib/python3/dist-packages/" + name
        if os.path.exists(os.path.join(root, src.lstrip("/"))):
            os.symlink(src, host_path(d, os.path.join(site, name)))
    real = roots.run(root, [python, "-c", IMPORT], binds=binds, env=env, timeout=300)
    check("IMPORTED" in real.stdout, "%s: with setuptools linked in, the real import works (exit %d)\n%s"
          % (suite, real.returncode, real.stderr[-1500:]))
    p = roots.run(root, argv, binds=mld_binds, env=env, timeout=300)
    check('"JIT024"' not in p.stdout, "%s: no JIT024 once the import works: %s" % (suite, p.stdout[-1500:]))
    print("%s: without setuptools the real import fails (\"%s\"); mldoctor: JIT024 for %s" % (
        suite, missing.group(0), module))


def one(suite):
    root = roots.root(suite)
    d = scratch()
    os.chmod(d, 0o777)
    binds = [(d, HOME)]
    env = {"HOME": HOME, "PYTHONUNBUFFERED": "1"}

    # 0. torch.utils.cpp_extension where setuptools is missing.
    without_setuptools(suite, root, d, binds, env)

    # 1. Where torch builds x2, by torch's own function.
    p = roots.run(root, ["/usr/bin/python3", "-c", PROBE, "x2"], binds=binds, env=env, timeout=300)
    if not check_eq(p.returncode, 0, "%s: torch's _get_build_directory (stderr %s)" % (suite, p.stderr[-1500:])):
        return
    real = json.loads(p.stdout)
    build_dir = real["build_dir"]
    parent = os.path.dirname(build_dir)
    tag = None if os.path.realpath(parent) == os.path.realpath(real["default_root"]) else os.path.basename(parent)
    print("%s: torch %s builds x2 in %s (tag level: %s)" % (suite, real["torch"], build_dir, tag or "none"))
    rc, doc = jit_json(root, d, suite)
    e = extension(doc, "x2")
    if check(e is not None, "%s: mldoctor jit lists x2 (torch made %s); extensions: %s"
             % (suite, build_dir, [x.get("path") for x in (doc or {}).get("extensions", [])])):
        check_eq(e["path"], build_dir, "%s: x2's build directory as torch computes it" % suite)
        check_eq(e.get("tag"), tag, "%s: x2's tag level" % suite)
    check(not [x for x in (doc or {}).get("findings", []) if x["rule"] == "JIT024"],
          "%s: no JIT024 for the root's python3, which has setuptools" % suite)

    # 2. An empty lock file, as a builder killed under FileBaton leaves it.
    # The real outcome decides: FileBaton's waiter spins and never writes
    # build.ninja; under the OS advisory lock (filelock, pytorch#190543) the
    # load takes the lock and builds.
    lock = os.path.join(build_dir, "lock")
    ninja_file = host_path(d, os.path.join(build_dir, "build.ninja"))
    open(host_path(d, lock), "w").close()
    out_path = os.path.join(d, "waiter.log")
    with open(out_path, "wb") as f:
        waiter = subprocess.Popen(roots.command(root, ["/usr/bin/python3", "-c", LOAD, "x2"], binds, env),
                                  stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        # HANG counts from the moment torch is imported and load_inline is
        # called (importing torch alone can take longer on a busy machine).
        deadline = time.monotonic() + BUILD
        while waiter.poll() is None and time.monotonic() < deadline:
            with open(out_path, "rb") as f:
                if b"LOADING" in f.read():
                    break
            time.sleep(0.1)
        time.sleep(HANG)
        hung = waiter.poll() is None and not os.path.exists(ninja_file)
        rc, doc = jit_json(root, d, suite + " (load started behind the lock file)")
        e = extension(doc, "x2")
        found = [x for x in (doc or {}).get("findings", []) if x["rule"] == "JIT001"]
        rules = [x["rule"] for x in (doc or {}).get("findings", [])]
        if hung:
            check_eq([x.get("subject") for x in found], [lock], "%s: the real load waits behind the lock file: "
                     "JIT001 for it; findings %s" % (suite, rules))
            check(e is not None and e["lock"] and not e["lock"].get("advisory"),
                  "%s: the lock is FileBaton's, not advisory: %s" % (suite, e and e["lock"]))
            check_eq(rc, 1, "%s: jit's exit status with a stale lock" % suite)
        else:
            waiter.wait(timeout=BUILD)
            check(not found, "%s: the real load went through the lock file (torch's OS advisory lock), yet "
                  "JIT001: %s" % (suite, found))
            check(e is not None and e["lock"] and e["lock"].get("advisory"),
                  "%s: the lock taken for torch's advisory lock: %s" % (suite, e and e["lock"]))
        with open(out_path, "rb") as f:
            printed = f.read().decode("utf-8", "replace")
        check("Building extension module" not in printed or not hung,
              "%s: a waiter that never wrote build.ninja printed a build: %r" % (suite, printed[-800:]))
        if not hung:
            check_in("RESULT 42", printed, "%s: the load behind the leftover lock file built and ran" % suite)
    finally:
        if waiter.poll() is None:
            os.killpg(waiter.pid, signal.SIGKILL)
        waiter.wait()
    print("%s: a load behind an empty lock file %s" % (
        suite, "waits forever (FileBaton): JIT001" if hung else
        "builds (torch's OS advisory lock): no JIT001, the file is kept"))

    # What the waiting load printed, read by `mldoctor logs`.
    says_root = "as PyTorch extensions root" in printed
    p = subprocess.run([MLDOCTOR, "logs", "--json", out_path], capture_output=True, text=True, timeout=120)
    try:
        rules = [x["rule"] for i in json.loads(p.stdout)["inputs"] for x in i["findings"]]
    except (ValueError, KeyError):
        rules = None
        fail("%s: mldoctor logs --json on the load's output: exit %d\n%s" % (suite, p.returncode, p.stderr))
    if rules is not None and hung:
        check_eq("JIT019" in rules, says_root, "%s: JIT019 from the hung load's output exactly when torch printed "
                 "its 'Using ... as PyTorch extensions root' line (output: %r; rules %s)"
                 % (suite, printed[-400:], rules))
    if rules is not None and not hung:
        check("JIT019" not in rules, "%s: JIT019 on the output of a load that built: %s" % (suite, rules))
    print("%s: with verbose=True the load printed %s" % (
        suite, "torch's extensions-root line" if says_root else
        "no extensions-root line (%d bytes: torch logs it with logging.info, which no handler shows)"
        % len(printed)))

    # 3. --fix removes FileBaton's stale lock and keeps an advisory one; the
    # real build then succeeds.
    rc, out, err = jit(root, d, "--fix")
    check_in(lock, out, "%s: jit --fix names the lock it acts on" % suite)
    check_eq(os.path.exists(host_path(d, lock)), not hung, "%s: after jit --fix the lock file is %s (exit %d)\n%s%s"
             % (suite, "gone" if hung else "kept", rc, out, err))
    t0 = time.monotonic()
    p = roots.run(root, ["/usr/bin/python3", "-c", LOAD, "x2"], binds=binds, env=env, timeout=BUILD + 120)
    took = time.monotonic() - t0
    result = [line.split() for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    if not check(p.returncode == 0 and result and result[0][1] == "42",
                 "%s: the real load_inline builds after the fix and f() returns 42 (exit %d)\n%s"
                 % (suite, p.returncode, (p.stdout + p.stderr)[-3000:])):
        return
    module = result[0][2]
    rc, doc = jit_json(root, d, suite + " (built)")
    e = extension(doc, "x2")
    if check(e is not None, "%s: mldoctor jit lists the built x2" % suite):
        check_eq(os.path.realpath(host_path(d, e.get("module") or HOME)), os.path.realpath(host_path(d, module)),
                 "%s: x2's module is the file Python imported" % suite)
        check(e.get("for_this_environment", True), "%s: x2 taken as built for this environment: %s" % (suite, e))
    bad = [x for x in (doc or {}).get("findings", []) if x.get("severity") in ("warning", "error")]
    check(not bad, "%s: no warning or error once built: %s" % (suite, [(x["rule"], x.get("subject")) for x in bad]))
    print("%s: after jit --fix the real build took %.0f s; f() = 42" % (suite, took))


for s in roots.SUITES:
    one(s)
finish("roots-jit")

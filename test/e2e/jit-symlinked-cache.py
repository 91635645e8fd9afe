#!/usr/bin/env python3
# labels: slow scenario
"""Issue 31, item 3: extension caches linked to scratch or shared storage.

Oracle: Debian's real torch.utils.cpp_extension.load_inline(verbose=True),
run by /usr/bin/python3 with HOME=<scratch>.

1. A build directory that is a symbolic link (the default cache,
   ~/.cache/torch_extensions/<tag>/xlink -> <scratch storage>/xlink) with a
   stale `lock` behind the link: the real load waits forever (killed after
   HANG_TIMEOUT s). `mldoctor jit` reports JIT001 naming the link and the real
   path (before: "✓ no findings"); `--fix --dry-run` says what it would remove
   and removes nothing; `--fix` removes the real lock, prints its real path,
   and leaves the link and the directory; then the real load_inline builds
   there and f() returns 42.
2. A cache root that is a link (~/.cache/torch_extensions -> storage): the
   real load waits on the lock under the real root; mldoctor names the root's
   real path and the lock's; `--fix` removes it. And a TORCH_EXTENSIONS_DIR
   that is a link, in JSON: the action's real_path.
3. A lock behind a link held open by a live process (made as FileBaton makes
   it): JIT002 names the pid; `--fix` keeps it.
4. Links that lead nowhere: a dangling build directory link and a loop make
   the real load fail at once with FileExistsError, a looping
   TORCH_EXTENSIONS_DIR with "Too many levels of symbolic links"; mldoctor
   reports JIT009 with the same error, returns promptly, and `--fix` leaves
   every link in place.
5. As root: a link owned by another user (65534) that leads to a directory
   of root's holding a `lock` (what a planted link looks like): the lock is
   reported, and `--fix` keeps it, saying whose link it is.
"""
import atexit
import json
import os
import select
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, fail, finish  # noqa: E402
from scenarios import PY, skip_unless  # noqa: E402
from torch_load import (BUILD_TIMEOUT, HANG_TIMEOUT, cleanup, have_headers, make_env, spawn,  # noqa: E402
                        start_load, tmpdir, wait_load)

skip_unless("torch", tools=("ninja", "c++"))
HAVE_HEADERS = have_headers()
atexit.register(cleanup)
for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_sig, lambda signum, frame: sys.exit(128 + signum))

TAG = subprocess.run([PY, "-c", "import sys, torch; c = torch.version.cuda; "
                      "print('py%d%d_' % sys.version_info[:2] + ('cpu' if c is None else 'cu' + c.replace('.', '')))"],
                     capture_output=True, text=True, check=True).stdout.strip()


def jit(*args, env, cwd):
    """`mldoctor jit --python /usr/bin/python3 ARGS`, bounded: a loop must not hang it."""
    try:
        return subprocess.run([MLDOCTOR, "jit", "--python", PY, "--no-color"] + list(args), env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("mldoctor jit %s did not return within 120 s" % " ".join(args))
        return subprocess.CompletedProcess(args, -1, "", "")


def show(what, p):
    print("$ mldoctor jit %s  (exit %d)\n%s%s" % (what, p.returncode, p.stdout, p.stderr))


def stale_lock(directory):
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, "lock"), "w").close()   # what a SIGKILLed builder leaves


def hangs(name, env, cwd, what):
    """The real load_inline(NAME) waits on the lock: still running after HANG_TIMEOUT s."""
    p, out, t0 = start_load(name, env, cwd)
    timed_out, rc, text, secs = wait_load(p, out, t0, HANG_TIMEOUT)
    print("real: load_inline(%r) %s: %s after %.1f s\n%s" % (name, what, "still waiting, killed" if timed_out
                                                             else "exited %s" % rc, secs, text.rstrip()))
    check(timed_out, "%s: load_inline should wait on the stale lock (it exited %s)\n%s" % (what, rc, text))
    check("Building extension module" not in text, "%s: the waiter must not build:\n%s" % (what, text))
    return text


def is_link_to(path, target):
    return os.path.islink(path) and os.readlink(path) == target


# ====================================================== 1. a linked build dir
STORE = tmpdir()          # scratch / shared storage
HOME = tmpdir()
WORK = tmpdir()           # cwd of every run
env = make_env(None, HOME)
tagdir = os.path.join(HOME, ".cache", "torch_extensions", TAG)
os.makedirs(tagdir)
real_dir = os.path.join(STORE, "xlink-build")
stale_lock(real_dir)
link = os.path.join(tagdir, "xlink")
os.symlink(real_dir, link)
link_lock, real_lock = os.path.join(link, "lock"), os.path.join(real_dir, "lock")

hangs("xlink", env, WORK, "through a linked build directory")

p = jit(env=env, cwd=WORK)
show("", p)
check_eq(p.returncode, 1, "jit over a linked build directory with a stale lock: exit status")
check("no findings" not in p.stdout, "the stale lock behind the link is found, not '✓ no findings'")
check_in("stale lock %s (really %s): no process holds it, so every load() of xlink waits on it forever"
         % (link_lock, real_lock), p.stdout, "JIT001 names the link's path and the real one")
check_in("reached through the symbolic link %s → %s: the directory is %s" % (link, real_dir, real_dir),
         p.stdout, "the evidence names the link and its target")
check_in("fix: rm %s   (or: mldoctor jit --fix)" % real_lock, p.stdout, "the fix removes the real file")

p = jit("--fix", "--dry-run", env=env, cwd=WORK)
show("--fix --dry-run", p)
check_in("would remove stale lock %s (named %s through symbolic links, which stay)" % (real_lock, link_lock),
         p.stdout, "--dry-run names the real path it would remove")
check(os.path.exists(real_lock), "--fix --dry-run removes nothing")

p = jit("--fix", env=env, cwd=WORK)
show("--fix", p)
check_eq(p.returncode, 0, "jit --fix: exit status once the lock is gone")
check_in("removed stale lock %s (named %s through symbolic links, which stay)" % (real_lock, link_lock),
         p.stdout, "--fix prints the real path it removed")
check_in("1 fixed, nothing left", p.stdout, "--fix summary")
check(not os.path.exists(real_lock), "--fix removes the stale lock behind the link")
check(is_link_to(link, real_dir), "--fix leaves the link as it was")
check(os.path.isdir(real_dir), "--fix leaves the build directory")

p, out, t0 = start_load("xlink", env, WORK)
timed_out, rc, text, secs = wait_load(p, out, t0, BUILD_TIMEOUT)
print("real: load_inline('xlink') after the fix: %s after %.1f s" % ("timed out" if timed_out else "exit %s" % rc, secs))
check(not timed_out, "load_inline after the fix must not wait\n%s" % text)
check_in("Building extension module xlink", text, "the real load builds after the fix")
check(os.path.exists(os.path.join(real_dir, "build.ninja")), "torch built through the link, in %s" % real_dir)
if HAVE_HEADERS:
    check_eq(rc, 0, "load_inline after the fix: exit status\n%s" % text)
    check_in("RESULT 42", text, "f() of the extension built behind the link")
else:
    print("note: torch/extension.h is missing (Debian: libtorch-dev); the load got past the lock, "
          "the compile result is not checked")

# ====================================================== 2. linked roots
HOME2 = tmpdir()
STORE2 = tmpdir()
os.makedirs(os.path.join(HOME2, ".cache"))
os.symlink(STORE2, os.path.join(HOME2, ".cache", "torch_extensions"))
real_lock2 = os.path.join(STORE2, TAG, "y", "lock")
stale_lock(os.path.dirname(real_lock2))
env2 = make_env(None, HOME2)
text = hangs("y", env2, WORK, "under a linked cache root")
check_in("Using %s as PyTorch extensions root" % os.path.join(STORE2, TAG), text,
         "torch resolves the default root with os.path.realpath")
p = jit(env=env2, cwd=WORK)
show("(linked cache root)", p)
root_link = os.path.join(HOME2, ".cache", "torch_extensions")
check_in("%s (torch_extensions cache, really %s): 1 build" % (root_link, STORE2), p.stdout,
         "the root's line names its real path")
check_in("stale lock %s (really %s)" % (os.path.join(root_link, TAG, "y", "lock"), real_lock2), p.stdout,
         "JIT001 under a linked root names the real path")
p = jit("--fix", env=env2, cwd=WORK)
show("--fix (linked cache root)", p)
check_in("removed stale lock %s" % real_lock2, p.stdout, "--fix under a linked root")
check(not os.path.exists(real_lock2), "the lock under the linked root is removed")
check(is_link_to(root_link, STORE2), "the root link stays")

STORE3 = tmpdir()
te_link = os.path.join(WORK, "te")
os.symlink(STORE3, te_link)
stale_lock(os.path.join(STORE3, "z"))
env3 = make_env(te_link, HOME2)
p = jit("--fix", "--json", env=env3, cwd=WORK)
try:
    doc = json.loads(p.stdout)
except ValueError:
    doc = {}
    fail("jit --fix --json is not JSON:\n%s%s" % (p.stdout, p.stderr))
acts = [a for a in doc.get("actions", []) if a.get("path") == os.path.join(te_link, "z", "lock")]
if check(len(acts) == 1, "one action for the lock under TORCH_EXTENSIONS_DIR=%s: %r" % (te_link, doc.get("actions"))):
    check_eq((acts[0]["action"], acts[0]["real_path"], acts[0]["done"]),
             ("remove", os.path.join(STORE3, "z", "lock"), True), "JSON action under a linked TORCH_EXTENSIONS_DIR")
roots = [r for r in doc.get("roots", []) if r.get("kind") == "TORCH_EXTENSIONS_DIR"]
check_eq([(r["path"], r["real_path"]) for r in roots], [(te_link, STORE3)], "JSON root with its real path")
check(not os.path.exists(os.path.join(STORE3, "z", "lock")), "removed under the linked TORCH_EXTENSIONS_DIR")

# ====================================================== 3. held behind a link
STORE4 = tmpdir()
os.makedirs(os.path.join(STORE4, "held"))
os.symlink(os.path.join(STORE4, "held"), os.path.join(tagdir, "heldlink"))
HOLDER = r"""
import os, signal, sys, time
signal.alarm(600)
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL)   # exactly FileBaton.try_acquire
print("ready", flush=True)
time.sleep(600)
"""
held_lock = os.path.join(tagdir, "heldlink", "lock")
holder = spawn([PY, "-c", HOLDER, held_lock], env, stdout=subprocess.PIPE, text=True)
ready, _, _ = select.select([holder.stdout], [], [], 30)
check(ready and holder.stdout.readline().startswith("ready"), "the lock holder started")
p = jit("--fix", env=env, cwd=WORK)
show("--fix (held behind a link)", p)
check_in("extension heldlink is being built: pid %d" % holder.pid, p.stdout, "JIT002 through the link names the pid")
check_in("kept %s: held by pid %d" % (held_lock, holder.pid), p.stdout, "--fix keeps the held lock")
check(os.path.exists(os.path.join(STORE4, "held", "lock")), "the held lock stays")

# ====================================================== 4. links that lead nowhere
STORE5 = tmpdir()
te5 = os.path.join(STORE5, "te")
os.makedirs(te5)
os.symlink(os.path.join(STORE5, "purged", "gone"), os.path.join(te5, "gone"))
os.symlink("lb", os.path.join(te5, "la"))
os.symlink("la", os.path.join(te5, "lb"))
env5 = make_env(te5, HOME2)
for name in ("gone", "la"):
    lp, out, t0 = start_load(name, env5, WORK)
    timed_out, rc, text, secs = wait_load(lp, out, t0, 120)
    print("real: load_inline(%r) through a %s link: exit %s after %.1f s\n%s"
          % (name, "dangling" if name == "gone" else "looping", rc, secs, text.rstrip()))
    check_in("RAISED FileExistsError", text, "the real load fails at once on the %s link" % name)
p = jit(env=env5, cwd=WORK)
show("(dangling and looping links)", p)
check_eq(p.returncode, 1, "jit over broken links: exit status")
check_in("build directory %s (TORCH_EXTENSIONS_DIR) is a symbolic link to %s (%s does not exist): load() of gone "
         "fails at once with FileExistsError" % (os.path.join(te5, "gone"), os.path.join(STORE5, "purged", "gone"),
                                                 os.path.join(STORE5, "purged")),
         p.stdout, "JIT009 for the dangling link")
check_in("build directory %s (TORCH_EXTENSIONS_DIR) is a loop of symbolic links: load() of la fails at once with "
         "FileExistsError" % os.path.join(te5, "la"), p.stdout, "JIT009 for the loop")
p = jit("--fix", env=env5, cwd=WORK)
check_eq(p.returncode, 1, "jit --fix over broken links: they stay, so does the finding (no failed removal)")
for name in ("gone", "la", "lb"):
    check(os.path.islink(os.path.join(te5, name)), "--fix leaves the link %s" % name)

loop_root = os.path.join(STORE5, "loop-root")
os.symlink(loop_root, loop_root)
env6 = make_env(loop_root, HOME2)
lp, out, t0 = start_load("w", env6, WORK)
timed_out, rc, text, secs = wait_load(lp, out, t0, 120)
print("real: load_inline('w') under a looping TORCH_EXTENSIONS_DIR: exit %s\n%s" % (rc, text.rstrip()))
check_in("Too many levels of symbolic links", text, "the real load fails on the looping root")
p = jit(env=env6, cwd=WORK)
show("(looping TORCH_EXTENSIONS_DIR)", p)
check_in("root %s (TORCH_EXTENSIONS_DIR) is a loop of symbolic links: every load() under it fails at once with "
         "OSError: Too many levels of symbolic links" % loop_root, p.stdout, "JIT009 for the looping root")

# ====================================================== 5. a link of another user
if os.geteuid() == 0:
    STORE7 = tmpdir()
    app = os.path.join(STORE7, "app")
    os.makedirs(app)
    with open(os.path.join(app, "lock"), "w") as f:
        f.write("an application's lock, not torch's\n")
    planted = os.path.join(tagdir, "planted")
    os.symlink(app, planted)
    os.lchown(planted, 65534, 65534)
    p = jit("--fix", env=env, cwd=WORK)
    show("--fix (a link of uid 65534)", p)
    check_in("stale lock %s (really %s)" % (os.path.join(planted, "lock"), os.path.join(app, "lock")), p.stdout,
             "the lock behind another user's link is reported (torch would wait on it)")
    check_in("kept %s: reached through the symbolic link %s → %s of uid 65534, neither root nor the build "
             "directory's owner (uid 0)" % (os.path.join(planted, "lock"), planted, app), p.stdout,
             "--fix keeps a lock reached through another user's link")
    check(os.path.exists(os.path.join(app, "lock")), "the file behind the planted link stays")
else:
    print("note: not root; the other user's link is checked by the unit test JitLinks when run as root")

finish("jit-symlinked-cache")

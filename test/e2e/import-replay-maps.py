#!/usr/bin/env python3
# labels: slow scenario roots
"""The import replay of `mldoctor check --import SET` against the native
objects a real `import SET` maps, on this machine's /usr/bin/python3 and in
every Debian test root (bullseye, trixie, sid), for every package of the
interpreter's dist-packages that holds native code and for mixed sets
(torch+cv2, cv2+torch, sklearn+torch, numba+torch, all of them) (issue 32).

Oracle: the interpreter imports SET for real and reads /proc/self/maps: every
regular ELF file mapped, identified by (st_dev, st_ino) so that symlinks and
the several names of one file are one object. CPython's own objects are taken
out by a second oracle, not by a model: a fresh interpreter that imports only
the lib-dynload modules the first process mapped (ssl, ctypes, decimal...) and
reads its own maps; what it maps (the interpreter, its libraries, the stdlib's
modules and their DT_NEEDED) is CPython's, the rest is what SET brought.

Prediction: `mldoctor check --root ROOT --python /usr/bin/python3 --import SET
--json`, imports.objects (every replayed dlopen with its DT_NEEDED closure as
the loader model computes it), stat'ed inside the same chroot, after the real
import, by the same process. Objects marked "first parallel call" (numba's
threading layer) are loaded at first use, not at import: they never count
against precision and a plain import is not expected to map them.

Assertions: recall is 100% for every set (every object the real import maps
outside CPython's own is predicted); every step the package table
(src/pyenv/import-set.cc) adds at import is loaded by the real import in
every target (issue 32 item 3: a row that disagrees anywhere is dropped or
fixed); each set's precision is printed, with the objects predicted but not
mapped. A package whose real import fails in a
root (a missing optional dependency) is reported and not counted; at least
the six named packages must be checkable in every target.

The second half makes a package whose RECORD does not list its extension
module (a small C extension linking libgomp, built with the target's gcc,
installed beside a second libgomp copy as `build_ext --inplace` or a hand
copy leaves it): the real import maps both OpenMP runtimes, the replay must
predict the module and both copies, and OMP001 must name both.
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import inroot  # noqa: E402
import roots  # noqa: E402
from mldtest import MLDOCTOR, check, check_eq, clean_env, fail, finish, scratch  # noqa: E402

NAMED = ["torch", "numpy", "scipy", "sklearn", "cv2", "numba"]
MIXED = [["torch", "cv2"], ["cv2", "torch"], ["sklearn", "torch"], ["numba", "torch"]]
SITE = "/usr/lib/python3/dist-packages"

# Runs inside the target: imports argv[1] (comma-separated) in order, then
# prints what is mapped and stats the predicted paths read from stdin.
REAL = r'''
import importlib, json, os, sys
names = [n for n in sys.argv[1].split(",") if n]
errors = {}
for n in names:
    try:
        importlib.import_module(n)
    except BaseException as e:
        errors[n] = "%s: %s" % (type(e).__name__, e)
        break
def ident(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return "%d:%d" % (st.st_dev, st.st_ino)
def elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False
mapped, dynload = {}, set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        p = parts[5].rstrip("\n")
        if p.endswith(" (deleted)") or not os.path.isfile(p) or not elf(p):
            continue
        i = ident(p)
        mapped.setdefault(i, os.path.realpath(p))
        if "/lib-dynload/" in p:
            dynload.add(os.path.basename(p).split(".")[0])
# glibc's own account of each load (LD_DEBUG=files, written to
# LD_DEBUG_OUTPUT.PID): "file=NAME [ns];  needed by CALLER" or "...;
# dynamically loaded by CALLER". NAME is what was asked for (a path, or a
# DT_NEEDED / dlopen name found in a directory the loader searched).
import glob, re
loads = {}
tag = sys.argv[2] if len(sys.argv) > 2 else ""
if tag:
    dirs = {os.path.dirname(p) for p in mapped.values()} | {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"}
    def named(name):
        if "/" in name:
            return ident(name)
        for d in sorted(dirs):
            i = ident(os.path.join(d, name))
            if i in mapped:
                return i
        return None
    try:
        with open("%s.%d" % (tag, os.getpid())) as f:
            for line in f:
                m = re.search(r"file=(\S+) \[\d+\];\s+(needed by|dynamically loaded by) (\S+)", line)
                if not m:
                    continue
                i = named(m.group(1))
                if i is not None and i not in loads:
                    loads[i] = ["needed" if m.group(2) == "needed by" else "dlopen",
                                named(m.group(3)), m.group(3), m.group(1)]
    finally:
        for p in glob.glob(tag + ".*"):
            os.unlink(p)
want = json.loads(sys.stdin.read() or "[]")
print(json.dumps({"errors": errors, "mapped": mapped, "dynload": sorted(dynload),
                  "loads": loads, "interpreter": ident(sys.executable), "predicted": {p: ident(p) for p in want}}))
'''


class Target:
    """This machine's /usr/bin/python3 (root None) or a test root's."""

    def __init__(self, name, root):
        self.name, self.root = name, root

    def python(self, program, args=(), stdin="", env=None, binds=()):
        return self.command(["/usr/bin/python3", "-c", program] + list(args), stdin, env, binds)

    def command(self, argv, stdin="", env=None, binds=()):
        """argv run in the target: here, or in the root with `binds`
        ((host dir, dir in the root) pairs; here the host dir is used as is)."""
        if self.root is None:
            return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=600,
                                  env=clean_env(**(env or {})), cwd="/tmp")
        return roots.run(self.root, argv, input=stdin, timeout=600, env=env, binds=binds)

    def host_path(self, path):
        return path if self.root is None else os.path.join(self.root, path.lstrip("/"))

    def site(self):
        return os.path.join(self.root or "/", SITE.lstrip("/"))

    def check(self, names, extra=(), env=None):
        argv = [MLDOCTOR, "check", "--python", "/usr/bin/python3", "--import", ",".join(names),
                "--json"]
        if self.root is not None:
            argv[2:2] = ["--root", self.root]
        p = subprocess.run(argv + list(extra), capture_output=True, text=True, timeout=300,
                           env=clean_env(**(env or {})))
        try:
            return json.loads(p.stdout)
        except ValueError:
            fail("%s: check --import %s: exit %d, no JSON\n%s"
                 % (self.name, ",".join(names), p.returncode, p.stderr[-2000:]))
            return None


def native_packages(target):
    """Top-level importable names of the target's dist-packages holding native
    code: packages with a .so anywhere below, and extension modules."""
    site, out = target.site(), []
    for n in sorted(os.listdir(site)):
        d = os.path.join(site, n)
        if os.path.isdir(d) and os.path.isfile(os.path.join(d, "__init__.py")):
            if any(f.endswith(".so") or ".so." in f for _, _, fs in os.walk(d) for f in fs):
                out.append(n)
        elif n.endswith(".so") and "." not in n.split(".")[0] and os.path.isfile(d):
            out.append(n.split(".")[0])
    return sorted(set(out))


_baselines = {}


def cpython_own(target, dynload):
    """Objects CPython maps by itself with these lib-dynload modules imported."""
    key = (target.name, tuple(dynload))
    if key not in _baselines:
        p = target.python(REAL, [",".join(dynload)])
        doc = json.loads(p.stdout) if p.returncode == 0 else None
        if doc is None or doc["errors"]:
            fail("%s: the baseline import of %s failed: %s%s"
                 % (target.name, dynload, p.stderr[-1500:], doc and doc["errors"]))
            return None
        _baselines[key] = set(doc["mapped"])
    return _baselines[key]


results = []  # (target, set, real, hit, predicted, precise)


def compare(target, names, quiet_failure=False):
    """Returns False when the real import of `names` fails in the target."""
    doc = target.check(names)
    if doc is None:
        return True
    objects = doc["imports"]["objects"]
    lazy = {o["path"] for o in objects if "first parallel call" in o.get("loaded_by", "")}
    prog = {o["path"] for o in objects if o.get("loaded_by", "").startswith("the interpreter")}
    paths = sorted({o["path"] for o in objects})
    tag = "/tmp/mld-lddebug-%d-%d" % (os.getpid(), len(results))
    p = target.python(REAL, [",".join(names), tag], stdin=json.dumps(paths),
                      env={"LD_DEBUG": "files", "LD_DEBUG_OUTPUT": tag})
    if p.returncode != 0:
        fail("%s: the real import of %s exited %d\n%s" % (target.name, names, p.returncode,
                                                          p.stderr[-2000:]))
        return True
    real = json.loads(p.stdout)
    if real["errors"]:
        if not quiet_failure:
            fail("%s: the real import of %s failed: %s" % (target.name, names, real["errors"]))
        return False
    own = cpython_own(target, real["dynload"])
    if own is None:
        return True
    brought = {i: path for i, path in real["mapped"].items() if i not in own}
    pred = {}
    for path, i in real["predicted"].items():
        if i is not None and path not in prog:
            pred.setdefault(i, path)
    eager = {i for i, path in pred.items()
             if path not in lazy and i not in own and i not in {real["predicted"].get(l) for l in lazy}}
    native = native_loads(target, real, own, brought)
    driven = {i: path for i, path in brought.items() if i not in native}
    missed = sorted(path for i, path in driven.items() if i not in pred)
    hit = len(driven) - len(missed)
    unmapped = sorted(pred[i] for i in eager if i not in real["mapped"])
    results.append((target.name, "+".join(names), len(driven), hit, len(eager),
                    len(eager) - len(unmapped), len(native)))
    print("%s: import %s: recall %d/%d, precision %d/%d, loaded by native code at run time %d"
          % (target.name, ",".join(names), hit, len(driven), len(eager) - len(unmapped),
             len(eager), len(native)))
    for i in sorted(native, key=lambda i: brought[i]):
        print("    native run-time load: %s (%s)%s" % (brought[i], native[i],
                                                       "" if i not in pred else ", predicted too"))
    for u in unmapped[:8]:
        print("    predicted, not mapped: %s" % u)
    # Every row of the package table that the replay used loads for real here
    # (issue 32 item 3: a row that disagrees with a real import in any root
    # is dropped or fixed).
    for st in doc["imports"]["steps"]:
        # A step named by soname, not path, is numba's threading-layer probe
        # (ctypes.CDLL("libtbb.so.12") at the first parallel call; the table's
        # own libraries are paths in their package): not an at-import load.
        if st.get("source") == "table" and "/" in st["path"] and st["path"] not in lazy and \
                "first parallel call" not in (st.get("note") or ""):
            i = real["predicted"].get(st["path"])
            check(i in real["mapped"], "%s: import %s: the table's step %s (%s) is not loaded by "
                  "the real import" % (target.name, ",".join(names), st.get("module") or st["path"],
                                       st.get("note")))
    if not check(not missed, "%s: import %s maps %d objects check --import does not predict:\n    %s"
                 % (target.name, ",".join(names), len(missed), "\n    ".join(missed))):
        steps = doc["imports"]["steps"]
        print("  replay steps:\n    " + "\n    ".join(
            "%s %s" % (s.get("module") or "(library)", s.get("path")) for s in steps))
    return True


_needed = {}


def needed_names(target, path):
    """DT_NEEDED of a file of the target, read by readelf (binutils)."""
    if path not in _needed:
        p = subprocess.run(["readelf", "-dW", target.host_path(path)], capture_output=True,
                           text=True, timeout=60)
        _needed[path] = {l.split("[", 1)[1].split("]", 1)[0] for l in p.stdout.splitlines()
                         if "(NEEDED)" in l and "[" in l}
    return _needed[path]


def native_loads(target, real, own, brought):
    """The objects of `brought` that native code loaded at run time, by
    glibc's own account (LD_DEBUG=files): following "needed by" back to the
    dlopen that brought it in, the caller of that dlopen is a native library
    other than CPython's import machinery (the interpreter, libpython, a
    lib-dynload module such as _ctypes: those load what Python code asks
    for; glibc loading its NSS modules is native code), and no
    import-driven object lists it in DT_NEEDED. Returns {ident: who loaded it}.
    An object with no load record stays import-driven."""
    loads = real["loads"]
    root_caller = {}
    for i in brought:
        seen, at = set(), i
        while at in loads and at not in seen:
            seen.add(at)
            kind, caller, caller_path, _ = loads[at]
            if kind == "dlopen":
                if caller is not None and caller != real["interpreter"] and \
                        not os.path.basename(caller_path).startswith("libpython") and \
                        "/lib-dynload/" not in caller_path:
                    root_caller[i] = "dlopen by %s" % caller_path
                break
            at = caller
    if not root_caller:
        return {}
    driven = [path for i, path in brought.items() if i not in root_caller]
    out = {}
    for i, who in root_caller.items():
        names = {os.path.basename(brought[i])}
        if i in loads:
            names.add(os.path.basename(loads[i][3]))
        users = [path for path in driven if names & needed_names(target, path)]
        if users:
            continue  # an import-driven object needs it: the replay must predict it
        out[i] = who
    return out


# The RECORD-omits fixture: two extension modules of one package, each
# calling into GNU OpenMP, one linked to the target's libgomp.so.1, the other
# to a copy of it renamed as auditwheel renames what it vendors.
OMP_MODULE = r'''
#include <Python.h>
int omp_get_max_threads(void);
static PyObject* threads(PyObject* self, PyObject* args) { return PyLong_FromLong(omp_get_max_threads()); }
static PyMethodDef methods[] = {{"threads", threads, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, NAME, NULL, -1, methods};
PyMODINIT_FUNC INIT(void) { return PyModule_Create(&module); }
'''
COPY = "libgomp-deadbeef.so.1"


def record_omits(target):
    """A package whose RECORD lists only its __init__.py (an in-place build,
    a hand copy): its two OpenMP extension modules must be replayed all the
    same, both libgomp copies predicted as the real import maps them, and
    OMP001 must name both."""
    host_dir = scratch()
    inside = host_dir if target.root is None else "/tmp/fx"
    binds = [] if target.root is None else [(host_dir, inside)]
    site = os.path.join(host_dir, "site")
    pkg = os.path.join(site, "omitpkg")
    os.makedirs(os.path.join(site, "omitpkg.libs"))
    os.makedirs(os.path.join(site, "omitpkg-1.0.dist-info"))
    p = target.python("import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'), "
                      "sysconfig.get_paths()['include'])")
    if not check_eq(p.returncode, 0, "%s: the target's EXT_SUFFIX (%s)" % (target.name, p.stderr)):
        return
    suffix, include = p.stdout.split()
    os.makedirs(pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write("from . import _sys_omp\nfrom . import _copy_omp\n")
    with open(os.path.join(pkg, "omp.c"), "w") as f:
        f.write(OMP_MODULE)
    shutil.copyfile(target.host_path("/usr/lib/x86_64-linux-gnu/libgomp.so.1"),
                    os.path.join(site, "omitpkg.libs", COPY))
    subprocess.run(["patchelf", "--set-soname", COPY, os.path.join(site, "omitpkg.libs", COPY)],
                   check=True, timeout=60)
    with open(os.path.join(site, "omitpkg-1.0.dist-info", "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: omitpkg\nVersion: 1.0\n")
    with open(os.path.join(site, "omitpkg-1.0.dist-info", "RECORD"), "w") as f:
        f.write("omitpkg/__init__.py,,\nomitpkg-1.0.dist-info/METADATA,,\n"
                "omitpkg-1.0.dist-info/RECORD,,\n")
    gcc = ["gcc", "-shared", "-fPIC", "-O1", "-I" + include, os.path.join(inside, "site/omitpkg/omp.c")]
    for name, link in (("_sys_omp", ["-lgomp"]),
                       ("_copy_omp", ["-L" + os.path.join(inside, "site/omitpkg.libs"), "-l:" + COPY,
                                      "-Wl,-rpath,$ORIGIN/../omitpkg.libs"])):
        p = target.command(gcc + ['-DNAME="%s"' % name, "-DINIT=PyInit_" + name, "-o",
                                  os.path.join(inside, "site/omitpkg", name + suffix)] + link,
                           binds=binds)
        if not check_eq(p.returncode, 0, "%s: the target's gcc builds omitpkg.%s: %s"
                        % (target.name, name, p.stderr[-1500:])):
            return
    env = {"PYTHONPATH": os.path.join(inside, "site")}
    p = target.python(REAL, ["omitpkg"], env=env, binds=binds)
    real = json.loads(p.stdout) if p.returncode == 0 else None
    if not check(real is not None and not real["errors"], "%s: the real import omitpkg: %s %s"
                 % (target.name, p.stderr[-1500:], real and real["errors"])):
        return
    gomps = sorted(path for path in real["mapped"].values() if "libgomp" in os.path.basename(path))
    check_eq(len(gomps), 2, "%s: the real import maps two GNU OpenMP copies: %s" % (target.name, gomps))
    argv = ["check", "--python", "/usr/bin/python3", "--import", "omitpkg", "--json"]
    if target.root is None:
        p = subprocess.run([MLDOCTOR] + argv, capture_output=True, text=True, timeout=300,
                           env=clean_env(**env))
    else:
        p = roots.run(target.root, inroot.mldoctor_argv(MLDOCTOR, argv), env=env,
                      binds=binds + inroot.mldoctor_binds(MLDOCTOR), timeout=300)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("%s: check --import omitpkg: exit %d, no JSON\n%s" % (target.name, p.returncode, p.stderr[-2000:]))
        return
    def here(path):
        """A path of the target as this machine reaches it."""
        if path.startswith(inside + "/"):
            return os.path.realpath(os.path.join(host_dir, os.path.relpath(path, inside)))
        return os.path.realpath(target.host_path(path))

    predicted = {here(o["path"]) for o in doc["imports"]["objects"]}
    for path in sorted(here(m) for m in real["mapped"].values()):
        if "omitpkg" in path or "libgomp" in os.path.basename(path):
            check(path in predicted, "%s: RECORD omits it, the real import maps it, check --import "
                  "omitpkg predicts it: %s" % (target.name, path))
    omp = [f for f in doc["findings"] if f["rule"] == "OMP001"]
    if check(len(omp) == 1, "%s: OMP001 for omitpkg's two copies; findings: %s"
             % (target.name, [f["rule"] for f in doc["findings"]])):
        text = json.dumps(omp[0])
        check(COPY in text and "libgomp.so.1" in text, "%s: OMP001 names %s and libgomp.so.1: %s"
              % (target.name, COPY, text[:600]))
    check("not in omitpkg's RECORD" in json.dumps(doc),
          "%s: the report says omitpkg's RECORD does not list the modules it replays" % target.name)
    print("%s: omitpkg (RECORD lists neither extension module): the real import maps %s; check predicts "
          "both, OMP001" % (target.name, ", ".join(os.path.basename(g) for g in gomps)))


def run_target(target):
    t0 = time.monotonic()
    pkgs = native_packages(target)
    check(all(n in pkgs for n in NAMED), "%s: native packages %s lack some of %s"
          % (target.name, pkgs, NAMED))
    importable = []
    for n in pkgs:
        if compare(target, [n], quiet_failure=n not in NAMED):
            importable.append(n)
        else:
            print("%s: import %s fails here; not an oracle" % (target.name, n))
    for s in MIXED + [[n for n in NAMED if n in importable]]:
        compare(target, s)
    print("%s: %d packages, %.0f s" % (target.name, len(importable), time.monotonic() - t0))


targets = [Target("bookworm (this machine)", None)]
for suite in roots.SUITES:
    targets.append(Target(suite, roots.root(suite)))
only = os.environ.get("MLD_REPLAY_TARGETS")
for t in targets:
    if only and t.name.split()[0] not in only.split(","):
        continue
    run_target(t)
    record_omits(t)

for name in sorted({r[0] for r in results}):
    rs = [r for r in results if r[0] == name]
    print("%s: %d import sets, %d at 100%% recall; recall %d/%d, precision %d/%d; "
          "%d objects loaded by native code at run time"
          % (name, len(rs), sum(1 for r in rs if r[3] == r[2]), sum(r[3] for r in rs),
             sum(r[2] for r in rs), sum(r[5] for r in rs), sum(r[4] for r in rs),
             sum(r[6] for r in rs)))
total = sum(r[2] for r in results)
hit = sum(r[3] for r in results)
pred = sum(r[4] for r in results)
precise = sum(r[5] for r in results)
native = sum(r[6] for r in results)
print("all: recall %d/%d, precision %d/%d over %d import sets; %d objects loaded by native "
      "code at run time (outside what an import replay predicts)"
      % (hit, total, precise, pred, len(results), native))
finish("import-replay-maps")

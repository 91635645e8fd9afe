#!/usr/bin/env python3
# labels: slow scenario roots
"""Static TLS in each Debian generation: the model against that root's real
dlopen() (issue 32, items 2a and 2d's seed 001).

The static TLS surplus and its tunables differ between glibc 2.31 (bullseye:
upstream's fixed 1664-byte surplus, but Debian's backport of the 2.32
accounting with its early constants), 2.41 (trixie) and 2.43 (sid:
glibc.rtld.nns and optional_static_tls, the rseq block at startup, the
newer GLIBC_TUNABLES parser). Everything real runs inside the root with the
root's own loader; every fixture is built inside the root by the root's own
gcc (a program built here would need GLIBC_2.34). The model is mldoctor run
from outside with --root ROOT --glibc X.Y (X.Y read from the root's libc6),
in a private mount namespace where the fixture directory is bound onto the
root's /mnt, so both sides see the same paths; nothing in the root changes.

1. static_size: the root loader's own _dl_get_tls_static_info under each
   setting (GLIBC_TUNABLES values, an LD_AUDIT module, malformed strings)
   equals `libs --load-order`'s static_size.
2. dlopen() sequences: tls-differential.py's fixture libraries (initial-exec
   and TLSDESC blocks of many sizes and alignments, cross-library references)
   and system runtimes opened by soname (libgomp.so.1, libstdc++.so.6...),
   directed and random (seeded), dlopen()ed by tls-runner, single-threaded
   and with a second thread, under each setting: every step (ok, or the
   failure and its dlerror() text) equals the model's.
3. The fix: for each failing sequence with a tunables_fix, the real runner
   loads every library under GLIBC_TUNABLES=<fix> and fails 64 bytes below
   it. Where the model offers none for a static TLS failure, a large
   glibc.rtld.optional_static_tls does not make the sequence load either.
   (Which releases have the tunable is the root's business: Debian 11's
   2.31 carries 2.32's accounting, upstream 2.31 does not.)
4. Seed 001 with the root's real torch and cv2: the real import orders
   `import torch, cv2` and `import cv2, torch`, then eight extension modules
   with 400 bytes of initial-exec TLS each after them (a fixture module
   fails), and four of them before torch (torch's libgomp.so.1, loaded late,
   fails). The real outcome (which file's dlopen failed, in the ImportError)
   equals `check --root --glibc --import ...`'s TLS001; its GLIBC_TUNABLES
   fix makes the real import succeed (where it offers none, a large value
   must not).

Environment: MLDOCTOR. Optional: MLD_TLS_SEED (the random sequences),
MLD_ROOT_TLS_SEQUENCES (how many random ones per root; default 6),
MLD_ROOT_SUITES (a comma-separated subset of the roots, for quick runs).
"""
import concurrent.futures
import importlib.util
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

_spec = importlib.util.spec_from_file_location("tls_differential", os.path.join(HERE, "tls-differential.py"))
tlsdiff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tlsdiff)

MNT = "/mnt"  # where the fixture directory is seen, inside the root and by the model
SETTINGS = [  # (GLIBC_TUNABLES, LD_AUDIT with the fixture auditor)
    (None, False),
    ("glibc.rtld.optional_static_tls=0", False),
    ("glibc.rtld.optional_static_tls=1024", False),
    ("glibc.rtld.nns=2:glibc.rtld.optional_static_tls=256", False),
    (None, True),
]
PARSE_CASES = ["glibc.rtld.nns=1", "glibc.rtld.optional_static_tls=4096", "glibc.rtld.nns=0x10",
               "glibc.rtld.nns=2=3", "glibc.rtld.nns=99:glibc.rtld.nns=2", "glibc.rtld.optional_static_tls= 300",
               "glibc.rtld.nns", "glibc.rtld.nns=3:bogus"]
MODS = ["tlsmod%d" % k for k in range(1, 9)]
ORDERS = [  # seed 001: the real torch/cv2 orders (torch, cv2 heads the third), then
    # fixture modules after and before torch
    ["cv2", "torch"],
    ["torch", "cv2"] + MODS,
    MODS[:4] + ["torch", "cv2"],
]
BIG = "glibc.rtld.optional_static_tls=65536"
ERR = re.compile(r"(\S+): cannot allocate memory in static TLS block")

# mldtest's counters are thread-safe: the roots run side by side.
check, check_eq, fail = mldtest.check, mldtest.check_eq, mldtest.fail


# Inside the root: runs each [argv, env] of the JSON list on stdin; prints
# [[rc, stdout, stderr], ...].
REAL_DRIVER = r'''
import json, os, subprocess, sys
out = []
for argv, env in json.load(sys.stdin):
    e = {"PATH": os.environ["PATH"], "HOME": "/tmp", "LANG": "C.UTF-8"}
    e.update(env)
    p = subprocess.run(argv, env=e, capture_output=True, text=True, cwd="/tmp")
    out.append([p.returncode, p.stdout, p.stderr])
print(json.dumps(out))
'''

# On this machine, in a private mount namespace: binds the fixture directory
# onto ROOT/mnt, then runs each [argv, env] of the JSON list on stdin.
MODEL_DRIVER = r'''
import json, subprocess, sys
src, dst = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "--bind", src, dst], check=True)
out = []
for argv, env in json.load(sys.stdin):
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    out.append([p.returncode, p.stdout, p.stderr])
print(json.dumps(out))
'''


class Root:
    def __init__(self, suite, root, scratch):
        self.suite, self.root, self.scratch = suite, root, scratch
        self.glibc = ".".join(re.match(r"(\d+)\.(\d+)", roots.versions(root, ["libc6"])["libc6"]).groups())

    def real(self, jobs, timeout=900):
        """[(argv, env)] run inside the root; [(rc, stdout, stderr)]."""
        p = roots.run(self.root, ["python3", "-c", REAL_DRIVER], binds=[(self.scratch, MNT)],
                      input=json.dumps(jobs), timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("%s: the real driver failed (exit %d): %s" % (self.suite, p.returncode, p.stderr[-2000:]))
        return json.loads(p.stdout)

    def model(self, jobs, timeout=900):
        """[(mldoctor args, env)] run here with the fixtures at ROOT/mnt."""
        full = [([mldtest.MLDOCTOR] + args[:1] + ["--root", self.root, "--glibc", self.glibc] + args[1:],
                 mldtest.clean_env(**env)) for args, env in jobs]
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", MODEL_DRIVER,
                            self.scratch, os.path.join(self.root, MNT.lstrip("/"))],
                           input=json.dumps(full), capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("%s: the model driver failed (exit %d): %s" % (self.suite, p.returncode, p.stderr[-2000:]))
        return json.loads(p.stdout)


def build_script():
    """The shell script that builds every fixture inside the root."""
    cmds = ["set -e", "cd %s" % MNT]
    src = MNT + "/src"
    order = sorted(tlsdiff.FIXTURES, key=lambda n: tlsdiff.FIXTURES[n][2] is not None)
    for name in order:
        macros, flags, needed = tlsdiff.FIXTURES[name]
        argv = ["gcc", "-shared", "-fPIC", "-O1", "-o", "%s/libtls-%s.so" % (MNT, name)]
        argv += ["-D%s=%s" % kv for kv in macros.items()] + flags
        argv += [src + "/tls-fixture.c", "-Wl,-soname,libtls-%s.so" % name]
        if needed:
            argv += ["-Wl,-rpath,$ORIGIN", "-L" + MNT, "-Wl,--no-as-needed", "-ltls-" + needed]
        cmds.append(" ".join(shlex.quote(a) for a in argv))
    cmds += ["gcc -shared -fPIC -o tls-auditor.so %s/tls-auditor.c -Wl,--no-as-needed" % src,
             "gcc -O1 -pthread -o tls-runner %s/tls-runner.c -ldl" % src,
             "gcc -o static-info %s/static-info.c -ldl" % src,
             "inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"include\"])')",
             "suf=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var(\"EXT_SUFFIX\"))')",
             "mkdir -p site",
             "for k in 1 2 3 4 5 6 7 8; do sed \"s/@K@/$k/g\" %s/tlsmod.c > /tmp/m.c; "
             "gcc -shared -fPIC -O0 -I\"$inc\" -o site/tlsmod$k$suf /tmp/m.c; done" % src]
    return "\n".join(cmds) + "\n"


TLSMOD = r'''#define PY_SSIZE_T_CLEAN
#include <Python.h>
static __thread char b[400] __attribute__((tls_model("initial-exec")));
char *tlsmod@K@_buf(void) { b[0] = @K@; return b; }
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "tlsmod@K@", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_tlsmod@K@(void) { return PyModule_Create(&def); }
'''
STATIC_INFO = r'''#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>
int main(void) {
  void (*g)(size_t*, size_t*) = (void (*)(size_t*, size_t*))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
  size_t s = 0, a = 0;
  if (!g) return 1;
  g(&s, &a);
  printf("%zu %zu\n", s, a);
  return 0;
}
'''
# Imports the modules one after another; the first failure ends the run.
IMPORTS = r'''
import sys
for m in sys.argv[1].split(","):
    try:
        __import__(m)
        print("ok", m)
    except Exception as e:
        print("fail", m, "%s: %s" % (type(e).__name__, e))
        break
'''


def tenv(tunables, audit):
    env = {}
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    if audit:
        env["LD_AUDIT"] = MNT + "/tls-auditor.so"
    return env


def describe(tunables, audit):
    return "GLIBC_TUNABLES=%s%s" % (tunables, " LD_AUDIT=tls-auditor.so" if audit else "")


def steps_of(stdout):
    out = []
    for line in stdout.splitlines():
        if line.startswith("ok "):
            out.append((line[3:], True, None))
        elif line.startswith("fail "):
            path, err = line[5:].split(": ", 1)
            out.append((path, False, err))
    return out


def load_order_of(rc_out_err):
    rc, out, err = rc_out_err
    try:
        return json.loads(out)["load_order"]
    except (ValueError, KeyError, TypeError):
        return None


def sequences(rng, count):
    lib = lambda n: n if ".so" in n else "%s/libtls-%s.so" % (MNT, n)  # noqa: E731
    seqs = [[lib(n) for n in s] for s in tlsdiff.DIRECTED]
    names = sorted(tlsdiff.FIXTURES)
    for _ in range(count):
        libs = [lib(n) for n in rng.sample(names, rng.randint(2, len(names)))]
        if rng.random() < 0.2:
            libs.insert(rng.randrange(len(libs) + 1), rng.choice(["libgomp.so.1", "libstdc++.so.6"]))
        seqs.append(libs)
    return seqs


def static_sizes(r, figures):
    settings = SETTINGS + [(t, False) for t in PARSE_CASES]
    real = r.real([([MNT + "/static-info"], tenv(t, a)) for t, a in settings])
    model = r.model([(["libs", MNT + "/tls-runner", "--load-order", MNT + "/libtls-c.so", "--json"], tenv(t, a))
                     for t, a in settings])
    agree = 0
    for (t, a), (rc, out, err), m in zip(settings, real, model):
        lo = load_order_of(m)
        if not check(rc == 0 and lo is not None, "%s: static-info exit %d (%s) / model exit %d (%s)"
                     % (r.suite, rc, err.strip(), m[0], m[2].strip()[-300:])):
            continue
        if check(lo["static_size"] == int(out.split()[0]), "%s (glibc %s): static_size under %s: model %d, the "
                 "root's loader %s" % (r.suite, r.glibc, describe(t, a), lo["static_size"], out.split()[0])):
            agree += 1
    figures["static_size"] = (agree, len(settings))


def dlopen_sequences(r, seqs, figures):
    jobs = [(libs, t, a) for libs in seqs for t, a in SETTINGS]
    model = r.model([(["libs", MNT + "/tls-runner", "--load-order", ",".join(libs), "--json"], tenv(t, a))
                     for libs, t, a in jobs])
    real = r.real([([MNT + "/tls-runner"] + (["--thread"] if thread else []) + libs, tenv(t, a))
                   for libs, t, a in jobs for thread in (False, True)])
    agree = fails = 0
    fixes = []       # (libs, tunables fix, audit)
    no_fix = []      # failing (libs, t, a, real steps) without a fix
    for i, (libs, t, a) in enumerate(jobs):
        lo = load_order_of(model[i])
        if not check(lo is not None, "%s: the model gave no load_order for %s under %s: %s"
                     % (r.suite, libs, describe(t, a), model[i][2][-500:])):
            continue
        ok = True
        for thread in (False, True):
            rc, out, err = real[2 * i + thread]
            steps = steps_of(out)
            if len(steps) != len(libs) or len(lo["steps"]) != len(libs):
                fail("%s: step count: real %d (exit %d, %s), model %d, asked %d"
                     % (r.suite, len(steps), rc, err.strip()[-300:], len(lo["steps"]), len(libs)))
                ok = False
                continue
            for k, (path, sok, serr) in enumerate(steps):
                m = lo["steps"][k]
                if m["ok"] != sok or (not sok and m["error"] != serr):
                    fail("%s (glibc %s): step %d (%s)%s under %s of %s:\n      real:  %s\n      model: %s"
                         % (r.suite, r.glibc, k + 1, path, " with a thread" if thread else "", describe(t, a),
                            ",".join(libs), "ok" if sok else "fail: " + serr,
                            "ok" if m["ok"] else "fail: %s" % m["error"]))
                    ok = False
                    break
        agree += ok
        real_fail = not all(s[1] for s in steps_of(real[2 * i][1]))
        fails += real_fail
        if real_fail and lo["tunables_fix"]:
            fixes.append((libs, lo["tunables_fix"], a))
        elif real_fail and any(not s["ok"] and "static TLS" in (s["error"] or "") for s in lo["steps"]):
            no_fix.append((libs, t, a))
    figures["sequences"] = (agree, len(jobs), fails)
    check(fails > 0, "%s: no sequence failed for real: the fixture tests nothing" % r.suite)
    check_fixes(r, fixes, no_fix, figures)


def check_fixes(r, fixes, no_fix, figures):
    """Each fix loads everything for real and is the smallest multiple of 64;
    where the model offers none, no value of optional_static_tls makes the
    whole sequence load for real either."""
    jobs = []
    for libs, fix, a in fixes:
        head, _, value = fix.rpartition("glibc.rtld.optional_static_tls=")
        jobs.append((libs, fix, a, True))
        if int(value) >= 64:
            jobs.append((libs, head + "glibc.rtld.optional_static_tls=%d" % (int(value) - 64), a, False))
    for libs, t, a in no_fix:
        jobs.append((libs, BIG if t is None else t + ":" + BIG, a, None))
    real = r.real([([MNT + "/tls-runner"] + libs, tenv(t, a)) for libs, t, a, _ in jobs])
    good = 0
    for (libs, t, a, want), (rc, out, err) in zip(jobs, real):
        steps = steps_of(out)
        loads = len(steps) == len(libs) and all(s[1] for s in steps)
        if want:
            good += check(loads, "%s: the fix %s does not make %s load for real: %s"
                          % (r.suite, describe(t, a), ",".join(libs), [s for s in steps if not s[1]][:1]))
        elif want is False:
            good += check(not loads, "%s: the fix is not the smallest: %s loads %s too"
                          % (r.suite, describe(t, a), ",".join(libs)))
        else:
            good += check(not loads, "%s (glibc %s): the model offers no fix, yet %s makes %s load for real"
                          % (r.suite, r.glibc, describe(t, a), ",".join(libs)))
    figures["fixes"] = (good, len(jobs))


def seed001(r, figures):
    env = {"PYTHONPATH": MNT + "/site"}
    real = r.real([(["python3", "-c", IMPORTS, ",".join(o)], env) for o in ORDERS], timeout=1200)
    model = r.model([(["check", "--import", ",".join(o), "--json"], env) for o in ORDERS])
    agree, reruns = 0, []
    for order, (rc, out, err), (mrc, mout, merr) in zip(ORDERS, real, model):
        lines = out.splitlines()
        failed = [line for line in lines if line.startswith("fail ")]
        m = ERR.search(failed[0]) if failed else None
        done = [line[3:] for line in lines if line.startswith("ok ")]
        print("%s real [import %s]: %s" % (r.suite, ", ".join(order), failed[0] if failed else "all imported"))
        if not check(rc == 0 and (len(done) == len(order) or m),
                     "%s: import %s: neither imports all nor fails on static TLS (exit %d):\n%s%s"
                     % (r.suite, ",".join(order), rc, out, err[-1500:])):
            continue
        try:
            doc = json.loads(mout)
        except ValueError:
            fail("%s: check --import %s: exit %d\n%s" % (r.suite, ",".join(order), mrc, merr[-1500:]))
            continue
        tls = [f for f in doc["findings"] if f["rule"] == "TLS001"]
        if not m:
            agree += check(not tls, "%s: import %s succeeds for real, but check reports %s"
                           % (r.suite, ",".join(order), [f["message"] for f in tls]))
            continue
        if not check(len(tls) == 1, "%s: import %s fails for real at %s, check reports %d TLS001"
                     % (r.suite, ",".join(order), m.group(1), len(tls))):
            continue
        text = tls[0]["message"]
        ok = check(m.group(0) in text, "%s: import %s: the real failure is \"%s\", TLS001 says \"%s\""
                   % (r.suite, ",".join(order), m.group(0), text))
        ok &= check(("import %s" % failed[0].split()[1]) in text, "%s: TLS001 names the import that fails, "
                    "%s: %s" % (r.suite, failed[0].split()[1], text))
        fix = [e.split("=", 1)[1] for e in tls[0].get("env_fix") or [] if e.startswith("GLIBC_TUNABLES=")]
        ok &= check(len(fix) <= 1, "%s: TLS001 gives one GLIBC_TUNABLES value: %r" % (r.suite, tls[0].get("env_fix")))
        # With the fix the order must import for real; with no fix offered,
        # not even a large value may.
        reruns.append((order, fix[0] if fix else BIG, bool(fix)))
        agree += ok
    figures["seed001"] = (agree, len(ORDERS))
    # With the fix, each failing order imports everything for real.
    if reruns:
        again = r.real([(["python3", "-c", IMPORTS, ",".join(o)], dict(env, GLIBC_TUNABLES=v))
                        for o, v, _ in reruns], timeout=1200)
        good = 0
        for (order, value, offered), (rc, out, err) in zip(reruns, again):
            done = [line[3:] for line in out.splitlines() if line.startswith("ok ")]
            print("%s real [import %s] with GLIBC_TUNABLES=%s: %s" % (r.suite, ", ".join(order), value,
                                                                     "all imported" if done == order else "fails"))
            if offered:
                good += check(done == order, "%s: with TLS001's GLIBC_TUNABLES=%s, import %s still fails for "
                              "real:\n%s%s" % (r.suite, value, ",".join(order), out, err[-800:]))
            else:
                good += check(done != order, "%s: TLS001 offers no fix, yet GLIBC_TUNABLES=%s makes import %s "
                              "work for real" % (r.suite, value, ",".join(order)))
        figures["seed001 fix"] = (good, len(reruns))


def one_root(suite, seed, count):
    why = roots.problem(suite)
    if why:
        fail(why)
        return None
    scratch = tempfile.mkdtemp(prefix="mld-roots-tls-")
    os.chmod(scratch, 0o755)
    try:
        os.makedirs(os.path.join(scratch, "src"))
        for name in ("tls-fixture.c", "tls-auditor.c", "tls-runner.c"):
            shutil.copy(os.path.join(HERE, "tls", name), os.path.join(scratch, "src", name))
        for name, text in (("tlsmod.c", TLSMOD), ("static-info.c", STATIC_INFO)):
            with open(os.path.join(scratch, "src", name), "w") as f:
                f.write(text)
        r = Root(suite, os.path.join(roots.cache(), suite), scratch)
        p = roots.run(r.root, ["sh", "-c", build_script()], binds=[(scratch, MNT)], timeout=900)
        if not check(p.returncode == 0, "%s: building the fixtures with the root's gcc: exit %d\n%s"
                     % (suite, p.returncode, p.stderr[-2000:])):
            return None
        figures = {}
        rng = random.Random("%d-%s" % (seed, suite))
        try:
            for phase in (lambda: static_sizes(r, figures), lambda: dlopen_sequences(r, sequences(rng, count), figures),
                          lambda: seed001(r, figures)):
                t0 = time.time()
                phase()
                print("%s: phase took %.1f s" % (suite, time.time() - t0))
        except RuntimeError as e:
            fail(str(e))
        return r.glibc, figures
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    seed = int(os.environ.get("MLD_TLS_SEED", random.randrange(1 << 32)))
    count = int(os.environ.get("MLD_ROOT_TLS_SEQUENCES", "6"))
    print("roots-static-tls: seed %d (MLD_TLS_SEED=%d reproduces the random sequences)" % (seed, seed))
    suites = os.environ.get("MLD_ROOT_SUITES", ",".join(roots.SUITES)).split(",")
    with concurrent.futures.ThreadPoolExecutor(len(suites)) as pool:
        results = list(pool.map(lambda s: one_root(s, seed, count), suites))
    for suite, res in zip(suites, results):
        if res:
            glibc, figures = res
            print("%-8s glibc %s  %s" % (suite, glibc, "  ".join(
                "%s %d/%d%s" % (k, v[0], v[1], " (%d fail for real)" % v[2] if len(v) > 2 else "")
                for k, v in figures.items())))
    mldtest.finish("roots-static-tls")


main()

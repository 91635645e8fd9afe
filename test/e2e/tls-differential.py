#!/usr/bin/env python3
# labels: slow
"""Static TLS differential test: mldoctor's dlopen model against real dlopen().

Builds 21 fixture libraries with gcc from test/e2e/tls/tls-fixture.c:
initial-exec TLS of 8..2000 bytes at alignments 1..256, TLSDESC modules
(-mtls-dialect=gnu2), a general dynamic one, one with two TLS arrays, and
libraries whose initial-exec reference goes to another library's TLS, so the
failure names that other library. A runner (test/e2e/tls/tls-runner.c)
dlopen()s its arguments in order and prints "ok LIB" or "fail LIB: <dlerror()>".
A few directed sequences probe single rules (the rollback of a failed dlopen,
the TLSDESC budget, alignment) and open system runtimes such as libgomp.so.1
by soname.

Then, for random sequences (seeded; subsets in random order, sometimes with a
repeated or a missing library), under six GLIBC_TUNABLES settings and two
more with LD_AUDIT=tls-auditor.so (an auditor linked with libc), it runs
the runner for real, single-threaded and with a blocked second thread, and
compares every line with `mldoctor libs RUNNER --load-order ... --json` run
in the same environment. It also checks:
  * static_size, under those settings and 25 more GLIBC_TUNABLES strings
    (malformed items, number formats, repeats, int wrap-around), against the
    loader's own _dl_get_tls_static_info;
  * for each failing sequence with a tunables_fix, that the real runner loads
    every library under GLIBC_TUNABLES=<tunables_fix>, and fails under the
    same setting 64 bytes smaller (the fix claims to be the smallest multiple
    of 64).

Environment: MLDOCTOR (the binary). Optional: MLD_TLS_SEED (reproduce a run),
MLD_TLS_SEQUENCES (how many sequences; default 200), MLD_TLS_KEEP=1 (keep the
build directory and print its path).
"""
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.environ.get("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE))),
                   "test", "e2e", "tls")
MLDOCTOR = os.environ.get("MLDOCTOR", "mldoctor")
CC = os.environ.get("CC", "gcc")

# name: macros, extra flags, needed fixture (DT_NEEDED, found via $ORIGIN).
IE = {"IE": "1"}
DESC = {"IE": "0"}
FIXTURES = {
    "a": (dict(VAR="va", SIZE="400", ALIGN="16", **IE), [], None),
    "b": (dict(VAR="vb", SIZE="1200", ALIGN="8", **IE), [], None),
    "c": (dict(VAR="vc", SIZE="8", ALIGN="1", **IE), [], None),
    "d": (dict(VAR="vdd", SIZE="64", ALIGN="64", **IE), [], None),
    "e": (dict(VAR="ve", SIZE="700", ALIGN="256", **IE), [], None),  # above static_align
    "f": (dict(VAR="vf", SIZE="333", ALIGN="4", **IE), [], None),
    "g": (dict(VAR="vg", SIZE="1024", ALIGN="32", **IE), [], None),
    "h": (dict(VAR="vh", SIZE="96", ALIGN="128", **IE), [], None),  # above static_align
    "two": (dict(VAR="vt1", SIZE="300", ALIGN="8", VAR2="vt2", SIZE2="150", ALIGN2="32", **IE),
            [], None),
    "da": (dict(VAR="vda", SIZE="512", ALIGN="16", **DESC), ["-mtls-dialect=gnu2"], None),
    "db": (dict(VAR="vdb", SIZE="200", ALIGN="64", **DESC), ["-mtls-dialect=gnu2"], None),
    "dc": (dict(VAR="vdc", SIZE="1100", ALIGN="8", **DESC), ["-mtls-dialect=gnu2"], None),
    "dd": (dict(VAR="vdd4", SIZE="48", ALIGN="256", **DESC), ["-mtls-dialect=gnu2"], None),
    "dx": (dict(VAR="vx", SIZE="600", ALIGN="32", **DESC), ["-mtls-dialect=gnu2"], None),
    "gd": (dict(VAR="vgd", SIZE="900", ALIGN="16", **DESC), [], None),
    "rx": (dict(REF="vx", REFSIZE="600"), [], "dx"),
    "ra": (dict(REF="va", REFSIZE="400", VAR="vra", SIZE="250", ALIGN="16", **IE), [], "a"),
    # For the directed sequences below: p needs q; q gets its 64 bytes at
    # alignment 64 (with slack below it), then p's 2000 bytes fail and the
    # rollback gives q's block back but, on x86, not the slack.
    "q": (dict(VAR="vq", SIZE="64", ALIGN="64", **IE), [], None),
    "p": (dict(VAR="vp", SIZE="2000", ALIGN="16", **IE), [], "q"),
    "m1700": (dict(VAR="vm1", SIZE="1700", ALIGN="4", **IE), [], None),
    "m1660": (dict(VAR="vm2", SIZE="1660", ALIGN="4", **IE), [], None),
}
# Sequences that probe one rule each (besides the random ones).
DIRECTED = [
    ["p", "m1700"],       # the slack below q is lost after the rollback
    ["p", "m1660"],       # ... but q's block itself comes back
    ["m1660", "p", "c"],  # a failure with nothing to roll back, then 8 bytes
    ["da", "rx", "dx"],   # TLSDESC first, then an IE reference to another module
    ["dx", "dc", "rx"],   # TLSDESC budget spent: rx must place dx itself
    ["e", "dd", "h"],     # alignment above static_align: IE fails, TLSDESC falls back
    # System runtimes with initial-exec TLS, opened by soname (found through
    # ld.so.cache; "not found" on both sides where a machine lacks one).
    ["m1700", "libgomp.so.1", "libglapi.so.0", "libgfortran.so.5", "libstdc++.so.6"],
    ["libgomp.so.1", "b", "g", "a", "libglapi.so.0"],
    ["g", "libstdc++.so.6", "libgfortran.so.5", "b", "libgomp.so.1"],
]
TUNABLES = [
    None,
    "glibc.rtld.optional_static_tls=0",
    "glibc.rtld.optional_static_tls=1024",
    "glibc.rtld.optional_static_tls=4096",
    "glibc.rtld.nns=1",
    "glibc.rtld.nns=2:glibc.rtld.optional_static_tls=256",
]
# (GLIBC_TUNABLES, with LD_AUDIT=tls-auditor.so) for every sequence.
SETTINGS = [(t, False) for t in TUNABLES] + [
    (None, True),
    ("glibc.rtld.optional_static_tls=1024", True),
]


# GLIBC_TUNABLES strings whose parse shows in the static TLS size (the
# loader's own _dl_get_tls_static_info is the oracle): malformed items,
# out-of-range values, number formats, repeats, int truncation.
PARSE_CASES = [
    "", ":::", "glibc.rtld.nns", "glibc.rtld.nns=5", "glibc.rtld.nns=0", "glibc.rtld.nns=17",
    "glibc.rtld.nns=0x10", "glibc.rtld.nns=010", "glibc.rtld.nns=5x", "glibc.rtld.nns=2=3",
    "glibc.rtld.nns=2:glibc.rtld.nns=99", "glibc.rtld.nns=99:glibc.rtld.nns=2",
    "foo:glibc.rtld.nns=3", "glibc.rtld.nns=3:bogus", "bogus:glibc.rtld.optional_static_tls=100",
    "glibc.rtld.optional_static_tls=", "glibc.rtld.optional_static_tls= 300",
    "glibc.rtld.optional_static_tls=+64", "glibc.rtld.nnsx=3", "glibc.rtld.nns=-1",
    "glibc.malloc.check=3:glibc.rtld.nns=7", "glibc.rtld.optional_static_tls=70000",
    "glibc.rtld.optional_static_tls=-64", "glibc.rtld.optional_static_tls=4294967296",
    "glibc.rtld.nns=16:glibc.rtld.optional_static_tls=0",
]


def lib_path(d, name):
    return os.path.join(d, "libtls-%s.so" % name)


def build(d):
    for name, (macros, flags, needed) in FIXTURES.items():
        cmd = [CC, "-shared", "-fPIC", "-O1", "-o", lib_path(d, name)]
        cmd += ["-D%s=%s" % kv for kv in macros.items()] + flags
        cmd += [os.path.join(SRC, "tls-fixture.c"), "-Wl,-soname,libtls-%s.so" % name]
        if needed:
            cmd += ["-Wl,-rpath,$ORIGIN", "-L" + d, "-Wl,--no-as-needed", "-ltls-" + needed]
        subprocess.run(cmd, check=True)
    subprocess.run([CC, "-shared", "-fPIC", "-o", os.path.join(d, "tls-auditor.so"),
                    os.path.join(SRC, "tls-auditor.c"), "-Wl,--no-as-needed"], check=True)
    runner = os.path.join(d, "tls-runner")
    subprocess.run([CC, "-O1", "-pthread", "-o", runner, os.path.join(SRC, "tls-runner.c")],
                   check=True)
    return runner


AUDITOR = [None]  # the path of tls-auditor.so once built


def env_with(tunables, audit=False):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLIBC_TUNABLES", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH")}
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    if audit:
        env["LD_AUDIT"] = AUDITOR[0]
    return env


def shell_cmd(tunables, argv, audit=False):
    pre = "GLIBC_TUNABLES='%s' " % tunables if tunables is not None else "env -u GLIBC_TUNABLES "
    if audit:
        pre += "LD_AUDIT=%s " % AUDITOR[0]
    return pre + " ".join("'%s'" % a if "," in a or "$" in a else a for a in argv)


def describe(tunables, audit):
    return "GLIBC_TUNABLES=%s%s" % (tunables, " LD_AUDIT=tls-auditor.so" if audit else "")


def run_real(runner, libs, tunables, thread, audit=False):
    argv = [runner] + (["--thread"] if thread else []) + libs
    env = env_with(tunables, audit)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    steps = []
    for line in p.stdout.splitlines():
        if line.startswith("ok "):
            steps.append((line[3:], True, None))
        elif line.startswith("fail "):
            path, err = line[5:].split(": ", 1)
            steps.append((path, False, err))
    return steps, p, argv


def run_model(runner, libs, tunables, audit=False):
    argv = [MLDOCTOR, "libs", runner, "--load-order", ",".join(libs), "--json"]
    p = subprocess.run(argv, env=env_with(tunables, audit), capture_output=True, text=True,
                       timeout=60)
    try:
        doc = json.loads(p.stdout)
        return doc["load_order"], p, argv
    except (ValueError, KeyError):
        return None, p, argv


def static_info(d):
    """GLRO(dl_tls_static_size) of a fresh process, from the loader itself."""
    src = os.path.join(d, "static-info.c")
    with open(src, "w") as f:
        f.write('#include <dlfcn.h>\n#include <stdio.h>\n#include <stddef.h>\n'
                'int main(void){void (*g)(size_t*,size_t*)=(void(*)(size_t*,size_t*))'
                'dlsym(RTLD_DEFAULT,"_dl_get_tls_static_info");size_t s=0,a=0;'
                'if(!g)return 1;g(&s,&a);printf("%zu %zu\\n",s,a);return 0;}\n')
    exe = os.path.join(d, "static-info")
    subprocess.run([CC, "-o", exe, src, "-ldl"], check=True)
    return exe


def main():
    if os.uname().machine != "x86_64":
        # The fixtures use -mtls-dialect=gnu2 and x86_64 relocation types.
        print("tls-differential: skipped, x86_64 only (this is %s)" % os.uname().machine)
        return 0
    seed = int(os.environ.get("MLD_TLS_SEED", random.randrange(1 << 32)))
    count = int(os.environ.get("MLD_TLS_SEQUENCES", "200"))
    print("tls-differential: seed %d (MLD_TLS_SEED=%d reproduces this run)" % (seed, seed))
    rng = random.Random(seed)
    d = tempfile.mkdtemp(prefix="mld-tls-")
    try:
        return run(d, rng, count, seed)
    finally:
        if os.environ.get("MLD_TLS_KEEP"):
            print("tls-differential: kept %s" % d)
        else:
            shutil.rmtree(d, ignore_errors=True)


def run(d, rng, count, seed):
    runner = build(d)
    AUDITOR[0] = os.path.join(d, "tls-auditor.so")
    names = sorted(FIXTURES)
    missing = os.path.join(d, "libtls-missing.so")
    sequences = [[n if ".so" in n else lib_path(d, n) for n in seq] for seq in DIRECTED]
    for _ in range(count):
        k = rng.randint(1, len(names))
        libs = [lib_path(d, n) for n in rng.sample(names, k)]
        r = rng.random()
        if r < 0.1:
            libs.insert(rng.randrange(len(libs) + 1), rng.choice(libs))
        elif r < 0.15:
            libs.insert(rng.randrange(len(libs) + 1), missing)
        sequences.append(libs)

    problems = []
    totals = {"runs": 0, "steps": 0, "fixes": 0, "parse": 0}

    def report(msg, cmds):
        problems.append(msg + "".join("\n    reproduce: " + c for c in cmds))

    # static_size under each setting, from the loader itself.
    info = static_info(d)
    for t, audit in SETTINGS + [(t, False) for t in PARSE_CASES]:
        p = subprocess.run([info], env=env_with(t, audit), capture_output=True, text=True)
        lo, mp, margv = run_model(runner, [lib_path(d, "c")], t, audit)
        if p.returncode != 0:
            report("_dl_get_tls_static_info is not available: %s" % p.stderr.strip(), [info])
        elif lo is None:
            report("model gave no load_order (exit %d): %s" % (mp.returncode, mp.stderr.strip()),
                   [shell_cmd(t, margv, audit)])
        elif lo["static_size"] != int(p.stdout.split()[0]):
            report("static_size under %s: model %d, loader %s"
                   % (describe(t, audit), lo["static_size"], p.stdout.split()[0]),
                   [shell_cmd(t, margv, audit)])
        totals["parse"] += 1

    def check(libs, t, audit):
        lo, mp, margv = run_model(runner, libs, t, audit)
        out = {"runs": 0, "steps": 0, "fixes": 0, "problems": []}
        if lo is None:
            out["problems"].append(("model gave no load_order (exit %d): %s"
                                    % (mp.returncode, mp.stderr.strip()[-400:]),
                                    [shell_cmd(t, margv, audit)]))
            return out
        steps = lo["steps"]
        any_fail = False
        for thread in (False, True):
            real, rp, rargv = run_real(runner, libs, t, thread, audit)
            out["runs"] += 1
            if len(real) != len(libs) or len(steps) != len(libs):
                out["problems"].append(("step count: real %d, model %d, asked %d\n%s"
                                        % (len(real), len(steps), len(libs), rp.stderr),
                                        [shell_cmd(t, rargv, audit), shell_cmd(t, margv, audit)]))
                continue
            for i, (path, ok, err) in enumerate(real):
                out["steps"] += 1
                m = steps[i]
                any_fail |= not ok
                if m["ok"] != ok or (not ok and m["error"] != err):
                    out["problems"].append((
                        "step %d (%s)%s under %s:\n      real:  %s\n      model: %s"
                        % (i + 1, os.path.basename(path), " with a thread" if thread else "",
                           describe(t, audit),
                           "ok" if ok else "fail: " + err,
                           "ok" if m["ok"] else "fail: %s" % m["error"]),
                        [shell_cmd(t, rargv, audit), shell_cmd(t, margv, audit)]))
                    break
        fix = lo.get("tunables_fix")
        if any_fail and fix:
            out["fixes"] += 1
            for thread in (False, True):
                real, rp, rargv = run_real(runner, libs, fix, thread, audit)
                bad = [s for s in real if not s[1]]
                if bad or len(real) != len(libs):
                    out["problems"].append(("tunables_fix %s does not make every step load: %s"
                                            % (fix, bad[:1]), [shell_cmd(fix, rargv, audit)]))
            # The fix claims to be the smallest multiple of 64.
            head, _, value = fix.rpartition("glibc.rtld.optional_static_tls=")
            if int(value) >= 64:
                smaller = head + "glibc.rtld.optional_static_tls=%d" % (int(value) - 64)
                real, rp, rargv = run_real(runner, libs, smaller, False, audit)
                if all(s[1] for s in real) and len(real) == len(libs):
                    out["problems"].append(("tunables_fix %s is not the smallest: %s loads too"
                                            % (fix, smaller), [shell_cmd(smaller, rargv, audit)]))
        return out

    jobs = [(libs, t, audit) for libs in sequences for t, audit in SETTINGS]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for out in pool.map(lambda j: check(*j), jobs):
            for k in ("runs", "steps", "fixes"):
                totals[k] += out[k]
            for msg, cmds in out["problems"]:
                report(msg, cmds)

    if problems:
        print("tls-differential: %d disagreements in %d sequences (%d steps); the first:"
              % (len(problems), totals["runs"], totals["steps"]))
        for p in problems[:10]:
            print("  " + p)
        print("  (the files are deleted at exit: rerun with MLD_TLS_SEED=%d MLD_TLS_KEEP=1)"
              % seed)
        return 1
    print("tls-differential: %d sequences, %d steps, all agree (%d tunables_fix checked, "
          "static_size under %d settings)"
          % (totals["runs"], totals["steps"], totals["fixes"], totals["parse"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

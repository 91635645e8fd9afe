#!/usr/bin/env python3
# labels: slow scenario roots
"""`mldoctor run`'s shims inside each Debian generation's processes (issue
32, item 2h). The oracle is the real process: its own /proc/self/maps and the
real outcome of its imports.

trixie (glibc 2.41) and sid (2.43): the built mldoctor and its shims are
bound into the root (at /tmp/mld) and run there, so the job's processes use
the root's ld.so and libc:
  1. `mldoctor run -- python3 -c 'import torch, cv2; ...'`: the job writes
     the ELF objects its own /proc/self/maps holds at the end. run's report
     for that process must list exactly those objects (paths resolved in the
     root as the kernel resolves them; the audit shim itself apart), the
     image's glibc must be the root's, and the OpenMP runtimes it reports at
     exit must be exactly the mapped objects named like one (libgomp,
     libomp, libiomp5). The job's exit status is 0 and its output is there.
  2. Static TLS (seed 001 under run): four fixture extension modules with
     400 bytes of initial-exec TLS each, built by the root's gcc, then
     `import torch`: torch's libgomp.so.1 no longer fits. Run plainly and
     under `mldoctor run`, the job fails the same way (exit status and the
     ImportError's text); the report's TLS001 quotes that text, names the
     object whose dlopen failed, and its replay of the job's dlopen calls
     fails at the same call.

bullseye (glibc 2.31): the binary and the shims built here need symbol
versions the root's glibc lacks (read from the files: GLIBC_2.34 today, for
dladdr and dlsym). Asserted, each with the loader's exact words:
  - `mldoctor run -- python3 ...` inside the root never starts: the loader
    refuses mldoctor naming a missing GLIBC_ version (a sanitizer build: its
    missing libasan), an exit status (not a signal), and the job does not
    run;
  - the audit shim given to a bullseye process (LD_AUDIT, the route a newer
    mldoctor outside a chroot or container takes) is refused and ignored:
    "cannot be loaded as audit interface: version `GLIBC_2.34' not found",
    and the job runs unchanged;
  - `mldoctor run` on this machine with the job chrooted into the root, the
    shims and the trace directory bound at the same paths: the root's first
    process refuses the audit shim with the same words, the job's output and
    exit status are those of the plain job, the report claims no traced
    image of the root's glibc, and RUN001 says the command's exec after the
    chroot went untraced because that root's ld.so refused the shims,
    naming the GLIBC_ version they need (the one the loader names);
  - the same without the trace directory bound: RUN001 says the command
    changed its root to the root and the trace directory is not there;
  - the preload shim (LD_PRELOAD, the route glibc before 2.35 would take) is
    fatal there: the loader stops the job with "version `GLIBC_2.34' not
    found (required by .../libmldoctor-preload.so)", an exit status.
  3. Static TLS room: a job dlopen()s 16-byte initial-exec modules until
     one fails, plainly and under run: under run it never loads more (a
     failure is never hidden) and at most 4 fewer; the report says what the
     probe measured.
When the shims need nothing the root lacks (`make portable`'s, run with
MLDOCTOR=build-portable/mldoctor), bullseye's processes are traced for real
like trixie's and sid's, with the same three parts. There Debian's glibc 2.31
leaves 48 bytes more room under the shims (its backported surplus
accounting); run measures that and preloads a reserve that takes it back
(docs/design.md, "Where the shims leave more room").
"""
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

MLD = "/tmp/mld"   # the build directory, inside the root
OUT = "/tmp/out"   # the scratch directory, inside the root
AUDIT, PRELOAD = "libmldoctor-audit.so", "libmldoctor-preload.so"
OPENMP = re.compile(r"^lib(gomp|omp|iomp5)[.-]")

# mldtest's counters are thread-safe: the roots run side by side.
check, check_eq, fail = mldtest.check, mldtest.check_eq, mldtest.fail


# The job of part 1: imports, then the ELF objects of its own maps.
MAPS_JOB = r'''
import json, torch, cv2
seen = []
for line in open("/proc/self/maps"):
    f = line.split(None, 5)
    if len(f) == 6 and f[5].startswith("/"):
        path = f[5].rstrip("\n")
        try:
            with open(path, "rb") as fh:
                elf = fh.read(4) == b"\x7fELF"
        except OSError:
            elf = False
        if elf and path not in seen:
            seen.append(path)
json.dump(seen, open("/tmp/out/maps.json", "w"))
print("JOB-DONE torch", torch.__version__)
'''
TLS_JOB = "import tlsmod1, tlsmod2, tlsmod3, tlsmod4, torch\nprint('imported')\n"
TLSMOD = r'''#define PY_SSIZE_T_CLEAN
#include <Python.h>
static __thread char b[400] __attribute__((tls_model("initial-exec")));
char *tlsmod@K@_buf(void) { b[0] = @K@; return b; }
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "tlsmod@K@", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_tlsmod@K@(void) { return PyModule_Create(&def); }
'''
# The job of part 3: dlopen() 16-byte initial-exec modules (copies of one
# file: distinct inodes, distinct objects) until one fails; how many loaded.
ROOM_JOB = r'''
import ctypes
n = 0
try:
    for n in range(400):
        ctypes.CDLL("/tmp/room/m%d.so" % n)
    n = 400
except OSError as e:
    assert "static TLS" in str(e), e
print("ROOM", n)
'''
ROOMMOD = 'static __thread char b[16] __attribute__((tls_model("initial-exec"))); char *room_buf(void) { return b; }\n'
# Everything of trixie's and sid's parts in one command inside the root.
SCRIPT = r'''
set -e
inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suf=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
mkdir -p /tmp/site
for k in 1 2 3 4; do
  sed "s/@K@/$k/g" /tmp/out/tlsmod.c > /tmp/m.c
  gcc -shared -fPIC -O0 -I"$inc" -o /tmp/site/tlsmod$k$suf /tmp/m.c
done
set +e
/tmp/mld/mldoctor run --json --report /tmp/out/maps-report.json -- python3 -c "$MAPS_JOB" \
  >/tmp/out/maps.out 2>/tmp/out/maps.err
echo $? >/tmp/out/maps.rc
PYTHONPATH=/tmp/site python3 -c "$TLS_JOB" >/tmp/out/plain.out 2>/tmp/out/plain.err
echo $? >/tmp/out/plain.rc
PYTHONPATH=/tmp/site /tmp/mld/mldoctor run --json --report /tmp/out/tls-report.json -- python3 -c "$TLS_JOB" \
  >/tmp/out/tls.out 2>/tmp/out/tls.err
echo $? >/tmp/out/tls.rc
mkdir -p /tmp/room
gcc -shared -fPIC -O0 -o /tmp/room/m0.so /tmp/out/roommod.c
for k in $(seq 1 399); do cp /tmp/room/m0.so /tmp/room/m$k.so; done
python3 -c "$ROOM_JOB" >/tmp/out/room-plain.out 2>/tmp/out/room-plain.err
/tmp/mld/mldoctor run --json --report /tmp/out/room-report.json -- python3 -c "$ROOM_JOB" \
  >/tmp/out/room-run.out 2>/tmp/out/room-run.err
/tmp/mld/mldoctor run --report /tmp/out/room-report.txt -- python3 -c "$ROOM_JOB" \
  >/tmp/out/room-text.out 2>/tmp/out/room-text.err
'''


def realpath_in(root, path):
    """The path the kernel shows for `path` inside `root` (symlinks resolved,
    absolute ones relative to the root)."""
    parts, out, hops = [p for p in path.split("/") if p], [], 0
    while parts:
        p = parts.pop(0)
        if p == "..":
            out = out[:-1]
            continue
        if p == ".":
            continue
        here = os.path.join(root, *(out + [p]))
        if os.path.islink(here):
            hops += 1
            if hops > 40:
                return path
            target = os.readlink(here)
            if target.startswith("/"):
                out = []
            parts = [x for x in target.split("/") if x] + parts
            continue
        out.append(p)
    return "/" + "/".join(out)


def glibc_of(root):
    return ".".join(re.match(r"(\d+)\.(\d+)", roots.versions(root, ["libc6"])["libc6"]).groups())


def vtuple(v):
    return tuple(int(x) for x in v.split("."))


def missing_versions(path, glibc):
    """GLIBC_x.y versions the file needs that glibc `glibc` lacks."""
    out = subprocess.run(["readelf", "--version-info", "--wide", path], capture_output=True, text=True,
                         check=True).stdout
    need = set(re.findall(r"Name: GLIBC_(\d+\.\d+(?:\.\d+)?)\s", out))
    return sorted(("GLIBC_" + v for v in need if vtuple(v)[:2] > vtuple(glibc)), key=lambda s: vtuple(s[6:]))


def needed_libs(path):
    out = subprocess.run(["readelf", "-d", "--wide", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", out)


def read(d, name):
    try:
        with open(os.path.join(d, name)) as f:
            return f.read()
    except OSError:
        return None


def traced(suite, root, glibc, build, figures):
    scratch = tempfile.mkdtemp(prefix="mld-roots-run-")
    os.chmod(scratch, 0o777)
    try:
        with open(os.path.join(scratch, "tlsmod.c"), "w") as f:
            f.write(TLSMOD)
        with open(os.path.join(scratch, "roommod.c"), "w") as f:
            f.write(ROOMMOD)
        p = roots.run(root, ["sh", "-c", SCRIPT], binds=[(build, MLD, "ro"), (scratch, OUT)],
                      env={"MAPS_JOB": MAPS_JOB, "TLS_JOB": TLS_JOB, "ROOM_JOB": ROOM_JOB}, timeout=900)
        if not check(p.returncode == 0, "%s: the script in the root failed (exit %d): %s"
                     % (suite, p.returncode, p.stderr[-2000:])):
            return
        maps_part(suite, root, glibc, scratch, figures, build)
        tls_part(suite, scratch, figures)
        room_part(suite, scratch, figures)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def maps_part(suite, root, glibc, d, figures, build):
    rc, out, err = read(d, "maps.rc"), read(d, "maps.out") or "", read(d, "maps.err") or ""
    if not check(rc and rc.strip() == "0" and "JOB-DONE" in out,
                 "%s: mldoctor run -- python3 (import torch, cv2): exit %s\nstdout:\n%s\nstderr:\n%s"
                 % (suite, rc, out, err[-2000:])):
        return
    try:
        report = json.loads(read(d, "maps-report.json"))
        mapped = json.loads(read(d, "maps.json"))
    except (TypeError, ValueError) as e:
        check(False, "%s: the report or the maps are unreadable: %s" % (suite, e))
        return
    procs = [p for p in report["processes"] if p["images"] and "python" in os.path.basename(p["images"][-1]["exe"])]
    if not check(len(procs) == 1, "%s: one python3 process in the report, found %s"
                 % (suite, [(p["pid"], [i["exe"] for i in p["images"]]) for p in report["processes"]])):
        return
    proc = procs[0]
    check_eq(proc["images"][-1].get("glibc"), glibc, "%s: the glibc run saw in the job's process" % suite)
    check_eq(report["not_traced"], [], "%s: run's not_traced" % suite)
    shim = MLD + "/" + AUDIT
    # ld.so loads an audit module and what it needs into a namespace of its
    # own: they are mapped in the process but are none of the job's objects.
    # What the shim needs (libc and, built against a glibc before 2.34 by
    # `make portable`, libdl) is in maps; in the job's namespace only if the
    # job loads it too, which run's report then shows.
    own = set(needed_libs(os.path.join(build, AUDIT)))
    real = set(p for p in mapped if p != shim)
    real -= set(p for p in real if os.path.basename(p) in own
                and not any(os.path.basename(realpath_in(root, o["path"])) == os.path.basename(p)
                            for o in proc["objects"]))
    seen = set(realpath_in(root, o["path"]) for o in proc["objects"]
               if not o["closed"] and not o["removed_by_failure"] and o["path"] != "linux-vdso.so.1"
               and o["path"] != shim)
    check(real == seen, "%s: the objects run saw differ from the process's /proc/self/maps:\n  only in maps: %s\n"
          "  only in run's report: %s" % (suite, sorted(real - seen)[:10], sorted(seen - real)[:10]))
    figures["objects"] = (len(real & seen), len(real | seen))
    omp_real = sorted(p for p in real if OPENMP.match(os.path.basename(p)))
    omp_seen = sorted(realpath_in(root, r["path"]) for r in proc["runtimes_at_exit"]
                      if r["kind"] in ("gnu-openmp", "llvm-openmp", "intel-openmp"))
    check(bool(omp_real), "%s: torch maps no OpenMP runtime?" % suite)
    check_eq(omp_seen, omp_real, "%s: the OpenMP runtimes run reports at exit vs the mapped ones" % suite)
    figures["openmp"] = (len(set(omp_real) & set(omp_seen)), len(set(omp_real) | set(omp_seen)))
    print("%s: run saw %d objects, /proc/self/maps holds %d; OpenMP %s" % (suite, len(seen), len(real), omp_real))


def tls_part(suite, d, figures):
    # torch >= 1.8 loads libgomp as a DT_NEEDED of an extension (ImportError);
    # Debian 11's torch 1.7 loads it with ctypes.CDLL (OSError).
    err_re = re.compile(r"(?:ImportError|OSError): (\S+): cannot allocate memory in static TLS block")
    plain_rc, plain_err = read(d, "plain.rc"), read(d, "plain.err") or ""
    rc, err = read(d, "tls.rc"), read(d, "tls.err") or ""
    m, mt = err_re.search(plain_err), err_re.search(err)
    print("%s: import tlsmod1..4, torch: plain exit %s (%s), under run exit %s (%s)"
          % (suite, (plain_rc or "").strip(), m.group(0) if m else "no static TLS error",
             (rc or "").strip(), mt.group(0) if mt else "no static TLS error"))
    if not check(m is not None, "%s: the plain job should fail on static TLS:\n%s" % (suite, plain_err[-1500:])):
        return
    same = check_eq(((rc or "").strip(), mt.group(0) if mt else None), ((plain_rc or "").strip(), m.group(0)),
                    "%s: under run the job ends as it does plainly" % suite)
    try:
        report = json.loads(read(d, "tls-report.json"))
    except (TypeError, ValueError) as e:
        check(False, "%s: the TLS job's report is unreadable: %s" % (suite, e))
        return
    tls = [f for f in report["findings"] if f["rule"] == "TLS001"]
    if not check(len(tls) == 1, "%s: one TLS001 in run's report: %s" % (suite, [f["rule"] for f in report["findings"]])):
        return
    f = tls[0]
    text = json.dumps(f)
    ok = check(m.group(1) in f["message"] and "cannot allocate memory in static TLS block" in f["message"],
               "%s: TLS001 quotes the loader's message for %s: %s" % (suite, m.group(1), f["message"]))
    ok &= check("fails at the same dlopen" in text, "%s: run's replay of the dlopen calls fails at the same call:\n%s"
                % (suite, text[:2000]))
    figures["static TLS"] = (int(same and ok), 1)


def room_part(suite, d, figures):
    """The static TLS room under run against the real process's: the job
    dlopen()s 16-byte initial-exec modules until one fails. Under run it must
    never load more than plainly (a failure would be hidden), and fewer by at
    most 4 (64 bytes: what the shims' namespace and the reserve's rounding
    may cost, docs/design.md); run's report says what it measured."""
    count = re.compile(r"^ROOM (\d+)$", re.M)
    plain, under = count.search(read(d, "room-plain.out") or ""), count.search(read(d, "room-run.out") or "")
    if not check(plain and under, "%s: the room job did not finish: plain %r / %r, under run %r / %r"
                 % (suite, read(d, "room-plain.out"), (read(d, "room-plain.err") or "")[-800:],
                    read(d, "room-run.out"), (read(d, "room-run.err") or "")[-800:])):
        return
    p, r = int(plain.group(1)), int(under.group(1))
    try:
        room = json.loads(read(d, "room-report.json"))["static_tls_room"]
    except (TypeError, ValueError, KeyError) as e:
        check(False, "%s: the room job's report has no static_tls_room: %s" % (suite, e))
        return
    print("%s: 16-byte initial-exec modules dlopen()ed: %d plainly, %d under run; run computed %s bytes for %s "
          "(the probe measured %s), reserved %d%s" % (suite, p, r, room["change_bytes"], room["program"],
                                                      room["probe_change_bytes"], room["reserved_bytes"],
                                                      "; " + room["note"] if room["note"] else ""))
    ok = check(0 < p < 400, "%s: the plain room job should run out of static TLS: %d" % (suite, p))
    ok &= check(r <= p, "%s: under run the job loaded %d modules, plainly %d: run would hide a static TLS "
                "failure" % (suite, r, p))
    ok &= check(p - r <= 4, "%s: under run the job loaded %d modules, plainly %d: more than 64 bytes less room"
                % (suite, r, p))
    ok &= check(room["change_bytes"] is not None, "%s: run did not measure the shims' effect: %s"
                % (suite, room["note"]))
    if room["change_bytes"] is not None:
        want = max(0, (room["change_bytes"] + 15) // 16 * 16)
        ok &= check_eq(room["reserved_bytes"], want, "%s: the reserve is the change rounded up to 16" % suite)
        # The text report says so exactly when a reserve was taken.
        text = read(d, "room-report.txt") or ""
        line = re.search(r"^tls +under the shims this glibc leaves (\d+) bytes more static TLS for dlopen\(\); "
                         r"a (\d+)-byte reserve was preloaded", text, re.M)
        if want:
            ok &= check(line and (int(line.group(1)), int(line.group(2))) == (room["change_bytes"], want),
                        "%s: the text report's tls line for a %d-byte reserve:\n%s" % (suite, want, text[-1500:]))
        else:
            ok &= check("\ntls " not in text, "%s: a tls line without a reserve:\n%s" % (suite, text[-1500:]))
    figures["TLS room"] = (int(ok), 1)


def bullseye(suite, root, glibc, build, figures):
    """The binary and the shims built here in a glibc older than they need."""
    agree = total = 0
    for name in ("mldoctor", AUDIT, PRELOAD):
        missing = missing_versions(os.path.join(build, name), glibc)
        total += 1
        agree += check(bool(missing), "%s: %s needs nothing glibc %s lacks: trace bullseye's processes for real "
                       "(a portable build); this part of the test must change" % (suite, name, glibc))
        print("%s: %s needs %s, which glibc %s lacks" % (suite, name, ", ".join(missing) or "nothing", glibc))
    words = "version `(GLIBC_[0-9.]+)' not found"
    code = "print('JOB-RAN')"
    # A sanitizer build also needs its runtime (GCC 12's libasan.so.8), which
    # bullseye lacks: the loader stops at that before any version check.
    absent = [n for n in needed_libs(os.path.join(build, "mldoctor"))
              if not any(os.path.exists(os.path.join(root, d, n))
                         for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib", "lib"))]
    refused = r"%s/mldoctor: [^\n]*%s \(required by %s/mldoctor\)" % (MLD, words, MLD)
    if absent:
        refused = r"%s/mldoctor: error while loading shared libraries: (%s): cannot open shared object file" \
            % (MLD, "|".join(re.escape(n) for n in absent))
    runs = [
        ("mldoctor run", [MLD + "/mldoctor", "run", "--", "python3", "-c", code], {}, refused, False),
        ("LD_AUDIT", ["python3", "-c", code], {"LD_AUDIT": MLD + "/" + AUDIT},
         r"ERROR: ld.so: object '%s/%s' cannot be loaded as audit interface: %s \(required by %s/%s\); ignored\."
         % (MLD, AUDIT, words, MLD, AUDIT), True),
        ("LD_PRELOAD", ["python3", "-c", code], {"LD_PRELOAD": MLD + "/" + PRELOAD},
         r"python3: [^\n]*libc\.so\.6: %s \(required by %s/%s\)" % (words, MLD, PRELOAD), False),
    ]
    for what, argv, env, pattern, job_runs in runs:
        p = roots.run(root, argv, binds=[(build, MLD, "ro")], env=env, timeout=300)
        m = re.search(pattern, p.stderr)
        total += 1
        ok = check(m is not None and 0 < p.returncode < 128 if not job_runs else m is not None and p.returncode == 0,
                   "%s (glibc %s): %s: expected the loader's refusal /%s/ and %s; exit %d\nstdout:\n%s\nstderr:\n%s"
                   % (suite, glibc, what, pattern, "the job unchanged" if job_runs else "an exit status",
                      p.returncode, p.stdout, p.stderr))
        ok &= check(("JOB-RAN" in p.stdout) == job_runs, "%s: %s: the job %s" % (
            suite, what, "should run unchanged" if job_runs else "should not have run"))
        if m and m.group(1).startswith("GLIBC_"):
            ok &= check(m.group(1) in missing_versions(os.path.join(build, "mldoctor" if what == "mldoctor run"
                                                                    else (AUDIT if what == "LD_AUDIT" else PRELOAD)),
                                                       glibc), "%s: the loader names %s" % (suite, m.group(1)))
        agree += ok
        print("%s: %s: exit %d, %s" % (suite, what, p.returncode, m.group(0) if m else p.stderr.strip()[-300:]))
    agree_outside, total_outside = outside(suite, root, glibc, build, code, words)
    figures["refusals"] = (agree + agree_outside, total + total_outside)


def outside(suite, root, glibc, build, code, words):
    """mldoctor run on this machine, the job chrooted into the root: the
    root's first process gets the audit shim and its ld.so refuses it; the
    job's output and exit status are those of the plain job, the report
    claims nothing of a process it could not see, and RUN001 says why it
    could not (with the trace directory bound into the root: the exec after
    the chroot, refused by that root's ld.so; without: the chroot itself)."""
    shims = mldtest.scratch(prefix="mld-shims-", dir="/tmp")
    os.chmod(shims, 0o755)
    for name in (AUDIT, PRELOAD):
        shutil.copy(os.path.join(build, name), shims)
    needed = missing_versions(os.path.join(shims, AUDIT), glibc)
    plain = roots.run(root, ["python3", "-c", code], timeout=300)
    agree = total = 0
    for bind_trace_dir in (True, False):
        traces = mldtest.scratch(prefix="mld-trace-", dir="/tmp")
        binds = [(shims, shims, "ro")] + ([(traces, traces)] if bind_trace_dir else [])
        rep = os.path.join(shims, "report-%d.json" % bind_trace_dir)
        argv = [mldtest.MLDOCTOR, "run", "--json", "--report", rep, "--trace-dir", traces, "--"] + \
            roots.command(root, ["python3", "-c", code], binds=binds)
        p = subprocess.run(argv, env=mldtest.clean_env(MLDOCTOR_SHIM_DIR=shims), capture_output=True,
                           text=True, timeout=300)
        try:
            with open(rep) as f:
                report = json.load(f)
        except (OSError, ValueError):
            report = None
        what = "%s: run outside, job in the root (trace directory %s)" % (
            suite, "bound there" if bind_trace_dir else "not there")
        ok = check_eq((p.returncode, p.stdout), (plain.returncode, plain.stdout),
                      "%s: exit status and output as the plain job's" % what)
        ok &= check(report is not None and not [i for pr in report["processes"] for i in pr["images"]
                                                if i.get("glibc") == glibc],
                    "%s: the report claims a traced image of glibc %s: %s" % (what, glibc, report))
        run001 = [f for f in (report or {}).get("findings", []) if f["rule"] == "RUN001"]
        text = json.dumps(run001)
        if bind_trace_dir:
            pattern = (r"ERROR: ld.so: object '%s/%s' cannot be loaded as audit interface: %s \(required by %s/%s\); "
                       r"ignored\." % (re.escape(shims), AUDIT, words, re.escape(shims), AUDIT))
            m = re.search(pattern, p.stderr)
            ok &= check(m is not None, "%s: the root's ld.so should refuse the audit shim /%s/:\n%s"
                        % (what, pattern, p.stderr))
            # The loader names the first version it misses, RUN001 the
            # newest the shims need (a glibc at least that loads them).
            ok &= check(len(run001) == 1 and "changed its root directory" in text and "refused" in text
                        and bool(needed) and "they need " + needed[-1] in text and bool(m) and m.group(1) in needed,
                        "%s: RUN001 should say that root's ld.so refused the shims, which need %s (the loader "
                        "names %s): %s" % (what, needed[-1] if needed else "?", m.group(1) if m else "?", text))
        else:
            ok &= check(len(run001) == 1 and "changed its root directory to " + root in text
                        and "trace directory " + traces + " is not at that path" in text,
                        "%s: RUN001 should say the root lacks the trace directory: %s" % (what, text))
        agree += ok
        total += 1
        print("%s: exit %d; RUN001: %s" % (what, p.returncode, [(f["message"], [e["text"] for e in f["evidence"]])
                                                               for f in run001]))
    return agree, total


def one_root(suite, build):
    why = roots.problem(suite)
    if why:
        fail(why)
        return None
    root = os.path.join(roots.cache(), suite)
    glibc = glibc_of(root)
    figures = {}
    needs = missing_versions(os.path.join(build, "mldoctor"), glibc) + \
        missing_versions(os.path.join(build, AUDIT), glibc)
    (bullseye if needs else traced)(suite, root, glibc, build, figures)
    return glibc, figures


def main():
    build = os.path.dirname(os.path.abspath(mldtest.MLDOCTOR))
    for name in ("mldoctor", AUDIT, PRELOAD):
        if not os.path.isfile(os.path.join(build, name)):
            mldtest.fail("%s is not next to %s" % (name, mldtest.MLDOCTOR))
            mldtest.finish("roots-run-shims")
    suites = os.environ.get("MLD_ROOT_SUITES", ",".join(roots.SUITES)).split(",")
    with concurrent.futures.ThreadPoolExecutor(len(suites)) as pool:
        results = list(pool.map(lambda s: one_root(s, build), suites))
    for suite, res in zip(suites, results):
        if res:
            print("%-8s glibc %s  %s" % (suite, res[0], "  ".join("%s %d/%d" % (k, v[0], v[1])
                                                                  for k, v in res[1].items())))
    mldtest.finish("roots-run-shims")


main()

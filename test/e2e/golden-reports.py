#!/usr/bin/env python3
"""Golden reports: the exact text mldoctor prints for fixed scenarios.

Each case is a directory test/golden/<case>/ with
  setup.sh      builds fixtures into $T (a fresh scratch directory); $CASE is the
                case directory, $LIB test/e2e/lib (make_log.py writes logs)
  cmd           the mldoctor arguments, one shell line ($T expands)
  cmd.sh        instead of cmd: a whole bash script that runs "$MLDOCTOR"
                (a launcher such as mpirun in front of it)
  expected.txt  stdout, with the scratch directory written as %t
  expected.rc   optional: the expected exit status (default 0)
  env           optional: the child's whole environment, NAME=value per line
                (besides PATH, T, MLDOCTOR, NO_COLOR, CASE, LIB, MLD_SOURCE_DIR),
                for commands that read the environment (`check`)
  requires      optional: what the case needs besides mldoctor, one per line: a
                program on PATH, or "companion NAME" for a file next to the
                binary (a build without MPI skips the fleet case, says so)
  filters       optional: what differs between two real runs (pids, seconds),
                one `REGEX => REPLACEMENT` per line (Python re), applied to
                the output before comparing; a filter that matches nothing
                fails the case (so a filter cannot hide a changed report)
Outputs are compared after replacing $T by %t and trimming trailing spaces;
a difference prints a unified diff. UPDATE_GOLDEN=1 rewrites expected.txt;
GOLDEN_RAW_DIR=DIR also writes each case's output before the filters there.
GOLDEN_CASES=a,b runs only those cases.
docs/guide.md shows some of these outputs (scripts/update-guide.py,
test/e2e/docs-guide-current.sh).
"""
import difflib
import os
import re
import shutil
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(os.path.dirname(HERE), "golden")
MLDOCTOR = os.environ.get("MLDOCTOR", "mldoctor")


# The host fixture trees by their names, as the guide writes them (a report
# that repeats its command line, `mldoctor fix --root cgroup-v2-quota`,
# must not depend on where the source tree is).
FIXTURE_HOSTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "hosts") + "/"


def normalise(text, t):
    text = text.replace(t, "%t").replace(FIXTURE_HOSTS, "")
    if os.environ.get("MLD_SOURCE_DIR"):
        text = text.replace(os.path.join(os.path.realpath(os.environ["MLD_SOURCE_DIR"]), "test", "fixtures", "hosts") + "/", "")
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def apply_filters(text, cdir):
    """The case's filters applied to `text`; the filters that matched nothing."""
    path = os.path.join(cdir, "filters")
    unused = []
    if os.path.exists(path):
        for line in open(path).read().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            pattern, replacement = line.split(" => ", 1)
            text, n = re.subn(pattern, replacement, text, flags=re.M)
            if n == 0:
                unused.append(pattern)
    return text, unused


def missing_requirements(cdir):
    path = os.path.join(cdir, "requires")
    missing = []
    if os.path.exists(path):
        for line in open(path).read().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("companion "):
                name = line.split(None, 1)[1]
                if not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(MLDOCTOR)), name)):
                    missing.append(name)
            elif not shutil.which(line):
                missing.append(line)
    return missing


def main():
    failed = passed = 0
    only = [c for c in os.environ.get("GOLDEN_CASES", "").split(",") if c]
    for case in sorted(os.listdir(GOLDEN)):
        if only and case not in only:
            continue
        cdir = os.path.join(GOLDEN, case)
        if not any(os.path.isfile(os.path.join(cdir, c)) for c in ("cmd", "cmd.sh")):
            continue
        missing = missing_requirements(cdir)
        if missing:
            print("skip golden %s: needs %s" % (case, ", ".join(missing)))
            continue
        t = tempfile.mkdtemp(prefix="mld-golden-")
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "GLIBC_TUNABLES", "LD_AUDIT")}
        env_file = os.path.join(cdir, "env")
        if os.path.exists(env_file):
            # The sanitizer options of make test-sanitize: reports go to files there.
            keep = ("PATH", "MLD_SOURCE_DIR", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")
            env = {k: v for k, v in env.items() if k in keep}
            env.setdefault("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
            for line in open(env_file).read().splitlines():
                if "=" in line and not line.startswith("#"):
                    k, v = line.split("=", 1)
                    env[k] = v
        env.update(T=t, MLDOCTOR=MLDOCTOR, NO_COLOR="1", CASE=cdir, LIB=os.path.join(HERE, "lib"))
        if os.path.exists(os.path.join(cdir, "setup.sh")):
            subprocess.run(["bash", "-e", os.path.join(cdir, "setup.sh")], env=env, cwd=t, check=True)
        if os.path.isfile(os.path.join(cdir, "cmd")):
            with open(os.path.join(cdir, "cmd")) as f:
                argv = ["bash", "-c", '"$MLDOCTOR" ' + f.read().strip()]
        else:
            argv = ["bash", os.path.join(cdir, "cmd.sh")]
        p = subprocess.run(argv, env=env, cwd=t, capture_output=True, text=True)
        raw = normalise(p.stdout, t)
        actual, unused = apply_filters(raw, cdir)
        if os.environ.get("GOLDEN_RAW_DIR"):
            # This run's output before the filters (scripts/update-guide.py).
            with open(os.path.join(os.environ["GOLDEN_RAW_DIR"], case + ".txt"), "w") as f:
                f.write(raw)
        rc_file = os.path.join(cdir, "expected.rc")
        want_rc = int(open(rc_file).read()) if os.path.exists(rc_file) else 0
        exp_file = os.path.join(cdir, "expected.txt")
        if os.environ.get("UPDATE_GOLDEN"):
            with open(exp_file, "w") as f:
                f.write(actual)
            with open(rc_file, "w") as f:
                f.write("%d\n" % p.returncode)
        expected = open(exp_file).read() if os.path.exists(exp_file) else ""
        ok = actual == expected and p.returncode == want_rc and not unused
        for pattern in unused:
            print("FAIL golden %s: filter %r matched nothing" % (case, pattern))
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL golden %s (exit %d, expected %d)" % (case, p.returncode, want_rc))
            sys.stdout.writelines(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                                       "expected.txt", "actual"))
            if p.stderr:
                print("stderr:\n" + p.stderr)
        shutil.rmtree(t, ignore_errors=True)
    print("golden-reports: %d passed, %d failed" % (passed, failed))
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Golden reports: the exact text mldoctor prints for fixed scenarios.

Each case is a directory test/golden/<case>/ with
  setup.sh      builds fixtures into $T (a fresh scratch directory); $CASE is the
                case directory, $LIB test/e2e/lib (make_log.py writes logs)
  cmd           the mldoctor arguments, one shell line ($T expands)
  expected.txt  stdout, with the scratch directory written as %t
  expected.rc   optional: the expected exit status (default 0)
  env           optional: the child's whole environment, NAME=value per line
                (besides PATH, T, MLDOCTOR, NO_COLOR, CASE, LIB, MLD_SOURCE_DIR),
                for commands that read the environment (`check`)
Outputs are compared after replacing $T by %t and trimming trailing spaces;
a difference prints a unified diff. UPDATE_GOLDEN=1 rewrites expected.txt.
"""
import difflib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(os.path.dirname(HERE), "golden")
MLDOCTOR = os.environ.get("MLDOCTOR", "mldoctor")


def normalise(text, t):
    return "\n".join(line.rstrip() for line in text.replace(t, "%t").splitlines()) + "\n"


def main():
    failed = passed = 0
    for case in sorted(os.listdir(GOLDEN)):
        cdir = os.path.join(GOLDEN, case)
        if not os.path.isfile(os.path.join(cdir, "cmd")):
            continue
        t = tempfile.mkdtemp(prefix="mld-golden-")
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "GLIBC_TUNABLES", "LD_AUDIT")}
        env_file = os.path.join(cdir, "env")
        if os.path.exists(env_file):
            keep = ("PATH", "MLD_SOURCE_DIR")
            env = {k: v for k, v in env.items() if k in keep}
            env.setdefault("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
            for line in open(env_file).read().splitlines():
                if "=" in line and not line.startswith("#"):
                    k, v = line.split("=", 1)
                    env[k] = v
        env.update(T=t, MLDOCTOR=MLDOCTOR, NO_COLOR="1", CASE=cdir, LIB=os.path.join(HERE, "lib"))
        if os.path.exists(os.path.join(cdir, "setup.sh")):
            subprocess.run(["bash", "-e", os.path.join(cdir, "setup.sh")], env=env, cwd=t, check=True)
        with open(os.path.join(cdir, "cmd")) as f:
            cmd = f.read().strip()
        p = subprocess.run(["bash", "-c", '"$MLDOCTOR" ' + cmd], env=env, cwd=t, capture_output=True, text=True)
        actual = normalise(p.stdout, t)
        rc_file = os.path.join(cdir, "expected.rc")
        want_rc = int(open(rc_file).read()) if os.path.exists(rc_file) else 0
        exp_file = os.path.join(cdir, "expected.txt")
        if os.environ.get("UPDATE_GOLDEN"):
            with open(exp_file, "w") as f:
                f.write(actual)
            with open(rc_file, "w") as f:
                f.write("%d\n" % p.returncode)
        expected = open(exp_file).read() if os.path.exists(exp_file) else ""
        ok = actual == expected and p.returncode == want_rc
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

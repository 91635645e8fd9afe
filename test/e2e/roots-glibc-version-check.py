#!/usr/bin/env python3
# labels: slow roots
"""Issue 34, item 1: tools/check-glibc-versions.py (which fails `make
portable` when a shipped object needs a glibc symbol version above 2.28)
agrees with the real loader of an older glibc. Fixture programs are built
here with gcc against this machine's glibc (2.36), each calling one function
whose symbol version is newer than bullseye's glibc 2.31 (arc4random 2.36,
stat 2.33, pthread_create 2.34) or not (puts 2.2.5, getrandom 2.25); the
oracle is bullseye's own ld.so running each program in that root: the tool
says "too new for 2.31" exactly for the programs that loader refuses, and the
version it names is one the loader's message names. The same is checked for
a shared object loaded with dlopen() by that root's python3 (ctypes)."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(SOURCE, "tools", "check-glibc-versions.py")
CASES = {
    # name: (C body of main/function, includes)
    "arc4random": ("return (int)(arc4random() & 1) * 0;", "#include <stdlib.h>"),
    "stat": ("struct stat st; return stat(\"/\", &st) == 0 ? 0 : 1;", "#include <sys/stat.h>"),
    "pthread": ("pthread_t t; if (pthread_create(&t, 0, worker, 0)) return 1; "
                "return pthread_join(t, 0);",
                "#include <pthread.h>\nstatic void* worker(void* a) { return a; }"),
    "puts": ("puts(\"ok\"); return 0;", "#include <stdio.h>"),
    "getrandom": ("char b[4]; return getrandom(b, 4, 0) == 4 ? 0 : 1;", "#include <sys/random.h>"),
}


def build(d, name, body, includes, shared):
    src = os.path.join(d, name + ".c")
    with open(src, "w") as f:
        if shared:
            f.write("%s\nint probe(void) { %s }\n" % (includes, body))
        else:
            f.write("%s\nint main(void) { %s }\n" % (includes, body))
    out = os.path.join(d, ("lib%s.so" % name) if shared else name)
    argv = [mldtest.CC, "-O1", "-o", out, src, "-pthread"] + (["-shared", "-fPIC"] if shared else [])
    p = subprocess.run(argv, capture_output=True, text=True)
    mldtest.check(p.returncode == 0, "gcc %s: %s" % (name, p.stderr))
    return out


def tool(path, max_glibc):
    return subprocess.run([sys.executable, TOOL, "--max-glibc", max_glibc, path],
                          capture_output=True, text=True)


def main():
    root = roots.root("bullseye")
    d = mldtest.scratch()
    for name, (body, includes) in CASES.items():
        for shared in (False, True):
            obj = build(d, name, body, includes, shared)
            verdict = tool(obj, "2.31")
            mldtest.check(verdict.returncode in (0, 1), "%s: tool failed: %s" % (obj, verdict.stderr))
            flagged = re.findall(r": (GLIBC_[\d.]+) from ", verdict.stdout)
            if shared:
                real = roots.run(root, ["python3", "-c",
                                        "import ctypes; ctypes.CDLL('/tmp/fx/%s')" % os.path.basename(obj)],
                                 binds=[(d, "/tmp/fx", "ro")])
            else:
                real = roots.run(root, ["/tmp/fx/" + os.path.basename(obj)],
                                 binds=[(d, "/tmp/fx", "ro")])
            refused = re.findall(r"version `(GLIBC_[\d.]+)' not found", real.stderr)
            what = "%s (%s)" % (name, "dlopen" if shared else "exec")
            mldtest.check_eq(bool(flagged), bool(refused),
                             "%s: tool flags it for 2.31 exactly when bullseye's loader refuses it "
                             "(tool: %s; loader rc %d: %s)" % (what, verdict.stdout.strip(),
                                                               real.returncode, real.stderr.strip()))
            if refused:
                mldtest.check(set(refused) <= set(flagged),
                              "%s: the loader's missing versions %s are among the tool's %s"
                              % (what, refused, flagged))
            else:
                mldtest.check_eq(real.returncode, 0, "%s runs in bullseye: %s" % (what, real.stderr))
            # Against 2.28 the verdict only tightens: anything too new for 2.31 stays so.
            if flagged:
                mldtest.check_eq(tool(obj, "2.28").returncode, 1, "%s: too new for 2.28 too" % what)
    mldtest.finish("roots-glibc-version-check")


main()

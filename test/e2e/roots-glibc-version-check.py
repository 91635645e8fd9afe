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
a shared object loaded with dlopen() by that root's python3 (ctypes), and for
a C++ shared object linked against this machine's libstdc++ that calls
std::to_chars(float) (GLIBCXX_3.4.29, GCC 11): bullseye's libstdc++ (GCC 10)
refuses it by that version, and the tool, which allows no libstdc++ version
at all (it is linked statically into what we ship), names it."""
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
# C++, built as a shared object only (an executable would also need GLIBC_2.34's
# __libc_start_main, and ld.so names only the first version it misses).
CXX_CASES = {
    "to_chars": ("char b[32]; auto r = std::to_chars(b, b + 31, 1.5f); *r.ptr = 0; return b[0];",
                 "#include <charconv>"),
}
VERSION = r"((?:GLIBC|GLIBCXX|CXXABI|GCC)_[\d.]+)"


def build(d, name, body, includes, shared, cxx=False):
    src = os.path.join(d, name + (".cc" if cxx else ".c"))
    with open(src, "w") as f:
        if shared:
            f.write("%s\n%sint probe(void) { %s }\n" % (includes, 'extern "C" ' if cxx else "", body))
        else:
            f.write("%s\nint main(void) { %s }\n" % (includes, body))
    out = os.path.join(d, ("lib%s.so" % name) if shared else name)
    compiler = ["g++", "-std=c++17"] if cxx else [mldtest.CC]
    argv = compiler + ["-O1", "-o", out, src, "-pthread"] + (["-shared", "-fPIC"] if shared else [])
    p = subprocess.run(argv, capture_output=True, text=True)
    mldtest.check(p.returncode == 0, "gcc %s: %s" % (name, p.stderr))
    return out


def tool(path, max_glibc):
    return subprocess.run([sys.executable, TOOL, "--max-glibc", max_glibc, path],
                          capture_output=True, text=True)


def main():
    root = roots.root("bullseye")
    d = mldtest.scratch()
    runs = [(n, b, i, shared, False) for n, (b, i) in CASES.items() for shared in (False, True)]
    runs += [(n, b, i, True, True) for n, (b, i) in CXX_CASES.items()]
    for name, body, includes, shared, cxx in runs:
        obj = build(d, name, body, includes, shared, cxx)
        verdict = tool(obj, "2.31")
        mldtest.check(verdict.returncode in (0, 1), "%s: tool failed: %s" % (obj, verdict.stderr))
        flagged = re.findall(r": %s from " % VERSION, verdict.stdout)
        if shared:
            real = roots.run(root, ["python3", "-c",
                                    "import ctypes; ctypes.CDLL('/tmp/fx/%s')" % os.path.basename(obj)],
                             binds=[(d, "/tmp/fx", "ro")])
        else:
            real = roots.run(root, ["/tmp/fx/" + os.path.basename(obj)],
                             binds=[(d, "/tmp/fx", "ro")])
        refused = re.findall(r"version `%s' not found" % VERSION, real.stderr)
        what = "%s (%s)" % (name, "dlopen" if shared else "exec")
        if cxx:
            mldtest.check(any(v.startswith("GLIBCXX_") for v in flagged),
                          "%s: the tool flags its libstdc++ version: %s" % (what, verdict.stdout))
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

#!/usr/bin/env python3
"""Fails when a shipped object needs more than the oldest systems it is meant
to run on provide (issue 34): a GLIBC_ symbol version above --max-glibc
(2.28: RHEL/Rocky/Alma 8), any libstdc++ version (GLIBCXX_, CXXABI_: libstdc++
is linked statically, a system's may be older than the compiler's), or a
libgcc_s version above GCC_7.0.0 (what GCC 8's libgcc_s, RHEL 8's, defines;
the binary uses the system's libgcc_s).

The needs are read from each object's version references (readelf -V, the
.gnu.version_r section), the same data the dynamic loader checks before it
runs a program: "version `GLIBC_2.34' not found" is that check failing.

    tools/check-glibc-versions.py [--max-glibc 2.28] OBJECT...   (make portable)

Prints one line per object with the newest versions it needs; exit status 1
when any object needs too much (each offending symbol version and the
objects' symbols bound to it are named), 2 on a usage error or an unreadable
object."""
import argparse
import re
import subprocess
import sys

MAX_GCC = (7, 0, 0)


def version_tuple(text):
    return tuple(int(x) for x in text.split("."))


def needs(path):
    """{library: [version names]} from the object's version references."""
    out = subprocess.run(["readelf", "-V", "--wide", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise OSError(out.stderr.strip() or "readelf failed")
    result, current = {}, None
    for line in out.stdout.splitlines():
        m = re.search(r"Version: \d+\s+File: (\S+)\s+Cnt: \d+", line)
        if m:
            current = m.group(1)
            result.setdefault(current, [])
            continue
        m = re.search(r"Name: (\S+)\s+Flags:", line)
        if m and current:
            result[current].append(m.group(1))
    return result


def symbols_of(path, version):
    """The dynamic symbols of `path` bound to `version` (for the message)."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        if "(" + version + ")" in line or " " + version + " " in line:
            names.append(line.split()[-1])
    return sorted(set(names))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-glibc", default="2.28")
    parser.add_argument("objects", nargs="+")
    args = parser.parse_args()
    limit = version_tuple(args.max_glibc)
    bad = False
    for path in args.objects:
        try:
            refs = needs(path)
        except OSError as e:
            print("%s: cannot read its version needs: %s" % (path, e), file=sys.stderr)
            return 2
        too_new, newest = [], {}
        for lib, versions in refs.items():
            for v in versions:
                prefix, _, number = v.partition("_")
                if not re.fullmatch(r"\d+(\.\d+)*", number):
                    continue
                key = version_tuple(number)
                if prefix not in newest or key > version_tuple(newest[prefix]):
                    newest[prefix] = number
                if (prefix == "GLIBC" and key > limit) or prefix in ("GLIBCXX", "CXXABI") or \
                        (prefix == "GCC" and key > MAX_GCC):
                    too_new.append((lib, v))
        summary = ", ".join("%s_%s" % (p, newest[p]) for p in sorted(newest))
        print("%s: needs %s" % (path, summary or "no versioned symbols"))
        for lib, v in too_new:
            bad = True
            print("  %s: %s from %s (allowed: GLIBC_%s, GCC_7.0.0, no libstdc++): %s"
                  % (path, v, lib, args.max_glibc, " ".join(symbols_of(path, v)) or "?"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

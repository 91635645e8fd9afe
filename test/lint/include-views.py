#!/usr/bin/env python3
"""The build's own layering guard (mld_include_views in CMakeLists.txt): a
file compiled with a lower library's flags, taken from the real build's
compile_commands.json, must not find an upper library's header (elf cannot
include check's), while it does find its own headers and those of what it
links (elf's and base's). Fails if the views ever widen back to all of src/."""
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile

SOURCE = os.environ["MLD_SOURCE_DIR"]
BUILD = os.environ["MLD_BUILD_DIR"]
LOWER, LINKED, UPPER = "elf", "base", "check"


def header(lib):
    hs = sorted(glob.glob(os.path.join(SOURCE, "src", lib, "*.h")))
    if not hs:
        sys.exit("include-views: no header in src/%s" % lib)
    return "%s/%s" % (lib, os.path.basename(hs[0]))


def compile_flags():
    """The compile command of one of the lower library's sources, as a list
    without its input, output and dependency-file arguments."""
    with open(os.path.join(BUILD, "compile_commands.json")) as f:
        entries = json.load(f)
    for e in entries:
        if "/src/%s/" % LOWER in e["file"] and e["file"].endswith(".cc"):
            args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
            out, skip = [], False
            for a in args:
                if skip:
                    skip = False
                elif a in ("-o", "-MF", "-MT", "-MQ"):
                    skip = True
                elif a in ("-c", "-MD", "-MMD") or a == e["file"] or a.endswith(os.path.basename(e["file"])):
                    continue
                else:
                    out.append(a)
            return out, e["directory"]
    sys.exit("include-views: no src/%s/*.cc in compile_commands.json" % LOWER)


def compiles(flags, cwd, include):
    with tempfile.NamedTemporaryFile("w", suffix=".cc", prefix="mld-include-view-") as f:
        f.write('#include "%s"\n' % include)
        f.flush()
        p = subprocess.run(flags + ["-fsyntax-only", "-x", "c++", f.name], cwd=cwd,
                           capture_output=True, text=True, timeout=300)
    return p.returncode == 0, p.stderr


flags, cwd = compile_flags()
failed = False
for inc, want in ((header(LOWER), True), (header(LINKED), True), (header(UPPER), False)):
    ok, err = compiles(flags, cwd, inc)
    if ok != want or (not ok and "No such file" not in err and "file not found" not in err):
        failed = True
        print("FAIL mld_%s's flags, #include \"%s\": %s (want %s)\n%s"
              % (LOWER, inc, "compiles" if ok else "fails", "compiles" if want else "not found", err))
    else:
        print("ok   mld_%s's flags, #include \"%s\": %s" % (LOWER, inc, "compiles" if ok else "not found"))
sys.exit(1 if failed else 0)

#!/usr/bin/env python3
"""tools/check-layers.py against small synthetic trees, so the `layers` test
is known to fail when it should: a lower library including an upper one's
header must fail naming file:line and the edge, as must a cycle in the
mld_library graph and an include of a directory that is not a library; the
same tree without the planted include must pass (the checker is not simply
failing), and its diagram must put the upper library above the lower."""
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MLD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CHECKER = os.path.join(SOURCE, "tools", "check-layers.py")
CMAKE = """\
function(mld_library name)
  add_library(mld_${name} STATIC ${CMAKE_CURRENT_SOURCE_DIR}/src/${name}/${name}.cc)
  target_link_libraries(mld_${name} PUBLIC ${ARGN})
endfunction()
# mld_library(commented mld_out) is not a declaration
%s
"""
failures = []


def tree(declarations, files):
    root = tempfile.mkdtemp(prefix="mld-layers-")
    with open(os.path.join(root, "CMakeLists.txt"), "w") as f:
        f.write(CMAKE % declarations)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    return root


def run(root, *args):
    p = subprocess.run([sys.executable, CHECKER, "--source-dir", root] + list(args),
                       capture_output=True, text=True, timeout=60)
    shutil.rmtree(root)
    return p.returncode, p.stdout + p.stderr


def expect(name, got, rc, *needles):
    code, out = got
    missing = [n for n in needles if n not in out]
    if code != rc or missing:
        failures.append(name)
        print("FAIL %s: exit %d (want %d), missing %r; output:\n%s" % (name, code, rc, missing, out))
    else:
        print("ok   %s" % name)


LIBS = "mld_library(low)\nmld_library(high mld_low nlohmann_json::nlohmann_json)"
CLEAN = {
    "src/low/low.h": "#pragma once\nint low();\n",
    "src/low/low.cc": "#include \"low/low.h\"\n\n#include <vector>\nint low() { return 1; }\n",
    "src/high/high.h": "#pragma once\n#include \"low/low.h\"\nint high();\n",
    "src/high/high.cc": "#include \"high/high.h\"\nint high() { return low(); }\n",
    "src/tool/main.cc": "#include \"high/high.h\"\nint main() { return high(); }\n",
}

expect("clean tree passes", run(tree(LIBS, CLEAN)), 0, "2 libraries, 2 layers")

bad = dict(CLEAN)
bad["src/low/low.cc"] = "#include \"low/low.h\"\n\n#include \"high/high.h\"\nint low() { return 1; }\n"
expect("lower includes upper", run(tree(LIBS, bad)), 1,
       "src/low/low.cc:3: low -> high", '#include "high/high.h"', "low does not link high")

bad = dict(CLEAN)
bad["src/low/low.h"] = "#pragma once\n#include <high/high.h>\nint low();\n"
expect("angle-bracket include in a header", run(tree(LIBS, bad)), 1, "src/low/low.h:2: low -> high")

bad = dict(CLEAN)
bad["src/low/low.cc"] = "#include \"../high/high.h\"\nint low() { return 1; }\n"
expect("relative include", run(tree(LIBS, bad)), 1, "src/low/low.cc:1: low -> high")

bad = dict(CLEAN)
bad["src/high/high.cc"] = "#include \"tool/main.h\"\nint high() { return 2; }\n"
expect("include of a directory that is not a library", run(tree(LIBS, bad)), 1,
       "src/high/high.cc:1: high -> tool", "src/tool is not a layered library")

expect("cycle", run(tree("mld_library(low mld_high)\nmld_library(high mld_low)", CLEAN)), 1,
       "cycle in the library graph: high -> low -> high")

expect("undeclared dependency", run(tree("mld_library(low mld_gone)\nmld_library(high mld_low)", CLEAN)),
       1, "mld_library(low) links mld_gone, which no mld_library() declares")

expect("link added outside mld_library",
       run(tree(LIBS + "\ntarget_link_libraries(mld_low PRIVATE mld_high)", CLEAN)), 1,
       "target_link_libraries(mld_low ... mld_high)")

expect("diagram", run(tree(LIBS, CLEAN), "--diagram"), 0,
       "layer 1  high\nlayer 0  low\n", "| 1 | `high` | `low` | nlohmann_json |", "`src/tool` is not a layered library")

doc = dict(CLEAN)
doc["docs/design.md"] = "# x\n<!-- layers:begin -->\nold\n<!-- layers:end -->\ntail\n"
expect("stale diagram", run(tree(LIBS, doc), "--check-doc", "docs/design.md"), 1,
       "-old", "+layer 1  high", "tools/check-layers.py --update-doc docs/design.md")

if failures:
    print("layers-violation: %d failed: %s" % (len(failures), ", ".join(failures)))
    sys.exit(1)
print("layers-violation: the checker catches every planted violation")

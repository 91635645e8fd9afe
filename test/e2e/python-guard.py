#!/usr/bin/env python3
"""mldoctor.guard() in real processes, with extension modules built here:

- numpy alone: guard() warns of nothing and returns no hazard;
- GNU libgomp loaded (ctypes), then `import omp_ext`, an extension module
  linked with LLVM's -lomp: the import itself warns HazardWarning with
  OMP001, naming both runtimes and omp_ext as libomp's loader, pointing at
  the import line; another extension import does not warn again;
- `import kmp_copy_ext`, whose init dlopen()s a renamed copy of libomp: a new
  OMP001 warning says the second LLVM/Intel copy aborts with OMP: Error #15
  unless KMP_DUPLICATE_LIB_OK is set, and the process is still alive;
- OMP_NUM_THREADS=3 while libgomp was set to 1 by omp_set_num_threads: THR003.
The child processes run with /usr/bin/python3 and the package from the
source tree; exit 77 without gcc, Python.h, libgomp or libomp.so.5."""
import os
import shutil
import subprocess
import sys
import sysconfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import CC, check, check_eq, check_in, finish, scratch  # noqa: E402

SOURCE = os.environ["MLD_SOURCE_DIR"]
GOMP = "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
LLVM = "/usr/lib/x86_64-linux-gnu/libomp.so.5"
INCLUDE = sysconfig.get_paths()["include"]
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
for need in (GOMP, LLVM, os.path.join(INCLUDE, "Python.h")):
    if not os.path.exists(need):
        print("SKIP: no %s" % need)
        sys.exit(77)
if shutil.which(CC) is None:
    print("SKIP: no %s" % CC)
    sys.exit(77)
try:
    import numpy  # noqa: F401
except ImportError:
    print("SKIP: no numpy for %s" % sys.executable)
    sys.exit(77)

EXT = r"""
#include <Python.h>
#include <dlfcn.h>
#include <stdlib.h>
%(decl)s
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(name)s(void) {
  %(init)s
  return PyModule_Create(&def);
}
"""


def build_ext(d, name, decl="", init="", libs=()):
    path = os.path.join(d, name + SUFFIX)
    src = EXT % {"name": name, "decl": decl, "init": init}
    subprocess.run([CC, "-shared", "-fPIC", "-I", INCLUDE, "-o", path, "-xc", "-", "-xnone", "-Wl,--no-as-needed"]
                   + list(libs), input=src.encode(), check=True)
    return path


tmp = scratch()
copy = os.path.join(tmp, "libomp-deadbeef.so.5")
shutil.copy(LLVM, copy)
omp_ext = build_ext(tmp, "omp_ext", decl="int omp_get_max_threads(void);",
                    init="(void)&omp_get_max_threads;", libs=["-L" + os.path.dirname(LLVM), "-l:libomp.so.5"])
build_ext(tmp, "plain_ext")
build_ext(tmp, "kmp_copy_ext", init='if (!dlopen(getenv("MLD_KMP_COPY"), RTLD_NOW)) return NULL;', libs=["-ldl"])
needed = subprocess.run(["readelf", "-d", omp_ext], capture_output=True, text=True).stdout
check_in("libomp.so.5", needed, "omp_ext needs libomp.so.5")

CHILD = r"""
import ctypes, os, sys, warnings
sys.path.insert(0, %(python)r)
sys.path.insert(0, %(tmp)r)
warnings.simplefilter("always")
import numpy
import mldoctor

def show(tag, ws):
    for w in ws:
        print("WARN", tag, w.category.__name__, os.path.basename(w.filename), w.lineno)
        print(str(w.message))
    print("COUNT", tag, len(ws))

with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    hz = mldoctor.guard()
print("HAZARDS numpy", [h.rule for h in hz], [r.kind for r in mldoctor.runtimes()])
show("numpy", ws)
ctypes.CDLL(%(gomp)r)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    import omp_ext  # LINE-OMP-EXT
show("omp_ext", ws)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    import plain_ext
show("plain_ext", ws)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    import kmp_copy_ext
show("kmp_copy_ext", ws)
print("RUNTIMES", [(r.kind, r.num_threads) for r in mldoctor.runtimes()])
print("ALIVE")
"""

THR_CHILD = r"""
import ctypes, sys, warnings
sys.path.insert(0, %(python)r)
import mldoctor
ctypes.CDLL(%(gomp)r).omp_set_num_threads(1)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    hz = mldoctor.guard()
    again = mldoctor.guard()
print("RULES", [w.message.args[0].split(":")[0] for w in ws], [h.rule for h in hz], [h.rule for h in again])
for w in ws: print(w.message)
"""

args = {"python": os.path.join(SOURCE, "python"), "tmp": tmp, "gomp": GOMP}
env = {k: v for k, v in os.environ.items() if k not in ("KMP_DUPLICATE_LIB_OK", "OMP_NUM_THREADS")}
env["MLD_KMP_COPY"] = copy
script = os.path.join(tmp, "child.py")
open(script, "w").write(CHILD % args)
p = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=300)
out = p.stdout + p.stderr
print(out)
check_eq(p.returncode, 0, "the child's exit status")
check_in("HAZARDS numpy [] []", out, "numpy alone: no hazard, no runtime")
check_in("COUNT numpy 0", out, "numpy alone: no warning")
line = 1 + (CHILD % args).splitlines().index("    import omp_ext  # LINE-OMP-EXT")
check_in("COUNT omp_ext 1", out, "import omp_ext: one warning")
check_in("WARN omp_ext HazardWarning child.py %d" % line, out, "the warning is a HazardWarning at the import line")
ext_part = out.split("WARN omp_ext", 1)[-1].split("COUNT omp_ext", 1)[0]
check_in("mldoctor OMP001: 2 OpenMP runtimes", ext_part, "the warning's rule and count")
check_in("GNU libgomp /usr/lib/x86_64-linux-gnu/libgomp.so.1", ext_part, "names GNU libgomp")
check_in("LLVM libomp /usr/lib/llvm", ext_part, "names LLVM libomp by its real path")
check_in("needed by %s" % omp_ext, ext_part, "names omp_ext as libomp's loader")
check_in("fix: Install the packages from one source", ext_part, "carries the rule's fix (mldoctor explain)")
check("Error #15" not in ext_part, "one LLVM copy: no Error #15 in the warning")
check_in("COUNT plain_ext 0", out, "the same hazard is not warned twice")
check_in("COUNT kmp_copy_ext 1", out, "the renamed LLVM copy: a new warning")
copy_part = out.split("WARN kmp_copy_ext", 1)[-1].split("COUNT kmp_copy_ext", 1)[0]
check_in("3 OpenMP runtimes", copy_part, "three runtimes")
check_in("%s (dlopen()ed)" % copy, copy_part, "the copy, dlopen()ed by the extension")
check_in('aborts the process with "OMP: Error #15" unless KMP_DUPLICATE_LIB_OK is set', copy_part,
         "two LLVM copies: Error #15 said")
check_in("ALIVE", out, "guard() did not initialise both LLVM copies")

open(script, "w").write(THR_CHILD % args)
p = subprocess.run([sys.executable, script], capture_output=True, text=True, env=dict(env, OMP_NUM_THREADS="3"),
                   timeout=300)
print(p.stdout + p.stderr)
check_in("RULES ['mldoctor THR003'] ['THR003'] ['THR003']", p.stdout,
         "OMP_NUM_THREADS=3, libgomp at 1: THR003 warned once, still returned")
check_in("OMP_NUM_THREADS=3 but GNU libgomp", p.stdout, "THR003 names the variable and the runtime")
check_in("runs 1 threads", p.stdout, "THR003 says the count")
p = subprocess.run([sys.executable, script], capture_output=True, text=True, env=dict(env, OMP_NUM_THREADS="1"),
                   timeout=300)
check_in("RULES [] [] []", p.stdout, "OMP_NUM_THREADS=1, libgomp at 1: nothing")
shutil.rmtree(tmp, ignore_errors=True)
finish("python-guard")

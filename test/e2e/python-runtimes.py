#!/usr/bin/env python3
"""mldoctor.runtimes() against threadpoolctl, in one real process: torch,
numba, numpy and scipy imported, numba's OpenMP pool started when it has
one, and a renamed copy of the system's libgomp (libgomp-deadbeef.so.1)
loaded with ctypes.CDLL, as wheels vendor theirs. Every library
threadpoolctl.threadpool_info() lists (by realpath) is in runtimes() with
the same kind of API and the same thread count; the renamed copy is in
runtimes() as gnu-openmp, dlopen()ed, whatever threadpoolctl says of it
(printed). The system libgomp's loaders are objects that need it. A second
LLVM copy that is not initialised is listed but not asked (asking would end
the process with OMP: Error #15). Run with /usr/bin/python3 (Debian's
python3-threadpoolctl, python3-torch); exit 77 without them."""
import ctypes
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402

SOURCE = os.environ["MLD_SOURCE_DIR"]
sys.path.insert(0, os.path.join(SOURCE, "python"))
GOMP = "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
LLVM = "/usr/lib/x86_64-linux-gnu/libomp.so.5"

if len(sys.argv) > 1 and sys.argv[1] == "--two-llvm":
    # the child of the last check: two LLVM copies, the first initialised
    import mldoctor
    a = ctypes.CDLL(LLVM)
    ctypes.CDLL(sys.argv[2])
    a.omp_get_max_threads()
    for r in mldoctor.runtimes():
        print("RT", r.kind, r.path, r.num_threads, r.version, r.interface)
    print("ALIVE")
    sys.exit(0)

try:
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    import torch
    import numba
    import threadpoolctl
except ImportError as e:
    print("SKIP: %s (needs python3-torch, python3-numba, python3-threadpoolctl for %s)" % (e, sys.executable))
    sys.exit(77)
if not os.path.exists(GOMP):
    print("SKIP: no %s" % GOMP)
    sys.exit(77)

import mldoctor  # noqa: E402

tmp = scratch()
copy = os.path.join(tmp, "libgomp-deadbeef.so.1")
shutil.copy(GOMP, copy)
ctypes.CDLL(copy)
try:
    numba.get_num_threads()  # launches numba's pool: its omp layer calls omp_set_num_threads
    print("numba threading layer:", numba.threading_layer())
except Exception as e:  # no usable layer is not this test's business
    print("numba pool not started: %s" % e)
torch_threads = torch.get_num_threads()

info = threadpoolctl.threadpool_info()
rts = mldoctor.runtimes()
print("threadpoolctl %s lists:" % threadpoolctl.__version__)
for i in info:
    print("  %-8s %-10s %-40s num_threads=%s version=%s" % (i["user_api"], i["internal_api"], i["filepath"],
                                                            i["num_threads"], i["version"]))
print("mldoctor.runtimes() lists:")
for r in rts:
    print("  %-12s %-40s num_threads=%s version=%s interface=%s loaded_by=%s" % (
        r.kind, r.path, r.num_threads, r.version, r.interface, r.loaded_by))

by_path = {r.path: r for r in rts}
api_of = {"gnu-openmp": "openmp", "llvm-openmp": "openmp", "intel-openmp": "openmp", "mkl": "blas",
          "openblas": "blas", "blis": "blas", "flexiblas": "blas"}
for i in info:
    p = os.path.realpath(i["filepath"])
    r = by_path.get(p)
    if not check(r is not None, "threadpoolctl lists %s, runtimes() does not" % p):
        continue
    check_eq(api_of[r.kind], i["user_api"], "%s: kind %s against threadpoolctl's user_api" % (p, r.kind))
    check_eq(r.num_threads, i["num_threads"], "%s: thread count against threadpoolctl's" % p)
    if i["version"]:
        check_eq(r.version, i["version"], "%s: version against threadpoolctl's" % p)
tp_paths = {os.path.realpath(i["filepath"]) for i in info}
extra = [r.path for r in rts if r.path not in tp_paths]
print("runtimes() beyond threadpoolctl: %s" % (extra or "none"))
print("threadpoolctl lists the renamed copy: %s" % (copy in tp_paths))

# the renamed copy: recognised by its symbols, loaded by nobody's DT_NEEDED
r = by_path.get(copy)
if check(r is not None, "runtimes() lists the renamed copy %s" % copy):
    check_eq((r.kind, r.loaded_by, r.soname), ("gnu-openmp", "dlopen", "libgomp.so.1"), "the renamed copy")
    check(r.interface and r.interface.startswith("OMP_"), "the copy's OpenMP interface: %r" % r.interface)
    n = ctypes.CDLL(copy).omp_get_max_threads()
    check_eq(r.num_threads, n, "the copy's count is its own omp_get_max_threads()")
# the system libgomp: torch's (and numba's) runtime, its count torch's
g = by_path.get(os.path.realpath(GOMP))
if check(g is not None, "runtimes() lists the system libgomp"):
    check(g.loaded_by != "dlopen" and g.loaded_by in g.needed_by, "libgomp's loader is an object needing it: %r"
          % (g.needed_by,))
    check(any("libtorch" in n or "libc10" in n for n in g.needed_by), "torch's libraries need libgomp: %r"
          % (g.needed_by,))
    check_eq(g.num_threads, torch_threads, "libgomp's count is torch.get_num_threads()")
check_eq([r.kind for r in rts if r.kind not in api_of], [], "every kind is a known one")

# two LLVM copies, the first initialised: the second is listed, not asked
if os.path.exists(LLVM):
    llvm_copy = os.path.join(tmp, "libomp-deadbeef.so.5")
    shutil.copy(LLVM, llvm_copy)
    env = {k: v for k, v in os.environ.items() if k != "KMP_DUPLICATE_LIB_OK"}
    p = subprocess.run([sys.executable, __file__, "--two-llvm", llvm_copy], capture_output=True, text=True,
                       env=env, timeout=120)
    print(p.stdout + p.stderr)
    check_in("ALIVE", p.stdout, "runtimes() with two LLVM copies did not abort the process")
    lines = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("RT ")]
    check_eq(sorted((ln[1], ln[2] == llvm_copy, ln[3] == "None") for ln in lines),
             [("llvm-openmp", False, False), ("llvm-openmp", True, True)],
             "two LLVM copies: both llvm-openmp, the initialised one asked, the copy not")
    check(all(ln[5].startswith("OMP_") for ln in lines), "LLVM's interface is an OMP_ version")
shutil.rmtree(tmp, ignore_errors=True)
finish("python-runtimes")

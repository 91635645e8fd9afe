#!/usr/bin/env python3
# labels: slow
"""mldoctor.guard() and mldoctor.runtimes() never deadlock the process they
run in (issue 31, item 1). Each scenario runs in its own /usr/bin/python3
process with the package from the source tree, bounded; a run that does
not finish in time is a hang, and its native stacks (`mldoctor stacks`)
are printed before it is killed:

- guard: guard() on, two threads importing 100 freshly built extension
  modules each (every import is a dlopen() with the GIL held, then
  guard()'s check), 30 runs;
- loop: runtimes() in a loop in the main thread beside one thread
  importing 200 extension modules, 30 runs;
- realistic: guard(), a background thread doing `import numba, cv2` while
  the main thread imports torch, scikit-learn and scipy, 10 runs (Debian's
  python3-torch, -numba, -opencv, -sklearn, -scipy; skipped without them).

The oracle that the setup can deadlock at all: the design these replace, a
ctypes dl_iterate_phdr callback doing Python work beside the importing
thread, hangs in at least one of three runs here (it hung 30 of 30 when the
issue was filed); without that, 0 hangs would prove nothing."""
import os
import shutil
import subprocess
import sys
import sysconfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import CC, MLDOCTOR, check, check_eq, finish, scratch  # noqa: E402

SOURCE = os.environ["MLD_SOURCE_DIR"]
INCLUDE = sysconfig.get_paths()["include"]
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
MODULES = 200
if not os.path.exists(os.path.join(INCLUDE, "Python.h")) or shutil.which(CC) is None:
    print("SKIP: needs %s and Python.h for %s" % (CC, sys.executable))
    sys.exit(77)

tmp = scratch()
mods = os.path.join(tmp, "mods")
os.makedirs(mods)
# one object defining PyInit_m0..m199, copied under each module's name: every
# copy is a different file, so every import is a real dlopen()
src = "#include <Python.h>\n" + "".join(
    'static struct PyModuleDef d%d = {PyModuleDef_HEAD_INIT, "m%d", NULL, -1, NULL};\n'
    "PyMODINIT_FUNC PyInit_m%d(void) { return PyModule_Create(&d%d); }\n" % (i, i, i, i) for i in range(MODULES))
one = os.path.join(tmp, "all.so")
subprocess.run([CC, "-shared", "-fPIC", "-I", INCLUDE, "-o", one, "-xc", "-"], input=src.encode(), check=True)
for i in range(MODULES):
    shutil.copy(one, os.path.join(mods, "m%d%s" % (i, SUFFIX)))

CHILD = r"""
import ctypes, importlib, sys, threading, warnings
sys.path.insert(0, %(python)r)
sys.path.insert(0, %(mods)r)
warnings.simplefilter("ignore")
scenario = sys.argv[1]

def imports(lo, hi):
    for i in range(lo, hi):
        importlib.import_module("m%%d" %% i)

if scenario == "guard":
    import mldoctor
    mldoctor.guard()
    ts = [threading.Thread(target=imports, args=(0, 100)), threading.Thread(target=imports, args=(100, 200))]
    for t in ts: t.start()
    for t in ts: t.join()
elif scenario == "loop":
    import mldoctor
    t = threading.Thread(target=imports, args=(0, 200))
    t.start()
    walks = 0
    while t.is_alive():
        mldoctor.runtimes()
        walks += 1
    t.join()
    print("walks", walks)
elif scenario == "realistic":
    import mldoctor
    mldoctor.guard()
    def background():
        import numba, cv2
    t = threading.Thread(target=background)
    t.start()
    import torch, sklearn.ensemble, scipy.linalg
    t.join()
    print("runtimes", sorted(r.kind for r in mldoctor.runtimes()))
elif scenario == "old-callback":
    # what guard() and runtimes() did before: Python work in the callback,
    # under the loader's lock
    class Info(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]
    CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t, ctypes.c_void_p)
    libc = ctypes.CDLL(None)
    libc.dl_iterate_phdr.argtypes = [CB, ctypes.c_void_p]
    def visit(info, size, data):
        names.append((info.contents.name or b"").decode())
        return 0
    cb = CB(visit)
    t = threading.Thread(target=imports, args=(0, 200))
    t.start()
    while t.is_alive():
        names = []
        libc.dl_iterate_phdr(cb, None)
    t.join()
print("DONE", scenario)
"""
child = os.path.join(tmp, "child.py")
open(child, "w").write(CHILD % {"python": os.path.join(SOURCE, "python"), "mods": mods})
env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "KMP_DUPLICATE_LIB_OK")}
env["PYTHONDONTWRITEBYTECODE"] = "1"


def run(scenario, timeout, show_stacks=True):
    """'done', 'hung' or 'failed' for one run of the scenario."""
    p = subprocess.Popen([sys.executable, child, scenario], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if show_stacks:
            s = subprocess.run([MLDOCTOR, "stacks", str(p.pid)], capture_output=True, text=True, timeout=120)
            print("HUNG %s (pid %d) after %d s; its stacks:\n%s%s" % (scenario, p.pid, timeout, s.stdout, s.stderr))
        p.kill()
        p.communicate()
        return "hung"
    text = out.decode("utf-8", "replace")
    if p.returncode != 0 or "DONE " + scenario not in text:
        print("FAILED %s: exit %s\n%s" % (scenario, p.returncode, text[-3000:]))
        return "failed"
    return "done"


hung = [run("old-callback", 20, show_stacks=False) for _ in range(1)]
while hung.count("hung") == 0 and len(hung) < 3:
    hung.append(run("old-callback", 20, show_stacks=False))
print("the old design (Python in a dl_iterate_phdr callback): %d of %d runs hung" % (hung.count("hung"), len(hung)))
check(hung.count("hung") >= 1, "the setup reproduces the deadlock the old design had")

for scenario, runs in (("guard", 30), ("loop", 30)):
    results = [run(scenario, 180) for _ in range(runs)]
    print("%s: %d of %d runs finished, %d hung, %d failed" % (scenario, results.count("done"), runs,
                                                               results.count("hung"), results.count("failed")))
    check_eq(results.count("done"), runs, "%s: every run finishes" % scenario)

probe = subprocess.run([sys.executable, "-c", "import torch, numba, cv2, sklearn, scipy"], capture_output=True,
                       env=env, timeout=300)
if probe.returncode == 0:
    results = [run("realistic", 300) for _ in range(10)]
    print("realistic: %d of 10 runs finished, %d hung, %d failed" % (results.count("done"), results.count("hung"),
                                                                       results.count("failed")))
    check_eq(results.count("done"), 10, "realistic: every run finishes")
else:
    print("realistic scenario not run: %s" % probe.stderr.decode("utf-8", "replace").strip().splitlines()[-1])
shutil.rmtree(tmp, ignore_errors=True)
finish("python-loader-lock-stress")

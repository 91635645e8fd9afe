#!/usr/bin/env python3
# labels: slow scenario roots
"""mldoctor.runtimes() against each Debian generation's own threadpoolctl, in
one live process (issue 32 item 2e): in the bullseye, trixie and sid test
roots, the root's python3 (CPython 3.9, 3.13, 3.14) runs with the
repository's python/ bind-mounted and on PYTHONPATH, imports numpy, scipy,
torch and scikit-learn, starts numba's pool (numba.get_num_threads()), and
then asks threadpoolctl.threadpool_info() and mldoctor.runtimes() in the same
process. Twice per root: with numba's default layer (Debian's TBB, which
loads no OpenMP runtime) and with NUMBA_THREADING_LAYER=omp plus the root's
LLVM libomp loaded with ctypes (a second OpenMP runtime beside torch's
libgomp, as a wheel vendoring its own would bring). Every runtime that
threadpoolctl lists is in runtimes() by real path, with the same
user_api/internal_api (kind), the same version where both report one, and
the same thread count; every OpenMP or BLAS runtime runtimes() lists beyond
threadpoolctl's is printed (threadpoolctl knows fewer libraries)."""
import concurrent.futures
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

SRC = os.environ.get("MLD_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROBE = r"""
import ctypes, json, os, sys
import numpy, scipy.linalg, torch, sklearn, numba
numba.get_num_threads()
layer = numba.threading_layer()
if len(sys.argv) > 1:
    ctypes.CDLL(sys.argv[1]).omp_get_max_threads()
import threadpoolctl, mldoctor
info = threadpoolctl.threadpool_info()
rts = [dict(path=r.path, kind=r.kind, version=r.version, num_threads=r.num_threads, loaded_by=r.loaded_by)
       for r in mldoctor.runtimes()]
print(json.dumps({"python": sys.version.split()[0], "threadpoolctl": threadpoolctl.__version__, "layer": layer,
                  "torch_threads": torch.get_num_threads(),
                  "info": [dict(i, filepath=os.path.realpath(i["filepath"])) for i in info], "runtimes": rts}))
"""
# threadpoolctl's (user_api, internal_api) for each kind runtimes() reports.
API = {"gnu-openmp": ("openmp", "openmp"), "llvm-openmp": ("openmp", "openmp"),
       "intel-openmp": ("openmp", "openmp"), "mkl": ("blas", "mkl"), "openblas": ("blas", "openblas"),
       "blis": ("blas", "blis"), "flexiblas": ("blas", "flexiblas")}
LIBOMP = "/usr/lib/x86_64-linux-gnu/libomp.so.5"


def probe(suite, root, omp):
    env = {"PYTHONPATH": "/tmp/mld/python"}
    argv = ["python3", "-c", PROBE]
    if omp:
        env["NUMBA_THREADING_LAYER"] = "omp"
        argv.append(LIBOMP)
    p = roots.run(root, argv, binds=[(os.path.join(SRC, "python"), "/tmp/mld/python", "ro")], env=env,
                  timeout=300)
    if p.returncode != 0 or not p.stdout.strip():
        return "exit %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr[-2500:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    cases = [(s, roots.root(s), omp) for s in roots.SUITES for omp in (False, True)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda c: probe(*c), cases))
    for (suite, root, omp), got in zip(cases, done):
        name = "[%s, %s]" % (suite, "numba omp layer + LLVM libomp" if omp else "numba's default layer")
        if isinstance(got, str):
            mldtest.fail("%s the probe failed: %s" % (name, got))
            continue
        print("%s Python %s, threadpoolctl %s, numba layer %s, torch %d threads"
              % (name, got["python"], got["threadpoolctl"], got["layer"], got["torch_threads"]))
        by_path = {r["path"]: r for r in got["runtimes"]}
        for i in got["info"]:
            print("  threadpoolctl: %s %s %s version=%s num_threads=%s"
                  % (i["user_api"], i["internal_api"], i["filepath"], i.get("version"), i["num_threads"]))
        for r in got["runtimes"]:
            print("  runtimes():    %s %s version=%s num_threads=%s loaded_by=%s"
                  % (r["kind"], r["path"], r["version"], r["num_threads"], r["loaded_by"]))
        mldtest.check(got["info"], "%s threadpoolctl lists no runtime (torch's libgomp is loaded)" % name)
        agree = 0
        for i in got["info"]:
            r = by_path.get(i["filepath"])
            if not mldtest.check(r is not None, "%s threadpoolctl lists %s, runtimes() does not" % (name, i["filepath"])):
                continue
            ok = [mldtest.check_eq(API.get(r["kind"]), (i["user_api"], i["internal_api"]),
                                   "%s %s: runtimes()' kind %s against threadpoolctl's APIs" % (name, i["filepath"],
                                                                                              r["kind"])),
                  mldtest.check_eq(r["num_threads"], i["num_threads"], "%s %s: thread count" % (name, i["filepath"]))]
            if i.get("version") and r["version"]:
                ok.append(mldtest.check_eq(r["version"], i["version"], "%s %s: version" % (name, i["filepath"])))
            agree += all(ok)
        tp = {i["filepath"] for i in got["info"]}
        print("  %s: %d/%d of threadpoolctl's runtimes agree; runtimes() beyond it: %s"
              % (name, agree, len(got["info"]), [r["path"] for r in got["runtimes"] if r["path"] not in tp] or "none"))
        if omp:
            kinds = sorted(r["kind"] for r in got["runtimes"])
            mldtest.check("llvm-openmp" in kinds and "gnu-openmp" in kinds,
                          "%s libgomp and the LLVM libomp loaded: runtimes() lists %s" % (name, kinds))
            mldtest.check(os.path.realpath(os.path.join(root, LIBOMP.lstrip("/"))).endswith(
                tuple(os.path.basename(r["path"]) for r in got["runtimes"] if r["kind"] == "llvm-openmp")),
                "%s the LLVM runtime listed is the root's %s" % (name, LIBOMP))
    mldtest.finish("roots-python-runtimes")


main()

#!/usr/bin/env python3
# labels: scenario
"""A stale extension build (JIT004): a module built against symbols the
installed torch does not define. The oracle is the real loader: after
`import torch`, dlopen(RTLD_NOW) of the module fails with "undefined symbol:
<name>"; `mldoctor jit` must name the same symbol. A module whose symbols
resolve (against libc10 and the interpreter's C API) loads for real and must
not be reported."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import CC, MLDOCTOR, check, check_in, finish, scratch  # noqa: E402
from scenarios import PY, run_python, scenario_env, skip_unless  # noqa: E402

TORCH_LIB = "/usr/lib/python3/dist-packages/torch/lib"
MISSING = "_ZN3c104impl22symbol_of_another_torchEv"


def build(path, source):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    subprocess.run([CC, "-shared", "-fPIC", "-O0", "-o", path, "-xc", "-", "-xnone", "-L" + TORCH_LIB,
                    "-Wl,--no-as-needed", "-lc10"], input=source.encode(), check=True)
    open(os.path.join(os.path.dirname(path), "build.ninja"), "w").write("rule cxx\n")


def real_load(path, env):
    code = ("import torch, ctypes, os\n"
            "try:\n ctypes.CDLL(%r, mode=os.RTLD_NOW)\n print('LOADED')\n"
            "except OSError as e:\n print('ERROR', e)\n" % path)
    return run_python(code, env).stdout


def main():
    skip_unless("torch", tools=(TORCH_LIB + "/libc10.so",))
    t = scratch()
    try:
        ext = os.path.join(t, "ext")
        stale = os.path.join(ext, "stale", "stale.so")
        fresh = os.path.join(ext, "fresh", "fresh.so")
        build(stale, "void %s(void);\nvoid stale_entry(void) { %s(); }\n" % (MISSING, MISSING))
        build(fresh, "long PyLong_FromLong(long);\nlong fresh_entry(void) { return (long)PyLong_FromLong(1); }\n")
        env = scenario_env(TORCH_EXTENSIONS_DIR=ext, HOME=t)

        real_stale, real_fresh = real_load(stale, env), real_load(fresh, env)
        print("real: stale.so: %s" % real_stale.strip())
        print("real: fresh.so: %s" % real_fresh.strip())
        check_in("undefined symbol: " + MISSING, real_stale, "the real loader rejects the stale build")
        check_in("LOADED", real_fresh, "the real loader accepts the fresh build")

        p = subprocess.run([MLDOCTOR, "jit", "--python", PY, "--json"], env=env, capture_output=True, text=True,
                           timeout=120)
        check(p.returncode == 1, "jit exit %d (1: an error finding)\n%s" % (p.returncode, p.stderr))
        doc = json.loads(p.stdout)
        found = [f for f in doc["findings"] if f["rule"] == "JIT004"]
        check([f["subject"] for f in found] == [stale], "JIT004 exactly for %s: %s" % (stale, found))
        if found:
            check_in("undefined symbol: " + MISSING, found[0]["message"], "JIT004 names the real loader's symbol")

        # --fix --dry-run changes nothing; --fix removes the stale outputs
        # (module, objects), never the fresh build or the sources.
        stale_obj = os.path.join(ext, "stale", "stale.o")
        open(stale_obj, "w").write("object")
        p = subprocess.run([MLDOCTOR, "jit", "--python", PY, "--fix", "--dry-run"], env=env, capture_output=True,
                           text=True, timeout=120)
        check_in("would remove stale build output " + stale, p.stdout, "dry run lists the module")
        check(os.path.exists(stale) and os.path.exists(stale_obj), "dry run removes nothing")
        p = subprocess.run([MLDOCTOR, "jit", "--python", PY, "--fix"], env=env, capture_output=True, text=True,
                           timeout=120)
        check(p.returncode == 0, "jit --fix exit %d (0: the stale build is gone)\n%s%s" % (p.returncode, p.stdout, p.stderr))
        check(not os.path.exists(stale) and not os.path.exists(stale_obj), "the stale module and objects are removed")
        check(os.path.exists(os.path.join(ext, "stale", "build.ninja")), "build.ninja stays")
        check(os.path.exists(fresh), "the fresh build stays")
    finally:
        shutil.rmtree(t, ignore_errors=True)
    finish("jit-stale-build")


if __name__ == "__main__":
    main()

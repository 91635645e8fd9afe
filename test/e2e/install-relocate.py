#!/usr/bin/env python3
"""`cmake --install` into a prefix, then the whole tree moved to another
prefix: the binary finds its shims relative to itself, so `mldoctor run`
from the moved tree traces the job (a runtime dlopen()ed by the job is
reported with who loaded it), `--version` names the moved shims, and the
old prefix is gone (nothing resolved through it)."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402

BUILD = os.environ["MLD_BUILD_DIR"]


def main():
    t = scratch()
    first, moved = os.path.join(t, "opt-a"), os.path.join(t, "elsewhere", "tools")
    p = subprocess.run(["cmake", "--install", BUILD, "--prefix", first], capture_output=True, text=True, timeout=300)
    check_eq(p.returncode, 0, "cmake --install\n" + p.stdout + p.stderr)
    for f in ("bin/mldoctor", "lib/mldoctor/libmldoctor-audit.so", "lib/mldoctor/libmldoctor-preload.so",
              "share/man/man1/mldoctor.1.gz", "share/bash-completion/completions/mldoctor",
              "share/zsh/site-functions/_mldoctor", "share/fish/vendor_completions.d/mldoctor.fish"):
        check(os.path.isfile(os.path.join(first, f)), "installed " + f)
    os.makedirs(os.path.dirname(moved))
    shutil.move(first, moved)
    check(not os.path.exists(first), "the first prefix is gone")

    exe = os.path.join(moved, "bin", "mldoctor")
    env = {k: v for k, v in os.environ.items() if k not in ("MLDOCTOR_SHIM_DIR", "LD_PRELOAD", "LD_AUDIT")}
    v = subprocess.run([exe, "--version"], env=env, capture_output=True, text=True, timeout=60)
    check_in("shims      %s/lib/mldoctor/libmldoctor-{audit,preload}.so" % os.path.realpath(moved), v.stdout,
             "--version names the moved shims")

    report = os.path.join(t, "run.json")
    job = "import ctypes; ctypes.CDLL('libgomp.so.1'); print('job output')"
    r = subprocess.run([exe, "run", "--json", "--report", report, "--", "/usr/bin/python3", "-c", job],
                       env=env, capture_output=True, text=True, timeout=300)
    check_eq(r.returncode, 0, "moved run exit status: " + r.stderr)
    check_eq(r.stdout, "job output\n", "the job's output passes through unchanged")
    doc = json.load(open(report))
    check_eq(doc["not_traced"], [], "run traced the job (shims found in the moved tree)")
    loaded = [o for p in doc["processes"] for o in p["objects"] if o.get("path", "").endswith("libgomp.so.1")]
    check(loaded, "the job's dlopen of libgomp was traced: %r" % [p["objects"] for p in doc["processes"]][:1])
    if loaded:
        check_in("_ctypes", json.dumps(loaded[0]), "with the object that dlopen()ed it")
    finish("install-relocate")


if __name__ == "__main__":
    main()

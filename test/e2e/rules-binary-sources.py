#!/usr/bin/env python3
# labels: scenario
"""A closed emitter's message is cited by the binary that prints it (issue 33).

MKL, the CUDA runtime and the CUDA toolkit are closed source, so MKL011 cites
MKL's messages, the CUDA rules the runtime's error strings (`cudaGetErrorString`)
and error names, and JIT012/016/018/030 the messages of ptxas, nvcc and cudafe++,
as `[[source]]` tables with `package` (a Debian binary package), `path` (the
binary in it) and `tag` (the package version). Oracle: the binary itself. For
every such source of the builtin rules (`rules --json`), the package must be one that
scripts/fetch-test-debs.sh downloads, at the cited version, and its binary
must hold the cited format string as a NUL-terminated C string (what printf
is handed). The check fails, never skips, when the packages are missing:
make test downloads them.
"""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish  # noqa: E402
from scenarios import test_debs_libdir  # noqa: E402

doc = json.loads(subprocess.run([MLDOCTOR, "rules", "--json"], capture_output=True, text=True,
                                check=True).stdout)
binary_sources = [(r["id"], s) for r in doc["rules"] for s in r.get("sources", []) if "package" in s]
cited = {rid for rid, _ in binary_sources}
check({"MKL011", "CUDA011", "CUDA017", "CUDA021", "CUDA022", "JIT018", "JIT030"} <= cited,
      "MKL's, the CUDA runtime's and the toolkit's messages are cited from their binaries: %r"
      % sorted(cited))

libdir = test_debs_libdir(*sorted({os.path.basename(s["path"]) for _, s in binary_sources
                                    if s["path"].startswith("usr/lib/x86_64-linux-gnu/")}))
root = os.path.dirname(os.path.dirname(os.path.dirname(libdir)))   # .../test-debs/root
debs = os.path.join(os.path.dirname(root), "debs")
for rid, s in binary_sources:
    where = "%s: %s in %s %s" % (rid, s["path"], s["package"], s["tag"])
    check("repository" not in s and "line" not in s, "%s: a binary source has no repository or line" % where)
    check(s["url"] == "https://snapshot.debian.org/binary/%s/" % s["package"], "%s: url %s" % (where, s["url"]))
    # Debian names a .deb package_version_arch.deb, an epoch's ':' as '%3a'.
    version = s["tag"].replace(":", "%3a")
    fetched = glob.glob(os.path.join(debs, "%s_%s_*.deb" % (s["package"], version)))
    check(fetched, "%s: the cited version is the one fetch-test-debs downloaded (%s)" %
          (where, sorted(os.path.basename(d) for d in glob.glob(os.path.join(debs, s["package"] + "_*")))))
    # The binary came from that package: dpkg-deb lists the path in it.
    if fetched:
        listing = subprocess.run(["dpkg-deb", "--contents", fetched[0]], capture_output=True, text=True,
                                 check=True).stdout
        check_in("./" + s["path"], listing, "%s: the package ships the binary" % where)
    if not os.path.isfile(os.path.join(root, s["path"])):
        check(False, "%s: the binary was unpacked by scripts/fetch-test-debs.sh" % where)
        continue
    with open(os.path.join(root, s["path"]), "rb") as f:
        data = f.read()
    needle = b"\0" + s["format"].encode() + b"\0"
    check(needle in data, "%s: the binary holds %r as a C string" % (where, s["format"]))
    # MKL and the toolkit's programs print with printf; the CUDA runtime returns its strings as
    # they are.
    check_eq(s["syntax"], "literal" if s["package"] == "libcudart11.0" else "printf",
             "%s: syntax" % where)

# A wrong citation fails: a format the binary does not hold.
with open(os.path.join(libdir, "libmkl_core.so"), "rb") as f:
    core = f.read()
check(b"\0Intel MKL FATAL ERROR: Cannot load %s and %s.\0" not in core, "the check can fail (a wording MKL never used)")
with open(os.path.join(libdir, "libcudart.so.11.8.89"), "rb") as f:
    cudart = f.read()
check(b"\0an illegal memory access was encountered\0" in cudart and
      b"\0an illegal memory access occurred\0" not in cudart,
      "the runtime's table holds its own wording and not another")
finish(os.path.basename(__file__))

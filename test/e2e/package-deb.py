#!/usr/bin/env python3
"""The Debian packages CPack builds from this build tree: their dependencies
are computed (dpkg-shlibdeps), the libc6 version matching the GLIBC_x.y
needs readelf reads from the binary; `mldoctor` does not pull Open MPI, only
`mldoctor-mpi` does. Unpacked with `dpkg -x` into a temporary root (no
installation), the binary runs from there: `--version` finds the shims and
the MPI plugin inside that root, `check` works, `run -- true` traces the
command through the unpacked shims; the man page and completions are where
man, bash-completion, zsh and fish look."""
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402

BUILD = os.environ["MLD_BUILD_DIR"]


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def glibc_needed(path):
    """The newest GLIBC_x.y in the object's version needs (readelf -V)."""
    out = sh(["readelf", "-V", "--wide", path]).stdout
    versions = [tuple(int(x) for x in v.split(".")) for v in re.findall(r"Name: GLIBC_(\d+\.\d+(?:\.\d+)?)", out)]
    return max(versions)


def main():
    t = scratch()
    p = sh(["cpack", "--config", os.path.join(BUILD, "CPackConfig.cmake"), "-B", t])
    if not check_eq(p.returncode, 0, "cpack exit status\n" + p.stdout + p.stderr):
        finish("package-deb")
    debs = {os.path.basename(d).split("_")[0]: d for d in glob.glob(os.path.join(t, "*.deb"))}
    check_in("mldoctor", debs, "the mldoctor package")

    deb = debs["mldoctor"]
    depends = sh(["dpkg-deb", "-f", deb, "Depends"]).stdout.strip()
    root = os.path.join(t, "root")
    check_eq(sh(["dpkg", "-x", deb, root]).returncode, 0, "dpkg -x mldoctor")
    exe = os.path.join(root, "usr", "bin", "mldoctor")
    need = glibc_needed(exe)
    check_in("libc6 (>= %s)" % ".".join(map(str, need)), depends, "Depends computed from the binary's GLIBC needs")
    check("libopenmpi" not in depends, "mldoctor does not depend on Open MPI: " + depends)
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", sh(["readelf", "-d", exe]).stdout)
    if any(n.startswith("libasan") for n in needed):
        # make test-sanitize: the sanitizer runtimes need the shared libstdc++.
        print("sanitized build: portability (glibc 2.34, static libstdc++) not checked")
    else:
        check(need <= (2, 34), "the binary needs glibc %s, documented minimum 2.34" % (need,))
        check_eq(sorted(n for n in needed if not n.startswith("ld-linux")),
                 ["libc.so.6", "libgcc_s.so.1", "libm.so.6"], "the binary's shared libraries")

    mpi_built = os.path.exists(os.path.join(BUILD, "libmldoctor-mpi.so"))
    check_eq("mldoctor-mpi" in debs, mpi_built, "an mldoctor-mpi package exactly when the plugin was built")
    if "mldoctor-mpi" in debs:
        mdep = sh(["dpkg-deb", "-f", debs["mldoctor-mpi"], "Depends"]).stdout
        check_in("mldoctor (= ", mdep, "mldoctor-mpi depends on mldoctor of its version")
        check("libopenmpi" in mdep, "mldoctor-mpi depends on Open MPI (computed): " + mdep)
        check_eq(sh(["dpkg", "-x", debs["mldoctor-mpi"], root]).returncode, 0, "dpkg -x mldoctor-mpi")

    for f in ("usr/share/man/man1/mldoctor.1.gz", "usr/share/bash-completion/completions/mldoctor",
              "usr/share/zsh/vendor-completions/_mldoctor", "usr/share/fish/vendor_completions.d/mldoctor.fish",
              "usr/lib/mldoctor/libmldoctor-audit.so", "usr/lib/mldoctor/libmldoctor-preload.so"):
        check(os.path.isfile(os.path.join(root, f)), "packaged " + f)
    man = sh(["man", "-l", os.path.join(root, "usr/share/man/man1/mldoctor.1.gz")], env=dict(os.environ, MANWIDTH="100"))
    check_eq(man.returncode, 0, "man -l on the packaged page: " + man.stderr)
    check_in("mldoctor fleet [OPTIONS]", man.stdout, "man renders the packaged page")
    for f in ("guide.md", "rules.md", "json-schema.md", "rule-format.md", "fleet.md"):
        check(os.path.isfile(os.path.join(root, "usr/share/doc/mldoctor", f)), "packaged doc " + f)

    env = {k: v for k, v in os.environ.items() if k != "MLDOCTOR_SHIM_DIR"}
    v = sh([exe, "--version"], env=env)
    check_eq(v.returncode, 0, "--version exit")
    check_in("needs >= %s," % ".".join(map(str, need)), v.stdout,
             "--version's oldest glibc is the one readelf reads from the binary")
    real_root = os.path.realpath(root)
    check_in("shims      %s/usr/lib/mldoctor/libmldoctor-{audit,preload}.so" % real_root, v.stdout,
             "--version finds the unpacked shims")
    if "mldoctor-mpi" in debs:
        check_in("MPI        plugin %s/usr/lib/mldoctor/libmldoctor-mpi.so" % real_root, v.stdout,
                 "--version finds the unpacked MPI plugin")

    c = sh([exe, "check", "--python", "/usr/bin/python3", "--json"], env=env)
    check(c.returncode in (0, 1), "unpacked check runs: exit %d %s" % (c.returncode, c.stderr))
    check_eq(json.loads(c.stdout)["schema"], "mldoctor.check/1", "unpacked check --json")

    report = os.path.join(t, "run.json")
    r = sh([exe, "run", "--json", "--report", report, "--", "true"], env=env)
    check_eq(r.returncode, 0, "unpacked run -- true exit status")
    doc = json.load(open(report))
    check_eq(doc["not_traced"], [], "run traced the command (shims found)")
    check_eq(doc["trace_errors"], [], "run had no trace errors")
    check(len(doc["processes"]) == 1 and len(doc["processes"][0]["objects"]) > 0,
          "the shim reported the command's objects: %r" % doc["processes"])
    finish("package-deb")


if __name__ == "__main__":
    main()

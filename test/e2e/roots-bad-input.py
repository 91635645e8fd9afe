#!/usr/bin/env python3
"""Bad input for the test roots (scripts/make-test-roots.sh and
test/e2e/lib/roots.py), on small fake caches, never the real roots: a root with
a package unpacked but not configured, a root without python3, a root whose
build did not finish (no .mld-root), a half-built temporary sibling (removed,
or named and kept while something is mounted in it), a SUITE.FAILED left by a
failed download, no network, a cache on a read-only mount. Each is a clear failure that
names what is wrong; a test that needs such a root FAILS (exit 1), never skips.
The script runs in a mount namespace of its own where everything but the
cache is read-only, so any write outside the cache would show."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

KEY = roots.key_packages()


def fake_root(cache, suite, status=None, python=True, stamp=True):
    """A root as far as the checks look: a dpkg database with every key
    package ("install ok installed" unless `status` says otherwise), an
    executable usr/bin/python3 and .mld-root."""
    r = os.path.join(cache, suite)
    os.makedirs(os.path.join(r, "var/lib/dpkg"))
    os.makedirs(os.path.join(r, "usr/bin"))
    with open(os.path.join(r, "var/lib/dpkg/status"), "w") as f:
        for p in KEY:
            f.write("Package: %s\nStatus: %s\nPriority: optional\nSection: misc\nMaintainer: nobody\n"
                    "Architecture: amd64\nVersion: 1.0-1\nDescription: fake\n\n"
                    % (p, (status or {}).get(p, "install ok installed")))
    if python:
        with open(os.path.join(r, "usr/bin/python3"), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(os.path.join(r, "usr/bin/python3"), 0o755)
    if stamp:
        with open(os.path.join(r, ".mld-root"), "w") as f:
            f.write("".join("%s=1.0-1\n" % p for p in sorted(KEY)))
    return r


def script(cache, *args, setup="", cache_ro=False, network=True):
    """scripts/make-test-roots.sh ARGS with MLD_TEST_ROOTS=cache, in a private
    mount namespace where / is read-only and only the cache writable (or the
    cache read-only too), without network if asked; `setup` runs first there
    (shell)."""
    sh = ('set -e; c=$1; shift; mount --bind "$c" "$c"; %s; mount -o remount,bind,ro /; %s'
          'exec "$@"' % ('mount -o remount,bind,ro "$c"' if cache_ro else ":", setup))
    p = subprocess.run(["unshare", "--mount", "--propagation", "private"] + ([] if network else ["--net"])
                       + ["sh", "-c", sh, "sh", cache, roots.SCRIPT] + list(args),
                       capture_output=True, text=True, env=dict(os.environ, MLD_TEST_ROOTS=cache))
    return p.returncode, p.stdout + p.stderr


def needing_test(cache, suite):
    """A test that needs the root: (exit status, output)."""
    code = ("import sys; sys.path.insert(0, %r); import roots; roots.root(%r); print('GOT ROOT')"
            % (os.path.dirname(roots.__file__), suite))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, MLD_TEST_ROOTS=cache))
    return p.returncode, p.stdout + p.stderr


def listing(d):
    out = []
    for base, dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(base, n), d) for n in dirs + files]
    return sorted(out)


def expect_fails(cache, suite, words, what):
    """--check and a test needing the root both fail naming `words`."""
    rc, out = script(cache, "--check", suite)
    mldtest.check(rc == 1 and all(w in out for w in words),
                  "%s: --check should exit 1 naming %r; exit %d:\n%s" % (what, words, rc, out))
    rc, out = needing_test(cache, suite)
    mldtest.check(rc == 1 and "FAIL:" in out and all(w in out for w in words) and "GOT ROOT" not in out,
                  "%s: a test needing the root should FAIL (exit 1) naming %r; exit %d:\n%s"
                  % (what, words, rc, out))


def main():
    base = mldtest.scratch()
    n = [0]

    def cache():
        n[0] += 1
        c = os.path.join(base, "cache%d" % n[0])
        os.makedirs(c)
        return c

    # A good fake root passes, so what fails below fails for its defect.
    c = cache()
    fake_root(c, "sid")
    rc, out = script(c, "--check", "sid")
    mldtest.check(rc == 0 and "sid: ok" in out, "a complete fake root: --check exit %d:\n%s" % (rc, out))
    rc, out = needing_test(c, "sid")
    mldtest.check(rc == 0 and "GOT ROOT" in out, "a complete fake root: roots.root() exit %d:\n%s" % (rc, out))

    # A package unpacked but not configured.
    c = cache()
    fake_root(c, "trixie", status={"python3-torch": "install ok unpacked"})
    expect_fails(c, "trixie", ["python3-torch is unpacked but not configured", "install ok unpacked"],
                 "unconfigured package")
    # ... and the build run (offline) records it in trixie.FAILED.
    rc, out = script(c, "--offline", "trixie")
    failed = os.path.join(c, "trixie.FAILED")
    mldtest.check(rc == 0 and os.path.exists(failed) and "Read-only file system" not in out,
                  "unconfigured package, --offline: exit %d, FAILED written: %s\n%s"
                  % (rc, os.path.exists(failed), out))
    rc, out = needing_test(c, "trixie")
    mldtest.check_in("python3-torch is unpacked but not configured (dpkg status: install ok unpacked) "
                     "(--offline: not made)", out, "the FAILED reason printed by a test needing the root")

    # A root without python3.
    c = cache()
    fake_root(c, "bullseye", python=False)
    expect_fails(c, "bullseye", ["has no python3", "usr/bin/python3"], "root without python3")

    # A build that did not finish: no .mld-root in the root, and a half-built
    # temporary sibling.
    c = cache()
    fake_root(c, "sid", stamp=False)
    half = os.path.join(c, ".sid.new.4242")
    os.makedirs(os.path.join(half, "var/cache/apt/archives/partial"))
    with open(os.path.join(half, "var/cache/apt/archives/partial/python3-torch_2.6.0_amd64.deb"), "wb") as f:
        f.write(b"!<arch>\n" + b"\0" * 100)
    expect_fails(c, "sid", ["not a complete root", ".mld-root"], "root without .mld-root")
    rc, out = script(c, "--check", "sid")
    mldtest.check_in(".sid.new.4242 is a half-built root", out, "--check names the half-built sibling")
    mldtest.check(os.path.exists(half), "--check must not remove anything")
    rc, out = script(c, "--offline", "sid")
    mldtest.check(rc == 0 and not os.path.exists(half) and "removed %s" % half in out
                  and "Read-only file system" not in out,
                  "half-built sibling, --offline: exit %d, removed: %s\n%s" % (rc, not os.path.exists(half), out))
    rc, out = needing_test(c, "sid")
    mldtest.check(rc == 1 and "not a complete root" in out and "--offline: not made" in out,
                  "root without .mld-root: the test needing it prints FAILED's reason; exit %d:\n%s" % (rc, out))

    # A half-built sibling with something still mounted in it is named, kept.
    c = cache()
    fake_root(c, "sid")
    half = os.path.join(c, ".sid.new.77")
    os.makedirs(os.path.join(half, "proc"))
    rc, out = script(c, "--offline", "sid", setup='mount -t tmpfs mld-test "%s/proc";' % half)
    mldtest.check(rc == 0 and os.path.isdir(half) and "mounts still in it" in out,
                  "half-built sibling with a mount: exit %d, kept: %s\n%s" % (rc, os.path.isdir(half), out))
    with open(os.path.join(c, "sid.FAILED")) as f:
        mldtest.check_in("mounts still in it", f.read(), "sid.FAILED for the mounted leftover")

    # A failed download: no root, sid.FAILED says why.
    c = cache()
    with open(os.path.join(c, "sid.FAILED"), "w") as f:
        f.write("apt-get install in the sid root failed: E: Unable to fetch some archives\n")
    rc, out = needing_test(c, "sid")
    mldtest.check(rc == 1 and "FAIL:" in out and "E: Unable to fetch some archives" in out
                  and "no root at" in out,
                  "FAILED present, no root: a test needing it should FAIL with the reason; exit %d:\n%s"
                  % (rc, out))

    # No network (a failed download): with no root, sid.FAILED says the
    # archive could not be read and a test needing the root prints it; a
    # complete root is kept as it is, with no FAILED.
    c = cache()
    rc, out = script(c, "sid", network=False)
    mldtest.check(rc == 0 and os.path.exists(os.path.join(c, "sid.FAILED")) and "Read-only file system" not in out,
                  "no network, no root: exit %d, FAILED written: %s\n%s"
                  % (rc, os.path.exists(os.path.join(c, "sid.FAILED")), out))
    rc, out = needing_test(c, "sid")
    mldtest.check(rc == 1 and "apt-get update of sid from" in out,
                  "no network: a test needing the root should FAIL with the failed update; exit %d:\n%s" % (rc, out))
    fake_root(c, "sid")
    rc, out = script(c, "sid", network=False)
    mldtest.check(rc == 0 and "the archive is not reachable" in out and "keeping" in out
                  and not os.path.exists(os.path.join(c, "sid.FAILED")),
                  "no network, a complete root: kept, no FAILED; exit %d:\n%s" % (rc, out))

    # A cache on a read-only mount: with no root, a clear failure (exit 1)
    # naming the cache and the reason; with a complete root, used as it is.
    # Neither writes anything (checked on the listing).
    c = cache()
    before = listing(c)
    rc, out = script(c, "sid", cache_ro=True)
    mldtest.check(rc == 1 and "is not writable" in out and "Read-only file system" in out and c in out
                  and "MLD_TEST_ROOTS" in out,
                  "read-only cache without a root: exit %d:\n%s" % (rc, out))
    mldtest.check_eq(listing(c), before, "read-only cache: its contents")
    fake_root(c, "sid")
    before = listing(c)
    rc, out = script(c, "sid", cache_ro=True)
    mldtest.check(rc == 0 and "using the root there as it is" in out,
                  "read-only cache with a complete root: exit %d:\n%s" % (rc, out))
    mldtest.check_eq(listing(c), before, "read-only cache with a root: its contents")

    mldtest.finish("roots-bad-input")


main()

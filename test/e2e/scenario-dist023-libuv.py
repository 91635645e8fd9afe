#!/usr/bin/env python3
# labels: slow scenario roots
"""DIST023 (torch built without libuv while its TCPStore asks for libuv) and
ENV016 (check's prediction of it from the installed files) against
the real torch of every Debian generation: this machine's (torch 1.13) and the
bullseye, trixie and sid test roots (1.7, 2.6, 2.14; versions read, never
assumed).

Oracle: the real `init_process_group("gloo")` with `env://` under plain
`python3`, one rank, in a fresh process. In each generation:
  - The rule's "Confirm" step: the marker string the rule names is in that
    torch's libtorch_cpu.so exactly when the plain run fails with the libuv
    message (the failure, not the marker, decides).
  - Where it fails: `mldoctor logs` on the real output names DIST023 as the
    first incident; each claim of the fix text is run for real: with
    `USE_LIBUV=0` the same start succeeds; under `torchrun --standalone` with
    `USE_LIBUV=0` it still fails (and `logs` names DIST023 there too); one
    process per rank started by a shell loop with RANK, LOCAL_RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT and USE_LIBUV=0 succeeds, two ranks.
  - Where it succeeds: `logs` on its output names no DIST023.
  - `mldoctor check` (the roots read from outside with --root) reports ENV016
    exactly where the plain start fails, with USE_LIBUV unset and set to 0
    (then saying that torchrun still fails).
A generation whose root is missing FAILS with why (never a skip); at least one
generation must fail the plain start (Debian's torch 2.6 and later are built
without libuv), or the test proves nothing."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import concurrent.futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mldtest  # noqa: E402
import roots  # noqa: E402

MARKER = b"LibUV TCPStore implementation missing"
MESSAGE = "use_libuv was requested but PyTorch was buil"

RANK_SCRIPT = r"""
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
print("RANK-OK %d of %d torch %s" % (dist.get_rank(), dist.get_world_size(), torch.__version__), flush=True)
dist.destroy_process_group()
"""

# Where torch's libtorch_cpu.so really is (torch/lib links to /usr/lib/... in
# Debian's package), and torch's version, without importing distributed.
WHERE = r"""
import os, torch
print(torch.__version__)
print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")))
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Generation:
    """Runs shell commands with the rank script at /tmp/t.py, either on this
    machine (root None) or inside a test root."""

    def __init__(self, name, root):
        self.name, self.root = name, root

    def sh(self, script, env=None, timeout=300):
        full = "cat > /tmp/t.py && " + script
        if self.root:
            return roots.run(self.root, ["sh", "-c", full], env=env, timeout=timeout, input=RANK_SCRIPT)
        with tempfile.TemporaryDirectory(prefix="mld-dist023-") as tmp:
            # /tmp/t.py on this machine would be shared with other tests: the
            # host run gets its own directory instead.
            full = full.replace("/tmp/t.py", os.path.join(tmp, "t.py"))
            e = {"PATH": roots.PATH, "HOME": tmp, "LANG": "C.UTF-8"}
            e.update(env or {})
            try:
                return subprocess.run(["sh", "-c", full], env=e, input=RANK_SCRIPT, text=True,
                                      capture_output=True, timeout=timeout, cwd=tmp)
            except subprocess.TimeoutExpired as t:
                return subprocess.CompletedProcess(t.cmd, -9, t.stdout or "", (t.stderr or "") + "(timeout)")

    def path_in(self, p):
        return os.path.join(self.root, p.lstrip("/")) if self.root else p


def logs_rules(text):
    """The rules of `mldoctor logs` on `text`, first incident first."""
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(text)
    try:
        p = mldtest.mldoctor("logs", "--json", f.name)
        doc = json.loads(p.stdout)
        inp = doc["inputs"][0]
        return [i["rule"] for i in inp["incidents"]], [x["rule"] for x in inp["findings"]]
    finally:
        os.unlink(f.name)


def plain(gen, env=None):
    port = free_port()
    e = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    e.update(env or {})
    return gen.sh("python3 /tmp/t.py", env=e)


def check_generation(gen):
    w = gen.sh("python3 -c '%s'" % WHERE.replace("'", "'\"'\"'"))
    if not mldtest.check(w.returncode == 0, "%s: cannot locate torch: %s%s" % (gen.name, w.stdout, w.stderr)):
        return None
    version, lib = w.stdout.split()[:2]
    with open(gen.path_in(lib), "rb") as f:
        marker = MARKER in f.read()

    p = plain(gen)
    out = p.stdout + p.stderr
    failed = MESSAGE in out
    mldtest.check(failed or (p.returncode == 0 and "RANK-OK 0 of 1" in out),
                  "%s: the plain start neither succeeded nor failed on libuv (exit %d):\n%s"
                  % (gen.name, p.returncode, out[-3000:]))
    mldtest.check_eq(marker, failed, "%s (torch %s): marker %r in %s == the plain start fails on libuv"
                     % (gen.name, version, MARKER.decode(), lib))
    # ENV016: check's static prediction of the same failure, from the files
    # alone (the roots from outside with --root), equal to the real outcome;
    # with USE_LIBUV=0 set it still warns (torchrun ignores the variable).
    base = ["check", "--json"] + (["--root", gen.root] if gen.root else ["--python", "/usr/bin/python3"])
    for use_libuv in (None, "0"):
        env = {k: v for k, v in os.environ.items() if k != "USE_LIBUV"}
        if use_libuv is not None:
            env["USE_LIBUV"] = use_libuv
        c = mldtest.mldoctor(*base, env=env)
        try:
            found = [f for f in json.loads(c.stdout)["findings"] if f["rule"] == "ENV016"]
        except (ValueError, KeyError) as e:
            mldtest.check(False, "%s: mldoctor %s: exit %d, no JSON (%s)\n%s" % (gen.name, " ".join(base), c.returncode, e, c.stderr))
            continue
        mldtest.check_eq(bool(found), failed, "%s (USE_LIBUV=%s): check predicts ENV016 == the real plain start fails on libuv"
                 % (gen.name, use_libuv))
        if found and use_libuv == "0":
            mldtest.check("torchrun still fails" in found[0]["message"],
                  "%s: ENV016 with USE_LIBUV=0 does not say torchrun still fails: %s" % (gen.name, found[0]["message"]))
    incidents, findings = logs_rules(out)
    print("%s: torch %s, marker %s, plain start %s; logs: %s"
          % (gen.name, version, marker, "fails on libuv" if failed else "succeeds", incidents))
    if not failed:
        mldtest.check("DIST023" not in findings, "%s: DIST023 on a run that succeeded: %s" % (gen.name, findings))
        return False

    mldtest.check(incidents[:1] == ["DIST023"], "%s: first incident %s, expected DIST023\n%s"
                  % (gen.name, incidents, out[-2000:]))
    # Fix, started with python: USE_LIBUV=0.
    q = plain(gen, {"USE_LIBUV": "0"})
    mldtest.check(q.returncode == 0 and "RANK-OK 0 of 1" in q.stdout,
                  "%s: USE_LIBUV=0 did not make the plain start succeed (exit %d):\n%s"
                  % (gen.name, q.returncode, (q.stdout + q.stderr)[-2000:]))
    # torchrun ignores USE_LIBUV=0 (the fix text says so).
    t = gen.sh("python3 -m torch.distributed.run --standalone --nproc-per-node=1 /tmp/t.py",
               env={"USE_LIBUV": "0"})
    tout = t.stdout + t.stderr
    mldtest.check(t.returncode != 0 and MESSAGE in tout,
                  "%s: torchrun with USE_LIBUV=0 did not fail on libuv as the fix text says (exit %d):\n%s"
                  % (gen.name, t.returncode, tout[-2000:]))
    tincidents, _ = logs_rules(tout)
    mldtest.check(tincidents[:1] == ["DIST023"], "%s: torchrun log: first incident %s, expected DIST023"
                  % (gen.name, tincidents))
    # The torchrun alternative: one process per rank, USE_LIBUV=0.
    port = free_port()
    loop = ("for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d "
            "USE_LIBUV=0 python3 /tmp/t.py & done; wait" % port)
    r = gen.sh(loop)
    rout = r.stdout + r.stderr
    mldtest.check("RANK-OK 0 of 2" in rout and "RANK-OK 1 of 2" in rout,
                  "%s: ranks started one by one with USE_LIBUV=0 did not both start:\n%s" % (gen.name, rout[-2000:]))
    return True


def main():
    gens = [Generation("bookworm (this machine)", None)]
    for suite in roots.SUITES:
        why = roots.problem(suite)
        if why:
            mldtest.fail(why)
            continue
        gens.append(Generation(suite, os.path.join(roots.cache(), suite)))
    # The generations run side by side (each mostly waits on its processes;
    # mldtest's counters take a lock).
    with concurrent.futures.ThreadPoolExecutor(len(gens)) as pool:
        failing = [g.name for g, f in zip(gens, list(pool.map(check_generation, gens))) if f]
    mldtest.check(failing, "no generation's torch failed the plain start on libuv: the rule was not exercised")
    mldtest.finish("scenario-dist023-libuv")


if __name__ == "__main__":
    main()

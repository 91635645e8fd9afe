#!/usr/bin/env python3
"""The wheel of `make wheel` (scripts/build-wheel.py on this build tree),
installed with `pip install --no-index` into a fresh venv of Debian's
/usr/bin/python3 (--system-site-packages: torch, numba, opencv): its RECORD
hashes and sizes match its files, its tag's glibc is the binary's own
--version need; venv/bin/mldoctor runs the binary inside the package, which
finds its shims next to itself (no MLDOCTOR_SHIM_DIR: `run` traces and keeps
the job's exit status); `venv/bin/python -m mldoctor check` examines the
venv's interpreter; `import mldoctor` in the venv (no $MLDOCTOR, nothing on
PATH) runs the installed binary: check() finds what the CLI finds for that
interpreter, logs() a rule from its example, explain() a title, and an
unknown rule is MldoctorError with the tool's message."""
import base64
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mldtest import MLDOCTOR, check, check_eq, check_in, finish, scratch  # noqa: E402

SOURCE = os.environ["MLD_SOURCE_DIR"]
BUILD = os.environ["MLD_BUILD_DIR"]
SYSTEM_PYTHON = "/usr/bin/python3"


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def sh(cmd, env=None, input=None, timeout=600):
    return subprocess.run(cmd, env=env, input=input, capture_output=True, text=True, timeout=timeout)


def record_ok(wheel, pure=False):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = [n for n in names if re.fullmatch(r"mldoctor-[^/]+\.dist-info/RECORD", n)]
        if not check_eq(len(info), 1, "one RECORD in the wheel"):
            return
        rows = [r.rsplit(",", 2) for r in z.read(info[0]).decode().splitlines()]
        listed = {r[0] for r in rows}
        check_eq(sorted(listed), sorted(names), "RECORD lists every file of the wheel")
        for path, digest, size in rows:
            if path == info[0]:
                check_eq((digest, size), ("", ""), "RECORD has no hash of itself")
                continue
            data = z.read(path)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            check_eq((digest, int(size)), (want, len(data)), "RECORD hash and size of " + path)
        wheel_meta = z.read(info[0].replace("RECORD", "WHEEL")).decode()
        tag = os.path.basename(wheel)[:-4].split("-", 2)[2]
        check_in("Tag: %s\n" % tag, wheel_meta, "WHEEL names the file name's tag")
        if pure:
            check_in("Root-Is-Purelib: true", wheel_meta, "a pure wheel")
            check_eq([n for n in names if "/_bin/" in n], [], "the pure wheel carries no binary")
            return
        check_in("Root-Is-Purelib: false", wheel_meta, "a platform wheel")
        mode = z.getinfo("mldoctor/_bin/mldoctor").external_attr >> 16
        check(mode & 0o111, "the binary is executable in the archive: %o" % mode)


def main():
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        skip("no %s (Debian's python3)" % SYSTEM_PYTHON)
    if sh([SYSTEM_PYTHON, "-c", "import ensurepip, venv"]).returncode != 0:
        skip("%s has no venv/ensurepip (apt-get install python3-venv)" % SYSTEM_PYTHON)
    t = scratch()
    b = sh([SYSTEM_PYTHON, os.path.join(SOURCE, "scripts", "build-wheel.py"), BUILD, os.path.join(t, "dist")])
    if not check_eq(b.returncode, 0, "build-wheel.py\n" + b.stdout + b.stderr):
        finish("wheel-venv")
    pure, wheel = b.stdout.strip().splitlines()[-2:]
    cmakelists = open(os.path.join(SOURCE, "CMakeLists.txt")).read()
    version = re.search(r"project\(\s*mldoctor\s+VERSION\s+([0-9.]+)", cmakelists).group(1)
    need = re.search(r"needs >= (\d+)\.(\d+)", sh([MLDOCTOR, "--version"]).stdout)
    check_eq(os.path.basename(wheel), "mldoctor-%s-py3-none-manylinux_%s_%s_x86_64.whl"
             % (version, need.group(1), need.group(2)), "the wheel's name: version and the binary's glibc need")
    print("wheel: %s, %d bytes" % (os.path.basename(wheel), os.path.getsize(wheel)))
    record_ok(wheel)
    check_eq(os.path.basename(pure), "mldoctor-%s-py3-none-any.whl" % version, "the pure wheel's name")
    record_ok(pure, pure=True)

    venv = os.path.join(t, "venv")
    v = sh([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", venv])
    check_eq(v.returncode, 0, "python3 -m venv\n" + v.stderr)
    py, cmd = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "mldoctor")
    # Nothing outside the venv may point at a binary or the shims.
    env = {k: val for k, val in os.environ.items()
           if k not in ("MLDOCTOR", "MLDOCTOR_SHIM_DIR", "VIRTUAL_ENV", "LD_PRELOAD", "LD_AUDIT", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    p = sh([py, "-m", "pip", "install", "--no-index", "--no-cache-dir", wheel], env=env)
    if not check_eq(p.returncode, 0, "pip install\n" + p.stdout + p.stderr):
        finish("wheel-venv")
    site = sh([py, "-c", "import mldoctor, os; print(os.path.dirname(mldoctor.__file__))"], env=env).stdout.strip()
    inside = os.path.join(site, "_bin")

    ver = sh([cmd, "--version"], env=env)
    check_eq(ver.returncode, 0, "venv/bin/mldoctor --version: " + ver.stderr)
    check_in("shims      %s/libmldoctor-{audit,preload}.so" % os.path.realpath(inside), ver.stdout,
             "--version finds the shims in the installed package")
    check_eq(ver.stdout.split("\n")[0].split()[:2], ["mldoctor", version], "--version's first line")

    c = sh([py, "-m", "mldoctor", "check", "--json"], env=env)
    check(c.returncode in (0, 1), "python -m mldoctor check: exit %d %s" % (c.returncode, c.stderr))
    doc = json.loads(c.stdout)
    check_eq((doc["python"]["interpreter"], doc["python"]["chosen_by"]), (py, "--python"),
             "python -m mldoctor check examines the venv's interpreter")
    check_eq(doc["python"]["prefix"], venv, "sys.prefix of the examined interpreter is the venv")

    cli = sh([cmd, "check", "--json", "--python", py], env=env)
    cli_doc = json.loads(cli.stdout)
    rule_id, example = find_example()
    code = r"""
import json, sys, mldoctor
r = mldoctor.check()
out = {"binary": mldoctor.find_binary(), "check": [[f.rule, f.subject] for f in r.findings],
       "python": r.python["interpreter"], "logs": [f.rule for f in mldoctor.logs(sys.argv[1]).findings],
       "title": mldoctor.explain("OMP001").title}
try:
    mldoctor.explain("NOPE999")
except mldoctor.MldoctorError as e:
    out["error"] = [e.message, e.exit_status]
print(json.dumps(out))
"""
    a = sh([py, "-c", code, "a line before\n" + example], env=env)
    if check_eq(a.returncode, 0, "the API in the venv\n" + a.stderr):
        got = json.loads(a.stdout)
        check_eq(got["binary"], os.path.join(inside, "mldoctor"), "the API runs the binary inside the package")
        check_eq(got["python"], py, "mldoctor.check() examines the venv's interpreter")
        check_eq(got["check"], [[f["rule"], f["subject"]] for f in cli_doc["findings"]],
                 "mldoctor.check() finds what check --json --python venv/bin/python finds")
        check_in(rule_id, got["logs"], "mldoctor.logs(text) finds %s from its example" % rule_id)
        check_eq(got["title"], json.loads(sh([cmd, "explain", "OMP001", "--json"], env=env).stdout)["title"],
                 "mldoctor.explain('OMP001').title")
        check_eq(got.get("error"), ["mldoctor: error: no rule NOPE999 (mldoctor rules lists them)", 2],
                 "an unknown rule raises MldoctorError with the tool's message and status")

    # the console script, no environment activated: the venv it is installed in
    c = sh([cmd, "check", "--json"], env=env)
    check_eq(json.loads(c.stdout)["python"]["interpreter"] if c.stdout else c.stderr, py,
             "venv/bin/mldoctor check (no VIRTUAL_ENV) examines the venv it is installed in")
    other = os.path.join(t, "venv-other")
    sh([SYSTEM_PYTHON, "-m", "venv", "--without-pip", other])
    c = sh([cmd, "check", "--json"], env=dict(env, VIRTUAL_ENV=other))
    got = json.loads(c.stdout)["python"] if c.stdout else {}
    check_eq((got.get("interpreter"), got.get("chosen_by")), (os.path.join(other, "bin", "python"), "$VIRTUAL_ENV/bin/python"),
             "an activated environment still wins over the one mldoctor is installed in\n" + c.stderr)

    report = os.path.join(t, "run.json")
    r = sh([cmd, "run", "--json", "--report", report, "--", "/bin/sh", "-c", "exit 3"], env=env)
    check_eq(r.returncode, 3, "venv/bin/mldoctor run -- sh -c 'exit 3' exits 3: " + r.stderr)
    run_doc = json.load(open(report))
    check_eq(run_doc["not_traced"], [], "run traced the job: the shims were found")
    check("shim" not in json.dumps(run_doc["not_traced"]) and "shims" not in r.stderr,
          "nothing says the shims were not found: " + r.stderr)
    r = sh([cmd, "run", "--", "/bin/sh", "-c", "exit 3"], env=env)
    check_eq(r.returncode, 3, "text report: exit 3")
    check("not found" not in r.stdout + r.stderr, "the text report does not say the shims were not found:\n"
          + r.stdout + r.stderr)
    cannot_start(t, env, py, cmd, os.path.join(inside, "mldoctor"))
    pure_wheel(t, env, os.path.dirname(wheel), pure, version)
    finish("wheel-venv")


def cannot_start(t, env, py, cmd, installed):
    """The installed binary made to need GLIBC_2.99 (its newest GLIBC_ need
    renamed in .dynstr): ld.so refuses it as it refuses a binary built for a
    newer glibc than the machine's."""
    data = bytearray(open(installed, "rb").read())
    versions = re.findall(r"Name: (GLIBC_2\.\d+)\s", sh(["readelf", "-V", "--wide", installed]).stdout)
    newest = max(versions, key=lambda v: int(v.split(".")[1])).encode() + b"\0"
    sections = sh(["readelf", "-S", "--wide", installed]).stdout
    m = re.search(r"\.dynstr\s+STRTAB\s+[0-9a-f]+ ([0-9a-f]+) ([0-9a-f]+)", sections)
    off, size = int(m.group(1), 16), int(m.group(2), 16)
    at = data.find(newest, off, off + size)
    check(at >= 0, "%s is in the binary's .dynstr" % newest.decode())
    data[at:at + len(newest)] = b"GLIBC_2.99\0"
    os.rename(installed, installed + ".good")
    with open(installed, "wb") as f:
        f.write(data)
    os.chmod(installed, 0o755)
    try:
        for argv in ([cmd, "check"], [py, "-m", "mldoctor", "check"]):
            r = sh(argv, env=env)
            what = " ".join(os.path.basename(a) for a in argv)
            check_eq(r.returncode, 2, "%s with a binary that cannot start: a tool error, not findings" % what)
            check_in("the mldoctor binary %s cannot start on this machine" % installed, r.stderr, what)
            check_in("version `GLIBC_2.99' not found", r.stderr, "%s: the loader's own message" % what)
            check_in("mldoctor.runtimes() and mldoctor.guard() work without it", r.stderr, "%s: what still works" % what)
            check_in("build mldoctor on this machine from its source (`make build`)", r.stderr, "%s: what to do" % what)
            check_eq(r.stdout, "", "%s prints no report" % what)
        code = "import mldoctor\ntry:\n    mldoctor.check()\nexcept mldoctor.MldoctorError as e:\n    print(e.message)"
        a = sh([py, "-c", code], env=env)
        check_in("cannot start on this machine", a.stdout, "the API says the binary cannot start: " + a.stderr)
        check("not JSON" not in a.stdout, "the API does not call it 'not JSON'")
        a = sh([py, "-c", "import mldoctor; mldoctor.runtimes(); mldoctor.guard(); print('ok')"], env=env)
        check_eq(a.stdout.strip(), "ok", "runtimes() and guard() work without a binary that starts: " + a.stderr)
    finally:
        os.replace(installed + ".good", installed)


def pure_wheel(t, env, dist, pure, version):
    """pip takes the platform wheel here and the pure one where the
    platform's tag does not fit; the pure install's commands say so."""
    venv = os.path.join(t, "venv-pick")
    sh([SYSTEM_PYTHON, "-m", "venv", venv])
    py = os.path.join(venv, "bin", "python")
    p = sh([py, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--find-links", dist, "mldoctor"], env=env)
    check_eq(p.returncode, 0, "pip install mldoctor from both wheels\n" + p.stdout + p.stderr)
    has_bin = sh([py, "-c", "import mldoctor, os; print(os.path.isfile(mldoctor.find_binary() or ''))"], env=env)
    check_eq(has_bin.stdout.strip(), "True", "on this machine pip installs the wheel with the binary")
    got = os.path.join(t, "downloaded")
    p = sh([py, "-m", "pip", "download", "--no-index", "--find-links", dist, "--only-binary=:all:", "--platform",
            "manylinux_2_28_x86_64", "--python-version", "3.9", "--no-deps", "-d", got, "mldoctor"], env=env)
    check_eq((p.returncode, sorted(os.listdir(got)) if os.path.isdir(got) else []),
             (0, ["mldoctor-%s-py3-none-any.whl" % version]),
             "for glibc 2.28, pip takes the pure wheel\n" + p.stdout + p.stderr)
    venv = os.path.join(t, "venv-pure")
    sh([SYSTEM_PYTHON, "-m", "venv", venv])
    py, cmd = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "mldoctor")
    p = sh([py, "-m", "pip", "install", "--no-index", "--no-cache-dir", pure], env=env)
    check_eq(p.returncode, 0, "pip install the pure wheel\n" + p.stdout + p.stderr)
    r = sh([cmd, "check"], env=env)
    check_eq(r.returncode, 2, "the pure install's mldoctor check: a tool error")
    check_in("This installation is mldoctor's pure-Python wheel (py3-none-any)", r.stderr, "says it has no binary")
    check_in("mldoctor.runtimes() and mldoctor.guard() work without it", r.stderr, "says what works")
    a = sh([py, "-c", "import mldoctor, ctypes; ctypes.CDLL('libgomp.so.1'); "
                      "print([r.kind for r in mldoctor.runtimes()]); mldoctor.guard()"], env=env)
    check_eq((a.returncode, a.stdout.strip()), (0, "['gnu-openmp']"), "runtimes() in the pure install\n" + a.stderr)


def find_example():
    import tomllib
    for f in sorted(glob.glob(os.path.join(SOURCE, "rules", "OMP*.toml"))):
        d = tomllib.load(open(f, "rb"))
        if d.get("example"):
            return d["id"], d["example"][0]["log"]
    raise SystemExit("no OMP rule with an example")


if __name__ == "__main__":
    main()

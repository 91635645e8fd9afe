#!/usr/bin/env python3
# labels: scenario
"""A replayed import that fails on a damaged extension module is a finding,
never "fails: ... (load)" above "✓ no findings" (issue 31, item 8).

Fixture: a venv (/usr/bin/python3, no pip) with two wheel-shaped packages
(RECORD, METADATA), each an __init__.py importing one extension module:
  - trunc: trunc/_core<EXT> cut to half its size (an interrupted download,
    a full disk during `pip install`): its headers survive, its writable
    PT_LOAD segment reaches past the end of the file;
  - garbled: garbled/_core<EXT> whose first bytes are overwritten (not ELF).
Real half: `import trunc` kills the interpreter with SIGBUS (no traceback);
`import garbled` raises ImportError with the loader's "invalid ELF header".
mldoctor half: `check --import trunc,garbled`: both steps fail (load), each
is an LD005 error with the loader's message (the real one, for garbled; the
SIGBUS, for trunc), exit 1, and no "no findings" line.
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import check, check_eq, check_in, finish, scratch  # noqa: E402
from scenarios import ext_suffix, scenario_env  # noqa: E402
from wheels import build_ext, install_dist, make_venv, rel_files, run_check_py, write  # noqa: E402

t = scratch()
python, site = make_venv(os.path.join(t, "venv"))
modules = {}
for name in ("trunc", "garbled"):
    write(os.path.join(site, name, "__init__.py"), "from %s import _core  # noqa\n" % name)
    modules[name] = build_ext(os.path.join(site, name, "_core" + ext_suffix()), "_core",
                              body="static char data[65536] = {1};\n"
                                   "int %s_touch(void) { return data[0]++; }\n" % name)
    install_dist(site, name, "1.0", rel_files(site, name), [name])
with open(modules["trunc"], "rb") as f:
    whole = f.read()
with open(modules["trunc"], "wb") as f:
    f.write(whole[:len(whole) // 2])
with open(modules["garbled"], "r+b") as f:
    f.write(b"\0" * 16)
env = scenario_env(NO_COLOR="1")

# The real imports.
real = subprocess.run([python, "-c", "import trunc"], env=env, capture_output=True, text=True, timeout=120)
check_eq(real.returncode, -signal.SIGBUS, "import trunc dies of SIGBUS for real")
real = subprocess.run([python, "-c", "import garbled"], env=env, capture_output=True, text=True, timeout=120)
check_in("ImportError: %s: invalid ELF header" % modules["garbled"], real.stderr,
         "import garbled: the loader's message")

# mldoctor, as text.
_, p = run_check_py(python, "--import", "trunc,garbled", env=env, json_out=False)
print(p.stdout)
check_eq(p.returncode, 1, "exit 1: the failing imports are errors")
out = p.stdout
check("no findings" not in out, "no '✓ no findings' beside failing imports")
check_in("· fails: trunc._core (load) · fails: garbled._core (load)", out, "the Imports row")
check_in(" ✗ import trunc (trunc._core) would fail: %s: file truncated: a PT_LOAD segment spans bytes "
         % modules["trunc"], out, "LD005 for the truncated module")
check_in("ld.so maps it anyway, and the process dies of SIGBUS (Bus error) when it touches a page past the end",
         out, "LD005 says how it dies")
check_in(" ✗ import garbled (garbled._core) would fail: %s: invalid ELF header" % modules["garbled"], out,
         "LD005 for the garbled module, in the loader's words")
check_in("_core%s is from trunc 1.0" % ext_suffix(), out, "LD005 names the distribution")
check_in("2 errors", out, "the summary counts both")

doc, _ = run_check_py(python, "--import", "trunc,garbled", env=env)
ld005 = [f for f in (doc or {}).get("findings", []) if f["rule"] == "LD005"]
check_eq(sorted(f["subject"] for f in ld005), sorted(modules.values()), "JSON: one LD005 per module")
check(all(f["severity"] == "error" for f in ld005), "JSON: LD005 is an error")
finish(os.path.basename(__file__))

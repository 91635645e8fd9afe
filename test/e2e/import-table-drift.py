#!/usr/bin/env python3
# labels: slow scenario
"""The import table (src/pyenv/import-set.cc, load_table()) against the real
loads of `import X` on this machine, for every entry X of the table.

Oracle: /usr/bin/python3 runs `import X` (for numba also a parallel function,
since numba's threading layer is loaded at the first parallel call, not at
import) under LD_DEBUG=files. Every "file=P [0];  dynamically loaded by ..."
line of the interpreter's process is one real dlopen() (extension modules
and ctypes loads alike), in the order glibc performed them; the "needed by"
lines after it are what that dlopen brought into the process.

Prediction: `mldoctor check --python /usr/bin/python3 --import X --json`,
its imports.steps (the table's replay), in the same environment.

"Drift" means any of:
  1. a step of the replay from the table that the real import does not
     dlopen at all (the table names a load that does not happen: its loader
     consequences, TLS, runtimes, are predicted for nothing);
  2. two steps of the replay that the real import dlopens in the opposite
     order, where both are table steps or either brings a runtime (the first
     OpenMP runtime loaded and the first static-TLS user that does not fit
     depend on order, so that relative order must be the real one);
  3. a real dlopen that brings a native runtime (OpenMP, BLAS/LAPACK, CUDA,
     TBB: the dlopened object itself or an object it newly loads) that is not a
     step of the replay (the table misses the load that brings the runtimes the
     rules reason about).
Since issue 32 the replay follows the import statements into every package
(ImportWalker): the steps it adds ("inferred: imported at FILE:LINE") that
bring no runtime are held to recall (test/e2e/import-replay-maps.py), not to
this order: an extension module's PyInit imports others (Cython's cimports,
scipy.sparse.csgraph) and a module-level `if os.environ.get(...)` takes one
branch, neither of which the statements show; such steps found out of order
or never dlopened are printed as NOTE lines.
The table MAY omit loads that bring no runtime (the interpreter's own
lib-dynload modules, psutil, yaml, most of scipy's modules): the replay is
meant to be the subsequence that matters to the loader rules, not a full
re-enactment of the import. Order is compared only between replay steps.

No vacuous pass: an entry X that /usr/bin/python3 can import must have a
non-empty replay and a non-empty real dlopen sequence, and every entry must be
importable here: a table row without a real import to check it against has no
place in the table (packages this machine cannot install, such as tensorflow,
jax or deepspeed, are left to the inference below).

The inference for packages the table does not know (import-set.cc
inferred_steps, python-imports.cc): every package of Debian's dist-packages
that holds an extension module and is not a table entry (yaml, psutil, gi,
functorch, cryptography where installed) is checked the same way, with
inference's own contract: the steps marked "imported at <file:line>" (reached
by the module-level import walk) are real dlopens in the real order, every
real dlopen of one of the package's own files is such a step, and every real
load that brings a runtime is a replay step. Steps no import reaches may be
absent from the real import (they are replayed for what a later lazy import
would bring). At least two such packages must be checkable here.
A drift prints BOTH sequences: the replay, and the real dlopens (with what
each brought) where `*` marks a real load that is a replay step and `!` a
load that brings a runtime.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import MLDOCTOR, check, fail, finish  # noqa: E402
from scenarios import PY, has_modules, scenario_env  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "pyenv",
                   "import-set.cc")

# The real program per entry: the import, plus what triggers a lazy load the
# table lists (numba's threading layer at the first parallel call).
PROGRAMS = {
    "numba": ("import numba, numpy\n"
              "@numba.njit(parallel=True)\n"
              "def f(a):\n"
              "    s = 0.0\n"
              "    for i in numba.prange(a.shape[0]):\n"
              "        s += a[i]\n"
              "    return s\n"
              "assert f(numpy.ones(64)) == 64.0\n"),
}

# Native runtimes the loader rules reason about (by file name).
RUNTIME = re.compile(
    r"^lib(gomp|omp|iomp5|blas|cblas|openblas\w*|lapack|blis\w*|flexiblas|mkl_\w+|tbb\w*"
    r"|cudart|cuda|cublas\w*|cudnn\w*|nccl|cufft\w*|curand|cusparse\w*|cusolver\w*|nvrtc\w*)"
    r"([-.].*)?$")

LINE = re.compile(r"^\s*(\d+):\s+file=(\S+) \[(\d+)\];\s+(dynamically loaded|needed) by (\S+)")


def table_entries():
    """The import names of load_table(), read from its source: the test
    follows the table as it changes."""
    with open(SRC) as f:
        text = f.read()
    start = text.find("load_table()")
    end = text.find("return table;", start)
    if start < 0 or end < 0:
        fail("cannot find load_table() in %s" % SRC)
        return []
    # An entry opens with its import name and then its steps ("{{" on the
    # same line or the next); a list of names (decided_by_row) is not one.
    return re.findall(r'^\s*\{"([\w.]+)",\s*\{\{', text[start:end], re.M)


def is_runtime(name):
    return bool(RUNTIME.match(os.path.basename(name)))


def real_loads(program, env):
    """[{path, by, brought: [names]}] for every dlopen() of the interpreter's
    process, in order, from LD_DEBUG=files; None when the program failed."""
    e = dict(env, LD_DEBUG="files")
    p = subprocess.run([PY, "-c", program], env=e, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        tail = "\n".join(l for l in p.stderr.splitlines() if not LINE.match(l)
                         and not re.match(r"^\s*\d+:", l))
        fail("the real program failed (exit %d):\n%s\nstderr (without the loader's lines):\n%s"
             % (p.returncode, program, tail[-3000:]))
        return None
    pid, loads = None, []
    for line in p.stderr.splitlines():
        m = LINE.match(line)
        if not m or m.group(3) != "0":
            continue
        if pid is None:
            pid = m.group(1)  # the first loader line is the interpreter's own startup
        if m.group(1) != pid:
            continue
        if m.group(4) == "dynamically loaded":
            loads.append({"path": m.group(2), "by": m.group(5), "brought": []})
        elif loads and not line.rstrip().endswith("(relocation dependency)"):
            loads[-1]["brought"].append(m.group(2))
    return loads


def same_object(real_path, step_path):
    if os.path.isabs(real_path):
        return os.path.realpath(real_path) == os.path.realpath(step_path)
    return os.path.basename(step_path) == real_path  # a dlopen by bare soname


def show(steps, loads, marks):
    out = ["  replay (check --import, imports.steps):"]
    for i, s in enumerate(steps):
        out.append("    %2d. %s %s" % (i + 1, s.get("module") or "(library)", s.get("path")))
    if not steps:
        out.append("    (none)")
    out.append("  real dlopen() sequence (LD_DEBUG=files; * = replay step, ! = brings a runtime):")
    for i, l in enumerate(loads):
        rts = [b for b in [l["path"]] + l["brought"] if is_runtime(b)]
        out.append("    %3d. %s%s %s%s" % (i + 1, "*" if i in marks else " ", "!" if rts else " ",
                                          l["path"], "  [brings %s]" % ", ".join(rts) if rts else ""))
    if not loads:
        out.append("    (none)")
    return "\n".join(out)


def verify(name, env, inferred=False):
    program = PROGRAMS.get(name, "import %s\n" % name)
    t0 = time.monotonic()
    loads = real_loads(program, env)
    p = subprocess.run([MLDOCTOR, "check", "--python", PY, "--import", name, "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        fail("check --import %s: exit %d, no JSON\n%s" % (name, p.returncode, p.stderr[-2000:]))
        return
    if loads is None:
        return
    steps = [s for s in (doc.get("imports") or {}).get("steps") or [] if s.get("import") == name]
    print("%s: %d replay steps, %d real dlopens (%.1f s)"
          % (name, len(steps), len(loads), time.monotonic() - t0))
    problems = []
    if not steps:
        problems.append("check replays nothing for `import %s`, which /usr/bin/python3 imports" % name)
    if not loads and not inferred:
        problems.append("the real `import %s` dlopened nothing: no oracle" % name)

    def reached(s):
        return not inferred or s.get("source") != "inferred" or \
            (s.get("note") or "").startswith("inferred: imported at")

    def walked(s):
        """A step the import walk added to a table package's replay."""
        return not inferred and s.get("source") == "inferred"

    notes = []

    # 1. every replay step is a real dlopen; 2. in the same relative order.
    where = []
    for s in steps:
        idx = [i for i, l in enumerate(loads) if same_object(l["path"], s.get("path", ""))]
        if not idx:
            if walked(s):
                notes.append("replay step %s is never dlopened by the real import"
                             % (s.get("module") or s.get("path")))
            elif reached(s):
                problems.append("replay step %s (%s) is never dlopened by the real import"
                                % (s.get("module") or "(library)", s.get("path")))
        else:
            where.append((idx[0], s))
    if inferred:
        # The package's own files that the real import loads are the steps
        # the import walk reached.
        own = os.path.realpath(os.path.join("/usr/lib/python3/dist-packages", name)) + "/"
        for i, l in enumerate(loads):
            if not os.path.realpath(l["path"]).startswith(own):
                continue
            hit = [s for j, s in where if j == i]
            if not hit or not reached(hit[0]):
                problems.append("the real import loads %s; the import walk does not reach it%s"
                                % (l["path"], " (replayed as unreached)" if hit else ""))
    def brings_runtime(i):
        return any(is_runtime(b) for b in [loads[i]["path"]] + loads[i]["brought"])

    for (i, a), (j, b) in zip(where, where[1:]):
        if j < i and (walked(a) or walked(b)) and not (brings_runtime(i) or brings_runtime(j)):
            notes.append("order: %s before %s in the replay, after it in the real import"
                         % (a.get("module") or a.get("path"), b.get("module") or b.get("path")))
        elif j < i:
            problems.append("order: the replay loads %s before %s; the real import loads it after"
                            % (a.get("module") or a.get("path"), b.get("module") or b.get("path")))
    marks = {i for i, _ in where}

    # 3. every real load that brings a runtime is a replay step.
    for i, l in enumerate(loads):
        rts = [b for b in [l["path"]] + l["brought"] if is_runtime(b)]
        if rts and i not in marks:
            problems.append("real dlopen of %s (by %s) brings %s; no replay step covers it"
                            % (l["path"], l["by"], ", ".join(rts)))
    for n in notes:
        print("NOTE: %s: %s" % (name, n))
    if problems:
        fail("import-table drift for `%s`:\n  - %s\n%s"
             % (name, "\n  - ".join(problems), show(steps, loads, marks)))
    else:
        check(True, name)


def inferred_candidates(entries):
    """Top-level packages of Debian's dist-packages holding an extension
    module that the table does not know."""
    root = "/usr/lib/python3/dist-packages"
    known = {e.split(".")[0] for e in entries}
    out = []
    for n in sorted(os.listdir(root)):
        d = os.path.join(root, n)
        if n in known or not os.path.isfile(os.path.join(d, "__init__.py")):
            continue
        if any(f.endswith(".so") for _, _, fs in os.walk(d) for f in fs):
            out.append(n)
    return out


entries = table_entries()
check(len(entries) >= 5 and "torch" in entries and "numpy" in entries,
      "load_table() entries read from %s: %r" % (SRC, entries))

env = scenario_env()
start = time.monotonic()
verified = []
for name in entries:
    if not has_modules(name):
        fail("%s: a table entry that %s cannot import, so nothing checks it: install it "
             "(scripts/install-deps.sh) or drop the row (the inference handles the package)"
             % (name, PY))
        continue
    verify(name, env)
    verified.append(name)
print("table entries verified against a real import: %s (%.1f s)"
      % (", ".join(verified), time.monotonic() - start))

inferred = []
for name in inferred_candidates(entries):
    if not has_modules(name):
        print("%s: not importable by %s here; skipped" % (name, PY))
        continue
    verify(name, env, inferred=True)
    inferred.append(name)
check(len(inferred) >= 2, "packages outside the table checked against a real import: %s"
      % (", ".join(inferred) or "none"))
print("inferred packages verified against a real import: %s" % ", ".join(inferred))
finish("import-table-drift")

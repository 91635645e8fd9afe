#!/usr/bin/env python3
# labels: slow scenario roots
"""Seed 003 in every Debian generation (issue 32 item 2d): THR002 appears
exactly when numba really changes torch's thread count, in the bullseye,
trixie and sid test roots (this machine's own torch and numba are
scenario-seed003-numba-torch's).

Real half (the oracle), in the root: its python3 imports torch, records
torch.get_num_threads(), imports numba, calls numba.get_num_threads() (numba's
first parallel use: it launches the threading layer's pool, and the omp
layer's calls omp_set_num_threads(NUMBA_NUM_THREADS) on the libgomp torch
shares), records torch's count again and numba's layer.

mldoctor half: `check --import torch,numba --json` run inside the same root
with the same environment (lib/inroot.py). For OMP_NUM_THREADS in {unset, 1}
x NUMBA_NUM_THREADS in {unset, 1}, with NUMBA_THREADING_LAYER=omp (the layer
of the seed), and with numba's default layer choice (Debian builds the TBB
layer, which never touches libgomp) for OMP_NUM_THREADS in {unset, 1}:
  * the layer mldoctor predicts is the one the real numba loaded;
  * torch's predicted count is the real starting count;
  * THR002 is present exactly when the real count changed, with "from
    BEFORE to AFTER" in its message, and its fix (env_fix), applied for real,
    keeps torch's count;
  * no LD005 says numba's first parallel call would fail when the real call
    loaded its layer;
  * in the other order (numba's first parallel call before torch's first use
    in the thread), THR002 says the change holds only "in threads where torch
    already ran" exactly when torch's first use really re-applies its own
    default (torch 2.6 and 2.14 do, 1.7 does not).
Cases run two at a time, each in its own mount namespace."""
import concurrent.futures
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import inroot  # noqa: E402
import mldtest  # noqa: E402
import roots  # noqa: E402

MLD = os.path.abspath(shutil.which(mldtest.MLDOCTOR) or mldtest.MLDOCTOR)
SCRIPT = """
import torch; print(torch.get_num_threads())
import numba; numba.get_num_threads(); print(torch.get_num_threads())
print(numba.config.NUMBA_NUM_THREADS); print(numba.threading_layer())
"""
# The other order: numba's first parallel call before torch's first use in
# the thread. torch's lazy init may then re-apply torch's own default.
NUMBA_FIRST = """
import torch, numba; numba.get_num_threads(); print(torch.get_num_threads())
"""
SETTINGS = [{}, {"OMP_NUM_THREADS": "1"}, {"NUMBA_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}]
LAYERS = [{}, {"NUMBA_THREADING_LAYER": "omp"}]


def real(root, env):
    """(before, after, numba's thread count, layer) or a string saying why not."""
    p = roots.run(root, ["python3", "-c", SCRIPT], env=env, timeout=300)
    lines = p.stdout.split()
    if p.returncode != 0 or len(lines) != 4:
        return "the real run failed (exit %d)\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr[-2000:])
    return int(lines[0]), int(lines[1]), int(lines[2]), lines[3]


def real_numba_first(root, env):
    """torch's count when numba's first parallel call came first, or why not."""
    p = roots.run(root, ["python3", "-c", NUMBA_FIRST], env=env, timeout=300)
    if p.returncode != 0 or not p.stdout.strip().isdigit():
        return "the real numba-first run failed (exit %d): %s" % (p.returncode, p.stderr[-1500:])
    return int(p.stdout)


def check_doc(root, env):
    """check's JSON, or a string saying why not."""
    p = roots.run(root, inroot.mldoctor_argv(MLD, ["check", "--import", "torch,numba", "--json"]),
                  binds=inroot.mldoctor_binds(MLD), env=env, timeout=300)
    if p.returncode not in (0, 1):
        return "mldoctor check exit %d: %s" % (p.returncode, p.stderr[-2000:])
    try:
        return json.loads(p.stdout)
    except ValueError:
        return "mldoctor check printed no JSON: %s" % p.stdout[:500]


def case(suite, root, env):
    """Both halves of one case, and the fix's real run where THR002 gives one."""
    r, doc = real(root, env), check_doc(root, env)
    fixed = None
    if not isinstance(doc, str):
        thr = [f for f in doc.get("findings", []) if f["rule"] == "THR002"]
        if thr and thr[0].get("env_fix"):
            fix = dict(env)
            for setting in thr[0]["env_fix"]:
                k, _, v = setting.partition("=")
                fix[k] = v
            fixed = (thr[0]["env_fix"], real(root, fix))
        if thr:
            fixed = (fixed, real_numba_first(root, env))
    return r, doc, fixed


def main():
    # The omp layer: the whole matrix. Debian's default (TBB) never touches
    # libgomp: the two settings whose omp twins change torch's count show
    # THR002 staying silent (the other two would add a minute, not a case).
    cases = [(s, roots.root(s), dict(a, **b)) for s in roots.SUITES for b in LAYERS
             for a in (SETTINGS if b else SETTINGS[:2])]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda c: case(*c), cases))
    tally = {}
    for (suite, _, env), (r, doc, fixed) in zip(cases, done):
        name = "[%s: %s]" % (suite, ", ".join("%s=%s" % kv for kv in sorted(env.items())) or "nothing set")
        for problem in (x for x in (r, doc) if isinstance(x, str)):
            mldtest.fail("%s %s" % (name, problem))
        if isinstance(r, str) or isinstance(doc, str):
            continue
        before, after, numba_threads, layer = r
        changed = before != after
        found = [f for f in doc.get("findings", []) if f["rule"] == "THR002"]
        predicted = doc.get("python", {}).get("torch_threads") or {}
        print("%s real: torch %d -> %d, NUMBA_NUM_THREADS=%d, layer %s; mldoctor: layer %s, torch %s, THR002 %s"
              % (name, before, after, numba_threads, layer, doc.get("imports", {}).get("numba_layer"),
                 predicted.get("count"), "yes" if found else "no"))
        ok = [mldtest.check_eq(doc.get("imports", {}).get("numba_layer"), layer, "%s numba's layer" % name),
              mldtest.check(predicted.get("count") == before, "%s torch's predicted count %r (rule %r, unknown %r) "
                            "is not the real %d" % (name, predicted.get("count"), predicted.get("rule"),
                                                    predicted.get("unknown"), before)),
              mldtest.check(bool(found) == changed, "%s torch's count %s for real (%d -> %d), THR002 %s: %s"
                            % (name, "changed" if changed else "did not change", before, after,
                               "reported" if found else "not reported",
                               found[0]["message"] if found else [f["rule"] for f in doc.get("findings", [])]))]
        if found and changed:
            ok.append(mldtest.check_in("from %d to %d" % (before, after), found[0].get("message", ""),
                                       "%s THR002's message" % name))
        numba_first = None
        if found:
            fixed, numba_first = fixed
        if found and changed and numba_first is not None:
            # THR002 says "in threads where torch already ran" exactly when
            # torch's own first use, after numba's, really re-applied torch's
            # count (torch 2.6, 2.14), and not when numba's count stuck (1.7).
            if isinstance(numba_first, str):
                mldtest.fail("%s %s" % (name, numba_first))
            else:
                reapplied = numba_first == before
                says = "in threads where torch already ran" in found[0].get("message", "")
                print("%s real, numba first: torch %d (%s)" % (name, numba_first, "torch re-applied its default"
                                                              if reapplied else "numba's count"))
                ok.append(mldtest.check(says == reapplied, "%s numba first, torch's first use gave %d (torch's own %d): "
                                        "THR002 %s the order matters: %s" % (name, numba_first, before,
                                                                            "says" if says else "does not say",
                                                                            found[0].get("message"))))
        if fixed:
            settings, fr = fixed
            if isinstance(fr, str):
                mldtest.fail("%s with %s: %s" % (name, " ".join(settings), fr))
            else:
                print("%s real with %s: torch %d -> %d" % (name, " ".join(settings), fr[0], fr[1]))
                ok.append(mldtest.check(fr[0] == fr[1], "%s THR002's fix %s does not keep torch's count (%d -> %d)"
                                        % (name, settings, fr[0], fr[1])))
        # The real first parallel call loaded its layer: nothing may say it fails.
        ld005 = [f["message"] for f in doc.get("findings", []) if f["rule"] == "LD005"
                 and "first parallel call" in f.get("message", "")]
        ok.append(mldtest.check(not ld005, "%s the real numba loaded its %s layer, yet: %s" % (name, layer, ld005)))
        t = tally.setdefault(suite, [0, 0, 0])
        t[0] += all(ok)
        t[1] += 1
        t[2] += changed
    for suite, (good, n, changed) in tally.items():
        print("%s: %d/%d cases agree (the real count changed in %d)" % (suite, good, n, changed))
    mldtest.finish("roots-seed003-numba-torch")


main()

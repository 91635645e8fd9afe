"""mldoctor: finds, explains and fixes the native-layer failures of Python
ML jobs. This package carries the mldoctor binary (in _bin/, with the shims
`mldoctor run` preloads) and a thin typed API over its --json documents:

    import mldoctor
    report = mldoctor.check()             # this interpreter's environment
    for f in report.findings: print(f.rule, f.subject, f.message)
    mldoctor.logs(open("train.log").read())
    mldoctor.explain("OMP001").title
    mldoctor.runtimes()                   # OpenMP/BLAS runtimes loaded here now
    mldoctor.guard()                      # warn of live hazards, now and later

runtimes() and guard() look at this process itself (ctypes, no binary).

`python -m mldoctor ARGS` and the `mldoctor` command run the binary itself."""
from __future__ import annotations

from ._api import (Evidence, Finding, Incident, LogInput, MldoctorError, Report, Rule, RuleFix, RuleSource, Signature,
                   StackWait, check, explain, logs, rules)
from ._binary import find_binary
from ._guard import Hazard, HazardWarning, guard
from ._runtimes import Runtime, runtimes

__all__ = ["Evidence", "Finding", "Hazard", "HazardWarning", "Incident", "LogInput", "MldoctorError", "Report", "Rule",
           "RuleFix", "RuleSource", "Runtime", "Signature", "StackWait", "check", "explain", "find_binary", "guard", "logs",
           "rules", "runtimes"]

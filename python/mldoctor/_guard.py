"""mldoctor.guard(): an opt-in watch over this process's thread-pool
runtimes, called at the top of a training script. It warns (HazardWarning,
a UserWarning) when a hazard is live now, and again when a later import of
an extension module brings one:

- OMP001: more than one OpenMP runtime loaded (two LLVM/Intel copies: the
  second to initialise aborts with "OMP: Error #15");
- THR003: OMP_NUM_THREADS is set and an OpenMP runtime's thread count
  (omp_get_max_threads() of that runtime, in this thread) is not it:
  a library changed it, or the variable was set after the runtime started.

Each hazard is warned once. The re-check runs after each import of a module
whose spec is an extension module (a sys.meta_path finder placed first,
which hands the import to the others and wraps their ExtensionFileLoader);
it only looks at objects it has not seen before, so it costs a
dl_iterate_phdr walk. A runtime loaded by ctypes outside an import is seen at
the next extension import or the next guard() call."""
from __future__ import annotations

import importlib.machinery
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

from . import _runtimes

__all__ = ["HazardWarning", "Hazard", "guard"]


class HazardWarning(UserWarning):
    """A native-layer hazard live in this process (mldoctor.guard())."""


@dataclass(frozen=True)
class Hazard:
    """One hazard guard() found: the rule, the message warned, the fix."""
    rule: str
    message: str
    fix: str
    key: Tuple[str, ...] = ()

    def text(self) -> str:
        return "mldoctor %s: %s\n  fix: %s\n  (mldoctor explain %s)" % (self.rule, self.message, self.fix, self.rule)


# Used when the binary cannot be asked (mldoctor explain RULE is the source).
_FALLBACK_FIX = {
    "OMP001": "Install the packages from one source that links a single OpenMP runtime, or size their pools "
              "together (OMP_NUM_THREADS reaches every copy). Do not set KMP_DUPLICATE_LIB_OK=TRUE, which hides "
              "the clash.",
    "THR003": "Give every library the same count before the process starts (OMP_NUM_THREADS, MKL_NUM_THREADS, "
              "OPENBLAS_NUM_THREADS, NUMBA_NUM_THREADS), or set it again after the library that changes it has run.",
}
_fixes: Dict[str, str] = {}


def _fix(rule: str) -> str:
    if rule not in _fixes:
        text = ""
        try:
            from ._api import explain
            text = " ".join(explain(rule).fix.text.split())
        except Exception:
            pass
        _fixes[rule] = text or _FALLBACK_FIX.get(rule, "")
    return _fixes[rule]


def _who(r: _runtimes.Runtime) -> str:
    return "needed by %s" % r.loaded_by if r.loaded_by != "dlopen" else "dlopen()ed"


def _omp_num_threads() -> Optional[int]:
    v = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(v) if v.isdigit() and int(v) > 0 else None


def hazards() -> List[Hazard]:
    """The hazards live in this process now (the check guard() repeats)."""
    out: List[Hazard] = []
    found = _runtimes.classified()
    omp = [(o, k) for o, k in found if k.kind in _runtimes.OPENMP_KINDS]
    wanted = _omp_num_threads()
    if len(omp) < 2 and wanted is None:
        return out  # the common case: no need to read DT_NEEDED or ask anything
    rts = [r for r in _runtimes.runtimes() if r.is_openmp]
    if len(rts) >= 2:
        kmp = [r for r in rts if r.kind in _runtimes.KMP_KINDS]
        msg = "%d OpenMP runtimes in this process: %s. Each keeps its own thread pool and thread count" % (
            len(rts), "; ".join("%s (%s)" % (r.describe(), _who(r)) for r in rts))
        if len(kmp) >= 2:
            ok = os.environ.get("KMP_DUPLICATE_LIB_OK")
            msg += (". %d are LLVM/Intel copies: the second to initialise aborts the process with "
                    "\"OMP: Error #15\" unless KMP_DUPLICATE_LIB_OK is set" % len(kmp))
            if _runtimes._truthy(ok):
                msg += " (it is set here, KMP_DUPLICATE_LIB_OK=%s, which hides the clash: ENV003)" % ok
        out.append(Hazard("OMP001", msg, _fix("OMP001"), ("OMP001",) + tuple(sorted(r.path for r in rts))))
    if wanted is not None:
        for r in rts:
            if r.num_threads is not None and r.num_threads != wanted:
                msg = ("OMP_NUM_THREADS=%s but %s (%s) runs %d threads (omp_get_max_threads() in this thread): "
                       "a library changed its count, or the variable was set after the runtime started"
                       % (os.environ.get("OMP_NUM_THREADS"), r.describe(), _who(r), r.num_threads))
                out.append(Hazard("THR003", msg, _fix("THR003"), ("THR003", r.path, str(wanted), str(r.num_threads))))
    return out


# ---------------------------------------------------------------- the watch

_warned: Set[Tuple[str, ...]] = set()
_check_lock = threading.Lock()


def _stacklevel() -> int:
    """Points the warning at the first frame outside importlib and mldoctor.
    warnings.warn itself skips importlib's _bootstrap frames when it counts
    a stacklevel above 1, so they are not counted here."""
    here = os.path.dirname(os.path.abspath(__file__))
    f, level = sys._getframe(1), 1
    while f is not None:
        name = f.f_code.co_filename
        internal = "importlib" in name and "_bootstrap" in name
        if not (internal or name.startswith(here) or "importlib" in name.split(os.sep)):
            return level
        f = f.f_back
        if not internal:
            level += 1
    return 1


def _check() -> List[Hazard]:
    if not _check_lock.acquire(blocking=False):
        return []  # another thread is checking (or this one, re-entered)
    try:
        try:
            found = hazards()
        except Exception:
            return []  # a diagnostic must never break the import it watches
        new = [h for h in found if h.key not in _warned]
        for h in new:
            _warned.add(h.key)
            warnings.warn(h.text(), HazardWarning, stacklevel=_stacklevel())
        return found
    finally:
        _check_lock.release()


class _CheckingExtensionLoader(importlib.machinery.ExtensionFileLoader):
    """The ExtensionFileLoader it replaces, checking after the module runs."""

    def exec_module(self, module) -> None:
        try:
            super().exec_module(module)
        finally:
            _check()


class _Finder:
    """First in sys.meta_path: asks the finders after it, in order, and
    swaps an extension module's loader for the checking one."""

    def __init__(self) -> None:
        self._busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    return None  # a legacy finder: let the import system go on as without us
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.on = False
        if spec is not None and type(spec.loader) is importlib.machinery.ExtensionFileLoader:
            spec.loader = _CheckingExtensionLoader(spec.loader.name, spec.loader.path)
        return spec

    def invalidate_caches(self) -> None:
        pass


_finder: Optional[_Finder] = None


def guard(watch_imports: bool = True) -> List[Hazard]:
    """Warns (HazardWarning) of every hazard live in this process that was
    not warned before, and returns all those live now. With watch_imports
    (the default) the check runs again after each import of an extension
    module, for the rest of the process. Calling it again re-checks."""
    global _finder
    if watch_imports and _finder is None:
        _finder = _Finder()
        sys.meta_path.insert(0, _finder)
    return _check()

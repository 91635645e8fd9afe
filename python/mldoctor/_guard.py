"""mldoctor.guard(): an opt-in watch over this process's thread-pool
runtimes, called at the top of a training script. It warns (HazardWarning,
a UserWarning) when a hazard is live now, and again when a later import of
an extension module brings one:

- OMP001: more than one OpenMP runtime loaded (two LLVM/Intel copies: the
  second to initialise aborts with "OMP: Error #15");
- THR003: a library changed an OpenMP runtime's thread count
  (omp_get_max_threads() of that runtime, in the thread that ran it): an
  extension module's import, or numba's threading layer launching its pool
  (seed 003: numba's omp layer calls omp_set_num_threads and torch's count
  on the same libgomp becomes numba's), seen across the event itself, so a
  count the user sets (torch.set_num_threads) is never mistaken for one;
  and, when OMP_NUM_THREADS is set, a count that is not it: every
  runtime's at a guard() call, and a runtime's when it first appears after
  an import (later, a count that differs is most often the user's own).

Each hazard is warned once. The re-check runs after each import of a module
whose spec is an extension module (a sys.meta_path finder placed first,
which hands the import to the others and gives their ExtensionFileLoader a
checking subclass), and around numba's private
numba.np.ufunc.parallel._launch_threads, which guard() wraps when numba is
imported (the wrapper calls it unchanged; it is the one thing patched). A
runtime loaded by ctypes outside an import is seen at the next extension
import or the next guard() call; a count changed by any other call, at
the next guard() call only when OMP_NUM_THREADS says what it should be
(`mldoctor run` sees every such call as it happens).

Nothing here runs Python under the loader's lock (see _loaded.py), holds a
lock of ours while it calls into other code, or waits for the process's
own locks; a check that finds this thread already checking returns at
once."""
from __future__ import annotations

import functools
import importlib.machinery
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

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
        try:  # bounded: this runs inside the user's import
            from ._api import Rule, run_json
            doc, _ = run_json(["explain", "--json", "--", rule], timeout=10)
            text = " ".join(Rule.from_json(doc).fix.text.split())
        except Exception:
            pass
        _fixes[rule] = text or _FALLBACK_FIX.get(rule, "")
    return _fixes[rule]


def _who(r: _runtimes.Runtime) -> str:
    return "needed by %s" % r.loaded_by if r.loaded_by != "dlopen" else "dlopen()ed"


def _omp_num_threads() -> Optional[int]:
    v = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(v) if v.isdigit() and int(v) > 0 else None


Counts = Dict[Tuple[str, int], Tuple[_runtimes._Loaded, str, Optional[int]]]


def _users(o: _runtimes._Loaded) -> str:
    """The loaded objects that need runtime o, by file name (at most four,
    torch's first), and whether torch's intra-op pool is one of its users."""
    try:
        names = [os.path.basename(n) for n in _runtimes.needed_by(o)]
    except Exception:
        return ""
    if not names:
        return ""
    names.sort(key=lambda n: not n.startswith("libtorch_cpu"))
    more = " and %d more" % (len(names) - 4) if len(names) > 4 else ""
    torch = " (torch's intra-op pool runs on it: %s needs it)" % names[0] if names[0].startswith("libtorch_cpu") else ""
    return "%s; the objects that need it: %s%s" % (torch, ", ".join(names[:4]), more)


def _changed(event: str, before: Counts, after: Counts) -> List[Hazard]:
    out = []
    for key, (o, kind, was) in before.items():
        now = after.get(key)
        if now is None or was is None or now[2] is None or now[2] == was:
            continue
        msg = ("%s changed the thread count of %s %s from %d to %d (omp_get_max_threads() in this thread, before "
               "and after): every library on that runtime now runs %d threads here%s"
               % (event, _runtimes.KIND_NAMES.get(kind, kind), o.path or o.name, was, now[2], now[2], _users(o)))
        out.append(Hazard("THR003", msg, _fix("THR003"), ("THR003", o.path or o.name, str(was), str(now[2]))))
    return out


_seen: Set[Tuple[str, int]] = set()  # the OpenMP runtimes checked against OMP_NUM_THREADS already


def hazards(event: Optional[str] = None, before: Optional[Counts] = None, explicit: bool = True) -> List[Hazard]:
    """The hazards live in this process now (the check guard() repeats);
    with an event and the counts taken before it, also the counts it
    changed. OMP_NUM_THREADS is compared with every runtime's count when
    asked explicitly (guard()), and otherwise only with a runtime seen for
    the first time: later, a count that differs from the variable is most
    often the user's own torch.set_num_threads(), not a hazard."""
    out: List[Hazard] = []
    found = _runtimes.classified()
    omp = [(o, k) for o, k in found if k.kind in _runtimes.OPENMP_KINDS]
    wanted = _omp_num_threads()
    new = [(o, k) for o, k in omp if (o.name, o.base) not in _seen]
    _seen.update((o.name, o.base) for o, _k in omp)
    if len(omp) < 2 and not before and (wanted is None or not (explicit or new)):
        return out  # the common case: no need to read DT_NEEDED or ask anything
    if len(omp) >= 2:
        rts = [r for r in _runtimes.runtimes() if r.is_openmp]
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
    counts = _runtimes.openmp_counts(walk=False)
    if before and event:
        out += _changed(event, before, counts)
    if wanted is not None:
        compare = set(counts) if explicit else {(o.name, o.base) for o, _k in new}
        for key, (o, kind, n) in counts.items():
            if key in compare and n is not None and n != wanted:
                path = o.path or o.name
                msg = ("OMP_NUM_THREADS=%s but %s %s runs %d threads (omp_get_max_threads() in this thread): "
                       "a library changed its count, or the variable was set after the runtime started%s"
                       % (os.environ.get("OMP_NUM_THREADS"), _runtimes.KIND_NAMES.get(kind, kind), path, n, _users(o)))
                out.append(Hazard("THR003", msg, _fix("THR003"), ("THR003", path, str(wanted), str(n))))
    return out


# ---------------------------------------------------------------- the watch

_warned: Set[Tuple[str, ...]] = set()
_warned_lock = threading.Lock()  # held for set operations only, never across a call out
_busy = threading.local()


def _stacklevel(also: Sequence[str] = ()) -> int:
    """Points the warning at the first frame outside importlib, mldoctor and
    the directories `also` (numba's package, for its pool's launch).
    warnings.warn itself skips importlib's _bootstrap frames when it counts
    a stacklevel above 1, so they are not counted here."""
    here = (os.path.dirname(os.path.abspath(__file__)),) + tuple(os.path.join(d, "") for d in also)
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


def _counts_before(walk: bool = False) -> Counts:
    """The OpenMP runtimes' counts in this thread before an event; nothing
    while this thread is already checking."""
    if getattr(_busy, "on", False):
        return {}
    _busy.on = True
    try:
        return _runtimes.openmp_counts(walk=walk)
    except Exception:
        return {}
    finally:
        _busy.on = False


def _check(event: Optional[str] = None, before: Optional[Counts] = None, internal: Sequence[str] = (),
           explicit: bool = False) -> List[Hazard]:
    if getattr(_busy, "on", False):
        return []  # this thread is checking already (an import made by the check itself)
    _busy.on = True
    try:
        found = hazards(event, before, explicit)
    except Exception:
        return []  # a diagnostic must never break the import it watches
    finally:
        _busy.on = False
    new = []
    with _warned_lock:
        for h in found:  # one warning per key: a change seen both ways is one hazard
            if h.key not in _warned:
                _warned.add(h.key)
                new.append(h)
    for h in new:
        warnings.warn(h.text(), HazardWarning, stacklevel=_stacklevel(internal))
    return found


_nesting = threading.local()


def _checking(loader_class: type, after) -> type:
    """A subclass of loader_class whose exec_module calls after(module,
    before) once the module has run, `before` being the counts taken first.
    An extension module imported while another one's runs (its init imports
    it) is checked with the outer one, once."""

    class Checking(loader_class):  # type: ignore[valid-type, misc]
        def exec_module(self, module) -> None:
            outer = after is not _after_extension or getattr(_nesting, "depth", 0) == 0
            before = _counts_before() if outer else {}
            _nesting.depth = getattr(_nesting, "depth", 0) + 1
            try:
                super().exec_module(module)
            finally:
                _nesting.depth -= 1
                if outer:
                    after(module, before)

    Checking.__name__ = Checking.__qualname__ = "Checking" + loader_class.__name__
    return Checking


def _after_extension(module, before: Counts) -> None:
    _check("importing %s" % getattr(module, "__name__", "an extension module"), before)


NUMBA_PARALLEL = "numba.np.ufunc.parallel"


def _wrap_numba(module) -> None:
    """numba's _launch_threads, checked around its first, launching call."""
    launch = getattr(module, "_launch_threads", None)
    if launch is None or getattr(launch, "_mldoctor_checked", False):
        return

    @functools.wraps(launch)
    def _launch_threads(*args, **kwargs):
        if getattr(module, "_is_initialized", False):
            return launch(*args, **kwargs)
        before = _counts_before(walk=True)
        try:
            return launch(*args, **kwargs)
        finally:
            layer = getattr(module, "_threading_layer", None)
            package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(module.__file__))))
            _check("numba's threading layer launch (%s, %s._launch_threads)" % (
                "layer %s" % layer if isinstance(layer, str) else "layer unknown", NUMBA_PARALLEL), before,
                internal=(package,))

    _launch_threads._mldoctor_checked = True  # type: ignore[attr-defined]
    module._launch_threads = _launch_threads


def _after_numba(module, before: Counts) -> None:
    _wrap_numba(module)


_loader_classes: Dict[Tuple[type, bool], type] = {}


def _hooked(loader, numba: bool):
    """A copy of loader whose class is the checking subclass of its own."""
    cls = type(loader)
    key = (cls, numba)
    if key not in _loader_classes:
        _loader_classes[key] = _checking(cls, _after_numba if numba else _after_extension)
    hooked = object.__new__(_loader_classes[key])
    hooked.__dict__.update(loader.__dict__)
    return hooked


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
        if spec is None or spec.loader is None:
            return spec
        if type(spec.loader) is importlib.machinery.ExtensionFileLoader:
            spec.loader = _hooked(spec.loader, numba=False)
        elif fullname == NUMBA_PARALLEL and hasattr(spec.loader, "exec_module") and hasattr(spec.loader, "__dict__"):
            spec.loader = _hooked(spec.loader, numba=True)
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
    if watch_imports and NUMBA_PARALLEL in sys.modules:
        _wrap_numba(sys.modules[NUMBA_PARALLEL])
    return _check(explicit=True)

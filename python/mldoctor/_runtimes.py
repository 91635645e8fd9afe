"""mldoctor.runtimes(): the OpenMP and BLAS runtimes loaded in *this*
process now, each recognised by the symbols it defines itself (as the
binary's audit module does, src/trace/audit.c runtime_of), never by its file
name, so renamed vendored copies (torch's libgomp-a34b3233.so.1,
scikit-learn's libgomp) count:

- the loaded objects come from /proc/self/maps and the loader's own
  RTLD_NOLOAD handles (_loaded.py: never dl_iterate_phdr, whose callback
  would run Python under the loader's lock), in address order;
- an object "defines" a symbol when dlsym() on its own RTLD_NOLOAD handle
  returns an address inside one of its own PT_LOAD segments (dlsym on a
  handle also searches the object's dependencies, which is not defining);
- LLVM's libomp and Intel's libiomp5 (one lineage: __kmpc_fork_call) are
  told apart by the version strings they carry ("@(#) LLVM OMP ...",
  "@(#) Intel(R) OMP ..."), GNU libgomp by GOMP_parallel;
- DT_NEEDED, DT_SONAME and the OMP_x version definitions are read from each
  object's file with struct (nothing of the process's memory is parsed).

Thread counts are the runtime's own answer, called through its own handle:
omp_get_max_threads() (per calling thread, as OpenMP defines it),
mkl_get_max_threads(), openblas_get_num_threads(), ... An LLVM/Intel
runtime that is not yet initialised is asked only when it is the only one of
its lineage (or KMP_DUPLICATE_LIB_OK is set): asking initialises it, and a
second copy initialising aborts the process with OMP: Error #15."""
from __future__ import annotations

import ctypes
import os
import re
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ._elf import Elf
from ._files import read_regular
from ._loaded import RTLD_NOLOAD, RTLD_NOW, DlInfo, Loaded, dl, loaded_objects

__all__ = ["Runtime", "runtimes", "OPENMP_KINDS", "KMP_KINDS"]

OPENMP_KINDS = ("gnu-openmp", "llvm-openmp", "intel-openmp")
KMP_KINDS = ("llvm-openmp", "intel-openmp")

KIND_NAMES = {"gnu-openmp": "GNU libgomp", "llvm-openmp": "LLVM libomp", "intel-openmp": "Intel libiomp5",
              "mkl": "MKL", "openblas": "OpenBLAS", "blis": "BLIS", "flexiblas": "FlexiBLAS"}


@dataclass(frozen=True)
class Runtime:
    """One thread-pool runtime loaded in this process.

    path: the object's real path (what threadpoolctl calls `filepath`);
    loaded_as: the name the loader recorded (dl_iterate_phdr's dlpi_name);
    kind: gnu-openmp, llvm-openmp, intel-openmp, mkl, openblas, blis, flexiblas;
    version: what the runtime says of itself (openblas_get_config,
      MKL_Get_Version_String, bli_info_get_version_str; LLVM/Intel OpenMP's
      "OMP version" string, which LLVM builds leave at 5.0.20140926), else None;
    interface: the highest OpenMP interface the object defines (OMP_5.1),
      OpenMP runtimes only;
    num_threads: the runtime's current count for the calling thread, None
      when it could not be asked safely (see the module's notes);
    loaded_by: a loaded object whose DT_NEEDED brings it in (the first of
      needed_by; the loader's own order cannot be read safely, see
      _loaded.py), or "dlopen" when none needs it (ctypes.CDLL, an
      extension's own dlopen);
    needed_by: every loaded object whose DT_NEEDED resolves to it, in
      address order;
    soname: its DT_SONAME (a renamed copy keeps the original's)."""
    path: str
    loaded_as: str
    kind: str
    version: Optional[str]
    interface: Optional[str]
    num_threads: Optional[int]
    loaded_by: str
    needed_by: Tuple[str, ...] = ()
    soname: Optional[str] = None

    @property
    def is_openmp(self) -> bool:
        return self.kind in OPENMP_KINDS

    def describe(self) -> str:
        return "%s %s" % (KIND_NAMES.get(self.kind, self.kind), self.path)


# ---------------------------------------------------------------- the loader

_Loaded = Loaded
_Elf = Elf


class _Handle:
    """dlopen(name, RTLD_NOLOAD) of an object already loaded, closed after use."""

    def __init__(self, obj: _Loaded) -> None:
        self.obj = obj
        self.h = dl().dlopen(obj.name.encode("utf-8", "surrogateescape"), RTLD_NOW | RTLD_NOLOAD)

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc) -> None:
        if self.h:
            dl().dlclose(self.h)
            self.h = None

    def own(self, symbol: str) -> Optional[int]:
        """The address of `symbol` when this object itself defines it."""
        if not self.h:
            return None
        addr = dl().dlsym(self.h, symbol.encode())
        if not addr:
            return None
        if self.obj.holds(addr):
            return addr
        info = DlInfo()  # a symbol outside the segments (an ifunc's target is inside too): ask the loader
        if dl().dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            if info.dli_fname.decode("utf-8", "surrogateescape") == self.obj.name:
                return addr
        return None

    def call(self, symbol: str, restype=ctypes.c_int, argtypes: Sequence = (), args: Sequence = ()):
        addr = self.own(symbol)
        if addr is None:
            return None
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(addr)
        return fn(*args)


def _interface(verdefs: Sequence[str]) -> Optional[str]:
    best, best_key = None, None
    for v in verdefs:
        if not v.startswith("OMP_"):
            continue
        key = tuple(int(p) if p.isdigit() else 0 for p in v[4:].split("."))
        if best_key is None or key > best_key:
            best, best_key = v, key
    return best


# ---------------------------------------------------------------- recognising

_OPENBLAS_GET = [p + "openblas_get_num_threads" + s for p in ("", "scipy_") for s in ("", "64_", "_64")]
_KMP_VERSION = re.compile(rb"@\(#\) (LLVM|Intel\(R\)) OMP version: ([^\x00\s]+)")


def _kind(h: _Handle) -> Optional[str]:
    """audit.c's runtime_of, by the object's own definitions."""
    if h.own("omp_get_max_threads") is not None:
        if h.own("__kmpc_fork_call") is not None:
            return "kmp"  # LLVM or Intel: decided from the file
        if h.own("GOMP_parallel") is not None or h.own("GOMP_parallel_start") is not None:
            return "gnu-openmp"
    if h.own("MKL_Get_Max_Threads") is not None or h.own("mkl_get_max_threads") is not None:
        return "mkl"
    if any(h.own(s) is not None for s in _OPENBLAS_GET):
        return "openblas"
    if h.own("bli_thread_get_num_threads") is not None:
        return "blis"
    if h.own("flexiblas_get_num_threads") is not None:
        return "flexiblas"
    return None


@dataclass
class _Known:
    kind: Optional[str]
    elf: Optional[_Elf] = None
    version: Optional[str] = None


_cache: Dict[Tuple[str, int], _Known] = {}
_elf_cache: Dict[Tuple[str, int], _Elf] = {}
_lock = threading.RLock()


def _elf(o: _Loaded) -> _Elf:
    key = (o.name, o.base)
    e = _elf_cache.get(key)
    if e is None:
        e = _elf_cache[key] = _Elf(o.path or o.name)
    return e


def _known(o: _Loaded) -> _Known:
    key = (o.name, o.base)
    k = _cache.get(key)
    if k is not None:
        return k
    with _Handle(o) as h:
        kind = _kind(h)
    k = _Known(kind)
    if kind is not None:
        k.elf = _elf(o)
        if kind == "kmp":
            m = _KMP_VERSION.search(k.elf.rodata())
            if m:
                kind = "intel-openmp" if m.group(1).startswith(b"Intel") else "llvm-openmp"
                k.version = m.group(2).decode("ascii", "replace")
            else:  # no version strings: the file name it was built as (KMP_LIBRARY_FILE), as the binary does
                kind = "intel-openmp" if b"\0libiomp5" in k.elf.rodata() else "llvm-openmp"
            k.kind = kind
    _cache[key] = k
    return k


_last_classified: List[Tuple[_Loaded, _Known]] = []
_last_objects: List[_Loaded] = []


def classified() -> List[Tuple[_Loaded, _Known]]:
    """(object, what it is) for every loaded runtime, in address order.
    Each object is looked at once: the cheap check guard() repeats."""
    global _last_classified, _last_objects
    with _lock:
        objs = loaded_objects()
        if len(objs) != len(_last_objects) or any(a is not b for a, b in zip(objs, _last_objects)):
            _last_classified = [(o, k) for o in objs for k in (_known(o),) if k.kind is not None]
            _last_objects = objs
        return list(_last_classified)


# ---------------------------------------------------------------- asking

def _truthy(v: Optional[str]) -> bool:
    return bool(v) and v.strip().lower() in ("1", "true", "yes", "on", ".true.", ".t.", "t", "y")


def _kmp_registered(rts: Sequence[_Loaded]) -> Optional[_Loaded]:
    """The LLVM/Intel runtime that registered itself as initialised
    (__KMP_REGISTERED_LIB_<pid>_<uid>: in /dev/shm or the environment; its
    value is "<flag address>-<value>-<library file>"). /dev/shm is world-
    writable: the file is read only when it is a regular file (a FIFO
    planted under that name would block the open), and the flag only
    through a handle that pins the runtime it lies in."""
    pid, uid = os.getpid(), os.getuid()
    values = []
    for name in ("__KMP_REGISTERED_LIB_%d_%d" % (pid, uid), "__KMP_REGISTERED_LIB_%d" % pid):
        data = read_regular("/dev/shm/" + name, 512)
        if data is not None:
            values.append(data.split(b"\0", 1)[0].decode("ascii", "replace"))
        if os.environ.get(name):
            values.append(os.environ[name])
    for v in values:
        parts = v.split("-", 2)
        try:
            addr, value = int(parts[0], 16), int(parts[1], 16)
        except (ValueError, IndexError):
            continue
        for o in rts:
            if not o.holds(addr):
                continue
            with _Handle(o) as h:
                # a stale registration of an earlier process with this pid fails the flag's value, as in the runtime
                if h.h and ctypes.c_ulong.from_address(addr).value == value:
                    return o
    return None


# omp_get_max_threads of each OpenMP runtime asked before, through a handle
# kept open: guard() asks before and after every extension import, and
# closing a handle the loader counted as the only direct one runs its whole
# unload pass over the namespace (0.3 ms with 600 objects). Keeping a
# runtime pinned is what the objects that need it do anyway; LLVM's libomp
# is NODELETE in any case.
_omp_askers: Dict[Tuple[str, int], Optional[Callable[[], int]]] = {}


def _omp_max_threads(o: _Loaded) -> Optional[int]:
    key = (o.name, o.base)
    if key not in _omp_askers:
        h = _Handle(o)
        addr = h.own("omp_get_max_threads")
        if addr is None:
            h.__exit__()
        _omp_askers[key] = ctypes.CFUNCTYPE(ctypes.c_int)(addr) if addr is not None else None
    ask = _omp_askers[key]
    return ask() if ask is not None else None


def _num_threads(o: _Loaded, kind: str, may_ask: bool) -> Optional[int]:
    if not may_ask:
        return None
    if kind in OPENMP_KINDS:
        return _omp_max_threads(o)
    with _Handle(o) as h:
        if kind == "mkl":
            n = h.call("MKL_Get_Max_Threads")
            return n if n is not None else h.call("mkl_get_max_threads")
        if kind == "openblas":
            for s in _OPENBLAS_GET:
                n = h.call(s)
                if n is not None:
                    return n
            return None
        if kind == "blis":
            n = h.call("bli_thread_get_num_threads")
            return 1 if n == -1 else n  # unset: BLIS runs single-threaded (threadpoolctl says 1 too)
        if kind == "flexiblas":
            return h.call("flexiblas_get_num_threads")
    return None


def _blas_version(o: _Loaded, kind: str) -> Optional[str]:
    with _Handle(o) as h:
        if kind == "openblas":
            for p in ("", "scipy_"):
                for s in ("", "64_", "_64"):
                    cfg = h.call(p + "openblas_get_config" + s, restype=ctypes.c_char_p)
                    if cfg:
                        t = cfg.decode("utf-8", "replace").split()
                        return t[1] if len(t) > 1 and t[0] == "OpenBLAS" else None
            return None
        if kind == "mkl":
            buf = ctypes.create_string_buffer(200)
            for s in ("MKL_Get_Version_String", "mkl_get_version_string"):
                if h.own(s) is not None:
                    h.call(s, restype=None, argtypes=(ctypes.c_char_p, ctypes.c_int), args=(buf, 200))
                    m = re.search(r"Version ([^ ]+) ", buf.value.decode("utf-8", "replace"))
                    return m.group(1) if m else None
            return None
        if kind == "blis":
            v = h.call("bli_info_get_version_str", restype=ctypes.c_char_p)
            return v.decode("utf-8", "replace") if v else None
        if kind == "flexiblas":
            parts = [ctypes.c_int(), ctypes.c_int(), ctypes.c_int()]
            r = h.call("flexiblas_get_version", argtypes=(ctypes.POINTER(ctypes.c_int),) * 3,
                       args=[ctypes.byref(p) for p in parts])
            return None if r is None else "%d.%d.%d" % tuple(p.value for p in parts)
    return None


def ask_plan(rts: Sequence[Tuple[_Loaded, _Known]]) -> Callable[[_Loaded, str], bool]:
    """Which runtimes may be called into without risking OMP: Error #15."""
    kmp = [o for o, k in rts if k.kind in KMP_KINDS]
    registered = _kmp_registered(kmp) if kmp else None
    duplicates_ok = _truthy(os.environ.get("KMP_DUPLICATE_LIB_OK"))

    def may_ask(o: _Loaded, kind: str) -> bool:
        if kind not in KMP_KINDS or duplicates_ok or o is registered:
            return True
        return registered is None and len(kmp) == 1

    return may_ask


def openmp_counts(walk: bool = True) -> Dict[Tuple[str, int], Tuple[_Loaded, str, Optional[int]]]:
    """(l_name, l_addr) -> (object, kind, omp_get_max_threads() in this
    thread, None when it may not be asked) for each OpenMP runtime: of the
    objects loaded now (walk), or of those the last walk found (no read of
    /proc/self/maps: what guard() takes before an import, to compare after)."""
    with _lock:
        found = classified() if walk else list(_last_classified)
        omp = [(o, k) for o, k in found if k.kind in OPENMP_KINDS]
        if not omp:
            return {}
        may_ask = ask_plan(omp)
        out = {}
        for o, k in omp:
            kind = k.kind or ""
            try:
                n = _num_threads(o, kind, may_ask(o, kind))
            except Exception:
                n = None
            out[(o.name, o.base)] = (o, kind, n)
        return out


def _needers(objs: Sequence[_Loaded]) -> Dict[str, List[str]]:
    """l_name of a loaded object -> the loaded objects whose DT_NEEDED
    resolves to it. ld.so resolves a DT_NEEDED name to the first object in
    its link map known by that name: the name it was loaded as (the last
    component of l_name for an object found by search) or its soname. The
    link map's order is not known here (_loaded.py), so an object loaded
    as that very name is preferred to one that only carries it as its soname
    (a renamed copy dlopen()ed by path keeps the original's soname)."""
    as_loaded: Dict[str, str] = {}
    by_soname: Dict[str, str] = {}
    for o in objs:
        as_loaded.setdefault(os.path.basename(o.name), o.name)
        soname = _elf(o).soname
        if soname:
            by_soname.setdefault(soname, o.name)
    out: Dict[str, List[str]] = {}
    for o in objs:
        for n in _elf(o).needed:
            target = n if "/" in n else as_loaded.get(n) or by_soname.get(n)
            if target and target != o.name:
                out.setdefault(target, []).append(o.name)
    return out


def needed_by(o: _Loaded) -> List[str]:
    """l_name of each loaded object whose DT_NEEDED resolves to o."""
    with _lock:
        return list(_needers(loaded_objects()).get(o.name, ()))


def runtimes() -> List[Runtime]:
    """The OpenMP and BLAS runtimes loaded in this process now, in address order."""
    with _lock:
        objs = loaded_objects()
        rts = [(o, k) for o in objs for k in (_known(o),) if k.kind is not None]
        may_ask = ask_plan(rts)
        needers = _needers(objs)
        out = []
        for o, k in rts:
            kind = k.kind or ""
            by = tuple(needers.get(o.name, ()))
            try:
                n = _num_threads(o, kind, may_ask(o, kind))
            except Exception:
                n = None
            version = k.version if kind in OPENMP_KINDS else _blas_version(o, kind)
            out.append(Runtime(path=o.path or os.path.realpath(o.name), loaded_as=o.name, kind=kind, version=version,
                               interface=_interface(k.elf.verdefs) if k.elf and kind in OPENMP_KINDS else None,
                               num_threads=n, loaded_by=by[0] if by else "dlopen", needed_by=by,
                               soname=k.elf.soname if k.elf else None))
        return out

"""The objects loaded in this process now, found without ever running Python
under the dynamic loader's lock.

dl_iterate_phdr with a ctypes callback deadlocks the process it runs in:
glibc holds its loader lock (_dl_load_write_lock) while it calls the
callback, the callback needs the GIL, and CPython calls dlopen() with the
GIL held whenever it imports an extension module (the lock order is GIL
first, loader lock second). Even a ctypes.PyDLL call that keeps the GIL is
not enough: the Python code of the callback gives the GIL away at the eval
loop's switch points. threadpoolctl hit the same (joblib/threadpoolctl#239)
and left dl_iterate_phdr on Linux.

So the walk starts from /proc/self/maps, which the kernel writes without
any of the loader's locks: each executable file mapping is a candidate (an
object's text). The loader is asked about each new candidate once, by
dladdr1(address, RTLD_DL_LINKMAP), which takes its lock in C with the GIL
released (ctypes releases it around every call of a CDLL function): the
link map of the object holding that address gives l_name (what
dl_iterate_phdr calls dlpi_name) and l_addr (the load bias), copied at
once. An executable mapping that belongs to no object (a libffi trampoline
page, a JIT's code file) is not an object here.

One window is left open, and said so: the link map is read after dladdr1
returns, so an object that another thread dlclose()s in those microseconds
is read from freed memory (the loader's malloc'd link map, which free()
does not unmap). Pinning it first with dlopen(RTLD_NOLOAD) would need its
name, read from the same link map.

The order is the address order of /proc/self/maps, not the link map's: the
link map can only be walked under the loader's lock (or racing dlclose)."""
from __future__ import annotations

import ctypes
import os
import re
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ._elf import Elf
from ._files import read_proc

RTLD_NOW = getattr(os, "RTLD_NOW", 2)
RTLD_NOLOAD = getattr(os, "RTLD_NOLOAD", 4)
RTLD_DL_LINKMAP = 2


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


class _LinkMap(ctypes.Structure):  # <link.h>'s public part of struct link_map
    _fields_ = [("l_addr", ctypes.c_size_t), ("l_name", ctypes.c_char_p), ("l_ld", ctypes.c_void_p),
                ("l_next", ctypes.c_void_p), ("l_prev", ctypes.c_void_p)]


_SIGNATURES = {
    "dlopen": ([ctypes.c_char_p, ctypes.c_int], ctypes.c_void_p),
    "dlclose": ([ctypes.c_void_p], ctypes.c_int),
    "dlsym": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
    "dladdr": ([ctypes.c_void_p, ctypes.POINTER(DlInfo)], ctypes.c_int),
    "dladdr1": ([ctypes.c_void_p, ctypes.POINTER(DlInfo), ctypes.c_void_p, ctypes.c_int], ctypes.c_int),
}


class _Dl:
    """The dl* functions as CDLL functions (called with the GIL released),
    from the program's global scope, or libdl.so.2 before glibc 2.34 moved
    them into libc."""

    def __init__(self) -> None:
        scopes = [ctypes.CDLL(None)]
        for name, (argtypes, restype) in _SIGNATURES.items():
            fn = None
            for scope in scopes:
                fn = getattr(scope, name, None)
                if fn is not None:
                    break
            if fn is None:
                scopes.append(ctypes.CDLL("libdl.so.2"))
                fn = getattr(scopes[-1], name)
            fn.argtypes, fn.restype = argtypes, restype
            setattr(self, name, fn)


_dl_instance: Optional[_Dl] = None


def dl() -> _Dl:
    global _dl_instance
    if _dl_instance is None:
        _dl_instance = _Dl()
    return _dl_instance


class Loaded:
    """One loaded object: name is its link map's l_name (the name the loader
    recorded, dlpi_name), base its l_addr, path the file as the kernel names
    its mapping; segments, the [start, end) of each PT_LOAD in memory, are
    read from the file when first asked for."""
    __slots__ = ("name", "base", "path", "_mapped", "_start", "_segments")

    def __init__(self, name: str, base: int, path: str, mapped: Optional["Mapped"] = None, start: int = 0,
                 segments: Optional[Tuple[Tuple[int, int], ...]] = None) -> None:
        self.name, self.base, self.path = name, base, path
        self._mapped, self._start, self._segments = mapped, start, segments

    @property
    def segments(self) -> Tuple[Tuple[int, int], ...]:
        if self._segments is None:
            self._segments = _segments(self._mapped, self._start, self.base) if self._mapped else ()
        return self._segments

    def holds(self, addr: int) -> bool:
        return any(s <= addr < e for s, e in self.segments)

    def __repr__(self) -> str:
        return "Loaded(%r, base=%#x)" % (self.name, self.base)


@dataclass
class Mapped:
    """One executable file mapping in /proc/self/maps (an object's text)."""
    path: str
    dev: str
    inode: int
    start: int
    end: int
    deleted: bool = False


_DELETED = " (deleted)"
# The executable file mappings: (address, end, device, inode, path). One
# regular expression over the whole text costs about 2 ms of CPU for the
# 3,000 lines of a process that imported torch, scipy, scikit-learn and
# OpenCV; a Python loop over the lines cost several times that.
_EXEC = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) ..x. [0-9a-f]+ (\S+) ([1-9][0-9]*) +(/[^\n]*)$", re.M)


def mapped_files(maps: bytes) -> List[Tuple[bytes, bytes, bytes, bytes, bytes]]:
    """The executable file mappings of a /proc/PID/maps text, in address
    order, as the raw fields (start, end, device, inode, path)."""
    return _EXEC.findall(maps)


def _mapped(fields: Tuple[bytes, bytes, bytes, bytes, bytes]) -> Mapped:
    lo, hi, dev, inode, path = fields
    name = path.decode("utf-8", "surrogateescape")
    deleted = name.endswith(_DELETED)
    return Mapped(name[:-len(_DELETED)] if deleted else name, dev.decode("ascii", "replace"), int(inode),
                  int(lo, 16), int(hi, 16), deleted)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _segments(m: Mapped, start: int, base: int) -> Tuple[Tuple[int, int], ...]:
    """Each PT_LOAD of the file at `base`, when the file on disk is the one
    mapped (same inode) and its first segment starts where the object does;
    else what is known mapped: from the object's start to its text's end (a
    deleted or replaced file)."""
    try:
        same = not m.deleted and os.stat(m.path).st_ino == m.inode
    except OSError:
        same = False
    if same:
        loads = Elf(m.path, dynamic=False).loads
        if loads and base + (loads[0][0] & ~(_PAGE - 1)) == start:
            return tuple((base + v, base + v + size) for v, size in loads)
    return ((start, m.end),)


def _link(m: Mapped) -> Optional[Tuple[int, Loaded]]:
    """(its link map's address, the object) whose text m is, or None."""
    info, lm = DlInfo(), ctypes.POINTER(_LinkMap)()
    if not dl().dladdr1(m.start, ctypes.byref(info), ctypes.byref(lm), RTLD_DL_LINKMAP) or not lm:
        return None
    link = lm.contents
    name, base = (link.l_name or b"").decode("utf-8", "surrogateescape"), link.l_addr or 0
    if not name:
        return None  # the program itself (dl_iterate_phdr's empty name)
    return ctypes.addressof(link), Loaded(name, base, m.path, m, info.dli_fbase or m.start)


_known: Dict[Tuple[bytes, bytes, bytes], Optional[Tuple[int, Loaded]]] = {}
_known_lock = threading.Lock()


def loaded_objects() -> List[Loaded]:
    """The objects of the main namespace, in address order (the program and
    the vDSO left out). Each object is asked about once; the walk itself is
    one read of /proc/self/maps."""
    maps = read_proc("/proc/self/maps") or b""
    with _known_lock:
        known = dict(_known)
    out: List[Loaded] = []
    seen = set()
    now: Dict[Tuple[bytes, bytes, bytes], Optional[Tuple[int, Loaded]]] = {}
    for fields in mapped_files(maps):
        key = (fields[0], fields[2], fields[3])
        if key in known:
            found = known[key]
        else:
            found = _link(_mapped(fields))
            if found is None:
                continue  # asked again at the next walk: it may be an object another thread is loading
        now[key] = found
        if found is not None and found[0] not in seen:  # an object with two executable segments is one object
            seen.add(found[0])
            out.append(found[1])
    with _known_lock:
        _known.clear()
        _known.update(now)
    return out

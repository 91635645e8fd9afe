"""What mldoctor's in-process code reads from a loaded object's file (never
from the process's memory): the PT_LOAD segments, DT_SONAME, DT_NEEDED, the
version definitions, and on demand .rodata's version strings. ELF64
little-endian (x86_64, aarch64); anything else reads as an empty object.
Files are opened through _files: a FIFO or device is never opened for
reading."""
from __future__ import annotations

import os
import struct
from typing import Dict, List, Optional, Tuple

from ._files import open_regular

_PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
PT_LOAD, PT_DYNAMIC = 1, 2


class Elf:
    """path's soname, DT_NEEDED, version definitions and PT_LOAD segments
    (p_vaddr, p_memsz), each empty when the file cannot be read as ELF64."""

    def __init__(self, path: str, dynamic: bool = True) -> None:
        self.path = path
        self.is_elf = False
        self.soname: Optional[str] = None
        self.needed: List[str] = []
        self.verdefs: List[str] = []
        self.loads: List[Tuple[int, int]] = []  # (p_vaddr, p_memsz), in program header order
        fd = open_regular(path)
        if fd is None:
            return
        try:
            with os.fdopen(fd, "rb") as f:
                self._read(f, dynamic)
        except (OSError, struct.error, ValueError, IndexError):
            pass

    def _read(self, f, dynamic: bool) -> None:
        eh = f.read(64)
        if len(eh) < 64 or eh[:4] != b"\x7fELF" or eh[4] != 2 or eh[5] != 1:  # ELF64 little-endian only
            return
        self.is_elf = True
        phoff, = struct.unpack_from("<Q", eh, 32)
        phentsize, phnum = struct.unpack_from("<HH", eh, 54)
        if phentsize < _PHDR.size:
            return
        f.seek(phoff)
        raw = f.read(phentsize * phnum)
        loads, dyn = [], None
        for i in range(phnum):
            p_type, _fl, off, vaddr, _pa, filesz, memsz, _al = _PHDR.unpack_from(raw, i * phentsize)
            if p_type == PT_LOAD:
                loads.append((vaddr, off, filesz))
                self.loads.append((vaddr, memsz))
            elif p_type == PT_DYNAMIC:
                dyn = (off, filesz)
        if dyn is None or not dynamic:
            return

        def offset(vaddr: int) -> int:
            for v, o, s in loads:
                if v <= vaddr < v + s:
                    return o + vaddr - v
            raise ValueError("address outside the file")

        f.seek(dyn[0])
        d = f.read(dyn[1])
        tags: Dict[int, int] = {}
        needed, soname = [], None
        for i in range(0, len(d) - 15, 16):
            tag, val = struct.unpack_from("<qQ", d, i)
            if tag == 0:
                break
            if tag == 1:
                needed.append(val)
            elif tag == 14:
                soname = val
            else:
                tags.setdefault(tag, val)
        if 5 not in tags:
            return
        strtab = offset(tags[5])

        def string(off: int) -> str:
            f.seek(strtab + off)
            chunk = f.read(256)
            while b"\0" not in chunk and len(chunk) < 4096:
                more = f.read(256)
                if not more:
                    break
                chunk += more
            return chunk.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")

        self.needed = [string(n) for n in needed]
        self.soname = string(soname) if soname is not None else None
        if 0x6FFFFFFC in tags:  # DT_VERDEF, DT_VERDEFNUM
            at = offset(tags[0x6FFFFFFC])
            for _ in range(min(tags.get(0x6FFFFFFD, 0), 4096)):
                f.seek(at)
                vd = f.read(20)
                _ver, _flags, _ndx, cnt, _hash, aux, nxt = struct.unpack("<HHHHIII", vd)
                if cnt:
                    f.seek(at + aux)
                    name, = struct.unpack("<I", f.read(4))
                    self.verdefs.append(string(name))
                if not nxt:
                    break
                at += nxt

    def rodata(self) -> bytes:
        """The .rodata section (the whole file's first 16 MiB without section headers)."""
        fd = open_regular(self.path)
        if fd is None:
            return b""
        try:
            with os.fdopen(fd, "rb") as f:
                eh = f.read(64)
                shoff, = struct.unpack_from("<Q", eh, 40)
                shentsize, shnum, shstrndx = struct.unpack_from("<HHH", eh, 58)
                if shoff and shnum and shstrndx < shnum:
                    f.seek(shoff)
                    sh = f.read(shentsize * shnum)

                    def section(i):
                        name, _t, _fl, _a, off, size = struct.unpack_from("<IIQQQQ", sh, i * shentsize)
                        return name, off, size

                    _n, stroff, strsize = section(shstrndx)
                    f.seek(stroff)
                    names = f.read(strsize)
                    for i in range(shnum):
                        name, off, size = section(i)
                        if names[name:names.find(b"\0", name)] == b".rodata":
                            f.seek(off)
                            return f.read(size)
                f.seek(0)
                return f.read(16 << 20)
        except (OSError, struct.error):
            return b""

"""Reading files inside the user's process without ever blocking it: a path
that names a FIFO, a socket or a device (anyone can put a FIFO in /dev/shm
under a predictable name) is refused before anything waits on it. Every
file the package reads in-process goes through here."""
from __future__ import annotations

import os
import stat
from typing import Optional

_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def open_regular(path: str) -> Optional[int]:
    """A descriptor of `path` when it is a regular file, else None. O_NONBLOCK
    makes opening a FIFO return at once (it would wait for a writer), and
    the fstat of the opened descriptor is what counts: the path may change
    between a stat and the open."""
    try:
        fd = os.open(path, _FLAGS)
    except (OSError, ValueError):
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_regular(path: str, limit: int = 1 << 20, chunk: int = 1 << 16) -> Optional[bytes]:
    """At most `limit` bytes of a regular file, None for anything else or an error."""
    fd = open_regular(path)
    if fd is None:
        return None
    try:
        chunks, size = [], 0
        while size < limit:
            b = os.read(fd, min(chunk, limit - size))
            if not b:
                break
            chunks.append(b)
            size += len(b)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_proc(path: str) -> Optional[bytes]:
    """A whole /proc file (regular files of size 0 that are generated on read):
    in large reads, each of which the kernel fills as far as it can."""
    return read_regular(path, 64 << 20, 1 << 20)

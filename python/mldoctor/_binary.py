"""Where the mldoctor binary is: the copy inside this installed package
(the wheel puts it and its shims in mldoctor/_bin/, where the binary's own
find_shim_dir looks: next to itself), else $MLDOCTOR, else `mldoctor` on
PATH. The launcher and the API share this, so both run the same binary.

A binary that cannot start (built for a newer glibc than this machine's,
another CPU) is said so with the loader's own message and what to do, never
taken for a run that found something: ld.so exits 1, mldoctor's findings
status. The wheel without a binary (py3-none-any, which pip picks where the
binary's wheel does not fit) says that it has none."""
from __future__ import annotations

import os
import platform
import re
import subprocess
from typing import List, Optional

PACKAGE_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "mldoctor")


def _is_elf(path: str) -> bool:
    # A console script named mldoctor on PATH is this package's own launcher
    # (a Python script): executing it from the launcher would loop.
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def candidates() -> List[str]:
    """The places looked at, in order (for error messages)."""
    out = [PACKAGE_BIN]
    env = os.environ.get("MLDOCTOR")
    if env:
        out.append(env)
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        out.append(os.path.join(d or ".", "mldoctor"))
    return out


def find_binary() -> Optional[str]:
    """The first executable ELF mldoctor among candidates(), or None."""
    for c in candidates():
        if os.path.isfile(c) and os.access(c, os.X_OK) and _is_elf(c):
            return c
    return None


_TODO = ("mldoctor.runtimes() and mldoctor.guard() work without it. To run the commands here, build mldoctor "
         "on this machine from its source (`make build`) and point MLDOCTOR at build/mldoctor")


def not_found_message() -> str:
    env = os.environ.get("MLDOCTOR")
    looked = [PACKAGE_BIN, "$MLDOCTOR (%s)" % (env if env else "unset"), "mldoctor on PATH"]
    text = "mldoctor: error: the mldoctor binary was not found (looked at %s)" % ", ".join(looked)
    if not os.path.isdir(os.path.dirname(PACKAGE_BIN)):
        text += (".\nThis installation is mldoctor's pure-Python wheel (py3-none-any): pip installs it where the "
                 "wheel with the binary does not fit this machine (%s). %s." % (_machine(), _TODO))
    return text


def _machine() -> str:
    libc = " ".join(platform.libc_ver()).strip() or "no glibc found"
    return "%s, %s" % (libc, platform.machine() or "unknown CPU")


# What ld.so prints when it cannot start a program (elf/dl-load.c,
# elf/dl-version.c, elf/rtld.c), and what execve's ENOEXEC reads as.
_LOADER_FAILURE = re.compile(r"error while loading shared libraries|: version `[^']*' not found|"
                             r"cannot open shared object file|symbol lookup error|cannot execute binary file|"
                             r"Exec format error|wrong ELF class")


def loader_failure(stderr: str) -> Optional[str]:
    """The loader's message when stderr is that of a program that could not start."""
    lines = [ln.strip() for ln in stderr.splitlines() if _LOADER_FAILURE.search(ln)]
    return "\n  ".join(lines) if lines else None


def cannot_start_message(binary: str, loader_message: str) -> str:
    needs = sorted(set(re.findall(r"`(GLIBC(?:XX)?_[0-9.]+)'", loader_message)))
    need = " (it needs %s)" % ", ".join(needs) if needs else ""
    return ("mldoctor: error: the mldoctor binary %s cannot start on this machine (%s)%s; the loader says:\n  %s\n"
            "%s." % (binary, _machine(), need, loader_message, _TODO))


def startup_error(binary: str) -> Optional[str]:
    """None when `binary --version` runs; else what to tell the user."""
    try:
        p = subprocess.run([binary, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=60)
    except subprocess.TimeoutExpired:
        return None  # it started: whatever keeps it busy is the command's business, not the loader's
    except OSError as e:
        return cannot_start_message(binary, "%s: %s" % (binary, e.strerror))
    if p.returncode == 0:
        return None
    stderr = p.stderr.decode("utf-8", "replace")
    failure = loader_failure(stderr)
    if failure is not None:
        return cannot_start_message(binary, failure)
    return None

"""Where the mldoctor binary is: the copy inside this installed package
(the wheel puts it and its shims in mldoctor/_bin/, where the binary's own
find_shim_dir looks: next to itself), else $MLDOCTOR, else `mldoctor` on
PATH. The launcher and the API share this, so both run the same binary."""
from __future__ import annotations

import os
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


def not_found_message() -> str:
    env = os.environ.get("MLDOCTOR")
    looked = [PACKAGE_BIN, "$MLDOCTOR (%s)" % (env if env else "unset"), "mldoctor on PATH"]
    return "mldoctor: error: the mldoctor binary was not found (looked at %s)" % ", ".join(looked)

"""A package's __init__: what the walk meets most.

import not_a_statement
"""
from __future__ import annotations

import os
import sys as _sys
from typing import TYPE_CHECKING

from ._version import __version__
from .core import *  # noqa: F401,F403
from . import _C, ops as _ops

try:
    from ._fast import accel
except ImportError:  # pragma: no cover
    accel = None

if TYPE_CHECKING:
    from .typing_only import Alias
else:
    Alias = object

if _sys.platform == "linux":
    from ._platform_linux import cext
elif _sys.platform == "darwin":
    from ._platform_osx import cext


def load_plugins():
    import importlib
    return importlib.import_module(".plugins", __name__)


class Lazy:
    import threading

    def __getattr__(self, name):
        from . import _lazy
        return getattr(_lazy, name)


__all__ = ["accel", "cext", 'Alias', r'''raw''', b"bytes", f"{os.sep}"]

import importlib
from ._internal import clone_module, plain
__all__ = clone_module("numpy", globals())
importlib.import_module('a.b'); __import__("c")
x = plain(f"d{1}", "e")
def clone_module(mod_name: str, globals_: dict[str, object]) -> list[str]:
    """Doc "with" quotes."""
    mod = importlib.import_module(mod_name)
    exec(f"from {mod.__name__} import *", {})
    return []
def load(m): return __import__(m)
load('f'); load(r"g"); load("");  load(  "h" , 1)
y = ("unterminated
z = '''never closed

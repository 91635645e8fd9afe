import a.b.c as abc; import d, e.f
from .. import up; from ...deep.er import (x as y,
                                          z)
x = {'k': 1}; y = lambda: 2
match = 3
with open(__file__) as f: import inline_with
	import tabbed
def g(): import inline_def
async def h(a: int = 3) -> None:
    import in_async
from x.y \
    import zz

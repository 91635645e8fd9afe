if TYPE_CHECKING:
    import a
else:
    import b
try: import c
except: pass
from .x \
  import (y,
 z)
"""import d

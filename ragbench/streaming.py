"""Deprecated: moved to :mod:`ragbench.live_writes` (issue 30); importing this name warns.

``ragbench.streaming`` read as token streaming; the module runs ``ragbench stream``, an index
under live inserts and deletes. It is that module itself for one release, then goes.
"""

import sys

from ._moved import warn_moved

sys.modules[__name__] = warn_moved(__name__, "ragbench.live_writes")

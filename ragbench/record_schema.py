"""Deprecated: moved to :mod:`ragbench.results.schema` (issue 30); importing this name warns.

``ragbench.record_schema`` is that module itself for one release, then goes.
"""

import sys

from ._moved import warn_moved

sys.modules[__name__] = warn_moved(__name__, "ragbench.results.schema")

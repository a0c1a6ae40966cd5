"""Deprecated: this module moved to :mod:`ragbench.indexes.pgvector.hybrid` (issue 30).

Importing it still works for one release and warns (DeprecationWarning); the
names it exported are the same objects as in the new module.
"""

from __future__ import annotations

import warnings

from .pgvector.hybrid import PgHybridIndex

__all__ = ["PgHybridIndex"]

warnings.warn(
    "ragbench.indexes.pghybrid_index is deprecated: import from ragbench.indexes.pgvector.hybrid "
    "(the old module goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)

"""Deprecated: this module moved to :mod:`ragbench.indexes.pgvector.index` (issue 30).

Importing it still works for one release and warns (DeprecationWarning); the
names it exported are the same objects as in the new module.
"""

from __future__ import annotations

import warnings

from .pgvector.index import PgvectorIndex

__all__ = ["PgvectorIndex"]

warnings.warn(
    "ragbench.indexes.pgvector_index is deprecated: import from ragbench.indexes.pgvector.index "
    "(the old module goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)

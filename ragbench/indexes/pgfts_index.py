"""Deprecated: this module moved to :mod:`ragbench.indexes.pgvector.fts` (issue 30).

Importing it still works for one release and warns (DeprecationWarning); the
names it exported are the same objects as in the new module.
"""

from __future__ import annotations

import warnings

from .pgvector.fts import MATCH_SQL, PgFtsIndex

__all__ = ["PgFtsIndex", "MATCH_SQL"]

warnings.warn(
    "ragbench.indexes.pgfts_index is deprecated: import from ragbench.indexes.pgvector.fts "
    "(the old module goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)

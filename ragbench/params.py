"""Deprecated: the backend parameters live in :mod:`ragbench.settings.params` (issue 30).

Every name of the old module (``Params``, ``HnswBuild``, ``INDEXES``,
``STAGE_PARAMS``, ...) is still importable from here, with a
DeprecationWarning when this module is imported, for one release.
"""

from __future__ import annotations

import warnings
from typing import Any

from .settings import params as _params

warnings.warn(
    "ragbench.params is deprecated: import from ragbench.settings.params "
    "(it goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = list(_params.__all__)


def __getattr__(name: str) -> Any:
    """Every name of :mod:`ragbench.settings.params` (its Structs included)."""
    try:
        return getattr(_params, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

"""Deprecated: the shipped configs are part of :mod:`ragbench.settings` (issue 30).

::

    rb.configs.names()   ->  rb.settings.shipped_names()
    rb.configs.path(n)   ->  rb.settings.shipped_path(n)
    rb.configs.load(n)   ->  rb.settings.parse_config(n)   (typed; .to_dict() for the dict)

The files moved to ``ragbench/settings/shipped/``. This package keeps its
three functions, with a DeprecationWarning when it is imported, for one
release.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..settings.sources import load_config, shipped_names, shipped_path

warnings.warn(
    "ragbench.configs is deprecated: use ragbench.settings.shipped_names, shipped_path and "
    "parse_config (it goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["load", "names", "path"]


def names() -> list[str]:
    """The shipped config names, sorted."""
    return shipped_names()


def path(name: str) -> Path:
    """The TOML file of shipped config ``name``."""
    return shipped_path(name)


def load(name: str) -> dict[str, Any]:
    """Shipped config ``name``, normalized (defaults filled in, every key checked)."""
    return load_config(shipped_path(name))

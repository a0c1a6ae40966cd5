"""Deprecated: the configuration lives in :mod:`ragbench.settings` (issue 30).

``ragbench.config`` was the reading and checking half of the configuration;
it is now :mod:`ragbench.settings.sources`, and what users call is exported
by :mod:`ragbench.settings` (``parse_config``, ``read_config``, ``merge``,
``shipped_names``, ...). This module re-exports every name it had, with a
DeprecationWarning when it is imported, for one release.
"""

from __future__ import annotations

import warnings

from .settings.sources import (
    DEFAULTS,
    FILTER_KEYS,
    FILTER_STRATEGIES,
    OWN_KEYS,
    SHIPPED_DIR,
    STAGE_TABLES,
    TOML_DEPTH,
    ConfigSource,
    backend_params,
    check_filter_table,
    config_path,
    load_config,
    load_toml,
    merge,
    normalize,
    parse_config,
    read_config,
    shipped_names,
    shipped_path,
)
from .settings.tables import MAX_COUNT
from .settings.variants import parse

warnings.warn(
    "ragbench.config is deprecated: import from ragbench.settings "
    "(helpers: ragbench.settings.sources); it goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "ConfigSource",
    "DEFAULTS",
    "FILTER_KEYS",
    "FILTER_STRATEGIES",
    "MAX_COUNT",
    "OWN_KEYS",
    "SHIPPED_DIR",
    "STAGE_TABLES",
    "TOML_DEPTH",
    "backend_params",
    "check_filter_table",
    "config_path",
    "load_config",
    "load_toml",
    "merge",
    "normalize",
    "parse",
    "parse_config",
    "read_config",
    "shipped_names",
    "shipped_path",
]

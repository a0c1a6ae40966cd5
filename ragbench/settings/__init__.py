"""The pipeline configuration as typed, frozen ``msgspec`` Structs: one per table and backend.

A config (TOML or the same nested dict, see :mod:`ragbench.config`) is
converted once, at the boundary, by :func:`parse`: every table becomes a
Struct, every stage table the Struct of the backend it names (its
``backend`` key selects it: ``[retrieve] backend = "hnsw"`` gives a
:class:`Retrieve` whose ``build`` is :class:`HnswBuild`). A backend ragbench
does not know (a plugin, or one registered in code) gets the stage's open
Struct, whose ``params`` the backend checks itself when it is created.

Errors name the path and say what was expected::

    run.queries: expected int, got str
    run.k: expected int >= 1, got 0
    retrieve.build: unknown key 'MM' for backend 'hnsw'; valid keys: M, ef_construction, seed

:meth:`Config.to_dict` gives the plain dict the drivers read
(``cfg["run"]["k"]``): every key ragbench owns with its default, and the
backend parameters the config gave (a backend fills in its own defaults,
which the JSON Schema of :func:`config_schema` documents).

The package: :mod:`~ragbench.settings.tables` (the tables' Structs),
:mod:`~ragbench.settings.variants` (each backend's Struct, :class:`Config`,
:func:`parse`), :mod:`~ragbench.settings.convert` (errors naming the path)
and :mod:`~ragbench.settings.schema` (the JSON Schema); every name is
importable from ``ragbench.settings``.
"""

from __future__ import annotations

from .convert import config_error, convert
from .schema import config_schema
from .tables import (
    MAX_COUNT,
    STAGES,
    Cache,
    Dataset,
    Embed,
    Filter,
    Generate,
    Prompt,
    Rerank,
    Retrieve,
    Run,
    Serialize,
    Stage,
    Table,
    Transport,
)
from .variants import OPEN, TABLES, VARIANTS, Config, backend_names, parse

__all__ = [
    "MAX_COUNT",
    "OPEN",
    "STAGES",
    "TABLES",
    "VARIANTS",
    "Cache",
    "Config",
    "Dataset",
    "Embed",
    "Filter",
    "Generate",
    "Prompt",
    "Rerank",
    "Retrieve",
    "Run",
    "Serialize",
    "Stage",
    "Table",
    "Transport",
    "backend_names",
    "config_error",
    "config_schema",
    "convert",
    "parse",
]

"""The pipeline configuration: reading it, its typed tables, every backend's parameters, the shipped configs.

One package for configuration. A config (a TOML file, the name of a
shipped one, or the same nested dict) is converted once, at the boundary, by
:func:`parse_config` into a frozen :class:`Config`: every table becomes a
Struct, every stage table the Struct of the backend it names (its ``backend``
key selects it: ``[retrieve] backend = "hnsw"`` gives a :class:`Retrieve`
whose ``build`` is :class:`~ragbench.settings.params.HnswBuild`). A backend
ragbench does not know (a plugin, or one registered in code) gets the
stage's open Struct, whose parameters the backend checks itself when it is
created. The drivers (:class:`ragbench.Pipeline`, ``run``, ``compare``,
``sweep``, ``load``) take and read the :class:`Config`.

Errors name the path and say what was expected::

    run.queries: expected int, got str
    run.k: expected int >= 1, got 0
    retrieve.build: unknown key 'MM' for backend 'hnsw'; valid keys: M, ef_construction, seed

The package, by concern: :mod:`~ragbench.settings.sources` (where a config
comes from: files, shipped names, merging, :func:`parse_config`),
:mod:`~ragbench.settings.tables` (the tables' Structs),
:mod:`~ragbench.settings.params` (every built-in backend's parameters),
:mod:`~ragbench.settings.variants` (each backend's Struct, :class:`Config`),
:mod:`~ragbench.settings.convert` (errors naming the path) and
:mod:`~ragbench.settings.schema` (the JSON Schema). The shipped configs are
package data in ``ragbench/settings/shipped/``.

``ragbench.config``, ``ragbench.params`` and ``ragbench.configs`` were the
old names of these parts: they still import, with a DeprecationWarning, for
one release.
"""

from __future__ import annotations

from .._deprecated import moved_names
from .convert import convert as convert  # the function, as before (not the submodule)
from .params import Params
from .schema import config_schema
from .sources import (
    ConfigSource,
    load_config,
    merge,
    parse_config,
    read_config,
    shipped_names,
    shipped_path,
)
from .tables import (
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
    Transport,
)
from .variants import Config, backend_names

#: What users call (tests/project/test_public_api.py pins this list): the typed tables, the
#: base of backend parameters, reading and checking a config, the shipped configs' names.
__all__ = [
    "Cache",
    "Config",
    "ConfigSource",
    "Dataset",
    "Embed",
    "Filter",
    "Generate",
    "Params",
    "Prompt",
    "Rerank",
    "Retrieve",
    "Run",
    "Serialize",
    "Stage",
    "Transport",
    "backend_names",
    "config_schema",
    "load_config",
    "merge",
    "parse_config",
    "read_config",
    "shipped_names",
    "shipped_path",
]

#: Names ``ragbench.settings`` exported until its ``__all__`` was trimmed to what users call
#: (issue 30) still import from here for one release, warning where they live now
#: (:data:`ragbench._deprecated.MOVED` lists them).
__getattr__ = moved_names(__name__)

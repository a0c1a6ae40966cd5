"""Deprecated import paths: every public module or name that moved, kept working for one release.

One table, :data:`MOVED`, maps each old dotted path to its new one, and one rule serves it:

- **A module that moved** (``"ragbench.records": "ragbench.results.records"``): importing
  the old path gives the new module itself, so every object it holds is the same object; its
  submodules keep their old paths too (``ragbench.rendering.cells`` is
  ``ragbench.results.tables.cells``). The old file is deleted: a finder at the front of
  ``sys.meta_path`` (installed by ``ragbench/__init__.py``) answers the old paths of this table
  and nothing else, so a folder left behind at an old path (a stale ``__pycache__``) cannot
  shadow them.
- **A name that moved** (``"ragbench.pipeline.EmbedStage":
  "ragbench.pipeline.stages.EmbedStage"``): while the old module lives on, its
  ``__getattr__ = moved_names(__name__)`` gives the name from its new place. When the old module
  is gone too (``ragbench.config``), importing it gives a stand-in module whose ``__all__`` is
  exactly the names listed under it here, each the new object itself.

Every use warns, with a :class:`DeprecationWarning` that names the new path::

    ragbench.records is deprecated: import ragbench.results.records (the old path goes in the next release)

(a moved module or a stand-in warns when it is imported, a moved name each time it is read; a
submodule of a moved package does not warn again: its parent, imported first, has).
A move adds its entries here in the release that moves the name; the release after deletes
them, and nothing else has to change. ``tests/project/test_public_api.py`` checks every entry.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import pkgutil
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


def _each(old: str, new: str, names: str) -> dict[str, str]:
    """``old.NAME -> new.NAME`` for every name in the space-separated ``names``."""
    return {f"{old}.{name}": f"{new}.{name}" for name in names.split()}


_TABLES = "ragbench.results.tables"
_SOURCES = "ragbench.settings.sources"

#: Old dotted path -> new dotted path, for every public module or name that moved (issue 30).
MOVED: dict[str, str] = {
    # results: one package for records, their schema, their tables and their reading
    "ragbench.records": "ragbench.results.records",
    "ragbench.record_schema": "ragbench.results.schema",
    "ragbench.report": "ragbench.results.report",
    "ragbench.rendering": _TABLES,
    **_each("ragbench.rendering", f"{_TABLES}.dispatch", "FORMATS render render_checked"),
    **_each("ragbench.rendering", "ragbench.results.records", "caveats_of"),
    **_each(
        "ragbench.rendering",
        f"{_TABLES}.cells",
        "NAN cpu_cells event_text ms ms_ci num pct_cell plain_table rich_table stat_cells "
        "text_table with_ci",
    ),
    **_each("ragbench.rendering", f"{_TABLES}.diffs", "diff_records_table"),
    **_each(
        "ragbench.rendering",
        f"{_TABLES}.listings",
        "benchmark_table datasets_table stats_table",
    ),
    **_each("ragbench.rendering", f"{_TABLES}.load", "INVALID_MARK load_table"),
    **_each("ragbench.rendering", f"{_TABLES}.markdown", "flat_cell flat_rows"),
    **_each(
        "ragbench.rendering",
        f"{_TABLES}.notes",
        "SETUP_LABELS build_note connection_note filter_note hardware_note llm_note "
        "retrieve_parts_note simulated_note stage_label",
    ),
    **_each(
        "ragbench.rendering",
        f"{_TABLES}.points",
        "filtered_sweep_table params_text scale_table sweep_table",
    ),
    **_each(
        "ragbench.rendering",
        f"{_TABLES}.runs",
        "STATS compare_table fixed_line run_table setup_summary stopped_line",
    ),
    **_each("ragbench.rendering", f"{_TABLES}.stream", "stream_table"),
    "ragbench.plots": "ragbench.results.plots",
    "ragbench.rebuilds": "ragbench.results.rebuilds",
    "ragbench.frontier": "ragbench.results.frontier",
    "ragbench.diff": "ragbench.results.diff",
    "ragbench.reading": "ragbench.results.reading",
    **_each("ragbench.reading", "ragbench.results.reading", "reading"),
    **_each(
        "ragbench.reading",
        "ragbench.results.reading.common",
        "DOMINANT_SHARE SUGGESTED_REPEAT SUSTAINED Records ranking within_noise",
    ),
    **_each(
        "ragbench.reading", "ragbench.results.reading.diffs", "diff_reading saved_diff_reading"
    ),
    **_each("ragbench.reading", "ragbench.results.reading.load", "load_reading"),
    **_each("ragbench.reading", "ragbench.results.reading.points", "scale_reading sweep_reading"),
    **_each(
        "ragbench.reading",
        "ragbench.results.reading.runs",
        "AXES SAME_RECALL dominant_stage order_note run_reading",
    ),
    # `ragbench stream` is live inserts and deletes, not token streaming
    "ragbench.streaming": "ragbench.live_writes",
    # configuration: one package, ragbench.settings
    "ragbench.config": "ragbench.settings",
    **_each(
        "ragbench.config",
        _SOURCES,
        "DEFAULTS FILTER_KEYS FILTER_STRATEGIES OWN_KEYS SHIPPED_DIR STAGE_TABLES TOML_DEPTH "
        "ConfigSource backend_params check_filter_table config_path load_config load_toml merge "
        "normalize parse_config read_config shipped_names shipped_path",
    ),
    **_each("ragbench.config", "ragbench.settings.tables", "MAX_COUNT"),
    **_each("ragbench.config", "ragbench.settings.variants", "parse"),
    "ragbench.params": "ragbench.settings.params",
    "ragbench.configs": "ragbench.settings",
    "ragbench.configs.names": f"{_SOURCES}.shipped_names",
    "ragbench.configs.path": f"{_SOURCES}.shipped_path",
    "ragbench.configs.load": f"{_SOURCES}.load_config",
    **_each("ragbench.settings", "ragbench.settings.tables", "MAX_COUNT STAGES Table"),
    **_each("ragbench.settings", "ragbench.settings.variants", "OPEN TABLES VARIANTS parse"),
    **_each("ragbench.settings", "ragbench.settings.convert", "config_error"),
    # names the packages' __all__ no longer lists: they live in the package's modules
    **_each("ragbench.pipeline", "ragbench.pipeline.context", "NO_IDS"),
    **_each("ragbench.pipeline", "ragbench.pipeline.samples", "RECORD_BYTES far_fields"),
    **_each("ragbench.pipeline", "ragbench.pipeline.tracing", "TRACE_FLUSH_EVERY"),
    **_each("ragbench.pipeline", "ragbench.pipeline.cache", "CacheStage"),
    **_each("ragbench.pipeline", "ragbench.pipeline.parts", "Embedding freeze"),
    **_each("ragbench.pipeline", "ragbench.pipeline.build", "load_index"),
    **_each(
        "ragbench.pipeline",
        "ragbench.pipeline.stages",
        "EmbedStage FilteredRetrieveStage GenerateStage RerankStage RetrieveStage SerializeStage "
        "TextRerankStage TransportStage TruncateStage",
    ),
    **_each(
        "ragbench.workers",
        "ragbench.workers.closed",
        "ClosedResult ClosedRun run_closed_worker split_clients",
    ),
    **_each(
        "ragbench.workers",
        "ragbench.workers.board",
        "GRACE_NS OpenRun SPIN_NS STOP_GRACE_NS run_open_worker",
    ),
    **_each(
        "ragbench.workers",
        "ragbench.workers.processes",
        "WORKER_ENV pack_record process_worker unpack_record",
    ),
    # the PostgreSQL backends: one package
    "ragbench.indexes.pgvector_index": "ragbench.indexes.pgvector.index",
    "ragbench.indexes.pgfts_index": "ragbench.indexes.pgvector.fts",
    "ragbench.indexes.pghybrid_index": "ragbench.indexes.pgvector.hybrid",
}


def message(old: str, new: str) -> str:
    """The warning for ``old``: it names ``new``, the path to use instead."""
    return f"{old} is deprecated: import {new} (the old path goes in the next release)"


def resolve(path: str) -> Any:
    """The object at the dotted ``path``: a module, else a name of the module before its last dot."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name != path:
            raise
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def moved_names(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving the names :data:`MOVED` lists under ``module``, warning."""

    def __getattr__(name: str) -> Any:
        new = MOVED.get(f"{module}.{name}")
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(message(f"{module}.{name}", new), DeprecationWarning, stacklevel=2)
        return resolve(new)

    return __getattr__


def _listed_under(module: str) -> list[str]:
    """The names :data:`MOVED` lists directly under ``module``."""
    return sorted(
        old[len(module) + 1 :]
        for old in MOVED
        if old.startswith(module + ".") and "." not in old[len(module) + 1 :]
    )


def _new_module(old: str) -> str | None:
    """Where module ``old`` lives now: its own entry, or its moved package's plus the rest."""
    parts = old.split(".")
    for end in range(len(parts), 1, -1):
        new = MOVED.get(".".join(parts[:end]))
        if new is not None:
            return ".".join([new, *parts[end:]])
    return None


class _Loader(importlib.abc.Loader):
    """Loads an old module path: the new module itself, or a stand-in with the old names."""

    def __init__(self, new: str, names: list[str]) -> None:
        self.new, self.names = new, names

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module; exec_module fills it or swaps in the new one

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        if old in MOVED:  # a submodule of a moved package: importing its parent has warned
            warnings.warn(message(old, self.new), DeprecationWarning, stacklevel=2)
        if not self.names:  # the old path is the new module itself
            sys.modules[old] = importlib.import_module(self.new)
            return
        setattr(module, "__all__", self.names)  # noqa: B010 (a module's attribute, set as data)
        for name in self.names:
            setattr(module, name, resolve(MOVED[f"{old}.{name}"]))
        new_path = getattr(importlib.import_module(self.new), "__path__", None)
        if new_path is not None:  # the moved package's submodules, under the old path
            subs = {sub.name for sub in pkgutil.iter_modules(new_path)}

            def submodule(name: str) -> ModuleType:
                if name not in subs:
                    raise AttributeError(f"module {old!r} has no attribute {name!r}")
                return importlib.import_module(f"{old}.{name}")

            setattr(module, "__getattr__", submodule)  # noqa: B010


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of :data:`MOVED`, and nothing else."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("ragbench."):
            return None
        new = _new_module(fullname)
        if new is None:
            return None
        try:
            found = importlib.util.find_spec(new)
        except ModuleNotFoundError:  # a moved name, not a module
            return None
        if found is None:
            return None
        names = _listed_under(fullname)
        spec = importlib.machinery.ModuleSpec(fullname, _Loader(new, names))
        if names and found.submodule_search_locations is not None:
            spec.submodule_search_locations = []  # a package: its submodules come here too
        return spec


def install() -> None:
    """Put the finder of old module paths at the front of ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

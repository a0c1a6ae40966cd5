"""The public surface: each public package's exported names, pinned (as httpx pins its API).

``__all__`` of a package is what users call. The expected lists are written
out here, literally, so that adding a name to the public surface or dropping one
is a change to this file that a reviewer sees; a test also fails when a public
package is added without its list here, when a private module declares an
``__all__``, or when a listed name cannot be imported.

Modules and names that moved keep working for one release, with a DeprecationWarning naming
their new place: ``ragbench._deprecated.MOVED`` lists them all, and the tests at the end of this
file check every entry.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import ragbench
from ragbench._deprecated import MOVED, resolve

PACKAGE = Path(ragbench.__file__).resolve().parent

# fmt: off
EXPORTS: dict[str, list[str]] = {
    "ragbench": [
        "Hit", "Pipeline", "Report", "RetrievalResult", "__version__", "codecs", "datasets",
        "embedders", "errors", "generators", "indexes", "rerankers", "settings", "timing",
        "transports",
    ],
    "ragbench.aioworkers": [
        "AsyncWorkers", "HEARTBEAT_S", "LoopServer", "OFFLOADS", "Segment", "Settings",
        "aio_worker", "check_offload", "plan",
    ],
    "ragbench.cli": [
        "cli", "main",
    ],
    "ragbench.codecs": [
        "Codec", "SHAPES", "create", "names", "register", "registry",
    ],
    "ragbench.configs": [
        "load", "names", "path",
    ],
    "ragbench.datasets": [
        "ArrayCache", "CacheEvent", "Corpus", "Dataset", "Queries", "SYNTHETIC_DEFAULTS",
        "ShippedVectors", "brute_force_neighbors", "cache_dir", "datasets_dir", "describe",
        "find_shipped", "from_table", "load", "names", "spec_table", "synthetic",
    ],
    "ragbench.embedders": [
        "Embedder", "create", "names", "register", "registry",
    ],
    "ragbench.errors": [
        "ConfigError", "DatasetError", "DecodeError", "DimensionError", "GeneratorError",
        "IdOutOfRangeError", "IndexFileError", "IndexServerError", "InputError", "KTooLargeError",
        "MissingDependencyError", "NonFiniteError", "NotBuiltError", "RagbenchError", "RecordError",
        "StartTimeoutError", "TransportError", "UnknownBackendError", "UnsupportedConfigError",
        "UnsupportedOperationError", "WorkerFault",
    ],
    "ragbench.fusion": [
        "reciprocal_rank_fusion", "reciprocal_rank_fusion_plain", "weighted_fusion",
        "weighted_fusion_plain",
    ],
    "ragbench.generators": [
        "FirstToken", "Generator", "create", "names", "register", "registry",
    ],
    "ragbench.indexes": [
        "DeclaresBuild", "FilteredIndex", "Index", "PROBE_DIM", "PersistentIndex", "SplitsSearch",
        "WritableIndex", "build_timed", "can_delete", "create", "data_fingerprint", "declares",
        "deleting_backends", "filtering_backends", "load", "names", "register", "registry",
        "with_dsn", "writable_backends",
    ],
    "ragbench.indexes.pgvector": [
        "PgFtsIndex", "PgHybridIndex", "PgvectorIndex",
    ],
    "ragbench.pipeline": [
        "Pipeline", "RequestContext", "RequestRecord", "STAGES", "SharedParts", "Stage",
        "interleave",
    ],
    "ragbench.reading": [
        "AXES", "DOMINANT_SHARE", "Records", "SAME_RECALL", "SUGGESTED_REPEAT", "SUSTAINED",
        "diff_reading", "dominant_stage", "load_reading", "order_note", "ranking", "reading",
        "run_reading", "saved_diff_reading", "scale_reading", "sweep_reading", "within_noise",
    ],
    "ragbench.rendering": [
        "FORMATS", "INVALID_MARK", "NAN", "SETUP_LABELS", "STATS", "benchmark_table", "build_note",
        "caveats_of", "compare_table", "connection_note", "cpu_cells", "datasets_table",
        "diff_records_table", "event_text", "filter_note", "filtered_sweep_table", "fixed_line",
        "flat_cell", "flat_rows", "hardware_note", "llm_note", "load_table", "ms", "ms_ci", "num",
        "params_text", "pct_cell", "plain_table", "render", "render_checked",
        "retrieve_parts_note", "rich_table", "run_table", "scale_table", "setup_summary",
        "simulated_note", "stage_label", "stat_cells", "stats_table", "stopped_line",
        "stream_table", "sweep_table", "text_table", "with_ci",
    ],
    "ragbench.results": [
        "RecordWriter", "Report", "append_record", "iter_records", "read_records", "render",
    ],
    "ragbench.results.reading": [
        "diff_reading", "load_reading", "reading", "run_reading", "saved_diff_reading",
        "scale_reading", "sweep_reading",
    ],
    "ragbench.results.tables": [
        "FORMATS", "benchmark_table", "compare_table", "datasets_table", "diff_records_table",
        "filtered_sweep_table", "load_table", "render", "render_checked", "run_table",
        "scale_table", "stats_table", "stream_table", "sweep_table",
    ],
    "ragbench.rerankers": [
        "CAVEAT_PREFIX", "Reranker", "TEXT_RERANKERS", "create", "names", "register", "registry",
    ],
    "ragbench.settings": [
        "Cache", "Config", "ConfigSource", "Dataset", "Embed", "Filter", "Generate", "Params",
        "Prompt", "Rerank", "Retrieve", "Run", "Serialize", "Stage", "Transport", "backend_names",
        "config_schema", "load_config", "merge", "parse_config", "read_config", "shipped_names",
        "shipped_path",
    ],
    "ragbench.sweeps": [
        "FilterCase", "SweepData", "bytes_fields", "check_grid", "count_points",
        "index_param_names", "measure", "recall_fields", "scale_points", "scale_unit",
        "sweep_points", "sweep_unit", "synthetic_data", "tune",
    ],
    "ragbench.timing": [
        "Background", "Hook", "PERCENTILES", "Parts", "Request", "SetupTimes", "StageTimer",
        "Stats", "run_stages", "run_stages_cpu",
    ],
    "ragbench.traffic": [
        "ARRIVALS", "COMPLETED", "FAILED", "LoadOptions", "REJECTED", "TIMED_OUT", "Traffic",
        "arrivals", "closed_loop", "load_points", "merge_concurrent", "open_loop", "summarize",
        "warm",
    ],
    "ragbench.transports": [
        "ChildTransport", "FarSide", "FarSideProcessor", "Transport", "connection_columns",
        "create", "decode_reply", "make_codec", "names", "read_child_config", "register",
        "registry",
    ],
    "ragbench.workers": [
        "Board", "COMPLETED", "FAILED", "PENDING", "ProcessWorkers", "REJECTED", "Result",
        "TIMED_OUT", "ThreadWorkers", "WorkerFault", "admit",
    ],
}
# fmt: on

#: Public packages kept for one release as deprecated aliases (importing one warns).
DEPRECATED = {"ragbench.configs", "ragbench.reading", "ragbench.rendering"}


def _public_packages() -> set[str]:
    """Every package of ragbench none of whose path parts starts with an underscore."""
    found = set()
    for init in PACKAGE.rglob("__init__.py"):
        parts = init.parent.relative_to(PACKAGE.parent).parts
        if not any(p.startswith("_") for p in parts):
            found.add(".".join(parts))
    return found


def test_every_public_package_has_its_list_here() -> None:
    missing = _public_packages() - set(EXPORTS)
    assert not missing, f"add the exported names of {sorted(missing)} to EXPORTS"


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_exported_names(module: str) -> None:
    if module in DEPRECATED:
        sys.modules.pop(module, None)
        with pytest.warns(DeprecationWarning, match="deprecated"):
            mod = importlib.import_module(module)
    else:
        mod = importlib.import_module(module)
    assert sorted(mod.__all__) == EXPORTS[module]
    assert len(set(mod.__all__)) == len(mod.__all__), "a name listed twice"
    for name in mod.__all__:
        assert getattr(mod, name) is not None or name.isupper(), name


def test_private_modules_declare_no_all() -> None:
    declaring = []
    for path in sorted(PACKAGE.rglob("_*.py")):
        if path.name == "__init__.py" or "_pb" in path.parts or path.name.startswith("__"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                declaring.append(str(path.relative_to(PACKAGE)))
    assert declaring == []


def _moved_names(package: str) -> dict[str, str]:
    """The names MOVED lists under the living ``package``: name -> new dotted path."""
    prefix = package + "."
    return {
        old[len(prefix) :]: new
        for old, new in MOVED.items()
        if old.startswith(prefix) and "." not in old[len(prefix) :]
    }


def test_moved_workers_names_warn_and_still_work() -> None:
    import ragbench.workers as workers
    from ragbench.workers import board

    moved_here = _moved_names("ragbench.workers")
    assert "SPIN_NS" in moved_here and "SPIN_NS" not in workers.__all__
    with pytest.warns(DeprecationWarning, match=r"ragbench\.workers\.board"):
        moved = workers.SPIN_NS
    assert moved == board.SPIN_NS
    for name, new in moved_here.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(workers, name)
        assert value is resolve(new)
        assert [w.category for w in caught] == [DeprecationWarning], name
    with pytest.raises(AttributeError):
        _ = workers.no_such_name


def test_moved_pipeline_names_warn_and_still_work() -> None:
    import ragbench.pipeline as pipeline
    from ragbench.pipeline import stages

    moved_here = _moved_names("ragbench.pipeline")
    assert "EmbedStage" in moved_here and "EmbedStage" not in pipeline.__all__
    with pytest.warns(DeprecationWarning, match=r"ragbench\.pipeline\.stages"):
        moved = pipeline.EmbedStage
    assert moved is stages.EmbedStage
    for name, new in moved_here.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(pipeline, name)
        assert value is resolve(new)
        assert [w.category for w in caught] == [DeprecationWarning], name
    with pytest.raises(AttributeError):
        _ = pipeline.no_such_name


#: Modules issue 30 renamed (the results gathered in ragbench.results): old name -> new.
MOVED_MODULES = {
    "ragbench.records": "ragbench.results.records",
    "ragbench.record_schema": "ragbench.results.schema",
    "ragbench.report": "ragbench.results.report",
    "ragbench.rendering": "ragbench.results.tables",
    "ragbench.reading": "ragbench.results.reading",
    "ragbench.streaming": "ragbench.live_writes",
}


def _forget(old: str) -> None:
    """Drop ``old`` and its submodules from sys.modules, so that importing it runs again."""
    for name in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        del sys.modules[name]


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_moved_modules_warn_and_give_the_new_ones(old: str, new: str) -> None:
    _forget(old)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import {new}"):
        alias = importlib.import_module(old)
    moved = importlib.import_module(new)
    if hasattr(moved, "__path__"):  # a package: its submodules under the old name are the new ones
        assert importlib.import_module(f"{old}.runs") is importlib.import_module(f"{new}.runs")
        assert all(getattr(alias, name) is not None for name in alias.__all__)
        assert set(moved.__all__) <= set(alias.__all__)
        for name in moved.__all__:
            assert getattr(alias, name) is getattr(moved, name), name
    else:  # a module: the alias is the new module itself
        assert alias is moved


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_every_moved_path_still_imports_warns_and_gives_the_same_object(old: str, new: str) -> None:
    """Each entry of ragbench._deprecated.MOVED: the old path works, warns, and is the new object."""
    parent, _, name = old.rpartition(".")
    target = resolve(new)
    if not isinstance(target, ModuleType) and parent not in MOVED:
        # a name that left a living package: each read warns, naming the new path
        with pytest.warns(
            DeprecationWarning, match=re.escape(f"{old} is deprecated: import {new}")
        ):
            assert getattr(importlib.import_module(parent), name) is target
        return
    if parent in MOVED:  # a name of a module that is gone: its stand-in has it
        _forget(parent)
        with pytest.warns(DeprecationWarning, match=re.escape(f"{parent} is deprecated")):
            stand_in = importlib.import_module(parent)
        assert getattr(stand_in, name) is target and name in stand_in.__all__
        return
    # a module that moved: the old path warns on import, naming the new one
    _forget(old)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} is deprecated: import {new}")):
        alias = importlib.import_module(old)
    if alias is not target:  # a stand-in: exactly the names listed under it, each the new object
        listed = sorted(o.rpartition(".")[2] for o in MOVED if o.rpartition(".")[0] == old)
        assert sorted(alias.__all__) == listed
        for n in listed:
            assert getattr(alias, n) is resolve(MOVED[f"{old}.{n}"]), n


def test_old_paths_nothing_moved_to_still_fail() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ragbench.no_such_module")
    with pytest.raises(ModuleNotFoundError), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        importlib.import_module("ragbench.rendering.no_such_module")

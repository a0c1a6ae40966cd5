"""Reproducible index builds, and a cache of the slow ones.

:func:`build` is how the drivers (``sweep``, ``scale``, ``run``/``compare``)
build an index:

- **Deterministic by default.** The build runs with one thread (hnswlib's
  ``add_items(num_threads=1)``, faiss's OpenMP and BLAS at 1, usearch and
  qdrant-edge indexing on one thread), so the graph or the lists depend only
  on the data and the seeds: hnswlib's ``random_seed`` (``seed``), faiss HNSW's
  level generator (``seed``), the k-means seed of IVF/PQ (``seed``), and the
  training sample of the compressed indexes (``train_size`` rows drawn with
  ``seed``; ``info()`` reports ``train_rows`` and ``train_seed``). The same
  command gives the same recall every time, in this process or in a Ray
  worker with another thread count.
- ``fast=True`` (``--fast-build``, ``[retrieve] fast_build``) builds with every
  pinned thread instead; the record then says ``deterministic: false``
  (hnswlib's multi-threaded insertion order follows thread timing).

Each build leaves ``index.build_record`` (``info()["build"]``):
``{"deterministic", "threads", "seed", "cached", "seconds"}``; ``seconds`` is
the library build time (the original build's when the index came from the
cache, with ``load_s`` beside it).

The cache: a deterministic build that took at least
:func:`cache_min_seconds` (10 s; ``$RAGBENCH_INDEX_CACHE_MIN_S``) is saved
with ``Index.save`` (payload sha256, data fingerprint) under
``$RAGBENCH_CACHE_DIR/indexes/<recipe>/<fingerprint>.rbi`` with a JSON
sidecar holding the original build record, and loaded instead of rebuilt the
next time the same recipe meets the same data. The recipe is (backend,
metric, dim, rows, build parameters including the seed, deterministic); the
data fingerprint is only computed when an entry for the recipe exists or a
build is to be saved, so short builds pay nothing. A file that fails any
check (hash, header, fingerprint) is rebuilt and overwritten. Fast builds are
never cached (they are not the same index twice).

A backend says what it can promise: ``build_deterministic`` False (pgvector's
``hnsw`` and ``ivfflat``: their random draws are not seedable from SQL) makes
the record say ``deterministic: false`` even on one thread (Chroma, whose
one-thread builds of the same rows differ, says the same) and keeps the
backend out of the cache (a loaded build would claim to be the one every
run gets), and
``build_cacheable`` False (pgvector: a saved index is its rows, so a "load"
is a rebuild on the server, no faster and not the same graph) keeps the
backend out of the cache: every build is a real build, ``cached: false``
(LanceDB's is False for an index given attribute columns: the recipe does not
hold them and a loaded table would not take them, so its ``where`` path would
quietly become ``ids``). Both are :class:`~ragbench.indexes.contract.DeclaresBuild`;
a backend that does not declare it (one written from the ``Index`` Protocol
alone) promises nothing: its one-thread builds say ``deterministic: null``
(unknown) and are never cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

from ..datasets.cache import cache_dir
from ..errors import IndexFileError
from ..files import SIDECAR_LIMIT, open_regular
from ..threads import get_threads, set_threads
from ..validate import json_loads
from . import build_timed, data_fingerprint, load
from .contract import DeclaresBuild, PersistentIndex

__all__ = ["CACHE_MIN_ENV", "Built", "build", "cache_min_seconds", "recipe_key"]

log = logging.getLogger("ragbench.indexes")

#: Environment variable: builds shorter than this many seconds are not cached.
CACHE_MIN_ENV = "RAGBENCH_INDEX_CACHE_MIN_S"
_DEFAULT_MIN_S = 10.0


class Built(NamedTuple):
    """What :func:`build` did: the index, the build and kernel-compile ns, the cache load ns."""

    index: Any
    build_ns: int  # library build time in this process (0 when loaded from the cache)
    compile_ns: int
    load_ns: int  # time to load it from the cache (0 when built)


def cache_min_seconds() -> float:
    """Builds at least this long are cached (``$RAGBENCH_INDEX_CACHE_MIN_S``, default 10)."""
    raw = os.environ.get(CACHE_MIN_ENV)
    if not raw:
        return _DEFAULT_MIN_S
    try:
        return float(raw)
    except ValueError:
        log.warning("%s=%r is not a number; using %s s", CACHE_MIN_ENV, raw, _DEFAULT_MIN_S)
        return _DEFAULT_MIN_S


def recipe_key(index: Any, rows: int, deterministic: bool) -> str:
    """sha256 (hex, 24 chars) of what determines a built index apart from the data's bytes."""
    recipe = {
        "backend": index.name,
        "metric": index.metric,
        "dim": getattr(index, "dim", None),
        "rows": rows,
        "params": {k: repr(v) for k, v in sorted(dict(index.build_params).items())},
        "deterministic": deterministic,
        "library_version": _library_version(index),
    }
    blob = json.dumps(recipe, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _library_version(index: Any) -> str:
    version = getattr(index, "library_version", None)
    return str(version()) if callable(version) else ""


def build(
    index: Any, data: Any, *, fast: bool = False, source: str | None = None, cache: bool = True
) -> Built:
    """Build ``index`` on ``data`` (vectors or texts) as the module docstring says.

    Returns a :class:`Built` whose ``index`` is ``index`` itself, or an index
    loaded from the cache (same backend, parameters and data). ``cache=False``
    builds the same reproducible index but neither loads nor saves it.
    """
    deterministic = not fast
    # only a build that is the same index twice is cached: one thread, and a backend that
    # promises it (Chroma's one-thread builds differ; a cached one read "deterministic").
    # A backend that says nothing (no DeclaresBuild) builds indexes of unknown determinism.
    promise = index.build_deterministic if isinstance(index, DeclaresBuild) else None
    same_twice = deterministic and bool(promise)
    entry = _entry_dir(index, data, deterministic) if same_twice and cache else None
    if entry is not None and entry.is_dir():
        loaded = _load_cached(index, data, entry)
        if loaded is not None:
            return loaded
    before = get_threads()
    used = before if fast else 1
    if used != before:
        set_threads(used)
    try:
        build_ns, compile_ns = build_timed(index, data)
    finally:
        if used != before:
            set_threads(before)
    record = {
        "deterministic": None if deterministic and promise is None else same_twice,
        "threads": used,
        "seed": dict(index.build_params).get("seed"),
        "cached": False,
        "seconds": build_ns / 1e9,
    }
    _set_record(index, record)
    if entry is not None and build_ns / 1e9 >= cache_min_seconds():
        _save(index, data, entry, record, source)
    return Built(index, build_ns, compile_ns, 0)


def _set_record(index: Any, record: dict[str, Any]) -> None:
    with contextlib.suppress(AttributeError):  # a third-party index with slots
        index.build_record = record


def _rows(data: Any) -> int:
    shape = getattr(data, "shape", None)
    return int(shape[0]) if shape is not None else len(data)


def _entry_dir(index: Any, data: Any, deterministic: bool) -> Path | None:
    if not isinstance(index, PersistentIndex) or not isinstance(index, DeclaresBuild):
        return None
    if not index.build_cacheable:
        return None
    return cache_dir() / "indexes" / recipe_key(index, _rows(data), deterministic)


def _load_cached(index: Any, data: Any, entry: Path) -> Built | None:
    """The cached index for ``data`` under ``entry``, checked; None (and a log line) if none fits."""
    fingerprint = data_fingerprint(data)
    path = entry / f"{fingerprint}.rbi"
    side = entry / f"{fingerprint}.json"
    if not path.is_file() or not side.is_file():
        return None
    t0 = time.perf_counter_ns()
    try:
        what = "index cache sidecar"
        with open_regular(side, limit_bytes=SIDECAR_LIMIT, what=what, error=IndexFileError) as fh:
            original = json_loads(fh.read(), what, IndexFileError)
        if not isinstance(original, dict):
            raise IndexFileError("the sidecar is not a JSON object")
        loaded = load(path)
    except (IndexFileError, ValueError, OSError) as exc:
        log.warning("index cache %s: %s; rebuilding", path, exc)
        return None
    same = (loaded.name, loaded.metric, getattr(loaded, "dim", None), dict(loaded.build_params))
    want = (index.name, index.metric, getattr(index, "dim", None), dict(index.build_params))
    saved = getattr(loaded, "saved_data", None) or {}
    if same != want or loaded.ntotal != _rows(data) or saved.get("fingerprint") != fingerprint:
        log.warning("index cache %s: holds another index; rebuilding", path)
        return None
    load_ns = time.perf_counter_ns() - t0
    record = {**original, "cached": True, "load_s": load_ns / 1e9}
    _set_record(loaded, record)
    seconds = original.get("seconds")
    if isinstance(seconds, (int, float)):
        with contextlib.suppress(AttributeError):
            loaded.build_seconds = float(seconds)  # type: ignore[attr-defined]
    return Built(loaded, 0, int(getattr(loaded, "compile_ns", 0)), load_ns)


def _save(index: Any, data: Any, entry: Path, record: dict[str, Any], source: str | None) -> None:
    """Write the index and its sidecar (the sidecar last: an entry without one is ignored)."""
    fingerprint = data_fingerprint(data)
    try:
        entry.mkdir(parents=True, exist_ok=True)
        index.save(entry / f"{fingerprint}.rbi", data=data, source=source or "ragbench build")
        tmp = entry / f".{fingerprint}.{os.getpid()}.json.tmp"
        tmp.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
        os.replace(tmp, entry / f"{fingerprint}.json")
    except OSError as exc:  # a full or read-only cache costs the next run a rebuild, no more
        log.warning("index cache %s: not written: %s", entry, exc)

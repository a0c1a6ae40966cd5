"""One registry type for every component kind.

A registry maps names to factories. Built-in factories are lazy
``"module:attr"`` strings so that listing names imports nothing heavy;
third-party backends arrive through the ``ragbench.<kind>`` entry-point group.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

from .errors import ConfigError, UnknownBackendError

T = TypeVar("T")

Factory = Callable[..., Any]


class Builtin(NamedTuple):
    """A built-in backend's registry line: its lazy ``"module:attr"`` factory and what types it.

    ``params``: names of :mod:`ragbench.settings.params` Structs typing the backend's
    parameters in a config (an index: its build and its search parameters),
    resolved only when a config is read, so listing names stays cheap.
    """

    target: str
    params: tuple[str, ...] = ()


def _resolve(target: str) -> Factory:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def _line(target: str, build: str, search: str) -> Builtin:
    """An index's registry line: its class, and the :mod:`ragbench.settings.params` Structs
    typing its ``[retrieve] build`` and ``search`` tables."""
    return Builtin(target, (build, search))


#: The built-in index backends, one line each: the one place a backend's name is
#: listed. :data:`ragbench.indexes.registry` is made from it, and
#: :mod:`ragbench.settings` types each one's parameters with the Structs named
#: (strings, so that neither import costs the other; kept here, in the core
#: layer, because the settings may not import the indexes).
BUILTIN_INDEXES: dict[str, Builtin] = {
    "flat": _line("ragbench.indexes.faiss_indexes:FlatIndex", "NoParams", "NoParams"),
    "hnsw": _line("ragbench.indexes.hnswlib_index:HnswIndex", "HnswBuild", "EfSearch"),
    "faiss-hnsw": _line(
        "ragbench.indexes.faiss_indexes:FaissHnswIndex", "FaissHnswBuild", "EfSearch"
    ),
    "ivf": _line("ragbench.indexes.faiss_indexes:IvfIndex", "IvfBuild", "NprobeSearch"),
    "lsh": _line("ragbench.indexes.faiss_indexes:LshIndex", "LshBuild", "NoParams"),
    "minhash-lsh": _line("ragbench.indexes.minhash:MinHashLshIndex", "MinHashBuild", "NoParams"),
    # compressed codes, for search + exact re-scoring (ragbench.indexes.compressed)
    "ivfpq": _line("ragbench.indexes.compressed:IvfPqIndex", "IvfPqBuild", "NprobeSearch"),
    "ivfpq-fs": _line(
        "ragbench.indexes.compressed:IvfPqFastScanIndex", "IvfPqFsBuild", "NprobeSearch"
    ),
    "ivf-sq8": _line("ragbench.indexes.compressed:IvfSq8Index", "IvfSq8Build", "NprobeSearch"),
    "hnsw-sq": _line("ragbench.indexes.compressed:HnswSqIndex", "HnswSqBuild", "EfSearch"),
    "hnsw-fp16": _line("ragbench.indexes.compressed:HnswFp16Index", "GraphBuild", "EfSearch"),
    "binary-flat": _line("ragbench.indexes.compressed:BinaryFlatIndex", "NoParams", "NoParams"),
    "binary-hnsw": _line("ragbench.indexes.compressed:BinaryHnswIndex", "GraphBuild", "EfSearch"),
    # vector database engines in process (ragbench[vectordb]); qdrant-edge is
    # Qdrant's engine, embedded (qdrant-edge-py), not the Qdrant server
    "usearch": _line("ragbench.indexes.usearch_index:UsearchIndex", "UsearchBuild", "EfSearch"),
    "qdrant-edge": _line(
        "ragbench.indexes.qdrant_edge_index:QdrantEdgeIndex", "QdrantBuild", "EfSearch"
    ),
    # LanceDB (a table in a temporary folder) and Chroma (a PersistentClient), embedded
    "lancedb": _line(
        "ragbench.indexes.lancedb_index:LanceDbIndex", "LanceDbBuild", "LanceDbSearch"
    ),
    "chroma": _line("ragbench.indexes.chroma_index:ChromaIndex", "ChromaBuild", "ChromaSearch"),
    # PostgreSQL + pgvector, a real server (ragbench's own, or [retrieve] build dsn=)
    "pgvector": _line(
        "ragbench.indexes.pgvector.index:PgvectorIndex", "PgvectorBuild", "PgvectorSearch"
    ),
    # lexical (texts in; ragbench[lexical]): BM25 with bm25s in process
    "bm25": _line("ragbench.indexes.bm25_index:Bm25Index", "Bm25Build", "NoParams"),
    # the Tantivy full-text engine, embedded (an index in a temporary folder)
    "tantivy": _line("ragbench.indexes.tantivy_index:TantivyIndex", "TantivyBuild", "NoParams"),
    # PostgreSQL full-text search (tsvector, GIN, ts_rank_cd) on the server pgvector starts
    "pg-fts": _line("ragbench.indexes.pgvector.fts:PgFtsIndex", "PgFtsBuild", "NoParams"),
    # a dense and a lexical index, fused by rank (ragbench.fusion); vectors and texts in
    "hybrid": _line("ragbench.indexes.hybrid_index:HybridIndex", "HybridBuild", "NoParams"),
    # pgvector's search and PostgreSQL full-text fused by RRF in one SQL statement
    "pg-hybrid": _line(
        "ragbench.indexes.pgvector.hybrid:PgHybridIndex", "PgHybridBuild", "NoParams"
    ),
}


class Registry(Generic[T]):
    """Named factories for one component kind (``indexes``, ``codecs``, ...)."""

    def __init__(self, kind: str, builtins: Mapping[str, str | Builtin]) -> None:
        self.kind = kind
        self.group = f"ragbench.{kind}"
        self._factories: dict[str, str | Factory] = {
            name: line.target if isinstance(line, Builtin) else line
            for name, line in builtins.items()
        }
        self._entry_points_loaded = False

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            # A name registered in code wins over a plugin of the same name.
            self._factories.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        """Every registered name, built-in first, then plugins, in order."""
        self._load_entry_points()
        return list(self._factories)

    def register(self, name: str, factory: str | Factory) -> None:
        """Add or replace a backend: a callable, or a lazy ``"module:attr"`` string."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{self.kind} backend name must be a non-empty string")
        if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
            raise ConfigError(f"{self.kind} factory for {name!r} must be callable or 'module:attr'")
        self._factories[name] = factory

    def unregister(self, name: str) -> None:
        """Remove a backend (built-in, registered or plugin); unknown names are an error."""
        self._load_entry_points()
        if name not in self._factories:
            raise UnknownBackendError(self.kind, str(name), self.names())
        del self._factories[name]

    def factory(self, name: str) -> Factory:
        """The factory behind ``name`` (imports it if it is a lazy string)."""
        self._load_entry_points()
        try:
            target = self._factories[name]
        except (KeyError, TypeError):
            raise UnknownBackendError(self.kind, str(name), self.names()) from None
        if isinstance(target, str):
            target = _resolve(target)
            self._factories[name] = target
        return target

    def create(self, name: str, **params: Any) -> T:
        """Build the backend ``name`` with its construction parameters."""
        return self.factory(name)(**params)  # type: ignore[no-any-return]

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._factories

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()!r})"


def check_params(owner: str, given: dict[str, Any], valid: set[str] | frozenset[str]) -> None:
    """Raise :class:`ConfigError` naming any parameter not in ``valid``."""
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise ConfigError(
            f"{owner}: unknown parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}; valid: {', '.join(sorted(valid)) or '(none)'}"
        )

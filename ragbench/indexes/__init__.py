"""Vector and text indexes behind one :class:`Index` protocol.

``create(name, dim=..., metric=..., **build_params)`` builds an empty index,
vector and text indexes alike (a text index such as ``minhash-lsh`` accepts
and ignores ``dim``, and records a vector ``metric`` as the one its
candidates are re-scored with); ``build(data)`` adds the corpus (vectors, or
texts when ``input_kind == "texts"``); ``search(queries, k, **query_params)``
returns ``(ids int64 (nq, k), scores float32 (nq, k))`` padded with ``-1``.
Scores are similarities (higher is better) for ``ip``/``cosine`` and
negated squared distances for ``l2``, so every backend sorts the same way.

Dense indexes also take ``search(queries, k, filter=mask_or_ids,
strategy=...)`` (an allow-list; see :mod:`ragbench.indexes._writable`), and
every index ``add(data, ids=None)`` and, where the library can remove rows,
``delete(ids)`` (see :mod:`ragbench.indexes._live` for ids; each backend's
docstring for thread-safety).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from .._registry import Registry

if TYPE_CHECKING:
    from os import PathLike

    import numpy as np

__all__ = [
    "PROBE_DIM",
    "Index",
    "build_timed",
    "create",
    "data_fingerprint",
    "load",
    "names",
    "register",
    "registry",
    "with_dsn",
]


@runtime_checkable
class Index(Protocol):
    """An index over a corpus of vectors (or texts, when ``input_kind == "texts"``)."""

    name: str
    input_kind: Literal["vectors", "texts"]
    metric: str
    build_params: dict[str, Any]
    query_params: frozenset[str]

    def build(self, data: Any) -> None: ...
    def search(self, queries: Any, k: int, **params: Any) -> tuple[np.ndarray, np.ndarray]: ...
    def memory_bytes(self) -> int: ...
    def save(
        self, path: str | PathLike[str], *, data: Any = None, source: str | None = None
    ) -> None: ...
    @property
    def ntotal(self) -> int: ...


registry: Registry[Index] = Registry(
    "indexes",
    {
        "flat": "ragbench.indexes.faiss_indexes:FlatIndex",
        "hnsw": "ragbench.indexes.hnswlib_index:HnswIndex",
        "faiss-hnsw": "ragbench.indexes.faiss_indexes:FaissHnswIndex",
        "ivf": "ragbench.indexes.faiss_indexes:IvfIndex",
        "lsh": "ragbench.indexes.faiss_indexes:LshIndex",
        "minhash-lsh": "ragbench.indexes.minhash:MinHashLshIndex",
        # compressed codes, for search + exact re-scoring (ragbench.indexes.compressed)
        "ivfpq": "ragbench.indexes.compressed:IvfPqIndex",
        "ivfpq-fs": "ragbench.indexes.compressed:IvfPqFastScanIndex",
        "ivf-sq8": "ragbench.indexes.compressed:IvfSq8Index",
        "hnsw-sq": "ragbench.indexes.compressed:HnswSqIndex",
        "hnsw-fp16": "ragbench.indexes.compressed:HnswFp16Index",
        "binary-flat": "ragbench.indexes.compressed:BinaryFlatIndex",
        "binary-hnsw": "ragbench.indexes.compressed:BinaryHnswIndex",
        # vector database engines in process (ragbench[vectordb]); qdrant-edge is
        # Qdrant's engine, embedded (qdrant-edge-py), not the Qdrant server
        "usearch": "ragbench.indexes.usearch_index:UsearchIndex",
        "qdrant-edge": "ragbench.indexes.qdrant_edge_index:QdrantEdgeIndex",
        # LanceDB (a table in a temporary folder) and Chroma (a PersistentClient), embedded
        "lancedb": "ragbench.indexes.lancedb_index:LanceDbIndex",
        "chroma": "ragbench.indexes.chroma_index:ChromaIndex",
        # PostgreSQL + pgvector, a real server (ragbench's own, or [retrieve] build dsn=)
        "pgvector": "ragbench.indexes.pgvector_index:PgvectorIndex",
    },
)
create = registry.create

#: A vector width for checking an index's parameter names and values before
#: the data (and so its real width) is known: ``create(name, dim=PROBE_DIM, ...)``.
PROBE_DIM = 64
names = registry.names
register = registry.register


def with_dsn(name: str, build: dict[str, Any], dsn: str | None) -> dict[str, Any]:
    """``build`` plus ``dsn`` (``[retrieve] dsn``) for a backend that takes one (``pgvector``).

    Backends without a ``dsn`` build parameter get ``build`` unchanged, so one
    config can compare ``hnsw`` with ``pgvector`` on an existing server; a
    ``dsn`` in ``build`` itself wins.
    """
    if dsn is None or "dsn" in build:
        return build
    defaults = getattr(registry.factory(name), "build_defaults", {})
    return {**build, "dsn": dsn} if "dsn" in defaults else build


def build_timed(index: Index, data: Any) -> tuple[int, int]:
    """``index.build(data)``; returns ``(build_ns, compile_ns)``.

    ``compile_ns`` is what ``build`` spent loading or compiling kernels of
    ragbench's own (the index's ``compile_ns``: hnsw's score conversion,
    once per process), reported apart so build times stay the library's.
    """
    t0 = time.perf_counter_ns()
    index.build(data)
    wall = time.perf_counter_ns() - t0
    compile_ns = min(wall, int(getattr(index, "compile_ns", 0)))
    return wall - compile_ns, compile_ns


def load(path: str | PathLike[str]) -> Index:
    """Load an index written by ``Index.save`` (library format + JSON header)."""
    from .persist import load_index

    return load_index(path)


def data_fingerprint(data: Any) -> str:
    """sha256 hex of an index's corpus (vectors or texts), as ``save(path, data=...)`` records it."""
    from .persist import data_fingerprint as fingerprint

    return fingerprint(data)

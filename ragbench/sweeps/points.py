"""What sweep and scale points share: an index built on the sweep data, its fields, bytes per vector."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import indexes, rerankers
from ..indexes import builds
from ..metrics import rerank_metric
from ..pipeline.capabilities import CompressedCodes, FiltersOnAttributes, RecordsBuild
from ..results.rebuilds import seeded_build
from .data import SweepData

__all__ = [
    "EF_RAISED_TO_CANDIDATES",
    "build_index",
    "bytes_fields",
    "effective_query",
    "exact_reranker",
    "point_fields",
]


#: Indexes that search with ``ef = max(ef, candidates asked for)``: a point asking
#: for a smaller ``ef`` runs at the number of candidates (k, or ``rescore``).
#: hnswlib and usearch keep ``ef`` on the index and the wrappers set ``max(ef, k)``
#: (a smaller beam cannot return k results); faiss's HNSW indexes (``faiss-hnsw``,
#: ``hnsw-sq``, ``hnsw-fp16``, ``binary-hnsw``) get ``efSearch = max(ef, k)`` per call;
#: Qdrant searches its graph with ``max(hnsw_ef, limit)``; pgvector's wrapper sets
#: ``hnsw.ef_search`` to ``max(ef, k)``, at most 1000 (the value is the cap).
#: LanceDB refuses an ``ef`` under k instead. ``tests/sweeps/test_sweeps.py`` checks each.
EF_RAISED_TO_CANDIDATES: dict[str, int | None] = {
    "hnsw": None,
    "faiss-hnsw": None,
    "hnsw-sq": None,
    "hnsw-fp16": None,
    "binary-hnsw": None,
    "usearch": None,
    "qdrant-edge": None,
    "pgvector": 1000,
}


def effective_query(
    name: str, index: Any, params: Mapping[str, Any], candidates: int
) -> dict[str, Any] | None:
    """The query parameters ``index`` ran with when they differ from ``params`` (else ``None``).

    ``candidates``: how many results each search asks for (k, or ``rescore``).
    An ``ef`` under it, given or the index's default, runs as ``candidates``
    (capped as :data:`EF_RAISED_TO_CANDIDATES` says) on those indexes.
    """
    if name not in EF_RAISED_TO_CANDIDATES or "ef" not in index.query_params:
        return None
    ef = params.get("ef", dict(index.default_query_params).get("ef"))
    cap = EF_RAISED_TO_CANDIDATES[name]
    ran = candidates if cap is None else min(cap, candidates)
    if ef is None or int(ef) >= ran:
        return None
    return {**params, "ef": int(ran)}


def bytes_fields(
    index: Any, vectors: np.ndarray, rescore: int | None, memory: int | None = None
) -> dict[str, Any]:
    """Bytes per vector: the index's whole, its code alone, and re-scoring's.

    The whole is ``memory`` / n (the measured ``memory_bytes``,
    :mod:`ragbench.sweeps.memory`), else the index's own ``memory_bytes()`` / n.
    ``code_bytes_per_vector`` is the compressed backends' code size (``None``
    for the others); ``rescore_bytes_per_vector`` is what re-scoring reads for
    each candidate (``dim`` × the vectors' item size: 4 for float32), 0 without it,
    and ``rescore_bytes`` the float vectors it reads from (n of them), 0 without it.
    """
    compressed = isinstance(index, CompressedCodes)
    n = max(1, int(index.ntotal))
    per = int(vectors.shape[1]) * vectors.itemsize if rescore else 0
    whole = index.memory_bytes() if memory is None else memory
    return {
        "bytes_per_vector": whole / n,
        "code_bytes_per_vector": int(index.code_bytes_per_vector()) if compressed else None,
        "rescore_bytes_per_vector": per,
        "rescore_bytes": per * int(vectors.shape[0]),
    }


def point_fields(data: SweepData, k: int, name: str, index: Any, build_s: float) -> dict[str, Any]:
    """The fields of a sweep or scale record about ``index`` built on ``data`` (build, memory),
    and what embedded its vectors when an embedder did (``embedder``, ``embed_agreement``)."""
    record = index.build_record if isinstance(index, RecordsBuild) else None
    embedded = (
        {"embedder": data.embedder, "embed_agreement": data.embed_agreement}
        if data.embedder is not None
        else {}
    )
    return embedded | {
        "dataset": data.name,
        "n": int(data.vectors.shape[0]),
        "dim": int(data.vectors.shape[1]),
        "metric": data.metric,
        "k": k,
        "index": name,
        "build": dict(index.build_params),
        "build_s": build_s,
        "build_info": dict(record) if record else None,
        "memory_bytes": int(index.memory_bytes()),  # replaced by the measured one (.memory)
        # threads one query's search may use (None: the library's pools, not limited)
        "search_threads": _search_threads(index),
    }


def _search_threads(index: Any) -> int | None:
    count = getattr(index, "search_thread_count", None)
    return count() if callable(count) else 1


def build_index(
    name: str, data: SweepData, build: Mapping[str, Any], *, fast_build: bool = False, i: int = 0
) -> tuple[Any, float]:
    """Index ``name`` built on ``data`` (:func:`ragbench.indexes.builds.build`): (index, build s).

    ``i``: the rebuild number; build ``i`` uses ``seed + i`` where the index
    has a ``seed``. The build seconds are the original build's for an index
    loaded from the cache.
    """
    dim, metric = int(data.vectors.shape[1]), data.metric
    params = dict(seeded_build(name, build, i))
    index = indexes.create(name, dim=dim, metric=metric, **params)
    if data.attributes and isinstance(index, FiltersOnAttributes):
        index.set_attributes(data.attributes)  # typed columns beside the vectors, as a run
    corpus = data.texts if index.input_kind == "texts" else data.vectors
    done = builds.build(index, corpus, fast=fast_build, source=f"sweep data {data.name!r}")
    record = (done.index.build_record if isinstance(done.index, RecordsBuild) else None) or {}
    return done.index, float(record.get("seconds") or done.build_ns / 1e9)


def exact_reranker(data: SweepData) -> Any:
    """The numba reranker re-scoring candidates exactly in ``data``'s metric, compiled."""
    # parallel across queries for batch QPS; single queries run on the one pinned thread
    reranker = rerankers.create("numba", metric=rerank_metric(data.metric), parallel=True)
    reranker.warmup(int(data.vectors.shape[1]))
    return reranker

"""Recall–latency frontiers (``sweep``) and cost as the corpus grows (``scale``).

Build parameters go to ``create``, query parameters to each ``search`` call;
a sweep is the cartesian product of both per index, skipping parameters an
index does not take. Every point is measured the same way:

- recall@k against exact search (tie-aware);
- latency per query from one query per call on one thread (never a batch
  time divided by N), reported as p50/p95/p99;
- batch throughput with all pinned threads;
- build time and index memory.

``rescore`` is a query parameter every index accepts here: ask the index for
``rescore`` candidates and re-score them exactly with the numba reranker, as
the pipeline's rerank stage would (LSH, MinHash LSH and the binary indexes
need it; the compressed ones of :mod:`ragbench.indexes.compressed` are meant
for it). Such a point reports recall before re-scoring (the index's own top
k) beside recall after it, and the bytes re-scoring reads per vector apart
from the index's own bytes per vector.

Recall is kept per query (``recall_per_query``) with its mean (``recall``)
and 10th percentile (``recall_p10``): a mean of 0.95 can hide queries at 0.5.

Filtered sweeps: with ``filter_selectivities`` the data carries, per
requested selectivity, one filter per query (:mod:`ragbench.attributes`) and
the exact filtered neighbours (:class:`FilterCase`); every query-parameter
point is then also measured at each selectivity with each filter strategy
the index has (``search(..., filter=mask, strategy=...)``), recall against the
filtered truth. Each such point carries ``strategy``, ``selectivity``,
``filter`` (achieved selectivity mean/min/max) and ``filter_cliff``: for its
(index, parameters, strategy) line, the selectivity below which recall falls
under ``recall_target`` or p50 grows more than 3× (see
:func:`ragbench.records.filter_cliffs`).

Both drivers split their work into independent units run by an executor
(:mod:`ragbench.executors`): in this process, in order (the default), or as
Ray tasks. A sweep unit is one (index, build parameters): built once, then
measured at every query-parameter point (:func:`sweep_unit`); a scale unit is
one (corpus size, index) (:func:`scale_unit`). Records come back as each
point finishes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import numpy as np

from . import datasets, embedders, indexes, intervals, rerankers, threads
from .attributes import QueryFilters
from .errors import ConfigError
from .executors import Executor, LocalExecutor, Unit
from .indexes import builds
from .metrics import recall_at_k, rerank_metric
from .pipeline.capabilities import (
    CompressedCodes,
    FilteredSearch,
    FiltersOnAttributes,
    RecordsBuild,
)
from .rebuilds import merge_builds, recall_interval
from .records import Collector, cliff_key, filter_cliffs, new_record
from .timing import Stats, run_stages
from .validate import positive_int

__all__ = [
    "FilterCase",
    "SweepData",
    "bytes_fields",
    "check_grid",
    "count_points",
    "index_param_names",
    "measure",
    "recall_fields",
    "scale_points",
    "scale_unit",
    "sweep_points",
    "sweep_unit",
    "synthetic_data",
    "tune",
]

#: Values tried, in order, to reach a recall target in ``scale``.
TUNING = {
    "ef": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024],
    "nprobe": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    "rescore": [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
}


#: Candidates ``scale`` re-scores for a compressed index while tuning its ef/nprobe.
SCALE_RESCORE = 100


@dataclass(frozen=True)
class FilterCase:
    """One requested selectivity: a filter per sweep query and the exact filtered top k.

    ``filters.masks`` bool ``(nq, n)``; ``truth`` int64 ``(nq, k)``, -1 padded.
    """

    selectivity: float
    filters: QueryFilters
    truth: np.ndarray


@dataclass
class SweepData:
    """Vectors, texts and exact neighbours one sweep measures against (and filter cases)."""

    name: str
    vectors: np.ndarray
    queries: np.ndarray
    texts: list[str]
    query_texts: list[str]
    truth: np.ndarray
    metric: str
    filter_cases: list[FilterCase] = field(default_factory=list)
    #: the corpus's attribute columns (filtered sweeps): a database index stores them
    attributes: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_dataset(
        cls,
        ds: Any,
        *,
        k: int,
        n_queries: int | None = None,
        embedder: str | None = None,
        metric: str | None = None,
        re_embed: bool = False,
        filter_selectivities: Sequence[float] = (),
        filter_table: Mapping[str, Any] | None = None,
    ) -> SweepData:
        """Vectors and exact neighbours of ``ds``; ``re_embed`` as in ``Dataset.corpus_vectors``.

        ``filter_selectivities``: one :class:`FilterCase` each, drawn as
        ``filter_table`` says (``attribute``, ``correlated``, ``seed``; see
        :meth:`ragbench.datasets.Dataset.query_filters`) at that selectivity.
        """
        emb = embedder or ds.default_embedder
        metric = metric or ds.metric
        e: Any = "precomputed" if emb == "precomputed" else embedders.create(emb)
        if emb == "precomputed":
            X, Q = ds.vectors, ds.query_vectors_precomputed
        else:
            X = ds.corpus_vectors(e, re_embed=re_embed)
            Q = ds.query_vectors(e, re_embed=re_embed)
        truth = ds.exact_neighbors(k, embedder=e, metric=metric, re_embed=re_embed)
        nq = len(Q) if n_queries is None else min(n_queries, len(Q))
        cases = []
        for sel in filter_selectivities:
            table = {**(filter_table or {}), "selectivity": sel}
            qf = ds.query_filters(table, embedder=e, metric=metric)
            ftruth = ds.exact_neighbors(k, embedder=e, metric=metric, filters=qf)
            cases.append(FilterCase(float(sel), qf.subset(nq), ftruth[:nq]))
        return cls(
            ds.name,
            X,
            Q[:nq],
            list(ds.corpus.texts),
            list(ds.queries.texts[:nq]),
            truth[:nq],
            metric,
            cases,
            dict(ds.corpus.attributes) if cases else {},
        )


def index_param_names(name: str, dim: int, metric: str) -> tuple[set[str], set[str]]:
    """(build parameter names, query parameter names) the index ``name`` accepts.

    ``rescore`` is a query parameter of every index here (see the module docstring).
    """
    probe = indexes.create(name, dim=dim, metric=metric)
    return set(probe.build_params), set(probe.query_params) | {"rescore"}


def check_grid(
    index_names: Sequence[str],
    dim: int,
    metric: str,
    build_grid: Mapping[str, Any],
    query_grid: Mapping[str, Any],
) -> None:
    """Raise :class:`ConfigError` for a grid parameter that none of the indexes takes."""
    b_all: set[str] = set()
    q_all: set[str] = set()
    for name in index_names:
        b, q = index_param_names(name, dim, metric)
        b_all |= b
        q_all |= q
    for given, valid, what in ((build_grid, b_all, "build"), (query_grid, q_all, "query")):
        bad = sorted(set(given) - valid)
        if bad:
            raise ConfigError(
                f"{what} parameter {bad[0]!r} applies to none of {', '.join(index_names)}; "
                f"valid: {', '.join(sorted(valid))}"
            )


class _Query:
    """One sweep query on its way through the timed steps (search, then optional re-scoring)."""

    __slots__ = ("query", "vector", "ids", "rescored", "allowed", "where")

    def __init__(
        self, query: Any, vector: np.ndarray, allowed: np.ndarray | None = None, where: Any = None
    ) -> None:
        self.query = query
        self.vector = vector
        self.ids: np.ndarray = np.empty(0, np.int64)  # the index's candidates, its order
        self.rescored: np.ndarray = self.ids  # the re-scored top k (when re-scoring)
        self.allowed = allowed
        self.where = where  # the filter as a spec, for an index that takes ``where=``


def _steps(
    index: Any,
    kk: int,
    params: Mapping[str, Any],
    k: int,
    vectors: np.ndarray,
    reranker: Any,
    filtered: bool = False,
) -> list[Callable[[_Query], None]]:
    search = index.search

    def search_step(q: _Query) -> None:
        q.ids = search(q.query, kk, **params)[0][0]

    def filtered_step(q: _Query) -> None:
        q.ids = search(q.query, kk, filter=q.allowed, **params)[0][0]

    def where_step(q: _Query) -> None:
        q.ids = search(q.query, kk, filter=q.allowed, where=q.where, **params)[0][0]

    if filtered:
        search_step = where_step if isinstance(index, FiltersOnAttributes) else filtered_step

    if reranker is None:
        return [search_step]
    rerank = reranker.rerank

    def rescore_step(q: _Query) -> None:
        q.rescored = rerank(q.vector, q.ids, vectors, k)[0]

    return [search_step, rescore_step]


def measure(
    index: Any,
    data: SweepData,
    k: int,
    params: Mapping[str, Any],
    *,
    rescore: int | None = None,
    reranker: Any = None,
    repeat: int = 1,
    case: FilterCase | None = None,
    strategy: str | None = None,
) -> dict[str, Any]:
    """Recall, per-query latency (one query per call, one thread) and batch QPS of one point.

    Each query is timed with :func:`ragbench.timing.run_stages` over its steps
    (the search, then the exact re-scoring when ``rescore`` is set), like a
    pipeline request; the point reports the total and each step's p50, with
    bootstrap intervals for p50 and p99 (over ``repeat`` passes over the
    queries, then queries within each, when ``repeat > 1``). With ``case``,
    each query searches with its filter and ``strategy``; recall is against
    the filtered truth, and a returned row outside the filter counts as a
    miss (``filter_violations`` counts them).
    """
    kk = min(rescore or k, index.ntotal)
    if kk < k:
        raise ConfigError(f"rescore={rescore} must be >= k={k}")
    texts = index.input_kind == "texts"
    Q, X = data.queries, data.vectors
    nq = len(Q)
    masks = None if case is None else case.filters.masks
    # a database index gets each query's spec too (SQL on its attribute columns), as in a run
    specs = case.filters.specs if case and isinstance(index, FiltersOnAttributes) else None
    if case is not None and strategy is not None:
        params = {**params, "strategy": strategy}
    steps = _steps(index, kk, params, k, X, reranker if rescore else None, masks is not None)
    batch_threads = threads.get_threads()
    found, before, stamps = _time_queries(steps, data, masks, k, repeat, texts, specs)
    per_step = np.diff(stamps, axis=1)
    totals = per_step.sum(axis=1)
    lat = Stats.from_samples(totals)
    groups = np.repeat(np.arange(repeat), nq) if repeat > 1 else None
    cis = {s: intervals.bootstrap(totals, s, groups=groups) for s in ("p50", "p99")}
    batch_s = _batch_seconds(
        index, data, kk, params, masks, reranker if rescore else None, k, specs
    )
    violations = _drop_outside(found, masks)
    truth = data.truth if case is None else case.truth
    recall = recall_at_k(found, truth, X, Q, k, data.metric)
    point = {
        **recall_fields(recall),
        "recall_ci": recall_interval(recall),
        "p50_us": lat.p50_ns / 1e3,
        "p95_us": lat.p95_ns / 1e3,
        "p99_us": lat.p99_ns / 1e3,
        "mean_us": lat.mean_ns / 1e3,
        "qps_single": 1e9 / lat.p50_ns if lat.p50_ns > 0 else float("inf"),
        "qps_batch": nq / batch_s if batch_s > 0 else float("inf"),
        "batch_threads": batch_threads,
        "queries": nq,
        "search_p50_us": Stats.from_samples(per_step[:, 0]).p50_ns / 1e3,
        "latency_ns": totals.tolist(),  # raw, one query per call (diff, intervals)
        "p50_us_ci": [cis["p50"].low / 1e3, cis["p50"].high / 1e3],
        "p99_us_ci": [cis["p99"].low / 1e3, cis["p99"].high / 1e3],
        "repeats": repeat,
    }
    if case is not None:
        point.update(strategy=strategy or "auto", selectivity=case.selectivity)
        point.update(filter=_filter_summary(case, index, strategy), filter_violations=violations)
    if groups is not None:
        point["repetition"] = groups.tolist()
    if len(steps) > 1:
        point["rescore_p50_us"] = Stats.from_samples(per_step[:, 1]).p50_ns / 1e3
        _drop_outside(before, masks)
        pre = recall_at_k(before, truth, X, Q, k, data.metric)
        point["recall_before_rescore"] = float(pre.mean())
        point["recall_before_rescore_p10"] = _p10(pre)
    return point


def _filter_summary(case: FilterCase, index: Any, strategy: str | None) -> dict[str, Any]:
    """The filter's summary; for a database index the path it ran (as a run record's)."""
    out = case.filters.summary()
    if isinstance(index, FiltersOnAttributes):
        in_db = (strategy or "auto") in ("auto", "in-graph")
        out["path"] = index.filter_path if in_db else strategy
    return out


def _p10(recall: np.ndarray) -> float:
    return float(np.percentile(recall, 10)) if recall.size else float("nan")


def recall_fields(recall: np.ndarray) -> dict[str, Any]:
    """``recall`` (mean), ``recall_p10`` and ``recall_per_query`` of per-query recalls ``(nq,)``."""
    return {
        "recall": float(recall.mean()) if recall.size else float("nan"),
        "recall_p10": _p10(recall),
        "recall_per_query": [round(float(v), 6) for v in recall],
    }


def _time_queries(
    steps: list[Callable[[_Query], None]],
    data: SweepData,
    masks: np.ndarray | None,
    k: int,
    repeat: int,
    texts: bool,
    specs: list[dict[str, Any]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each query once per repeat through ``steps`` on one thread.

    (found ids, the index's own top k before re-scoring, stamps); ids ``(nq, k)`` -1 padded.
    """
    Q = data.queries
    nq = len(Q)
    found = np.full((nq, k), -1, dtype=np.int64)
    before = np.full((nq, k), -1, dtype=np.int64)
    stamps = np.zeros((repeat * nq, len(steps) + 1), dtype=np.int64)
    row = [0] * (len(steps) + 1)
    batch_threads = threads.get_threads()
    threads.set_threads(1)
    try:
        for r in range(positive_int("sweep", "repeat", repeat)):
            for i in range(nq):
                allowed = None if masks is None else masks[i]
                where = None if specs is None else specs[i]
                q = _Query([data.query_texts[i]] if texts else Q[i : i + 1], Q[i], allowed, where)
                run_stages(steps, q, row)
                stamps[r * nq + i] = row
                before[i, : min(k, len(q.ids))] = q.ids[:k]
                final = q.rescored if len(steps) > 1 else q.ids
                found[i, : min(k, len(final))] = final[:k]
    finally:
        threads.set_threads(batch_threads)
    return found, before, stamps


def _drop_outside(found: np.ndarray, masks: np.ndarray | None) -> int:
    """In place: ``-1`` for found ids outside each query's filter; how many there were."""
    if masks is None:
        return 0
    outside = (found >= 0) & ~np.take_along_axis(masks, np.maximum(found, 0), axis=1)
    found[outside] = -1
    return int(outside.sum())


def _batch_seconds(
    index: Any,
    data: SweepData,
    kk: int,
    params: Mapping[str, Any],
    masks: np.ndarray | None,
    reranker: Any,
    k: int,
    specs: list[dict[str, Any]] | None = None,
) -> float:
    """Seconds for the whole query batch in one call (with every pinned thread)."""
    texts = index.input_kind == "texts"
    extra: dict[str, Any] = {} if masks is None else {"filter": masks}
    if specs is not None:
        extra["where"] = specs
    t0 = perf_counter_ns()
    ids, _ = index.search(data.query_texts if texts else data.queries, kk, **params, **extra)
    if reranker is not None:
        reranker.rerank_batch(data.queries, ids, data.vectors, k)
    return (perf_counter_ns() - t0) / 1e9


def _grid_axes(
    name: str,
    dim: int,
    metric: str,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
) -> tuple[list[tuple[str, list[Any]]], list[tuple[str, list[Any]]]]:
    """The (parameter, values) axes of ``name``'s build and query grids (others skipped)."""
    build_names, query_names = index_param_names(name, dim, metric)
    b_axes = [(p, list(v)) for p, v in build_grid.items() if p in build_names]
    q_axes = [(p, list(v)) for p, v in query_grid.items() if p in query_names]
    return b_axes, q_axes


def _combos(axes: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    names = [p for p, _ in axes]
    return [
        dict(zip(names, values, strict=True)) for values in itertools.product(*[v for _, v in axes])
    ]


def bytes_fields(index: Any, vectors: np.ndarray, rescore: int | None) -> dict[str, Any]:
    """Bytes per vector: the index's whole (serialized size / n), its code alone, and re-scoring's.

    ``code_bytes_per_vector`` is the compressed backends' code size (``None``
    for the others); ``rescore_bytes_per_vector`` is what re-scoring reads for
    each candidate (``dim`` × the vectors' item size: 4 for float32), 0 without it.
    """
    compressed = isinstance(index, CompressedCodes)
    n = max(1, int(index.ntotal))
    return {
        "bytes_per_vector": index.memory_bytes() / n,
        "code_bytes_per_vector": int(index.code_bytes_per_vector()) if compressed else None,
        "rescore_bytes_per_vector": int(vectors.shape[1]) * vectors.itemsize if rescore else 0,
    }


def _point_fields(data: SweepData, k: int, name: str, index: Any, build_s: float) -> dict[str, Any]:
    record = index.build_record if isinstance(index, RecordsBuild) else None
    return {
        "dataset": data.name,
        "n": int(data.vectors.shape[0]),
        "dim": int(data.vectors.shape[1]),
        "metric": data.metric,
        "k": k,
        "index": name,
        "build": dict(index.build_params),
        "build_s": build_s,
        "build_info": dict(record) if record else None,
        "memory_bytes": int(index.memory_bytes()),
    }


def _built(
    name: str, data: SweepData, build: Mapping[str, Any], *, fast_build: bool = False, i: int = 0
) -> tuple[Any, float]:
    """Index ``name`` built on ``data`` (:func:`ragbench.indexes.builds.build`): (index, build s).

    ``i``: the rebuild number; build ``i`` uses ``seed + i`` where the index
    has a ``seed``. The build seconds are the original build's for an index
    loaded from the cache.
    """
    dim, metric = int(data.vectors.shape[1]), data.metric
    params = dict(build)
    if i:
        probe = indexes.create(name, dim=dim, metric=metric, **params)
        if "seed" in probe.build_params:
            params["seed"] = int(probe.build_params["seed"]) + i
    index = indexes.create(name, dim=dim, metric=metric, **params)
    if data.attributes and isinstance(index, FiltersOnAttributes):
        index.set_attributes(data.attributes)  # typed columns beside the vectors, as a run
    corpus = data.texts if index.input_kind == "texts" else data.vectors
    done = builds.build(index, corpus, fast=fast_build, source=f"sweep data {data.name!r}")
    record = (done.index.build_record if isinstance(done.index, RecordsBuild) else None) or {}
    return done.index, float(record.get("seconds") or done.build_ns / 1e9)


def _exact_reranker(data: SweepData) -> Any:
    # parallel across queries for batch QPS; single queries run on the one pinned thread
    reranker = rerankers.create("numba", metric=rerank_metric(data.metric), parallel=True)
    reranker.warmup(int(data.vectors.shape[1]))
    return reranker


def sweep_unit(
    data: SweepData,
    name: str,
    build: Mapping[str, Any],
    queries: Sequence[Mapping[str, Any]],
    *,
    k: int,
    repeat: int = 1,
    strategies: Sequence[str] = ("auto",),
    recall_target: float = 0.9,
    rebuilds: int = 1,
    fast_build: bool = False,
) -> Iterator[dict[str, Any]]:
    """Build index ``name`` with ``build``, then yield one sweep record per query-parameter point.

    With filter cases in ``data``, each query-parameter point is followed by
    its filtered points (each of ``strategies`` the index has, at each
    selectivity), yielded once the line is complete, with ``filter_cliff``.
    Builds are deterministic unless ``fast_build``; with ``rebuilds > 1`` the
    index is built that many times (seed, seed + 1, ...) and each point's
    records of every build are merged (:func:`ragbench.rebuilds.merge_builds`),
    yielded once the last build is measured.
    """
    opts: dict[str, Any] = {"k": k, "repeat": repeat, "strategies": strategies}
    opts["fast_build"] = fast_build
    n = positive_int("sweep", "rebuilds", rebuilds)
    if n == 1:
        for point, line in _build_points(data, name, build, queries, i=0, **opts):
            yield from _with_cliffs(point, line, recall_target)
        return
    per_build = [list(_build_points(data, name, build, queries, i=i, **opts)) for i in range(n)]
    for same in zip(*per_build, strict=True):
        point = merge_builds([p for p, _ in same])
        line = [merge_builds(list(group)) for group in zip(*[ln for _, ln in same], strict=True)]
        yield from _with_cliffs(point, line, recall_target)


def _with_cliffs(
    point: dict[str, Any], line: list[dict[str, Any]], recall_target: float
) -> Iterator[dict[str, Any]]:
    yield new_record("sweep", point)
    cliffs = filter_cliffs(line, target=recall_target)
    for p in line:
        yield new_record("sweep", {**p, "filter_cliff": cliffs[cliff_key(p)]})


def _build_points(
    data: SweepData,
    name: str,
    build: Mapping[str, Any],
    queries: Sequence[Mapping[str, Any]],
    *,
    k: int,
    repeat: int,
    strategies: Sequence[str],
    fast_build: bool,
    i: int,
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Build ``i`` of the unit; per query point its fields and its filtered line (no cliffs yet)."""
    index, build_s = _built(name, data, build, fast_build=fast_build, i=i)
    fields = _point_fields(data, k, name, index, build_s)
    usable = _usable_strategies(index, strategies) if data.filter_cases else []
    reranker = None
    for point_params in queries:
        params = dict(point_params)
        rescore = params.pop("rescore", None)
        if rescore is not None and reranker is None:
            reranker = _exact_reranker(data)
        opts = {"rescore": rescore, "reranker": reranker, "repeat": repeat}
        sizes = bytes_fields(index, data.vectors, rescore)
        head = {**fields, **sizes, "query": params, "rescore": rescore}
        point = {**head, **measure(index, data, k, params, **opts)}
        line = [
            head | measure(index, data, k, params, case=case, strategy=strategy, **opts)
            for strategy in usable
            for case in data.filter_cases
        ]
        yield point, line


def _usable_strategies(index: Any, wanted: Sequence[str]) -> list[str]:
    """The strategies of ``wanted`` that ``index`` has (``auto`` when it has any)."""
    has = tuple(index.filter_strategies) if isinstance(index, FilteredSearch) else ()
    return [s for s in wanted if s in has or (s == "auto" and has)]


def sweep_points(
    data: SweepData,
    index_names: Sequence[str],
    *,
    k: int,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    repeat: int = 1,
    executor: Executor | None = None,
    strategies: Sequence[str] = ("auto",),
    recall_target: float = 0.9,
    rebuilds: int = 1,
    fast_build: bool = False,
) -> list[dict[str, Any]]:
    """Measure every (index, build params, query params) point; ``on_point`` gets each record at once.

    Builds are deterministic unless ``fast_build``; ``rebuilds``: builds per
    (index, build params), merged per point (see :func:`sweep_unit`).

    One unit of work per (index, build params) (:func:`sweep_unit`), run by
    ``executor`` (default: in this process, in order); the data is shared
    with the units once (:meth:`~ragbench.executors.Executor.share`: on Ray,
    one copy in the object store, since embedding and exact search are done once here).
    """
    dim = int(data.vectors.shape[1])
    ex = executor or LocalExecutor()
    shared = ex.share(data)
    units = []
    for name in index_names:
        b_axes, q_axes = _grid_axes(name, dim, data.metric, build_grid, query_grid)
        queries = _combos(q_axes)
        for build in _combos(b_axes):
            opts = {"k": k, "repeat": repeat, "strategies": list(strategies)}
            opts.update(recall_target=recall_target, rebuilds=rebuilds, fast_build=fast_build)
            units.append(Unit(sweep_unit, (shared, name, build, queries), opts))
    emit = Collector(on_point, progress)
    ex.run(units, emit)
    return emit.records


def count_points(
    index_names: Sequence[str],
    dim: int,
    metric: str,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
    *,
    selectivities: int = 0,
    strategies: Sequence[str] = ("auto",),
) -> int:
    """How many points :func:`sweep_points` will measure (``selectivities``: filter cases)."""
    total = 0
    for name in index_names:
        b_axes, q_axes = _grid_axes(name, dim, metric, build_grid, query_grid)
        probe = indexes.create(name, dim=dim, metric=metric) if selectivities else None
        per = 1 + selectivities * len(_usable_strategies(probe, strategies) if probe else [])
        total += math.prod(len(v) for _, v in b_axes) * math.prod(len(v) for _, v in q_axes) * per
    return total


# ---------------------------------------------------------------- scale


def _tuning_axis(index: Any, k: int) -> tuple[str, list[Any]]:
    """The query parameter tuned to reach a recall target, and the values tried in order."""
    qp = set(index.query_params)
    if "ef" in qp:
        return "ef", TUNING["ef"]
    if "nprobe" in qp:
        # the effective nlist (info) when the build parameter is None (automatic)
        nlist = int(index.build_params.get("nlist") or index.info().get("nlist") or 1024)
        return "nprobe", [v for v in TUNING["nprobe"] if v <= nlist] or [nlist]
    if index.name in ("lsh", "minhash-lsh", "binary-flat"):
        return "rescore", [v for v in TUNING["rescore"] if k <= v <= index.ntotal] or [index.ntotal]
    return "", [None]


def tune(
    index: Any, data: SweepData, k: int, target: float, reranker: Any
) -> tuple[dict[str, Any], int | None, dict[str, Any], bool]:
    """Smallest query parameter reaching ``target`` recall: (params, rescore, point, reached).

    A compressed index (one with ``code_bytes_per_vector``) is measured with
    its top :data:`SCALE_RESCORE` candidates re-scored exactly.

    When no value reaches it, the last (most accurate) value tried is returned with ``reached=False``.
    """
    axis, values = _tuning_axis(index, k)
    # compressed indexes are meant to be re-scored: a fixed number of candidates
    fixed = None
    if hasattr(index, "code_bytes_per_vector"):
        fixed = max(k, min(SCALE_RESCORE, index.ntotal))
    for j, v in enumerate(values):
        params: dict[str, Any] = {} if axis in ("", "rescore") else {axis: v}
        rescore = v if axis == "rescore" else fixed
        point = measure(index, data, k, params, rescore=rescore, reranker=reranker)
        if point["recall"] >= target or j == len(values) - 1:
            return params, rescore, point, point["recall"] >= target
    raise ConfigError(f"index {index.name!r}: no tuning values")  # values is never empty


def synthetic_data(n: int, *, dim: int, n_queries: int, seed: int, k: int) -> SweepData:
    """The synthetic corpus of size ``n`` (deterministic: the same on every machine) as sweep data."""
    return SweepData.from_dataset(
        datasets.load("synthetic", n=n, dim=dim, n_queries=n_queries, seed=seed), k=k
    )


def scale_unit(
    make: Callable[[], SweepData],
    n: int,
    index_names: Sequence[str],
    *,
    k: int,
    target: float,
    build: Mapping[str, Mapping[str, Any]],
    rebuilds: int = 1,
    fast_build: bool = False,
) -> Iterator[dict[str, Any]]:
    """Make the size-``n`` data once; per index: build, tune to ``target`` recall, yield its record.

    With ``rebuilds > 1`` the query parameter is tuned on the first build and
    the same point measured on each further build (seed + i), merged by
    :func:`ragbench.rebuilds.merge_builds`.
    """
    data = make()
    reranker = _exact_reranker(data)
    count = positive_int("scale", "rebuilds", rebuilds)
    for name in index_names:
        index, build_s = _built(name, data, build.get(name, {}), fast_build=fast_build)
        params, rescore, point, reached = tune(index, data, k, target, reranker)
        points = [_scale_fields(data, k, name, index, build_s, n, rescore) | point]
        del index
        for i in range(1, count):
            again, again_s = _built(name, data, build.get(name, {}), fast_build=fast_build, i=i)
            more = measure(again, data, k, params, rescore=rescore, reranker=reranker)
            points.append(_scale_fields(data, k, name, again, again_s, n, rescore) | more)
            del again
        merged = merge_builds(points)
        yield new_record(
            "scale",
            {
                **merged,
                "query": params,
                "rescore": rescore,
                "target_recall": target,
                "reached": reached,
            },
        )


def _scale_fields(
    data: SweepData, k: int, name: str, index: Any, build_s: float, n: int, rescore: int | None
) -> dict[str, Any]:
    return {
        **_point_fields(data, k, name, index, build_s),
        "n": n,
        **bytes_fields(index, data.vectors, rescore),
    }


def scale_points(
    datasets_by_n: Iterable[tuple[int, Callable[[], SweepData]]],
    index_names: Sequence[str],
    *,
    k: int,
    target: float,
    build: Mapping[str, Mapping[str, Any]],
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    executor: Executor | None = None,
    rebuilds: int = 1,
    fast_build: bool = False,
) -> list[dict[str, Any]]:
    """Per corpus size and index: build, tune the query parameter to ``target`` recall, measure.

    Builds are deterministic unless ``fast_build``; ``rebuilds`` as in :func:`scale_unit`.

    In this process (the default executor) one unit per size makes its data
    once for every index; elsewhere (Ray) each (size, index) is its own unit
    and makes its own data by calling ``make`` where it runs, so give a
    ``make`` that is cheap to send and gives the same data everywhere, such
    as :func:`synthetic_data` bound with :func:`functools.partial` (no corpus
    crosses the network, and no size waits in the object store for its turn).
    """
    ex = executor or LocalExecutor()
    groups = [list(index_names)] if ex.in_process else [[name] for name in index_names]
    options = {"k": k, "target": target, "build": build}
    options.update(rebuilds=rebuilds, fast_build=fast_build)
    units = [
        Unit(scale_unit, (make, n, names), options) for n, make in datasets_by_n for names in groups
    ]
    emit = Collector(on_point, progress)
    ex.run(units, emit)
    return emit.records

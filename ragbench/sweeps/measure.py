"""One sweep point measured (:func:`measure`): recall, per-query latency, batch throughput."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import perf_counter_ns, thread_time_ns
from typing import Any

import numpy as np

from .. import intervals, judged, threads
from ..errors import ConfigError
from ..metrics import recall_at_k
from ..pipeline.capabilities import FiltersOnAttributes, filter_path
from ..pipeline.samples import server_clock
from ..results.rebuilds import recall_interval
from ..timing import Stats, run_stages
from ..validate import positive_int
from .data import FilterCase, SweepData

__all__ = ["WARMUP_QUERIES", "measure", "recall_fields"]


#: Untimed searches before each point's timed passes (``warmup`` in its record).
WARMUP_QUERIES = 1


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


_NO_IDS = np.empty(0, np.int64)


def _answer_empty(q: _Query) -> None:
    """A query whose filter allows no row: not searched, its answer empty (as in a run)."""
    q.ids = q.rescored = _NO_IDS


def _per_query_steps(
    steps: list[Callable[[_Query], None]], masks: np.ndarray | None
) -> list[list[Callable[[_Query], None]]]:
    """Each query's steps: ``steps``, or no search at all for a filter that allows no row.

    The search with such a filter raised (an empty allow-list), ending the whole sweep; a
    run answers it empty, its exact truth is empty too (recall 1.00, nothing to find), and
    ``filter.empty_rows`` names it. Chosen before the clock, so other queries time as before.
    """
    if masks is None:
        return [steps]
    empty: list[Callable[[_Query], None]] = [_answer_empty] * len(steps)
    return [steps if row.any() else empty for row in masks]


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
    miss (``filter_violations`` counts them). Before the timed passes,
    :data:`WARMUP_QUERIES` untimed searches with the same parameters and
    filter take whatever the point does only once (:func:`_warm_up`).
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
    _warm_up(steps, data, masks, texts, specs)
    clock = server_clock(index)
    found, before, stamps, cpu, server = _time_queries(
        steps, data, masks, k, repeat, texts, specs, clock
    )
    per_step = np.diff(stamps, axis=1)
    totals = per_step.sum(axis=1)
    batch_s = _batch_seconds(index, data, kk, params, masks, steps, reranker, k, specs)
    violations = _drop_outside(found, masks)
    truth = data.truth if case is None else case.truth
    recall = recall_at_k(found, truth, X, Q, k, data.metric)
    point = {
        **recall_fields(recall),
        "recall_ci": recall_interval(recall),
        **_latency_fields(totals, repeat, nq),
        "qps_batch": nq / batch_s if batch_s > 0 else float("inf"),
        "batch_threads": batch_threads,
        "queries": nq,
        "search_p50_us": Stats.from_samples(per_step[:, 0]).p50_ns / 1e3,
        # the calling thread's CPU time per query, beside its wall time (latency_ns)
        "cpu_p50_us": Stats.from_samples(cpu).p50_ns / 1e3,
        "cpu_ns": cpu.tolist(),
        **_server_fields(server),
        "warmup": WARMUP_QUERIES,
        # the point's searches back to back, nothing between them (ragbench.results.tables.cache_state)
        "cache_state": "hot",
    }
    if data.judgments is not None:  # answer quality of the k returned (ragbench.judged)
        per = judged.scores(found, np.arange(nq), data.judgments)
        point["judged"] = judged.summary(per, np.arange(nq), data.judgments, returned=k)
    if case is not None:
        point.update(strategy=strategy or "auto", selectivity=case.selectivity)
        point.update(filter=_filter_summary(case, index, strategy), filter_violations=violations)
    if len(steps) > 1:
        point["rescore_p50_us"] = Stats.from_samples(per_step[:, 1]).p50_ns / 1e3
        _drop_outside(before, masks)
        pre = recall_at_k(before, truth, X, Q, k, data.metric)
        point["recall_before_rescore"] = float(pre.mean())
        point["recall_before_rescore_p10"] = _p10(pre)
    return point


def _latency_fields(totals: np.ndarray, repeat: int, nq: int) -> dict[str, Any]:
    """p50/p95/p99/mean µs of the per-query ``totals`` (ns, ``(repeat * nq,)``), one-thread QPS,
    the raw samples and bootstrap intervals of p50 and p99 (passes, then queries, when
    ``repeat > 1``)."""
    lat = Stats.from_samples(totals)
    groups = np.repeat(np.arange(repeat), nq) if repeat > 1 else None
    cis = {s: intervals.bootstrap(totals, s, groups=groups) for s in ("p50", "p99")}
    out = {
        "p50_us": lat.p50_ns / 1e3,
        "p95_us": lat.p95_ns / 1e3,
        "p99_us": lat.p99_ns / 1e3,
        "mean_us": lat.mean_ns / 1e3,
        "qps_single": 1e9 / lat.p50_ns if lat.p50_ns > 0 else float("inf"),
        "latency_ns": totals.tolist(),  # raw, one query per call (diff, intervals)
        "p50_us_ci": [cis["p50"].low / 1e3, cis["p50"].high / 1e3],
        "p99_us_ci": [cis["p99"].low / 1e3, cis["p99"].high / 1e3],
        "repeats": repeat,
    }
    if groups is not None:
        out["repetition"] = groups.tolist()
    return out


def _server_fields(server: np.ndarray | None) -> dict[str, Any]:
    """``server_cpu_ns`` (per query) and its p50 in µs, when the server's CPU was read."""
    if server is None:
        return {}
    return {
        "server_cpu_ns": server.tolist(),
        "server_cpu_p50_us": Stats.from_samples(server).p50_ns / 1e3,
    }


def _filter_summary(case: FilterCase, index: Any, strategy: str | None) -> dict[str, Any]:
    """The filter's summary; for a database index the path it ran (as a run record's)."""
    out = case.filters.summary()
    path = filter_path(index, strategy)
    if path is not None:
        out["path"] = path
    return out


def _p10(recall: np.ndarray) -> float:
    return float(np.percentile(recall, 10)) if recall.size else float("nan")


def recall_fields(recall: np.ndarray) -> dict[str, Any]:
    """``recall`` (mean), ``recall_p10``, ``recall_zero`` (queries at 0) and ``recall_per_query``
    of per-query recalls ``(nq,)``."""
    return {
        "recall": float(recall.mean()) if recall.size else float("nan"),
        "recall_p10": _p10(recall),
        "recall_zero": int(np.count_nonzero(recall == 0)),
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
    clock: Callable[[], int | None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Each query once per repeat through ``steps`` on one thread.

    (found ids, the index's own top k before re-scoring, stamps, CPU ns, server CPU ns); ids
    ``(nq, k)`` -1 padded; CPU ns ``(repeat * nq,)``: the calling thread's CPU time
    (:func:`time.thread_time_ns`) across each query's steps, read outside the wall stamps so
    the wall times do not include the reads. Work an engine does on its own threads or in a
    server process is not in it: ``clock`` (a database server's process CPU, ns) is read
    around each query the same way, giving server CPU ns ``(repeat * nq,)`` (``None`` without).
    """
    Q = data.queries
    nq = len(Q)
    found = np.full((nq, k), -1, dtype=np.int64)
    before = np.full((nq, k), -1, dtype=np.int64)
    stamps = np.zeros((repeat * nq, len(steps) + 1), dtype=np.int64)
    row = [0] * (len(steps) + 1)
    cpu = np.zeros(repeat * nq, dtype=np.int64)
    server = None if clock is None else np.zeros(repeat * nq, dtype=np.int64)
    batch_threads = threads.get_threads()
    per_query = _per_query_steps(steps, masks)
    threads.set_threads(1)
    try:
        for r in range(positive_int("sweep", "repeat", repeat)):
            for i in range(nq):
                allowed = None if masks is None else masks[i]
                where = None if specs is None else specs[i]
                q = _Query([data.query_texts[i]] if texts else Q[i : i + 1], Q[i], allowed, where)
                mine = per_query[i if masks is not None else 0]
                s0 = clock() if clock is not None else None
                c0 = thread_time_ns()
                run_stages(mine, q, row)
                cpu[r * nq + i] = thread_time_ns() - c0
                if server is not None and s0 is not None:
                    server[r * nq + i] = (clock() or s0) - s0  # type: ignore[misc]
                stamps[r * nq + i] = row
                before[i, : min(k, len(q.ids))] = q.ids[:k]
                final = q.rescored if len(steps) > 1 else q.ids
                found[i, : min(k, len(final))] = final[:k]
    finally:
        threads.set_threads(batch_threads)
    return found, before, stamps, cpu, server


def _warm_up(
    steps: list[Callable[[_Query], None]],
    data: SweepData,
    masks: np.ndarray | None,
    texts: bool,
    specs: list[dict[str, Any]] | None,
) -> None:
    """Run the first :data:`WARMUP_QUERIES` queries through ``steps`` untimed, on one thread.

    Same parameters, filter and strategy as the timed passes: what a point
    does once (``pre`` copying the vectors out of the library, a changed
    ``ef`` set on the index, a kernel compiled for a new shape) happens here,
    not in the first timed query's sample.
    """
    Q = data.queries
    batch_threads = threads.get_threads()
    per_query = _per_query_steps(steps, masks)
    threads.set_threads(1)
    try:
        for i in range(min(WARMUP_QUERIES, len(Q))):
            allowed = None if masks is None else masks[i]
            where = None if specs is None else specs[i]
            q = _Query([data.query_texts[i]] if texts else Q[i : i + 1], Q[i], allowed, where)
            for step in per_query[i if masks is not None else 0]:
                step(q)
    finally:
        threads.set_threads(batch_threads)


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
    steps: list[Callable[[_Query], None]],
    reranker: Any,
    k: int,
    specs: list[dict[str, Any]] | None = None,
) -> float:
    """Seconds for the whole query batch in one call (with every pinned thread).

    ``reranker`` re-scores the candidates when ``steps`` do (two steps: search, re-scoring).
    """
    reranker = reranker if len(steps) > 1 else None
    texts = index.input_kind == "texts"
    rows = np.arange(len(data.queries))
    if masks is not None:  # a filter allowing no row is answered empty, unsearched (above)
        rows = np.flatnonzero(masks.any(axis=1))
        if rows.size == 0:
            return 0.0
    extra: dict[str, Any] = {} if masks is None else {"filter": masks[rows]}
    if specs is not None:
        extra["where"] = [specs[i] for i in rows]
    queries = data.queries[rows]
    asked = [data.query_texts[i] for i in rows] if texts else queries
    t0 = perf_counter_ns()
    ids, _ = index.search(asked, kk, **params, **extra)
    if reranker is not None:
        reranker.rerank_batch(queries, ids, data.vectors, k)
    return (perf_counter_ns() - t0) / 1e9

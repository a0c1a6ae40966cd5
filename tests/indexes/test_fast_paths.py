"""The measured fast paths (ragbench.indexes._fast_paths) return exactly what the reference returns.

Each helper answers one float32 ``(1, dim)`` query or returns ``None``; whenever it answers, the
answer must be the reference search's, bit for bit (ids, scores, dtypes, shapes), and whenever
the reference raises it must not answer. Hypothesis draws the queries (NaN/inf components,
overflowing and zero rows, strided rows), ``k`` (beyond the index too) and the query parameters;
two corpora per backend, one with many duplicate rows, give answers with pads. The last tests
run writers beside searchers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.indexes._embedded_engines import EngineIndex
from ragbench.indexes._fast_paths import (
    faiss_one_query,
    hnswlib_one_query,
    qdrant_one_query,
    usearch_one_query,
)
from ragbench.indexes.base import LiveVectorIndex

DIM, N = 16, 240


def hnswlib_with_params(index: Any, queries: Any, k: Any, params: dict[str, Any]) -> Any:
    """:func:`hnswlib_one_query` asked as ``HnswIndex.search`` asks it for these parameters."""
    if set(params) - {"ef"}:
        return None  # search leaves any other name to the reference, which refuses it
    return hnswlib_one_query(index, queries, k, params.get("ef", index._default_compiled))


#: backend -> (its fast path, its reference search, the query parameter it takes or None)
FAMILIES: dict[str, tuple[Callable[..., Any], Callable[..., Any], str | None]] = {
    "flat": (faiss_one_query, LiveVectorIndex.search, None),
    "faiss-hnsw": (faiss_one_query, LiveVectorIndex.search, "ef"),
    "ivf": (faiss_one_query, LiveVectorIndex.search, "nprobe"),
    "hnsw": (hnswlib_with_params, LiveVectorIndex.search, "ef"),
    "usearch": (usearch_one_query, EngineIndex.search, "ef"),
    "qdrant-edge": (qdrant_one_query, EngineIndex.search, "ef"),
}
_ENGINE_MODULE = {"usearch": "usearch.index", "qdrant-edge": "qdrant_edge"}


def corpus(kind: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    if kind == "spread":
        return rng.standard_normal((N, DIM)).astype(np.float32)
    # 12 distinct rows, each 20 times: graph walks reach few rows, so answers hold pads
    return np.repeat(rng.standard_normal((12, DIM)).astype(np.float32), N // 12, axis=0)


_BUILT: dict[tuple[str, str, str], Any] = {}


def built(name: str, metric: str, kind: str) -> Any:
    key = (name, metric, kind)
    if key not in _BUILT:
        if name in _ENGINE_MODULE:
            pytest.importorskip(_ENGINE_MODULE[name])
        index = rb.indexes.create(name, dim=DIM, metric=metric)
        index.build(corpus(kind))
        _BUILT[key] = index
    return _BUILT[key]


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """What a search did: ("ok", ids, scores) with copies, or ("raised", type, message)."""
    try:
        ids, scores = call()
    except Exception as exc:  # the comparison is of whatever the reference raises
        return ("raised", type(exc), str(exc))
    return ("ok", np.array(ids, copy=True), np.array(scores, copy=True))


def same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "raised":
        return a[1:] == b[1:]
    return all(
        x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True)
        for x, y in zip(a[1:], b[1:], strict=True)
    )


@st.composite
def queries(draw: st.DrawFn) -> np.ndarray:
    """One (1, DIM) float32 query: a corpus-like row, maybe with NaN/inf, huge, zero or strided."""
    seed = draw(st.integers(0, 2**32 - 1))
    row = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    kind = draw(st.sampled_from(["plain", "plain", "plain", "bad", "huge", "zero"]))
    if kind == "bad":
        row[draw(st.integers(0, DIM - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    elif kind == "huge":
        row *= np.float32(1e20)  # finite, but its scores overflow
    elif kind == "zero":
        row[:] = 0
    if draw(st.booleans()):
        wide = np.zeros((1, 2 * DIM), np.float32)
        wide[0, ::2] = row
        return wide[:, ::2]  # a strided (non-contiguous) row
    return row[None, :].copy()


def params_for(draw: st.DrawFn, name: str | None) -> dict[str, Any]:
    if name is None or draw(st.booleans()):
        return {}
    return {name: draw(st.sampled_from([1, 2, 5, 16, 64, 300, 64.0, True, 0]))}


CASES = [
    (name, metric, kind)
    for name in FAMILIES
    for metric in ("ip", "l2")
    for kind in ("spread", "dupes")
]


@pytest.mark.parametrize(("name", "metric", "kind"), CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_answers_exactly_as_the_reference(
    name: str, metric: str, kind: str, data: st.DataObject
) -> None:
    index = built(name, metric, kind)
    fast, reference, param = FAMILIES[name]
    q = data.draw(queries())
    k = data.draw(st.integers(1, N + 2))
    params = params_for(data.draw, param)
    # The reference first: it parses the parameters and sets the library's beam width,
    # which is what lets a fast path answer the same call.
    want = outcome(lambda: reference(index, q, k, **params))
    answer = fast(index, q, k, dict(params))
    if answer is not None:
        assert want[0] == "ok", f"the fast path answered where the reference raised {want}"
        assert same(("ok", *answer), want)
    # The public search is one or the other: the same outcome either way.
    assert same(outcome(lambda: index.search(q, k, **params)), want)


@pytest.mark.parametrize(("name", "metric", "kind"), CASES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_asked_first_answers_exactly_as_the_reference(
    name: str, metric: str, kind: str, data: st.DataObject
) -> None:
    """The fast path asked before the reference, after a call with other parameters.

    The test above lets the reference set the library's beam width first; here an earlier
    call (a single query or a batch, another ``k``, other parameters) left its own, as in a
    sweep over ``ef``: the fast path must step aside or answer what the reference answers."""
    index = built(name, metric, kind)
    fast, reference, param = FAMILIES[name]
    earlier = corpus("spread")[: data.draw(st.sampled_from([1, 3]))] + np.float32(0.01)
    earlier_params = params_for(data.draw, param)
    outcome(lambda: reference(index, earlier, data.draw(st.integers(1, N)), **earlier_params))
    q = data.draw(queries())
    k = data.draw(st.integers(1, N + 2))
    params = params_for(data.draw, param)
    answer = fast(index, q, k, dict(params))
    want = outcome(lambda: reference(index, q, k, **params))
    if answer is not None:
        assert want[0] == "ok", f"the fast path answered where the reference raised {want}"
        assert same(("ok", *answer), want)


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_fast_path_answers_a_plain_query(name: str, metric: str) -> None:
    """The property above is not vacuous: a finite row of a full index takes the fast path."""
    index = built(name, metric, "spread")
    fast, reference, _ = FAMILIES[name]
    q = corpus("spread")[3:4] + np.float32(0.01)
    reference(index, q, 10)
    answer = fast(index, q, 10, {})
    assert answer is not None
    assert same(("ok", *answer), outcome(lambda: reference(index, q, 10)))


@pytest.mark.parametrize("name", ["flat", "faiss-hnsw", "ivf", "hnsw", "usearch", "qdrant-edge"])
def test_cosine_and_quantized_indexes_have_no_fast_path(name: str) -> None:
    index = built(name, "cosine", "spread")
    fast, _, _ = FAMILIES[name]
    assert fast(index, corpus("spread")[:1], 5, {}) is None
    if name == "usearch":
        i8 = rb.indexes.create("usearch", dim=DIM, metric="ip", dtype="i8")
        i8.build(corpus("spread"))
        assert usearch_one_query(i8, corpus("spread")[:1], 5, {}) is None


def _searchers(
    index: Any, fast: Callable[..., Any], reference: Callable[..., Any], qs: np.ndarray, k: int
) -> tuple[list[threading.Thread], list[tuple[int, str, Any]], threading.Event]:
    """Threads searching ``qs`` in turn until the event is set, through the fast path
    (or, where it declines, the reference); they record (query, path, outcome)."""
    done = threading.Event()
    seen: list[tuple[int, str, Any]] = []

    def run() -> None:
        while not done.is_set():
            for i in range(len(qs)):
                q = qs[i : i + 1]
                answer = fast(index, q, k, {})
                if answer is None:
                    seen.append((i, "reference", outcome(lambda q=q: reference(index, q, k))))
                else:
                    seen.append((i, "fast", ("ok", *answer)))

    return [threading.Thread(target=run) for _ in range(3)], seen, done


def test_flat_fast_path_under_concurrent_writes() -> None:
    """Threads search while one adds (new ids) and deletes (flat compacts: ids remapped).

    Writes are exclusive in faiss, so every answer must be the reference's answer on one of
    the index's states, which a mirror index reaches by the same writes in turn."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((400, DIM)).astype(np.float32)
    chunks = [rng.standard_normal((30, DIM)).astype(np.float32) for _ in range(6)]
    qs = rng.standard_normal((6, DIM)).astype(np.float32)
    k = 10

    def writes(index: Any) -> Any:
        for j, chunk in enumerate(chunks):
            yield index.add(chunk, ids=np.arange(30) + 10_000 + 100 * j)
            yield index.delete(np.arange(5) + 20 * j)  # from the first build's rows

    mirror = rb.indexes.create("flat", dim=DIM, metric="ip")
    mirror.build(base)
    allowed: list[set[tuple[bytes, bytes]]] = [set() for _ in qs]

    def note_state() -> None:
        for i in range(len(qs)):
            ids, scores = LiveVectorIndex.search(mirror, qs[i : i + 1], k)
            allowed[i].add((ids.tobytes(), scores.tobytes()))

    note_state()
    for _ in writes(mirror):
        note_state()

    index = rb.indexes.create("flat", dim=DIM, metric="ip")
    index.build(base)
    threads, seen, done = _searchers(index, faiss_one_query, LiveVectorIndex.search, qs, k)
    for t in threads:
        t.start()
    try:
        for _ in writes(index):
            threading.Event().wait(0.002)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert any(path == "fast" for _, path, _ in seen)
    for i, _, result in seen:
        assert result[0] == "ok"
        assert (result[1].tobytes(), result[2].tobytes()) in allowed[i]
    for i in range(len(qs)):  # after the writes: the last state, by both paths
        answer = faiss_one_query(index, qs[i : i + 1], k, {})
        assert answer is not None
        assert same(
            ("ok", *answer), outcome(lambda i=i: LiveVectorIndex.search(index, qs[i : i + 1], k))
        )


@pytest.mark.parametrize("name", ["hnsw", "usearch", "qdrant-edge"])
def test_graph_fast_paths_under_concurrent_writes(name: str) -> None:
    """Threads search while one adds rows under new ids and deletes some.

    hnswlib adds beside running searches, so an answer during an add may hold the new rows:
    every id returned must be one given to the index (never a bare position), pads last,
    scores best first; once the writes are done both paths agree."""
    fast, reference, _ = FAMILIES[name]
    index = built(name, "ip", "spread")  # a fresh one below; this checks the extra is there
    index = rb.indexes.create(name, dim=DIM, metric="ip")
    rng = np.random.default_rng(5)
    index.build(rng.standard_normal((300, DIM)).astype(np.float32))
    qs = rng.standard_normal((6, DIM)).astype(np.float32)
    k = 10
    given_ids = set(range(300))
    threads, seen, done = _searchers(index, fast, reference, qs, k)
    for t in threads:
        t.start()
    try:
        for j in range(6):
            ids = np.arange(40) + 50_000 + 100 * j
            given_ids.update(ids.tolist())
            index.add(rng.standard_normal((40, DIM)).astype(np.float32), ids=ids)
            index.delete(np.arange(3) + 10 * j)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert any(path == "fast" for _, path, _ in seen)
    for _, _, result in seen:
        assert result[0] == "ok", result
        ids, scores = result[1], result[2]
        assert ids.shape == scores.shape == (1, k) and ids.dtype == np.int64
        found = ids[ids >= 0].tolist()
        assert set(found) <= given_ids and len(set(found)) == len(found)
        assert (ids[0, len(found) :] == -1).all()
        assert (np.diff(scores[0, : len(found)]) <= 0).all()
    for i in range(len(qs)):
        answer = fast(index, qs[i : i + 1], k, {})
        # Qdrant's fast path answers only while the caller's ids are its point ids
        assert (answer is None) == (name == "qdrant-edge")
        if answer is not None:
            want = outcome(lambda i=i: reference(index, qs[i : i + 1], k))
            assert same(("ok", *answer), want)


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_a_short_answer_is_left_to_the_reference_without_reading_its_pads(
    name: str, metric: str
) -> None:
    """k near the whole index: the graph walk may find fewer rows than k. Their unset
    distances must not be computed on (a CI run caught usearch's fast path warning on
    ``1 - garbage`` under ``-W error``); the fast path steps aside or answers exactly."""
    index = built(name, metric, "spread")
    fast, reference, _ = FAMILIES[name]
    rng = np.random.default_rng(11)
    for _ in range(200):
        q = rng.standard_normal((1, DIM)).astype(np.float32)
        want = outcome(lambda q=q: reference(index, q, N - 1))
        answer = fast(index, q, N - 1, {})
        if answer is not None:
            assert same(("ok", *answer), want)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_hnsw_fast_path_answers_a_candidate_depth_above_the_default_ef(metric: str) -> None:
    """k = 100 over the default ef 64 (a request's usual candidate depth): the reference sets
    hnswlib's beam to max(ef, k) = 100, and the next such call takes the fast path with the
    reference's answer. A CI run found the pipeline's hnsw retrieve slower: every such call
    went to the reference, whose ef (64) never equalled the beam hnswlib had (100)."""
    index = built("hnsw", metric, "spread")
    q = corpus("spread")[5:6] + np.float32(0.01)
    want = outcome(lambda: index.search(q, 100))
    answer = hnswlib_one_query(index, q, 100, 64)
    assert answer is not None
    assert same(("ok", *answer), want)
    # an ef above k asks for another beam: left to the reference
    assert hnswlib_one_query(index, q, 100, 128) is None

"""Rerankers: the contract for every backend, numba and python against the numpy reference."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.errors import (
    ConfigError,
    DimensionError,
    IdOutOfRangeError,
    InputError,
    KTooLargeError,
    NonFiniteError,
    RagbenchError,
)

# the vector contract; the cross-encoder reads texts (tests/rerankers/test_rerankers_cross_encoder.py)
NAMES = [n for n in rb.rerankers.names() if n not in rb.rerankers.TEXT_RERANKERS]
METRICS = ["ip", "cosine", "l2"]
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The numba reranker's two ways of running: as shipped (one thread) and opted
# in to threads, splitting every query with more than one candidate.
SPLIT = {"parallel": True, "parallel_threshold": 1}
NUMBA_MODES = [{}, SPLIT]


# ---------------------------------------------------------------- helpers


def exact64(q: np.ndarray, x: np.ndarray, ids: np.ndarray, metric: str) -> np.ndarray:
    """float64 scores of rows ``ids``, with the contract's rules (cosine 0 on a zero norm)."""
    rows = x[ids].astype(np.float64)
    q64 = q.astype(np.float64)
    with np.errstate(all="ignore"):
        if metric == "l2":
            return -((rows - q64) ** 2).sum(axis=1)
        dots = rows @ q64
        if metric == "ip":
            return dots
        den = np.sqrt((rows * rows).sum(axis=1)) * math.sqrt(float(q64 @ q64))
        return np.where(den == 0, 0.0, dots / np.where(den == 0, 1.0, den))


def tolerance(q: np.ndarray, x: np.ndarray, ids: np.ndarray, metric: str) -> np.ndarray:
    """How far a float32 score may be from the float64 one: 1e-5 of the summed magnitudes."""
    rows = x[ids].astype(np.float64)
    q64 = q.astype(np.float64)
    with np.errstate(all="ignore"):
        if metric == "l2":
            mag = ((rows - q64) ** 2).sum(axis=1)
        else:
            mag = np.abs(rows * q64).sum(axis=1)
            if metric == "cosine":
                den = np.sqrt((rows * rows).sum(axis=1)) * math.sqrt(float(q64 @ q64))
                mag = np.where(den == 0, 0.0, mag / np.where(den == 0, 1.0, den))
    return 1e-5 * mag + 1e-30


def close(a: np.ndarray, b: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """Elementwise ``|a - b| <= tol``, with equal infinities counted as equal."""
    with np.errstate(invalid="ignore"):
        return (a == b) | (np.abs(a.astype(np.float64) - b) <= tol)


def ranks_before(s1: float, i1: int, s2: float, i2: int) -> bool:
    """The contract's order: score descending, then smaller id; NaN after every real score."""
    if math.isnan(s1) or math.isnan(s2):
        if math.isnan(s1) and math.isnan(s2):
            return i1 < i2
        return math.isnan(s2)
    return s1 > s2 or (s1 == s2 and i1 < i2)


def check_result(
    out: tuple[np.ndarray, np.ndarray],
    q: np.ndarray,
    x: np.ndarray,
    cand: np.ndarray,
    k: int,
    metric: str,
) -> None:
    """Tie-aware check of one sorted rerank result against float64 truth."""
    ids, scores = out
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert ids.shape == (k,) and scores.shape == (k,)
    valid = np.unique(cand[cand >= 0])
    m = min(k, valid.size)
    got = ids[:m]
    assert np.all(ids[m:] == -1) and np.all(scores[m:] == -np.inf)
    assert np.unique(got).size == m and np.isin(got, valid).all()
    truth = exact64(q, x, valid, metric)
    tol = tolerance(q, x, valid, metric)
    pos = np.searchsorted(valid, got)
    # Each returned score is the candidate's own score.
    real = ~np.isnan(truth[pos])
    assert np.array_equal(np.isnan(scores[:m]), ~real)
    assert np.all(close(scores[:m][real], truth[pos][real], tol[pos][real]))
    # Sorted by the contract's order, on the scores returned.
    for a in range(m - 1):
        assert ranks_before(float(scores[a]), int(got[a]), float(scores[a + 1]), int(got[a + 1]))
    # Nothing left out was better than what came back (up to the tolerance);
    # NaN never displaces a real score.
    left = np.ones(valid.size, dtype=bool)
    left[pos] = False
    n_real = int(np.count_nonzero(~np.isnan(truth)))
    assert int(real.sum()) == min(k, n_real)
    if m and left.any() and real.any():
        worst = int(np.argmin(np.where(real, truth[pos], np.inf)))
        with np.errstate(invalid="ignore"):
            floor = truth[pos][worst] + tol[pos][worst]
            others = truth[left]
            # A -inf left out next to a -inf returned is a tie (found by
            # hypothesis: an inf component makes the tolerance inf, and
            # -inf + inf is NaN, which no comparison passes).
            tie = others == truth[pos][worst]
            assert np.all(np.isnan(others) | tie | (others <= floor + tol[left]))


def make_case(
    seed: int, n_rows: int, dim: int, n_cand: int, mode: str, special_rows: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, query and candidate ids. ``int`` mode uses small integers times a
    power of two, where float32 arithmetic is exact in any order: every
    implementation must then agree bit for bit, ties included."""
    rng = np.random.default_rng(seed)
    if mode.startswith("int"):
        scale = {"int": 1.0, "int-tiny": 2.0**-40, "int-huge": 2.0**50}[mode]
        pool = rng.integers(-3, 4, size=(max(1, n_rows // 3), dim)).astype(np.float32)
        x = pool[rng.integers(0, pool.shape[0], n_rows)] * np.float32(scale)  # duplicate rows
        q = rng.integers(-3, 4, size=dim).astype(np.float32) * np.float32(scale)
    else:
        x = rng.standard_normal((n_rows, dim), dtype=np.float32)
        x[rng.integers(0, n_rows, n_rows // 4)] = x[0]  # duplicate rows: exact ties
        q = rng.standard_normal(dim, dtype=np.float32)
    if special_rows:
        for r in rng.integers(0, n_rows, special_rows):
            x[r, rng.integers(0, max(dim, 1))] = rng.choice([np.nan, np.inf, -np.inf])
    cand = rng.integers(-1, n_rows, n_cand).astype(np.int64)
    return np.ascontiguousarray(x), q, cand


def same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1], equal_nan=True)


@pytest.fixture(scope="module")
def numba_warm() -> None:
    rb.rerankers.create("numba", parallel=True).warmup(8)  # the serial kernel and the parallel ones


# ---------------------------------------------------------------- contract, every backend


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("metric", METRICS)
def test_contract(name: str, metric: str) -> None:
    rr = rb.rerankers.create(name, metric=metric)
    assert isinstance(rr, rb.rerankers.Reranker)
    assert rr.name == name and rr.metric == metric
    assert isinstance(rr.warmup(8), int)
    x, q, _ = make_case(1, 30, 8, 0, "float")
    cand = np.array([4, -1, 9, 4, 17, 2, -1, 9], dtype=np.int64)
    ids, scores = rr.rerank(q, cand, x, 6)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    # Padding skipped, duplicates once: four distinct ids, then two pads.
    assert sorted(ids[:4].tolist()) == [2, 4, 9, 17]
    assert ids[4:].tolist() == [-1, -1] and np.all(scores[4:] == -np.inf)
    np.testing.assert_allclose(scores[:4], exact64(q, x, ids[:4], metric), rtol=1e-5, atol=1e-6)
    check_result((ids, scores), q, x, cand, 6, metric)
    # k smaller than the candidates truncates; the batch form stacks queries.
    assert rr.rerank(q, cand, x, 2)[0].shape == (2,)
    bids, bscores = rr.rerank_batch(np.stack([q, -q]), np.stack([cand, cand[::-1]]), x, 3)
    assert bids.shape == (2, 3) and bscores.dtype == np.float32
    assert same((bids[0], bscores[0]), rr.rerank(q, cand, x, 3))
    assert same((bids[1], bscores[1]), rr.rerank(-q, cand[::-1].copy(), x, 3))


@pytest.mark.parametrize("name", NAMES)
def test_empty_and_single_candidates(name: str) -> None:
    rr = rb.rerankers.create(name)
    x, q, _ = make_case(2, 10, 4, 0, "float")
    ids, scores = rr.rerank(q, np.array([], dtype=np.int64), x, 3)
    assert ids.tolist() == [-1, -1, -1] and np.all(scores == -np.inf)
    ids, scores = rr.rerank(q, [], x, 1)  # a plain empty list is an empty candidate list
    assert ids.tolist() == [-1]
    ids, scores = rr.rerank(q, np.array([-1, -1]), x, 2)
    assert ids.tolist() == [-1, -1]
    ids, scores = rr.rerank(q, np.array([7], dtype=np.int32), x, 4)
    assert ids.tolist() == [7, -1, -1, -1]
    assert scores[0] == pytest.approx(float(x[7].astype(np.float64) @ q), rel=1e-5)
    bids, _ = rr.rerank_batch(np.empty((0, 4), np.float32), np.empty((0, 5), np.int64), x, 2)
    assert bids.shape == (0, 2)


@pytest.mark.parametrize("name", NAMES)
def test_zero_width_and_zero_norm(name: str) -> None:
    rr = rb.rerankers.create(name, metric="cosine")
    x = np.zeros((3, 4), np.float32)
    x[1] = [1, 0, 0, 0]
    ids, scores = rr.rerank(np.array([1, 0, 0, 0], np.float32), np.array([0, 1, 2]), x, 3)
    # Zero rows score 0.0 under cosine, by definition.
    assert sorted(zip(ids.tolist(), scores.tolist(), strict=True)) == [(0, 0.0), (1, 1.0), (2, 0.0)]
    ids, scores = rr.rerank(np.zeros(4, np.float32), np.array([0, 1, 2]), x, 3)
    assert np.all(scores == 0.0)
    assert ids.tolist() == [0, 1, 2]  # all tied: smaller id first
    empty = np.zeros((3, 0), np.float32)
    for metric in METRICS:
        ids, scores = rb.rerankers.create(name, metric=metric).rerank(
            np.zeros(0, np.float32), np.array([2, 0]), empty, 2
        )
        assert set(ids.tolist()) == {0, 2} and np.all(scores == 0.0)


@pytest.mark.parametrize("name", NAMES)
def test_config_errors(name: str) -> None:
    with pytest.raises(ConfigError, match="bogus.*valid: metric"):
        rb.rerankers.create(name, bogus=1)
    with pytest.raises(ConfigError, match="metric"):
        rb.rerankers.create(name, metric="dot")


def test_numba_params() -> None:
    rr = rb.rerankers.create("numba")
    assert rr.parallel is False and repr(rr) == "NumbaReranker(metric='ip')"
    rr = rb.rerankers.create("numba", parallel=True, parallel_threshold=5)
    assert rr.parallel is True and rr.parallel_threshold == 5
    assert repr(rr) == "NumbaReranker(metric='ip', parallel=True, parallel_threshold=5)"
    assert rb.rerankers.create("numba", parallel=np.bool_(True)).parallel is True
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="parallel_threshold"):
            rb.rerankers.create("numba", parallel=True, parallel_threshold=bad)
    for bad in (1, "yes", None):
        with pytest.raises(ConfigError, match="parallel must be true or false"):
            rb.rerankers.create("numba", parallel=bad)
    # A threshold without the opt-in would silently do nothing: it says how to fix it.
    for off in ({}, {"parallel": False}):
        with pytest.raises(ConfigError, match="only with parallel=True.*pass parallel=True"):
            rb.rerankers.create("numba", parallel_threshold=5, **off)


# ---------------------------------------------------------------- bad input, every backend

X_BAD = np.random.default_rng(3).standard_normal((20, 8), dtype=np.float32)
Q_BAD = np.ones(8, np.float32)
C_BAD = np.array([1, 2, 3], np.int64)

BAD_SINGLE = [
    ("id == N", dict(candidate_ids=np.array([1, 20])), IdOutOfRangeError, "20"),
    ("id < -1", dict(candidate_ids=np.array([1, -2])), IdOutOfRangeError, "-2"),
    ("huge id", dict(candidate_ids=np.array([2**62])), IdOutOfRangeError, "out of range"),
    (
        "uint64 past int64",
        dict(candidate_ids=np.array([2**64 - 1], np.uint64)),
        IdOutOfRangeError,
        "out of range",
    ),
    ("float ids", dict(candidate_ids=np.array([1.0, 2.0])), InputError, "integers"),
    ("bool ids", dict(candidate_ids=np.array([True])), InputError, "integers"),
    ("object ids", dict(candidate_ids=np.array([1, "a"], dtype=object)), InputError, "integers"),
    ("2-D ids", dict(candidate_ids=np.array([[1, 2]])), DimensionError, "shape"),
    ("scalar id", dict(candidate_ids=3), DimensionError, "shape"),
    ("short query", dict(query=np.ones(7, np.float32)), DimensionError, "dimension 8"),
    ("2-D query", dict(query=np.ones((1, 8), np.float32)), DimensionError, "rerank_batch"),
    ("NaN query", dict(query=np.r_[np.ones(7), np.nan].astype(np.float32)), NonFiniteError, "NaN"),
    ("inf query", dict(query=np.r_[np.ones(7), -np.inf]), NonFiniteError, "inf"),
    ("float64 beyond float32", dict(query=np.r_[np.ones(7), 1e300]), NonFiniteError, "inf"),
    ("text query", dict(query=["a"] * 8), InputError, "dtype"),
    ("k=0", dict(k=0), InputError, ">= 1"),
    ("k<0", dict(k=-1), InputError, ">= 1"),
    ("k float", dict(k=2.0), InputError, "integer"),
    ("k str", dict(k="3"), InputError, "integer"),
    ("k bool", dict(k=True), InputError, "integer"),
    ("k past candidates and corpus", dict(k=21), KTooLargeError, "k=21"),
    ("float64 vectors", dict(vectors=X_BAD.astype(np.float64)), InputError, "ascontiguousarray"),
    (
        "strided vectors",
        dict(vectors=np.repeat(X_BAD, 2, axis=1)[:, ::2]),
        InputError,
        "C-contiguous",
    ),
    ("Fortran vectors", dict(vectors=np.asfortranarray(X_BAD)), InputError, "C-contiguous"),
    ("1-D vectors", dict(vectors=X_BAD[0]), DimensionError, "shape"),
    ("list vectors", dict(vectors=X_BAD.tolist()), InputError, "numpy array"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("case", "change", "error", "match"), BAD_SINGLE, ids=[c[0] for c in BAD_SINGLE]
)
def test_bad_input_raises(name: str, case: str, change: dict, error: type, match: str) -> None:
    args = dict(query=Q_BAD, candidate_ids=C_BAD, vectors=X_BAD, k=2) | change
    with pytest.raises(error, match=match):
        rb.rerankers.create(name).rerank(**args)


def test_k_past_candidates_but_within_corpus_pads() -> None:
    for name in NAMES:
        ids, _ = rb.rerankers.create(name).rerank(Q_BAD, C_BAD, X_BAD, 20)
        assert ids[3:].tolist() == [-1] * 17


BAD_BATCH = [
    ("row count", dict(candidate_ids=np.array([[1, 2]])), DimensionError, "1 rows for 2"),
    ("1-D ids", dict(candidate_ids=np.array([1, 2])), DimensionError, "shape"),
    ("id out of range", dict(candidate_ids=np.array([[1, 2], [3, 99]])), IdOutOfRangeError, "99"),
    ("NaN in query 1", dict(queries=np.stack([Q_BAD, Q_BAD * np.nan])), NonFiniteError, "row 1"),
    ("1-D queries", dict(queries=Q_BAD), DimensionError, "shape"),
    ("wrong width", dict(queries=np.ones((2, 3), np.float32)), DimensionError, "dimension 8"),
    ("k=0", dict(k=0), InputError, ">= 1"),
    ("float64 vectors", dict(vectors=X_BAD.astype(np.float64)), InputError, "float32"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("case", "change", "error", "match"), BAD_BATCH, ids=[c[0] for c in BAD_BATCH]
)
def test_bad_batch_input_raises(
    name: str, case: str, change: dict, error: type, match: str
) -> None:
    args = (
        dict(
            queries=np.stack([Q_BAD, Q_BAD]),
            candidate_ids=np.array([[1, 2], [3, 4]]),
            vectors=X_BAD,
            k=2,
        )
        | change
    )
    with pytest.raises(error, match=match):
        rb.rerankers.create(name).rerank_batch(**args)


@PROPS
@given(
    ids=st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 25), max_size=12),
    k=st.integers(-2, 30) | st.sampled_from([2**40, 1.5, None]),
)
def test_garbage_never_crashes(numba_warm: None, ids: list[int], k: object) -> None:
    """Any ids and k: a result that follows the contract, or a ragbench error."""
    cand = np.array(ids, dtype=np.int64)
    for name in ("numba", "numpy"):
        try:
            out = rb.rerankers.create(name).rerank(Q_BAD, cand, X_BAD, k)
        except RagbenchError:
            ok = (
                not isinstance(k, int)
                or k < 1
                or k > max(cand.size, 20)
                or bool(cand.size and (cand.min() < -1 or cand.max() >= 20))
            )
            assert ok, "raised on valid input"
        else:
            check_result(out, Q_BAD, X_BAD, cand, int(k), "ip")  # type: ignore[call-overload]


# ---------------------------------------------------------------- numba vs the numpy reference


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    n_rows=st.integers(1, 40),
    dim=st.integers(1, 17),
    n_cand=st.sampled_from([0, 1, 2, 3, 4, 5, 7, 30, 60]),
    k=st.integers(1, 70),
    metric=st.sampled_from(METRICS),
    mode=st.sampled_from(["int", "int-tiny", "int-huge", "float"]),
    special=st.sampled_from([0, 0, 1, 3]),
)
# -inf scores tied across the cut (rows holding an inf component).
@example(seed=8, n_rows=6, dim=7, n_cand=30, k=4, metric="ip", mode="int", special=3)
def test_numba_matches_numpy(
    numba_warm: None,
    seed: int,
    n_rows: int,
    dim: int,
    n_cand: int,
    k: int,
    metric: str,
    mode: str,
    special: int,
) -> None:
    x, q, cand = make_case(seed, n_rows, dim, n_cand, mode, special)
    k = min(k, max(n_cand, n_rows))
    ref = rb.rerankers.create("numpy", metric=metric).rerank(q, cand, x, k)
    serial = rb.rerankers.create("numba", metric=metric).rerank(q, cand, x, k)
    chunked = rb.rerankers.create("numba", metric=metric, **SPLIT).rerank(q, cand, x, k)
    # Split across threads or not, the kernel reaches the same scores and order.
    assert same(serial, chunked)
    if mode.startswith("int"):
        # Exact arithmetic: bit-identical, so ties must fall the same way too.
        assert same(serial, ref)
    if special == 0 or mode.startswith("int"):
        # (float rows holding inf give float64 sums that float32 cannot follow.)
        check_result(serial, q, x, cand, k, metric)
        check_result(ref, q, x, cand, k, metric)
    # Sorted scores agree whatever the ties did.
    m = int(np.count_nonzero(ref[0] >= 0))
    assert np.count_nonzero(serial[0] >= 0) == m
    s, r = serial[1][:m].astype(np.float64), ref[1][:m].astype(np.float64)
    both = ~np.isnan(s) & ~np.isnan(r) & np.isfinite(s)
    assert np.array_equal(np.isnan(s), np.isnan(r))
    scale = np.abs(r[both]) + (1e-6 if metric == "cosine" else 0.0)
    assert np.all(
        np.abs(s[both] - r[both]) <= 2e-5 * scale + tolerance(q, x, serial[0][:m], metric)[both]
    )


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    nq=st.integers(0, 5),
    n_cand=st.integers(0, 40),
    k=st.integers(1, 12),
    metric=st.sampled_from(METRICS),
)
def test_numba_batch_equals_loop(
    numba_warm: None, seed: int, nq: int, n_cand: int, k: int, metric: str
) -> None:
    x, _, _ = make_case(seed, 25, 9, 0, "float")
    rng = np.random.default_rng(seed)
    qs = rng.standard_normal((nq, 9), dtype=np.float32)
    cand = rng.integers(-1, 25, (nq, n_cand))
    rr = rb.rerankers.create("numba", metric=metric)
    ids, scores = rr.rerank_batch(qs, cand, x, k)
    assert ids.shape == (nq, k) and scores.shape == (nq, k)
    for r in range(nq):
        assert same((ids[r], scores[r]), rr.rerank(qs[r], cand[r], x, k))


def test_numba_ties_go_to_smaller_id(numba_warm: None) -> None:
    x = np.tile(np.arange(1, 9, dtype=np.float32), (50, 1))  # fifty identical rows
    q = np.linspace(-1, 1, 8).astype(np.float32)
    for metric in METRICS:
        for mode in NUMBA_MODES:
            rr = rb.rerankers.create("numba", metric=metric, **mode)
            cand = np.random.default_rng(0).permutation(50)
            ids, scores = rr.rerank(q, cand, x, 7)
            assert ids.tolist() == list(range(7))
            assert np.unique(scores).size == 1


def test_numba_nan_rows_sort_last(numba_warm: None) -> None:
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    x[[2, 5, 8], 1] = np.nan
    q = np.ones(4, np.float32)
    for metric in METRICS:
        for name in ("numba", "numpy", "python"):
            ids, scores = rb.rerankers.create(name, metric=metric).rerank(q, np.arange(10), x, 10)
            assert sorted(ids[:7].tolist()) == [0, 1, 3, 4, 6, 7, 9], (name, metric)
            assert not np.isnan(scores[:7]).any()
            assert ids[7:].tolist() == [2, 5, 8]  # NaN scores after, by id
            assert np.isnan(scores[7:]).all()
        ids, _ = rb.rerankers.create("numba", metric=metric).rerank(q, np.array([5, 3]), x, 1)
        assert ids.tolist() == [3]


def test_numba_overflow_is_inf_not_a_crash(numba_warm: None) -> None:
    x = np.full((6, 4), 3e38, np.float32)
    x[1] = -3e38
    x[2] = 1.0
    x[3] = [np.inf, -np.inf, 1.0, 1.0]
    q = np.ones(4, np.float32)
    for name in ("numba", "numpy"):
        ids, scores = rb.rerankers.create(name).rerank(q, np.arange(6), x, 6)
        # Overflowed dot products are +-inf and sort as real scores; inf - inf
        # is NaN and goes last.
        assert ids[:3].tolist() == [0, 4, 5] and np.all(scores[:3] == np.inf)
        assert ids[3:5].tolist() == [2, 1] and scores[4] == -np.inf
        assert ids[5] == 3 and np.isnan(scores[5])
        ids, scores = rb.rerankers.create(name, metric="l2").rerank(q, np.arange(6), x, 6)
        assert ids[0] == 2 and np.all(scores[1:] == -np.inf)
        assert ids[1:].tolist() == [0, 1, 3, 4, 5]


def test_numba_accepts_other_ids_and_query_dtypes(numba_warm: None) -> None:
    x, q, cand = make_case(5, 30, 8, 20, "float")
    rr = rb.rerankers.create("numba")
    ref = rr.rerank(q, cand, x, 5)
    assert same(rr.rerank(q.astype(np.float64), cand.astype(np.int32), x, np.int64(5)), ref)
    assert same(rr.rerank(q.tolist(), cand.tolist(), x, 5), ref)
    assert same(rr.rerank(np.repeat(q, 2)[::2], cand.astype(np.uint16), x, 5), ref)


def test_numba_respects_thread_setting(numba_warm: None) -> None:
    import numba

    from ragbench import threads

    before = threads.get_threads()
    x, q, cand = make_case(6, 300, 8, 3000, "float")
    rr = rb.rerankers.create("numba", **SPLIT)
    try:
        threads.set_threads(1)
        one = rr.rerank(q, cand, x, 10)
        assert numba.get_num_threads() == 1
        threads.set_threads(2)
        two = rr.rerank(q, cand, x, 10)
        assert numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
    finally:
        threads.set_threads(before)
    assert same(one, two)


class KernelSpy:
    """Stands in for the kernels module of one reranker: counts parallel kernel calls."""

    def __init__(self, parallel_allowed: bool) -> None:
        from ragbench.rerankers import _kernels

        self._real = _kernels
        self.rerank_serial = _kernels.rerank_serial
        self.allowed = parallel_allowed
        self.calls: list[str] = []

    def _parallel(self, name: str, *args: object) -> int:
        if not self.allowed:
            raise AssertionError(f"the one-thread reranker called the parallel kernel {name}")
        self.calls.append(name)
        return int(getattr(self._real, name)(*args))

    def rerank_chunked(self, *args: object) -> int:
        return self._parallel("rerank_chunked", *args)

    def rerank_many(self, *args: object) -> int:
        return self._parallel("rerank_many", *args)


@pytest.fixture
def two_threads() -> Iterator[None]:
    """Pin two threads for the test (what would let a parallel kernel run), then restore."""
    import numba

    from ragbench import threads

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here: no parallel kernel to reach")
    before = threads.get_threads()
    threads.set_threads(2)
    yield
    threads.set_threads(before)


def test_numba_default_is_one_thread(numba_warm: None, two_threads: None) -> None:
    """As shipped, never a parallel kernel: not from the threshold, not for a batch,
    not in warmup, even with two threads pinned."""
    from ragbench.rerankers.numba_reranker import DEFAULT_PARALLEL_THRESHOLD

    x, q, cand = make_case(12, 500, 8, 4 * DEFAULT_PARALLEL_THRESHOLD, "float")
    rr = rb.rerankers.create("numba")
    rr._k = spy = KernelSpy(parallel_allowed=False)
    rr.warmup(8)
    ids, scores = rr.rerank(q, cand, x, 10)
    check_result((ids, scores), q, x, cand, 10, "ip")
    assert same(rr.rerank(q, cand.astype(np.int32), x, 10), (ids, scores))  # dispatcher path
    bids, bscores = rr.rerank_batch(np.stack([q, -q]), np.stack([cand, cand[::-1]]), x, 10)
    assert same((bids[0], bscores[0]), (ids, scores))
    assert spy.calls == []


def test_numba_parallel_option_reaches_parallel_kernels(
    numba_warm: None, two_threads: None
) -> None:
    """parallel=True splits a query from parallel_threshold on and runs batches in
    parallel, with the same answers as the one-thread default, bit for bit."""
    x, q, cand = make_case(13, 500, 8, 3000, "float")
    qs = np.stack([q, -q, q * 2])
    cands = np.stack([cand, cand[::-1], cand])
    for metric in METRICS:
        one = rb.rerankers.create("numba", metric=metric)
        rr = rb.rerankers.create("numba", metric=metric, parallel=True, parallel_threshold=1024)
        rr._k = spy = KernelSpy(parallel_allowed=True)
        for n in (3000, 1024):
            assert same(rr.rerank(q, cand[:n], x, 10), one.rerank(q, cand[:n], x, 10))
        assert spy.calls == ["rerank_chunked", "rerank_chunked"]
        # Below the threshold one query stays on one thread.
        assert same(rr.rerank(q, cand[:1023], x, 10), one.rerank(q, cand[:1023], x, 10))
        assert spy.calls == ["rerank_chunked", "rerank_chunked"]
        got = rr.rerank_batch(qs, cands, x, 10)
        assert spy.calls[-1] == "rerank_many"
        assert same(got, one.rerank_batch(qs, cands, x, 10))


POOL_SCRIPT = """
import json, os, sys
import numpy as np
import numba
import ragbench as rb

def tasks():
    return len(os.listdir("/proc/self/task"))

def pool_started():
    try:
        numba.threading_layer()
    except ValueError:  # "Threading layer is not initialized."
        return False
    return True

x = np.random.default_rng(0).standard_normal((5000, 16), dtype=np.float32)
ids = np.arange(5000)
numba.njit(lambda: 0)()  # numba's own start-up (one idle helper thread of its own)
before = tasks()
rr = rb.rerankers.create("numba")
rr.warmup(16)
rr.rerank(x[0], ids, x, 10)
rr.rerank_batch(x[:4], np.stack([ids] * 4), x, 10)
default = {"pool": pool_started(), "new_threads": tasks() - before}
opt = rb.rerankers.create("numba", parallel=True)
opt.warmup(16)
opt.rerank(x[0], ids, x, 10)
print(json.dumps({"default": default, "parallel": {"pool": pool_started(),
                  "new_threads": tasks() - before}}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
def test_numba_default_never_starts_the_thread_pool() -> None:
    """In a fresh process the default reranker (warmup, rerank above the old
    threshold, batch) loads no threading layer and starts no thread, so it has
    no pool to spin; parallel=True does start one (the check can fail)."""
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", POOL_SCRIPT],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "RAGBENCH_THREADS": "2", "NUMBA_NUM_THREADS": "2"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["default"] == {"pool": False, "new_threads": 0}
    assert got["parallel"]["pool"] is True and got["parallel"]["new_threads"] >= 1


def test_numba_large_k_and_adversarial_order(numba_warm: None) -> None:
    # Ascending scores: every candidate enters the heap. Duplicates everywhere.
    x = np.arange(2000, dtype=np.float32).reshape(-1, 1)
    cand = np.concatenate([np.arange(2000), np.arange(2000)[::-1], [-1] * 5])
    q = np.ones(1, np.float32)
    for mode in NUMBA_MODES:
        ids, scores = rb.rerankers.create("numba", **mode).rerank(q, cand, x, 1500)
        assert ids.tolist() == list(range(1999, 499, -1))
        assert scores.tolist() == [float(i) for i in range(1999, 499, -1)]


# ---------------------------------------------------------------- numba: kept entries, fast path


@pytest.mark.parametrize("k", [1, 2, 15, 16, 17, 48])
def test_numba_sorted_run_and_heap_agree_with_numpy(numba_warm: None, k: int) -> None:
    """Up to SMALL_K the best are kept as a sorted run, above it as a heap: either
    way bit-identical to numpy in exact arithmetic (ties, duplicates, NaN, inf),
    whatever the order the candidates come in, serial, split or batched."""
    from ragbench.rerankers._kernels import SMALL_K

    assert SMALL_K == 16  # the k values above straddle it
    for seed in range(4):
        for metric in METRICS:
            x, q, cand = make_case(seed, 60, 7, 150, "int", special_rows=3)
            ref = rb.rerankers.create("numpy", metric=metric).rerank(q, cand, x, k)
            for mode in NUMBA_MODES:
                rr = rb.rerankers.create("numba", metric=metric, **mode)
                assert same(rr.rerank(q, cand, x, k), ref)
                assert same(rr.rerank(q, cand[::-1].copy(), x, k), ref)
            ids, scores = rb.rerankers.create("numba", metric=metric).rerank_batch(
                np.stack([q, q]), np.stack([cand, cand[::-1]]), x, k
            )
            assert same((ids[0], scores[0]), ref) and same((ids[1], scores[1]), ref)


@pytest.mark.parametrize("k", [5, 16, 17])
def test_numba_every_candidate_enters_or_none_does(numba_warm: None, k: int) -> None:
    # Ascending scores: each candidate displaces the worst kept; descending:
    # after the first k, none gets past the threshold test.
    x = np.arange(300, dtype=np.float32).reshape(-1, 1)
    q = np.ones(1, np.float32)
    want = list(range(299, 299 - k, -1))
    for cand in (np.arange(300), np.arange(300)[::-1].copy()):
        ids, scores = rb.rerankers.create("numba").rerank(q, cand, x, k)
        assert ids.tolist() == want
        assert scores.tolist() == [float(i) for i in want]


def test_numba_fast_path_and_dispatcher_agree(numba_warm: None) -> None:
    """Arrays of exactly the compiled types go straight to the compiled entry
    point; anything else (read-only, another dtype, strided) takes the full
    checks and numba's dispatcher. Same answers, and bad ids raise either way."""
    from ragbench.rerankers import numba_reranker

    x, q, cand = make_case(11, 50, 16, 80, "float")
    rr = rb.rerankers.create("numba")
    ref = rr.rerank(q, cand, x, 5)
    assert numba_reranker._serial_entry is not numba_reranker._first_serial_call
    x_ro, q_ro, cand_ro = x.copy(), q.copy(), cand.copy()
    for arr in (x_ro, q_ro, cand_ro):
        arr.flags.writeable = False
    assert same(rr.rerank(q_ro, cand_ro, x_ro, 5), ref)
    assert same(rr.rerank(q, cand.astype(np.int32), x, 5), ref)
    assert same(rr.rerank(np.repeat(q, 2)[::2], cand, x, 5), ref)
    for mode in NUMBA_MODES:
        split = rb.rerankers.create("numba", **mode)
        for bad in (50, -7):
            with pytest.raises(IdOutOfRangeError, match=f"id {bad} is out of range"):
                split.rerank(q, np.r_[cand, bad], x, 5)
            # all three read-only, as above: the types the dispatcher has just compiled the
            # serial kernel for (read-only q and x with writable ids compiled it once more)
            bad_ro = np.r_[cand, bad]
            bad_ro.flags.writeable = False
            with pytest.raises(IdOutOfRangeError, match=f"id {bad} is out of range"):
                split.rerank(q_ro, bad_ro, x_ro, 5)


# ---------------------------------------------------------------- python and none


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    n_rows=st.integers(1, 30),
    n_cand=st.integers(0, 40),
    k=st.integers(1, 45),
    metric=st.sampled_from(METRICS),
    mode=st.sampled_from(["int", "float"]),
    special=st.sampled_from([0, 2]),
)
def test_python_equals_numpy(
    seed: int, n_rows: int, n_cand: int, k: int, metric: str, mode: str, special: int
) -> None:
    x, q, cand = make_case(seed, n_rows, 6, n_cand, mode, special)
    k = min(k, max(n_cand, n_rows))
    ref = rb.rerankers.create("numpy", metric=metric).rerank(q, cand, x, k)
    assert same(rb.rerankers.create("python", metric=metric).rerank(q, cand, x, k), ref)


FORK_SCRIPT = """
import os, sys
import numpy as np
import ragbench as rb
rr = rb.rerankers.create("numba", parallel=True, parallel_threshold=1)
rr.warmup(8)
x = np.random.default_rng(0).standard_normal((3000, 8), dtype=np.float32)
ids = np.arange(3000)
parent = rr.rerank(x[0], ids, x, 3)[0].tolist()
batch = rr.rerank_batch(x[:3], np.stack([ids] * 3), x, 2)[0].tolist()
pid = os.fork()
if pid == 0:
    ok = (rr.rerank(x[0], ids, x, 3)[0].tolist() == parent
          and rr.rerank_batch(x[:3], np.stack([ids] * 3), x, 2)[0].tolist() == batch)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_numba_in_a_forked_child(numba_warm: None) -> None:
    """A child forked after the parallel kernels ran gets serial kernels, not a kill."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]

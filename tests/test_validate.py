"""ragbench.validate: every shared check, and the one exact-scoring rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ragbench as rb
from ragbench import validate
from ragbench.datasets import brute_force_neighbors
from ragbench.errors import (
    ConfigError,
    DimensionError,
    IdOutOfRangeError,
    InputError,
    KTooLargeError,
    NonFiniteError,
)
from ragbench.metrics import exact_scores, unit_rows

GOOD_INTS = [1, 7, np.int64(3), np.int32(2), np.uint8(5)]
NOT_INTS = [True, False, 2.0, 1.5, "3", None, math.nan, math.inf, -math.inf, np.float32(2)]


# ---------------------------------------------------------------- parameter checks


@pytest.mark.parametrize("value", GOOD_INTS)
def test_positive_int_accepts_python_and_numpy_ints(value: object) -> None:
    got = validate.positive_int("index 'hnsw'", "M", value)
    assert got == int(value) and type(got) is int  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [*NOT_INTS, 0, -1, np.int64(-4)])
def test_positive_int_rejects(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^index 'hnsw': M must be ") as exc:
        validate.positive_int("index 'hnsw'", "M", value)
    assert ">= 1" in str(exc.value) or "integer" in str(exc.value)


def test_positive_int_bounds() -> None:
    assert validate.positive_int("o", "seed", 0, lo=0) == 0
    assert validate.positive_int("o", "M", 4096, lo=2, hi=4096) == 4096
    with pytest.raises(ConfigError, match=r"o: M must be in \[2, 4096\], got 1"):
        validate.positive_int("o", "M", 1, lo=2, hi=4096)
    with pytest.raises(ConfigError, match=r"o: M must be in \[2, 4096\], got 4097"):
        validate.positive_int("o", "M", 4097, lo=2, hi=4096)
    with pytest.raises(ConfigError, match="o: seed must be >= 0, got -1"):
        validate.positive_int("o", "seed", -1, lo=0)


@pytest.mark.parametrize("value", [0.5, 3, np.float64(2.5), 1e300])
def test_positive_number_accepts(value: float) -> None:
    assert validate.positive_number("stub", "prefill_ms", value) == float(value)


@pytest.mark.parametrize("value", [0, -1.0, True, math.nan, math.inf, -math.inf, "1", None])
def test_positive_number_rejects(value: object) -> None:
    with pytest.raises(ConfigError, match="^stub: prefill_ms must be a positive number"):
        validate.positive_number("stub", "prefill_ms", value)


@pytest.mark.parametrize("value", [True, False, np.True_, np.bool_(False)])
def test_bool_param_accepts(value: object) -> None:
    got = validate.bool_param("index 'lsh'", "rotate_data", value)
    assert got is bool(value)


@pytest.mark.parametrize("value", [0, 1, np.int64(1), 1.0, "true", None, math.nan])
def test_bool_param_rejects(value: object) -> None:
    with pytest.raises(ConfigError, match="^index 'lsh': rotate_data must be true or false"):
        validate.bool_param("index 'lsh'", "rotate_data", value)


def test_check_metric() -> None:
    assert validate.METRICS == ("ip", "cosine", "l2")
    for metric in validate.METRICS:
        assert validate.check_metric("reranker 'numpy'", metric) == metric
    for bad in ("dot", "IP", None, 1, ["ip"]):
        with pytest.raises(
            ConfigError, match=r"^reranker 'numpy': metric .* use one of: ip, cosine, l2$"
        ):
            validate.check_metric("reranker 'numpy'", bad)
    assert validate.check_metric("index 'lsh'", "ip", ("ip", "cosine")) == "ip"
    with pytest.raises(ConfigError, match="index 'lsh'.*'l2'.*use one of: ip, cosine$"):
        validate.check_metric("index 'lsh'", "l2", ("ip", "cosine"))


# ---------------------------------------------------------------- per-call checks


@pytest.mark.parametrize("value", GOOD_INTS)
def test_int_arg_and_check_k_accept_numpy_ints(value: object) -> None:
    assert validate.int_arg("dim", value, lo=0) == int(value)  # type: ignore[call-overload]
    got = validate.check_k(value, 10)
    assert got == int(value) and type(got) is int  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [*NOT_INTS, 0, -3, np.int64(0)])
def test_check_k_rejects(value: object) -> None:
    with pytest.raises(InputError, match="^k must be ") as exc:
        validate.check_k(value, 10)
    assert not isinstance(exc.value, KTooLargeError)


def test_check_k_too_large_says_the_limit() -> None:
    with pytest.raises(
        KTooLargeError, match=r"k=11 is larger than the queries \(10\); pass k <= 10"
    ):
        validate.check_k(11, 10, what="the queries")
    with pytest.raises(InputError, match="^dim must be >= 0, got -1"):
        validate.int_arg("dim", -1, lo=0)


def test_check_ids() -> None:
    ids = np.array([0, -1, 4], np.int64)
    assert validate.check_ids(ids, 5) is ids  # never copied when already right
    np.testing.assert_array_equal(validate.check_ids([3, 1], 5), [3, 1])
    assert validate.check_ids([], 5).dtype == np.int64
    assert validate.check_ids(np.array([[1, 2]], np.uint16), 5, ndim=2).dtype == np.int64
    assert validate.check_ids([9], 5, values=False).tolist() == [9]
    for bad in ([5], [-2], np.array([2**64 - 1], np.uint64)):
        with pytest.raises(
            IdOutOfRangeError, match=r"^candidate_ids: id -?\d+ is out of range \[0, 5\)"
        ):
            validate.check_ids(bad, 5)
    with pytest.raises(IdOutOfRangeError, match="^doc_ids: id 7 is out of range"):
        validate.check_ids([7], 5, name="doc_ids")
    for bad in ([1.0], [True], np.array([1, "a"], dtype=object)):
        with pytest.raises(InputError, match="ids must be integers"):
            validate.check_ids(bad, 5)
    with pytest.raises(DimensionError, match=r"expected shape \(n,\)"):
        validate.check_ids([[1]], 5)


def test_as_matrix() -> None:
    x = np.ones((3, 4), np.float32)
    assert validate.as_matrix(x) is x
    got = validate.as_matrix([[1, 2], [3, 4]], name="base")
    assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == (2, 2)
    assert validate.as_matrix(np.arange(3)).shape == (1, 3)  # one row
    assert validate.as_matrix(np.ones((4, 6))[:, ::2]).flags.c_contiguous
    with pytest.raises(DimensionError, match="queries: expected dimension 5, got 4"):
        validate.as_matrix(x, name="queries", dim=5)
    with pytest.raises(DimensionError, match=r"queries: expected shape \(n, d\)"):
        validate.as_matrix(np.ones((2, 2, 2)), name="queries")
    for bad in (np.array([[True]]), [["a"]], object()):
        with pytest.raises(InputError, match="^base: "):
            validate.as_matrix(bad, name="base")
    nan = np.ones((3, 2), np.float32)
    nan[2, 1] = np.nan
    with pytest.raises(NonFiniteError, match="base: row 2 holds NaN or inf"):
        validate.as_matrix(nan, name="base")
    with pytest.raises(NonFiniteError, match="row 0"):
        validate.as_matrix([[1e300]], name="base")  # float32 overflow is inf, no warning
    assert np.isnan(validate.as_matrix(nan, finite=False)[2, 1])


def test_as_float32_and_check_finite() -> None:
    q = validate.as_float32([1, 2, 3], name="query")
    assert q.dtype == np.float32 and q.shape == (3,)
    with pytest.raises(NonFiniteError, match="^query holds NaN or inf$"):
        validate.check_finite(np.array([1.0, np.inf], np.float32), "query")
    validate.check_finite(np.zeros((0, 3), np.float32), "queries")


# ---------------------------------------------------------------- one exact-scoring rule


def test_zero_norm_cosine_is_zero_everywhere() -> None:
    """exact_scores, unit_rows, the numpy/python/numba rerankers and exact neighbours agree."""
    x = np.array(
        [[0.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
        np.float32,
    )
    q = np.array([1.0, 0.0, 0.0], np.float32)
    ids = np.arange(len(x), dtype=np.int64)
    want = np.array([0.0, -1.0, 0.6, 0.0, 1.0], np.float32)
    scores = exact_scores(q, x, "cosine")
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, want, atol=1e-7)
    np.testing.assert_allclose(
        exact_scores(q.astype(np.float64), x.astype(np.float64), "cosine"), want, atol=1e-7
    )
    np.testing.assert_allclose(unit_rows(x) @ unit_rows(q[None, :])[0], want, atol=1e-7)
    order = [4, 2, 0, 3, 1]  # score descending, equal scores by smaller id
    for name in ("numpy", "python", "numba"):
        got_ids, got_scores = rb.rerankers.create(name, metric="cosine").rerank(q, ids, x, 5)
        assert got_ids.tolist() == order, name
        np.testing.assert_allclose(got_scores, want[order], atol=1e-7)
    assert brute_force_neighbors(q[None, :], x, 5, "cosine")[0].tolist() == order
    # A zero query: every cosine is 0.0, so every method ranks by id.
    zero = np.zeros(3, np.float32)
    assert np.all(exact_scores(zero, x, "cosine") == 0.0)
    for name in ("numpy", "python", "numba"):
        got_ids, got_scores = rb.rerankers.create(name, metric="cosine").rerank(zero, ids, x, 5)
        assert got_ids.tolist() == [0, 1, 2, 3, 4] and np.all(got_scores == 0.0), name
    assert brute_force_neighbors(zero[None, :], x, 5, "cosine")[0].tolist() == [0, 1, 2, 3, 4]


def test_exact_scores_metrics() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    q = rng.standard_normal(5).astype(np.float32)
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    np.testing.assert_allclose(exact_scores(q, x, "ip"), x64 @ q64, rtol=1e-5)
    np.testing.assert_allclose(exact_scores(q, x, "l2"), -((x64 - q64) ** 2).sum(1), rtol=1e-5)
    with pytest.raises(ConfigError, match="metric 'jaccard'"):
        exact_scores(q, x, "jaccard")

"""ragbench.fusion: the compiled kernels return exactly what the plain reference returns."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbench.errors import ConfigError, InputError, NonFiniteError
from ragbench.fusion import (
    reciprocal_rank_fusion,
    reciprocal_rank_fusion_plain,
    weighted_fusion,
    weighted_fusion_plain,
)

# small id ranges make overlaps and repeats common; -1 is a pad
ids_lists = st.lists(st.integers(min_value=-1, max_value=40), max_size=60)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


def same(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    assert got[0].dtype == np.int64 and got[1].dtype == np.float64
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()  # bit for bit, not approximately


# k_rrf from 2**53 on: neighbouring places round to one score (a tie the kernel sorts by id);
# the kernel sorts from k_rrf + rank = 2**40 on, so both sides of that bound are drawn
k_values = st.sampled_from(
    [0.0, 1.0, 60.0, 0.5, 2.0**40 - 70.5, 2.0**40 - 30, 2.0**53, 1e17, 1e300]
)


@settings(max_examples=300, deadline=None)
@given(ids_lists, ids_lists, k_values, st.none() | st.integers(1, 30))
def test_rrf_kernel_equals_plain(a: list[int], b: list[int], k: float, limit: int | None) -> None:
    same(
        reciprocal_rank_fusion(a, b, k_rrf=k, limit=limit),
        reciprocal_rank_fusion_plain(a, b, k_rrf=k, limit=limit),
    )


def as_given(ids: list[int], form: str) -> np.ndarray:
    """``ids`` as an int64 array the way a caller may hold it: writable, read-only, strided."""
    if form == "strided":
        arr = np.zeros(2 * len(ids), dtype=np.int64)
        arr[::2] = ids
        return arr[::2]
    arr = np.array(ids, dtype=np.int64)
    arr.flags.writeable = form != "read-only"
    return arr


forms = st.sampled_from(["writable", "read-only", "strided"])


@settings(max_examples=200, deadline=None)
@given(ids_lists, ids_lists, forms, forms, k_values, st.none() | st.integers(1, 30))
def test_rrf_arrays_of_any_layout_equal_plain(
    a: list[int], b: list[int], form_a: str, form_b: str, k: float, limit: int | None
) -> None:
    first, second = as_given(a, form_a), as_given(b, form_b)
    same(
        reciprocal_rank_fusion(first, second, k_rrf=k, limit=limit),
        reciprocal_rank_fusion_plain(a, b, k_rrf=k, limit=limit),
    )


def test_rrf_compiles_no_kernel_at_request_time() -> None:
    """A read-only or strided array is fused by the one compiled kernel (loaded from numba's
    cache with the module), not by a new specialisation compiled in the request (seconds)."""
    from ragbench.fusion import _kernels

    ids = np.arange(6, dtype=np.int64)
    read_only = ids.copy()
    read_only.flags.writeable = False
    for first, second in [(ids, ids), (read_only, ids), (ids, read_only), (ids[::2], ids)]:
        reciprocal_rank_fusion(first, second)
    assert len(_kernels.rrf.signatures) == 1


@pytest.mark.parametrize("k_rrf", [0.0, 0.5, 1.0, 60.0, 1e6 + 0.1, 2.0**39 + 0.3, 2.0**40 - 1001.7])
def test_no_two_ranks_share_a_score_below_the_kernels_sorting_bound(k_rrf: float) -> None:
    """Below ``_DISTINCT_RANKS`` the kernel writes the single-list entries in place order
    without sorting them: that needs every rank's ``1 / (k_rrf + rank)`` to be distinct."""
    from ragbench.fusion._kernels import _DISTINCT_RANKS

    ranks = np.arange(1, 1001, dtype=np.float64)
    assert k_rrf + ranks[-1] < _DISTINCT_RANKS
    scores = 1.0 / (k_rrf + ranks)  # the reference's expression, elementwise
    assert (np.diff(scores) < 0).all()


def test_rrf_ties_at_a_huge_k_are_ordered_by_id() -> None:
    # 1 / (1e300 + rank) is one double for every rank: all five tie
    ids, scores = reciprocal_rank_fusion([9, 3, 7], [8, 1], k_rrf=1e300)
    assert ids.tolist() == [1, 3, 7, 8, 9]
    assert scores.tolist() == [1 / (1e300 + 1)] * 5


@st.composite
def scored(draw: st.DrawFn) -> tuple[list[int], list[float]]:
    ids = draw(ids_lists)
    scores = [draw(finite) if i >= 0 else draw(st.floats()) for i in ids]  # a pad's score: anything
    return ids, scores


@settings(max_examples=300, deadline=None)
@given(scored(), scored(), st.floats(0.0, 1.0), st.none() | st.integers(1, 30))
def test_weighted_kernel_equals_plain(
    a: tuple[list[int], list[float]],
    b: tuple[list[int], list[float]],
    alpha: float,
    limit: int | None,
) -> None:
    same(
        weighted_fusion(a[0], a[1], b[0], b[1], alpha=alpha, limit=limit),
        weighted_fusion_plain(a[0], a[1], b[0], b[1], alpha=alpha, limit=limit),
    )


def test_rrf_by_hand() -> None:
    ids, scores = reciprocal_rank_fusion([7, 3, 9], [3, 5], k_rrf=60)
    assert ids.tolist() == [3, 7, 5, 9]
    assert scores.tolist() == [1 / 62 + 1 / 61, 1 / 61, 1 / 62, 1 / 63]


def test_weighted_by_hand() -> None:
    # first: 7 -> 1.0, 3 -> 0.0 ; second: 3 -> 1.0, 5 -> 0.0 (min-max over each list)
    ids, scores = weighted_fusion([7, 3], [2.0, 1.0], [3, 5], [10.0, 4.0], alpha=0.25)
    assert dict(zip(ids.tolist(), scores.tolist(), strict=True)) == {7: 0.25, 3: 0.75, 5: 0.0}
    assert ids.tolist() == [3, 7, 5]


def test_one_side_empty_keeps_the_other_order() -> None:
    ids, _ = reciprocal_rank_fusion([4, 2, 8], [-1, -1])
    assert ids.tolist() == [4, 2, 8]
    ids, scores = weighted_fusion([], [], [4, 2], [0.5, 0.5])
    assert ids.tolist() == [2, 4] and scores.tolist() == [0.5, 0.5]  # a tie: each normalised to 1
    assert reciprocal_rank_fusion([], [])[0].size == 0


def test_repeats_count_once_at_the_first_place() -> None:
    ids, scores = reciprocal_rank_fusion([5, 5, 6], [], k_rrf=0)
    assert ids.tolist() == [5, 6] and scores.tolist() == [1.0, 1 / 3]
    # in both lists, repeated in each: one entry, each list's first place
    ids, scores = reciprocal_rank_fusion([5, 6, 5], [6, 5, 6, -1], k_rrf=0)
    assert ids.tolist() == [5, 6] and scores.tolist() == [1.0 + 1 / 2, 1 / 2 + 1.0]


def test_nothing_to_trim_returns_every_entry() -> None:
    ids, scores = reciprocal_rank_fusion(np.array([4, 2]), np.array([7]), k_rrf=0)
    assert ids.tolist() == [4, 7, 2] and scores.tolist() == [1.0, 1.0, 1 / 2]
    ids, _ = reciprocal_rank_fusion(np.array([4, 2]), np.array([7]), limit=2)
    assert ids.tolist() == [4, 7]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: weighted_fusion([1], [1.0], [2], [1.0], alpha=1.5), ConfigError, "alpha"),
        (lambda: weighted_fusion([1], [1.0], [2], [1.0], alpha=-0.1), ConfigError, "alpha"),
        (lambda: reciprocal_rank_fusion([1], [2], k_rrf=-1), ConfigError, "k_rrf"),
        (lambda: reciprocal_rank_fusion([1], [2], k_rrf=float("nan")), ConfigError, "k_rrf"),
        (lambda: reciprocal_rank_fusion([1], [2], limit=0), ConfigError, "limit"),
        (lambda: reciprocal_rank_fusion([1.5], [2]), InputError, "integer"),
        (lambda: reciprocal_rank_fusion([[1]], [2]), InputError, "1-D"),
        (lambda: reciprocal_rank_fusion(np.ones((2, 2), np.int64), [2]), InputError, "1-D"),
        (lambda: reciprocal_rank_fusion([1], np.array(2)), InputError, "1-D"),
        (lambda: reciprocal_rank_fusion(np.array([1, -2]), np.array([2])), InputError, ">= 0"),
        (lambda: reciprocal_rank_fusion([1, -2], [2]), InputError, ">= 0"),
        (lambda: weighted_fusion([1], [float("nan")], [2], [1.0]), NonFiniteError, "finite"),
        (lambda: weighted_fusion([1, 2], [1.0], [2], [1.0]), InputError, "scores for 2 ids"),
    ],
)
def test_bad_input_is_refused_by_name(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()


def test_kernels_are_safe_across_threads() -> None:
    rng = np.random.default_rng(3)
    pairs = [(rng.permutation(500)[:100], rng.permutation(500)[:100]) for _ in range(64)]
    want = [reciprocal_rank_fusion_plain(a, b) for a, b in pairs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda p: reciprocal_rank_fusion(*p), pairs))
            for g, w in zip(got, want, strict=True):
                same(g, w)

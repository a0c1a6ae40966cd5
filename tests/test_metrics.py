"""recall_at_k: ties at the k-th score are interchangeable; nothing else is."""

from __future__ import annotations

import numpy as np
import pytest

from ragbench.metrics import exact_scores, recall_at_k


def recall(found: list[int], truth: list[int], x: np.ndarray, q: np.ndarray, metric: str) -> float:
    k = len(truth)
    out = recall_at_k(
        np.array([found], dtype=np.int64),
        np.array([truth], dtype=np.int64),
        x,
        q[None, :],
        k,
        metric,
    )
    assert out.shape == (1,)
    return float(out[0])


# Integer-valued float32 rows: every score below is exact, so ties are exact.
# Each case: rows, query, metric, and row ids in exact order, where the 4th and
# 5th (TIE_A, TIE_B) tie for 4th place and WORSE is strictly below them.
X_IP = np.array([[5, 0], [4, 1], [3, 7], [2, 9], [2, -9], [1, 0], [0, 0]], dtype=np.float32)
Q_IP = np.array([1, 0], dtype=np.float32)
# l2 from the origin: squared distances 1, 4, 9, 16, 16, 25
X_L2 = np.array([[0, 1], [2, 0], [0, -3], [4, 0], [0, 4], [3, 4]], dtype=np.float32)
Q_L2 = np.array([0, 0], dtype=np.float32)
# cosine with [1, 0]: same direction, lengths a power of 2 apart, is the same cosine
X_COS = np.array([[3, 0], [5, 1], [2, 1], [1, 1], [4, 4], [0, 1]], dtype=np.float32)
Q_COS = np.array([1, 0], dtype=np.float32)

CASES = {
    "ip": (X_IP, Q_IP, [0, 1, 2, 3, 4, 5]),
    "l2": (X_L2, Q_L2, [0, 1, 2, 3, 4, 5]),
    "cosine": (X_COS, Q_COS, [0, 1, 2, 3, 4, 5]),
}
K = 4


@pytest.mark.parametrize("metric", list(CASES))
def test_the_cases_are_what_they_claim(metric: str) -> None:
    x, q, order = CASES[metric]
    s = exact_scores(q.astype(np.float64), x.astype(np.float64), metric)[order]
    assert s[0] > s[1] > s[2] > s[3]
    assert s[3] == s[4]  # an exact tie for k-th place
    assert s[4] > s[5]  # then a strictly worse one


@pytest.mark.parametrize("metric", list(CASES))
def test_either_tied_neighbour_gives_full_recall(metric: str) -> None:
    x, q, o = CASES[metric]
    truth = o[:4]  # exact search chose TIE_A
    assert recall(o[:3] + [o[3]], truth, x, q, metric) == 1.0
    assert recall(o[:3] + [o[4]], truth, x, q, metric) == 1.0  # TIE_B instead
    assert recall([o[4], o[2], o[0], o[1]], truth, x, q, metric) == 1.0  # any order


@pytest.mark.parametrize("metric", list(CASES))
def test_a_strictly_worse_neighbour_costs_recall(metric: str) -> None:
    x, q, o = CASES[metric]
    truth = o[:4]
    assert recall(o[:3] + [o[5]], truth, x, q, metric) == 0.75
    assert recall([o[0], o[5], o[2], o[3]], truth, x, q, metric) == 0.75
    assert recall([o[5], o[5], o[5], o[5]], truth, x, q, metric) == 0.0


@pytest.mark.parametrize("metric", list(CASES))
def test_both_tied_neighbours_do_not_replace_a_better_one(metric: str) -> None:
    x, q, o = CASES[metric]
    truth = o[:4]
    # o[2] is strictly better than the tie and every exact top 4 holds it.
    assert recall([o[0], o[1], o[3], o[4]], truth, x, q, metric) == 0.75


@pytest.mark.parametrize("metric", list(CASES))
def test_padding_costs_recall(metric: str) -> None:
    x, q, o = CASES[metric]
    truth = o[:4]
    assert recall(o[:3] + [-1], truth, x, q, metric) == 0.75
    assert recall([-1, o[0], -1, o[1]], truth, x, q, metric) == 0.5
    assert recall([-1, -1, -1, -1], truth, x, q, metric) == 0.0


@pytest.mark.parametrize("metric", list(CASES))
def test_duplicates_count_once(metric: str) -> None:
    x, q, o = CASES[metric]
    truth = o[:4]
    assert recall([o[0], o[0], o[1], o[2]], truth, x, q, metric) == 0.75
    assert recall([o[3], o[3], o[3], o[3]], truth, x, q, metric) == 0.25
    # a duplicated tie is still one neighbour, not both
    assert recall([o[0], o[3], o[3], o[1]], truth, x, q, metric) == 0.75


def test_only_the_first_k_found_count_and_rows_map_to_queries() -> None:
    x, q, o = CASES["ip"]
    found = np.array([[o[5], o[0], o[1], o[2], o[3]], o[:5]], dtype=np.int64)
    truth = np.array([o[:4]], dtype=np.int64)
    # both rows of found answer query 0; the 5th found id is past k and ignored
    got = recall_at_k(found, truth, x, q[None, :], K, "ip", query_rows=np.array([0, 0]))
    np.testing.assert_array_equal(got, [0.75, 1.0])

"""ragbench.datasets.neighbors.top_k_agreement: what one embedder's vectors change against a
reference's (the overlap of the exact top k, the queries' cosine), on planted vectors."""

from __future__ import annotations

import numpy as np

from ragbench.datasets.neighbors import top_k_agreement


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_the_same_vectors_agree_fully() -> None:
    rng = np.random.default_rng(0)
    corpus, queries = _unit(rng.normal(size=(50, 8))), _unit(rng.normal(size=(6, 8)))
    got = top_k_agreement((queries, corpus), (queries, corpus))
    assert got["k"] == 10 and got["top_k_mean"] == got["top_k_min"] == 1.0
    assert abs(got["cosine_mean"] - 1.0) < 1e-6 and abs(got["cosine_p1"] - 1.0) < 1e-6


def test_a_query_that_moved_finds_other_passages() -> None:
    """Query 0 points at passages 0-4 in one space and 5-9 in the other; query 1 is the same
    in both: k=5 overlap 0 and 1 (mean 0.5, min 0), cosine 0 and 1."""
    corpus = np.zeros((10, 4), np.float32)
    corpus[:5, 0] = np.linspace(1.0, 0.6, 5)
    corpus[5:, 1] = np.linspace(1.0, 0.6, 5)
    mine = np.asarray([[1, 0, 0, 0], [0, 0, 1, 0]], np.float32)
    ref = np.asarray([[0, 1, 0, 0], [0, 0, 1, 0]], np.float32)
    got = top_k_agreement((mine, corpus), (ref, corpus), k=5)
    assert got["top_k_mean"] == 0.5 and got["top_k_min"] == 0.0
    assert got["cosine_mean"] == 0.5 and got["cosine_p1"] < 0.05


def test_vectors_of_another_width_have_no_cosine_and_k_is_at_most_the_corpus() -> None:
    rng = np.random.default_rng(1)
    mine = (_unit(rng.normal(size=(3, 4))), _unit(rng.normal(size=(6, 4))))
    ref = (_unit(rng.normal(size=(3, 8))), _unit(rng.normal(size=(6, 8))))
    got = top_k_agreement(mine, ref)
    assert got["k"] == 6 and got["top_k_mean"] == 1.0  # every passage in both top 6
    assert got["cosine_mean"] is None and got["cosine_p1"] is None
    assert got["cosine_note"] == "not comparable (4 PCA dimensions, not the reference's 8)"

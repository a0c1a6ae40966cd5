"""Recall against exact search, tie-aware (equal-scored neighbours are interchangeable)."""

from __future__ import annotations

import numpy as np

__all__ = ["exact_scores", "recall_at_k", "rerank_metric"]


def rerank_metric(index_metric: str) -> str:
    """The metric exact re-scoring uses for an index's metric (``jaccard`` text indexes → ``ip``)."""
    return index_metric if index_metric in ("ip", "cosine", "l2") else "ip"


def exact_scores(
    query: np.ndarray, vectors: np.ndarray, ids: np.ndarray, metric: str
) -> np.ndarray:
    """float64 scores of rows ``ids`` against ``query`` (higher is better; l2 is negated squared)."""
    rows = vectors[ids].astype(np.float64)
    q = np.asarray(query, dtype=np.float64).ravel()
    if metric == "l2":
        out: np.ndarray = -((rows - q) ** 2).sum(axis=1)
        return out
    s = rows @ q
    if metric == "cosine":
        s = s / np.maximum(np.linalg.norm(rows, axis=1) * np.linalg.norm(q), 1e-30)
    scores: np.ndarray = s
    return scores


def recall_at_k(
    found: np.ndarray,
    truth: np.ndarray,
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    metric: str,
    query_rows: np.ndarray | None = None,
) -> np.ndarray:
    """Per-query recall@k of ``found`` (int64 ``(nq, ≥k)``, -1 padded) against exact ``truth``.

    A found id counts when its exact score is at least the k-th best exact
    score, so a tie at the boundary never costs recall. ``query_rows`` maps
    each row of ``found`` to its row in ``queries``/``truth`` (default: same row).
    """
    nq = found.shape[0]
    out = np.empty(nq)
    for r in range(nq):
        qi = r if query_rows is None else int(query_rows[r])
        t = truth[qi][:k]
        t = t[t >= 0]
        if t.size == 0:
            out[r] = 1.0
            continue
        got = np.unique(found[r][:k])
        got = got[got >= 0]
        if got.size == 0:
            out[r] = 0.0
            continue
        kth = exact_scores(queries[qi], vectors, t, metric).min()
        scores = exact_scores(queries[qi], vectors, got, metric)
        tol = 1e-5 * max(1.0, abs(float(kth)))
        out[r] = min(1.0, np.count_nonzero(scores >= kth - tol) / t.size)
    return out

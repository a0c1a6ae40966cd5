"""Exact scores (the one scoring rule) and recall against exact search.

Every exact score in ragbench comes from :func:`exact_scores` or follows its
rule: higher is better for every metric; ``ip`` is the dot product,
``cosine`` is ``dot / (|q| |x|)`` and ``0.0`` when that denominator is 0 (a
zero row or a zero query), ``l2`` is the negated squared distance. Blocked
matrix products over a whole corpus get the same cosine from
:func:`unit_rows` (a zero row stays zero, so its dot product, the cosine, is 0).
The numba rerank kernels compile the same rule.

Recall is tie-aware: equal-scored neighbours are interchangeable.
"""

from __future__ import annotations

import numpy as np

from .validate import METRICS, check_metric

__all__ = ["exact_scores", "recall_at_k", "rerank_metric", "unit_rows"]


def rerank_metric(index_metric: str) -> str:
    """The metric exact re-scoring uses for an index's metric (``jaccard`` text indexes → ``ip``)."""
    return index_metric if index_metric in METRICS else "ip"


def exact_scores(query: np.ndarray, rows: np.ndarray, metric: str) -> np.ndarray:
    """Scores ``(n,)`` of ``rows (n, d)`` against ``query (d,)``, higher is better.

    ``ip`` dot product; ``cosine`` ``dot / (|q| |x|)``, ``0.0`` when that
    denominator is 0; ``l2`` negated squared distance. The arithmetic is in the
    inputs' dtype (give both the same): float32 in, float32 out with BLAS dot
    products; pass float64 arrays for float64 scores. No input checks (callers
    check once): overflow gives inf and inf - inf gives NaN, silently.
    """
    with np.errstate(all="ignore"):
        if metric == "ip":
            dots: np.ndarray = rows @ query
            return dots
        if metric == "l2":
            diff = rows - query
            return -np.einsum("ij,ij->i", diff, diff)  # type: ignore[no-any-return]
        if metric != "cosine":
            check_metric("exact_scores", metric)
        dots = rows @ query
        den = np.sqrt(np.einsum("ij,ij->i", rows, rows)) * np.sqrt(np.dot(query, query))
        out = np.zeros(rows.shape[0], dtype=dots.dtype)
        np.divide(dots, den, out=out, where=den != 0)
        return out


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """A new array of the rows of ``vectors (n, d)`` scaled to unit L2 norm; zero rows stay zero.

    ``unit_rows(Q) @ unit_rows(X).T`` is the cosine of :func:`exact_scores`
    (0.0 against a zero row or query) for a whole block at once. Same dtype as
    the input.
    """
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out = np.zeros_like(vectors)
    np.divide(vectors, norms, out=out, where=norms != 0)
    return out


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

    Tie-aware: a found id scoring above the k-th best exact score counts; ids
    tied with it (within a relative 1e-5) count only up to the number of
    places the tie holds in the exact top k, so returning either of two
    equally good neighbours never costs recall, and two tied ones never hide
    a missing better one. Padding (-1) and repeated ids count nothing extra.
    ``query_rows`` maps each row of ``found`` to its row in ``queries``/``truth``
    (default: same row).
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
        q = np.asarray(queries[qi], dtype=np.float64).ravel()
        exact = exact_scores(q, vectors[t].astype(np.float64), metric)
        kth = float(exact.min())
        tol = 1e-5 * max(1.0, abs(kth))
        tie_places = int(np.count_nonzero(exact <= kth + tol))
        scores = exact_scores(q, vectors[got].astype(np.float64), metric)
        above = int(np.count_nonzero(scores > kth + tol))
        tied = int(np.count_nonzero(np.abs(scores - kth) <= tol))
        out[r] = min(1.0, (above + min(tied, tie_places)) / t.size)
    return out

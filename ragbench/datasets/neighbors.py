"""Exact neighbours: the brute-force top-``k`` kernel recall is measured against.

Float32 scores in blocks of corpus rows (bounded memory on 1M-row corpora),
ties broken toward the smaller row, optional per-query filters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import progress
from ..errors import InputError
from ..metrics import unit_rows
from ..validate import as_matrix, check_k, check_metric

__all__ = ["brute_force_neighbors", "neighbour_problem", "top_k_agreement"]

_NEIGHBORS_BLOCK_BYTES = 64 << 20  # score block size: bounded memory on 1M-row corpora


def brute_force_neighbors(
    queries: np.ndarray,
    base: np.ndarray,
    k: int,
    metric: str = "ip",
    *,
    allowed: np.ndarray | None = None,
) -> np.ndarray:
    """Exact top-``k`` rows of ``base`` for each query: int64 ``(nq, k)``.

    ``allowed``: bool ``(nq, n)``, the rows each query may return (a
    filter); rows it excludes never appear, and a query with fewer than
    ``k`` allowed rows gets ``-1`` in the places left.

    ``queries`` float32 ``(nq, d)``, ``base`` float32 ``(n, d)``. ``"ip"`` and
    ``"cosine"`` rank by descending similarity, ``"l2"`` by ascending distance;
    equal scores rank the smaller row first. Scores are computed in float32
    blocks of corpus rows so memory stays bounded; cosine follows
    :func:`ragbench.metrics.exact_scores` (0.0 against a zero row or query),
    through :func:`ragbench.metrics.unit_rows`.
    """
    check_metric("brute_force_neighbors", metric)
    x = as_matrix(base, name="base vectors")
    q = as_matrix(queries, name="query vectors", dim=x.shape[1])
    n, nq = x.shape[0], q.shape[0]
    k = check_k(k, n)
    if metric == "cosine":
        q = unit_rows(q)
    if allowed is not None and (allowed.dtype != np.bool_ or allowed.shape != (nq, n)):
        raise InputError(f"allowed must be bool ({nq}, {n}), got {allowed.dtype}{allowed.shape}")
    block = max(k, min(n, _NEIGHBORS_BLOCK_BYTES // (4 * max(nq, 1))))
    best_scores = np.full((nq, 0), -np.inf, np.float32)
    best_ids = np.zeros((nq, 0), np.int64)
    with progress.task("exact neighbours", n, unit="rows") as advance:
        for start in range(0, n, block):
            stop = start + block
            best_scores, best_ids = _neighbors_block(
                q,
                x[start:stop],
                start,
                k,
                metric,
                (best_scores, best_ids),
                None if allowed is None else allowed[:, start:stop],
            )
            advance(min(block, n - start))
    if allowed is not None:
        best_ids[best_scores == -np.inf] = -1  # fewer than k allowed rows
    return np.ascontiguousarray(best_ids, dtype=np.int64)


def _neighbors_block(
    q: np.ndarray,
    xb: np.ndarray,
    start: int,
    k: int,
    metric: str,
    best: tuple[np.ndarray, np.ndarray],
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Merge the top-``k`` of corpus rows ``start:start+len(xb)`` into ``best`` (scores, ids).

    ``allowed``: bool ``(nq, len(xb))``; excluded rows score ``-inf``.
    """
    best_scores, best_ids = best
    if metric == "cosine":
        xb = unit_rows(xb)
    scores = q @ xb.T
    if metric == "l2":
        # ||q-x||^2 = ||q||^2 - 2 q.x + ||x||^2; ||q||^2 is constant per row, so rank by the rest.
        scores = 2 * scores - np.einsum("ij,ij->i", xb, xb)[None, :]
    if allowed is not None:
        scores[~allowed] = -np.inf
    top_scores, top_ids = _block_topk(scores, min(k, scores.shape[1]))
    all_scores = np.concatenate([best_scores, top_scores], axis=1)
    all_ids = np.concatenate([best_ids, top_ids + start], axis=1)
    order = np.lexsort((all_ids, -all_scores), axis=1)[:, :k]
    return np.take_along_axis(all_scores, order, axis=1), np.take_along_axis(all_ids, order, axis=1)


def _block_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row with ties at the cut broken toward smaller columns."""
    nq, m = scores.shape
    if k >= m:
        ids = np.broadcast_to(np.arange(m, dtype=np.int64), (nq, m))
        return scores, np.ascontiguousarray(ids)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
    # argpartition picks arbitrary members of a tie at the cut; redo those rows exactly.
    tied = np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k)
    for row in tied:
        s = scores[row]
        above = np.flatnonzero(s > kth[row])
        equal = np.flatnonzero(s == kth[row])[: k - above.size]
        part[row] = np.concatenate([above, equal])
    ids = part.astype(np.int64)
    return np.take_along_axis(scores, part, axis=1), ids


def neighbour_problem(ids: np.ndarray, nq: int, k: int, n: int, *, padded: bool = False) -> str:
    """Why ``ids`` cannot be the exact top-``k`` of ``nq`` queries over ``n`` rows ("" if it can).

    ``padded``: filtered truth, where a query with fewer than ``k`` allowed
    rows ends in ``-1`` pads (see :func:`brute_force_neighbors`); a pad
    before a real id is still a problem.
    """
    if ids.dtype.kind not in "iu" or ids.shape != (nq, k):
        return f"neighbours are {ids.dtype}{list(ids.shape)}, expected int64[{nq}, {k}]"
    if not ids.size:
        return ""
    pad = ids == -1 if padded else np.zeros(ids.shape, dtype=bool)
    if padded and (pad[:, :-1] & ~pad[:, 1:]).any():
        return "a -1 pad before a neighbour id (pads only end a row)"
    real = ids[~pad]
    if real.size and (int(real.min()) < 0 or int(real.max()) >= n):
        return f"neighbour ids outside the corpus rows [0, {n})"
    return ""


def top_k_agreement(
    mine: tuple[np.ndarray, np.ndarray],
    reference: tuple[np.ndarray, np.ndarray],
    metric: str = "ip",
    k: int = 10,
) -> dict[str, Any]:
    """What one embedder's vectors change against a reference embedder's, on the same texts.

    ``mine`` and ``reference``: ``(query vectors, corpus vectors)`` each, one
    row per query and per passage in the same order. ``top_k_mean`` /
    ``top_k_min``: the overlap of the exact top ``k`` (``min(k, n)``) over the
    corpus with each side's vectors, mean and worst over the queries (1: the
    same passages come back). ``cosine_mean`` / ``cosine_p1``: each query
    vector's cosine to the reference's (both unit rows), mean and 1st
    percentile; ``None`` with a ``cosine_note`` when the widths differ (a
    static model's PCA basis is another space).
    """
    (queries, corpus), (ref_queries, ref_corpus) = mine, reference
    k = min(k, int(corpus.shape[0]))
    got = brute_force_neighbors(queries, corpus, k, metric)
    want = brute_force_neighbors(ref_queries, ref_corpus, k, metric)
    overlap = np.asarray(
        [len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(got, want, strict=True)]
    )
    out: dict[str, Any] = {
        "k": k,
        "top_k_mean": float(overlap.mean()),
        "top_k_min": float(overlap.min()),
    }
    if queries.shape[1] == ref_queries.shape[1]:
        cos = np.einsum("ij,ij->i", queries, ref_queries)
        return out | {"cosine_mean": float(cos.mean()), "cosine_p1": float(np.percentile(cos, 1))}
    note = (
        f"not comparable ({queries.shape[1]} PCA dimensions, not the reference's "
        f"{ref_queries.shape[1]})"
    )
    return out | {"cosine_mean": None, "cosine_p1": None, "cosine_note": note}

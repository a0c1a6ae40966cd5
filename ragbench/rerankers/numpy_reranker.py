"""The numpy reference reranker: gather, matmul, argpartition, lexsort."""

from __future__ import annotations

import numpy as np

from ..metrics import exact_scores
from ._contract import BaseReranker, padded

__all__ = ["NumpyReranker"]


class NumpyReranker(BaseReranker):
    """Reference implementation of the reranker contract (see ``_contract``).

    Each call copies the candidate rows out of ``vectors`` (fancy indexing),
    scores them with one float32 matrix-vector product, selects with
    ``np.partition`` and orders the selection with ``np.lexsort`` so equal
    scores go to the smaller id. The selection keeps every candidate tied with
    the k-th score before cutting, so the tie rule holds at the boundary too.
    Duplicate ids are removed first (``np.unique``, which also sorts them).

    Scores: ``ip`` dot, ``cosine`` dot / (|q| |x|) with 0.0 for a zero
    denominator, ``l2`` negated squared distance. A NaN score (NaN or inf-inf in
    a base row) sorts after every real score. Pads with id -1, score -inf.
    """

    name = "numpy"

    def _rerank(
        self, query: np.ndarray, ids: np.ndarray, vectors: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        uniq = np.unique(ids[ids >= 0])
        scores = exact_scores(query, vectors[uniq], self.metric)
        # Negated so that ascending order is best first; NaN stays NaN and
        # numpy sorts NaN last.
        key = -scores
        if uniq.shape[0] > k:
            kth = np.partition(key, k - 1)[k - 1]
            if not np.isnan(kth):
                keep = np.flatnonzero(key <= kth)
                uniq, key, scores = uniq[keep], key[keep], scores[keep]
        order = np.lexsort((uniq, key))[:k]
        return padded(uniq[order], scores[order], k)

"""The pass-through reranker: no reordering, exact scores for what it keeps."""

from __future__ import annotations

import numpy as np

from ._common import BaseReranker, numpy_scores, padded

__all__ = ["NoReranker"]


class NoReranker(BaseReranker):
    """Keeps the candidates in the order given; it does **not** sort.

    Padding (-1) and repeated ids (after their first appearance) are dropped,
    the first k remaining are kept, and each gets its exact score (same numpy
    code as the ``numpy`` reference) so downstream stages see real scores.
    The scores are therefore not necessarily descending. Pads with id -1,
    score -inf.
    """

    name = "none"

    def _rerank(
        self, query: np.ndarray, ids: np.ndarray, vectors: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        valid = ids[ids >= 0]
        _, first = np.unique(valid, return_index=True)
        keep = valid[np.sort(first)[:k]]
        return padded(keep, numpy_scores(query, vectors[keep], self.metric), k)

"""The naive baseline: numpy scores, then a Python ``sorted`` over Python floats."""

from __future__ import annotations

import numpy as np

from ..metrics import exact_scores
from ._contract import BaseReranker, padded

__all__ = ["PythonReranker"]


def _key(pair: tuple[int, float]) -> tuple[int, float, int]:
    doc, score = pair
    # NaN compares false both ways, so it gets its own first key and sorts last.
    if score != score:
        return (1, 0.0, doc)
    return (0, -score, doc)


class PythonReranker(BaseReranker):
    """The reranker that hides on many RAG request paths, kept as a baseline.

    Scores come from the same numpy code as the ``numpy`` reference (so they
    are bit-identical to it); they are then turned into Python floats, zipped
    with the ids and ordered with ``sorted(zip(ids, scores), key=...)``. What it
    measures is the cost of leaving numpy for a Python sort. Results equal the
    ``numpy`` reranker's: same order rules (score descending, smaller id on
    ties, NaN last), same padding (id -1, score -inf).
    """

    name = "python"

    def _rerank(
        self, query: np.ndarray, ids: np.ndarray, vectors: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        # Same gather order as the numpy reference (sorted unique ids), so the
        # BLAS dot products see the same rows in the same places.
        uniq = sorted({i for i in ids.tolist() if i >= 0})
        scores = exact_scores(query, vectors[uniq], self.metric).tolist()
        best = sorted(zip(uniq, scores, strict=True), key=_key)[:k]
        return padded(
            np.array([doc for doc, _ in best], dtype=np.int64),
            np.array([score for _, score in best], dtype=np.float32),
            k,
        )

"""What a pipeline needs to rerank by texts (a cross-encoder) and still report exact scores.

A reranker of texts has ``input_kind = "texts"`` and
``rerank_texts(query str, candidate_ids int64 (n,), texts, k) -> (ids, scores)``;
optionally ``start() -> {step: ns}`` (set-up) and ``caveat`` (a string every
report must carry, e.g. random weights).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..metrics import exact_scores
from ._contract import PAD_SCORE
from .numpy_reranker import NumpyReranker

__all__ = ["exact_hit_scores", "start_text_reranker"]


def exact_hit_scores(
    query: np.ndarray, ids: np.ndarray, vectors: np.ndarray, metric: str
) -> np.ndarray:
    """The exact score (``metric``'s rule) of each id: float32 ``(len(ids),)``, ``-inf`` for ``-1``.

    ``query`` float32 ``(d,)``, ``ids`` int64 ``(k,)`` rows of ``vectors`` float32 ``(N, d)``.
    """
    out = np.full(ids.shape[0], PAD_SCORE, dtype=np.float32)
    real = ids >= 0
    if real.any():
        out[real] = exact_scores(query, vectors[ids[real]], metric)
    return out


def start_text_reranker(
    reranker: Any, add_step: Callable[[str, int], None], caveats: list[str]
) -> NumpyReranker:
    """Start ``reranker`` (each set-up step through ``add_step``), note its caveat in ``caveats``.

    Returns the exact (numpy) reranker of the same metric that scores the
    candidates for recall. numpy, not numba: numba's thread pool started
    before torch would slow torch (see :mod:`ragbench.threads`).
    """
    start = getattr(reranker, "start", None)
    if start is not None:
        for step, ns in start().items():
            add_step(step, ns)
    caveat = getattr(reranker, "caveat", None)
    if isinstance(caveat, str) and caveat not in caveats:
        caveats.append(caveat)
    return NumpyReranker(metric=reranker.metric)

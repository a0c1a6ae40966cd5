"""The reranker contract as code: every backend's input checks, padding and base class.

The contract (every backend):

- ``rerank(query (d,), candidate_ids (n,), vectors (N, d), k)`` returns
  ``(ids int64 (k,), scores float32 (k,))``.
- ``-1`` in ``candidate_ids`` is padding and skipped; a repeated id counts once.
- Fewer than ``k`` usable candidates: the rest is padded with id ``-1`` and
  score ``-inf`` (:data:`PAD_ID`, :data:`PAD_SCORE`). A real candidate can also
  score ``-inf`` (an ``l2`` distance that overflows); padding is told apart by
  its id.
- Scores (higher is better for every metric): ``ip`` is the dot product,
  ``cosine`` is ``dot / (|q| |x|)`` and ``0.0`` when that denominator is 0 (a
  zero row or a zero query), ``l2`` is the negated squared distance: the rule
  of :func:`ragbench.metrics.exact_scores`, which the numpy and python
  backends call and the numba kernels compile.
- Order: scores descending, equal scores by smaller id, and NaN scores (a NaN
  or an inf-minus-inf in a base row) after every real score, never ahead of
  one. ``+inf``/``-inf`` scores are real scores and sort as such.
- Checked before any row is read: ``vectors`` is a 2-D C-contiguous float32
  ndarray (it is never copied; anything else raises :class:`InputError` telling
  the caller to pass ``np.ascontiguousarray(x, dtype=np.float32)``), the query
  has the right width and is finite, the ids are integers of the right shape,
  each in ``[-1, N)``, and ``k`` is an int ``>= 1``. ``k`` may exceed the
  number of candidates (padding) but not both that number and ``N``
  (:class:`KTooLargeError`): nothing could ever fill it. The base matrix itself
  is never scanned for NaN (that would cost as much as the rerank).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np

from .._registry import check_params
from ..errors import DimensionError, InputError
from ..validate import as_float32, check_finite, check_ids, check_k, check_metric, int_arg

PAD_ID = -1
PAD_SCORE = np.float32(-np.inf)
#: What bounds ``k`` in :func:`~ragbench.validate.check_k`: ``k`` may exceed the
#: candidates (padding) or the corpus, not both; callers pass the larger of the two.
K_LIMIT = "both the candidate list and the corpus"

_F32 = np.dtype(np.float32)
_FIX_VECTORS = "pass np.ascontiguousarray(vectors, dtype=np.float32) once, outside the request path"


def check_vectors(vectors: Any) -> np.ndarray:
    """Return ``vectors`` unchanged if it is a C-contiguous float32 ``(N, d)`` ndarray.

    It is never converted: converting a large base matrix on every call would
    cost more than the rerank.
    """
    if not isinstance(vectors, np.ndarray):
        raise InputError(
            f"vectors: expected a numpy array, got {type(vectors).__name__}; {_FIX_VECTORS}"
        )
    if vectors.ndim != 2:
        raise DimensionError(f"vectors: expected shape (N, d), got {vectors.shape}")
    if vectors.dtype != _F32:
        raise InputError(f"vectors: expected float32, got {vectors.dtype}; {_FIX_VECTORS}")
    if not vectors.flags.c_contiguous:
        raise InputError(f"vectors: array is not C-contiguous; {_FIX_VECTORS}")
    return vectors


def check_query(query: Any, dim: int, *, finite: bool = True) -> np.ndarray:
    """Return the query as a C-contiguous float32 ``(dim,)`` array, or raise.

    ``finite=False`` leaves the NaN/inf test to the caller (the numba kernels
    do it in the same compiled call).
    """
    q = as_float32(query, name="query")
    if q.ndim != 1:
        raise DimensionError(
            f"query: expected one vector of shape ({dim},), got {q.shape}; "
            "use rerank_batch for several queries"
        )
    if q.shape[0] != dim:
        raise DimensionError(
            f"query: expected dimension {dim} (the vectors' width), got {q.shape[0]}"
        )
    if finite:
        check_finite(q, "query")
    return q


def check_queries(queries: Any, dim: int, *, finite: bool = True) -> np.ndarray:
    """Return the queries as a C-contiguous float32 ``(nq, dim)`` array, or raise."""
    qs = as_float32(queries, name="queries")
    if qs.ndim != 2:
        raise DimensionError(f"queries: expected shape (nq, {dim}), got {qs.shape}")
    if qs.shape[1] != dim:
        raise DimensionError(
            f"queries: expected dimension {dim} (the vectors' width), got {qs.shape[1]}"
        )
    if finite:
        check_finite(qs, "queries")
    return qs


def padded(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, scores)`` (already best first, at most k) padded to k with -1 / -inf."""
    out_ids = np.full(k, PAD_ID, dtype=np.int64)
    out_scores = np.full(k, PAD_SCORE, dtype=np.float32)
    out_ids[: ids.shape[0]] = ids
    out_scores[: scores.shape[0]] = scores
    return out_ids, out_scores


class BaseReranker:
    """Shared construction and the batch loop; subclasses implement :meth:`_rerank`.

    ``_rerank`` receives checked inputs: float32 finite query, int64 ids each
    in ``[-1, N)``, float32 C-contiguous vectors and a checked ``k``.
    """

    name: ClassVar[str] = ""
    extra_params: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, metric: str = "ip", **params: Any) -> None:
        owner = f"reranker {self.name!r}"
        check_params(owner, params, frozenset({"metric"}) | self.extra_params)
        self.metric = check_metric(owner, metric)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(metric={self.metric!r})"

    def rerank(
        self, query: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k best candidates: ``(ids int64 (k,), scores float32 (k,))``, best first.

        ``query`` is ``(d,)``, ``candidate_ids`` integer ``(n,)`` (``-1`` is
        padding), ``vectors`` float32 C-contiguous ``(N, d)``.
        """
        x = check_vectors(vectors)
        q = check_query(query, x.shape[1])
        ids = check_ids(candidate_ids, x.shape[0])
        n, n_rows = ids.shape[0], x.shape[0]
        k = check_k(k, n if n > n_rows else n_rows, what=K_LIMIT)
        return self._rerank(q, ids, x, k)

    def rerank_batch(
        self, queries: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`rerank` for ``queries (nq, d)`` and ``candidate_ids (nq, n)``.

        Returns ``(ids int64 (nq, k), scores float32 (nq, k))``.
        """
        x = check_vectors(vectors)
        qs = check_queries(queries, x.shape[1])
        ids = check_ids(candidate_ids, x.shape[0], ndim=2)
        if ids.shape[0] != qs.shape[0]:
            raise DimensionError(
                f"candidate_ids: {ids.shape[0]} rows for {qs.shape[0]} queries; "
                "pass one row of candidates per query"
            )
        n, n_rows = ids.shape[1], x.shape[0]
        k = check_k(k, n if n > n_rows else n_rows, what=K_LIMIT)
        out_ids = np.empty((qs.shape[0], k), dtype=np.int64)
        out_scores = np.empty((qs.shape[0], k), dtype=np.float32)
        for r in range(qs.shape[0]):
            out_ids[r], out_scores[r] = self._rerank(qs[r], ids[r], x, k)
        return out_ids, out_scores

    def warmup(self, dim: int) -> int:
        """Run one tiny rerank of width ``dim``; return the nanoseconds it took."""
        dim = int_arg("dim", dim, lo=0)
        t0 = time.perf_counter_ns()
        x = np.ones((2, int(dim)), dtype=np.float32)
        self._rerank(np.ones(int(dim), dtype=np.float32), np.array([0, 1], dtype=np.int64), x, 1)
        return time.perf_counter_ns() - t0

    def _rerank(
        self, query: np.ndarray, ids: np.ndarray, vectors: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError(f"{type(self).__name__} must implement _rerank")

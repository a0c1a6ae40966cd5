"""What every reranker shares: input checks, the numpy scoring rules, the base class.

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
  zero row or a zero query), ``l2`` is the negated squared distance.
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
from ..errors import (
    ConfigError,
    DimensionError,
    IdOutOfRangeError,
    InputError,
    KTooLargeError,
    NonFiniteError,
)

__all__ = [
    "METRICS",
    "PAD_ID",
    "PAD_SCORE",
    "BaseReranker",
    "check_ids",
    "check_k",
    "check_queries",
    "check_query",
    "check_vectors",
    "numpy_scores",
    "padded",
]

METRICS = ("ip", "cosine", "l2")
PAD_ID = -1
PAD_SCORE = np.float32(-np.inf)

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
_I64_MAX = np.iinfo(np.int64).max
_FIX_VECTORS = "pass np.ascontiguousarray(vectors, dtype=np.float32) once, outside the request path"


def check_metric(owner: str, metric: Any) -> str:
    """Return ``metric`` if it is one of :data:`METRICS`, else raise ConfigError."""
    if metric not in METRICS:
        raise ConfigError(f"{owner}: unknown metric {metric!r}; valid: {', '.join(METRICS)}")
    return str(metric)


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


def _as_float32(x: np.ndarray) -> np.ndarray:
    if x.dtype == _F32:
        return np.ascontiguousarray(x)
    # A float64 value beyond float32's range becomes inf here and is then
    # rejected as non-finite; numpy's cast-overflow warning would only repeat that.
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(x, dtype=np.float32)


def _numeric(x: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: not an array of numbers ({exc})") from None
    if arr.dtype.kind not in "fiu":
        raise InputError(f"{name}: expected float32 numbers, got dtype {arr.dtype}")
    return arr


def check_query(query: Any, dim: int, *, finite: bool = True) -> np.ndarray:
    """Return the query as a C-contiguous float32 ``(dim,)`` array, or raise.

    ``finite=False`` leaves the NaN/inf test to the caller (the numba kernels
    do it in the same compiled call).
    """
    q = _numeric(query, "query")
    if q.ndim != 1:
        raise DimensionError(
            f"query: expected one vector of shape ({dim},), got {q.shape}; "
            "use rerank_batch for several queries"
        )
    if q.shape[0] != dim:
        raise DimensionError(
            f"query: expected dimension {dim} (the vectors' width), got {q.shape[0]}"
        )
    q = _as_float32(q)
    if finite and not np.isfinite(q).all():
        raise NonFiniteError("query holds NaN or inf")
    return q


def check_queries(queries: Any, dim: int, *, finite: bool = True) -> np.ndarray:
    """Return the queries as a C-contiguous float32 ``(nq, dim)`` array, or raise."""
    qs = _numeric(queries, "queries")
    if qs.ndim != 2:
        raise DimensionError(f"queries: expected shape (nq, {dim}), got {qs.shape}")
    if qs.shape[1] != dim:
        raise DimensionError(
            f"queries: expected dimension {dim} (the vectors' width), got {qs.shape[1]}"
        )
    qs = _as_float32(qs)
    if finite and qs.size:
        bad = ~np.isfinite(qs).all(axis=1)
        if bad.any():
            raise NonFiniteError(f"queries: row {int(np.argmax(bad))} holds NaN or inf")
    return qs


def check_ids(candidate_ids: Any, n_rows: int, *, ndim: int = 1, values: bool = True) -> np.ndarray:
    """Return ids as C-contiguous int64 of ``ndim`` dimensions, each in ``[-1, n_rows)``.

    ``values=False`` checks dtype and shape only (the numba kernels check the
    range as the first loop of the same compiled call).
    """
    try:
        arr = np.asarray(candidate_ids)
    except (TypeError, ValueError) as exc:
        raise InputError(f"candidate_ids: not an array of integers ({exc})") from None
    if arr.ndim != ndim:
        want = "(n,)" if ndim == 1 else "(nq, n)"
        raise DimensionError(f"candidate_ids: expected shape {want}, got {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            # np.asarray([]) is float64; an empty list is a fine empty candidate list.
            return np.zeros(arr.shape, dtype=np.int64)
        raise InputError(f"candidate_ids: ids must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.itemsize == 8 and arr.size and int(arr.max()) > _I64_MAX:
        raise IdOutOfRangeError(
            f"candidate_ids: id {int(arr.max())} is out of range [0, {n_rows}) (-1 is padding)"
        )
    ids = (
        arr
        if (arr.dtype == _I64 and arr.flags.c_contiguous)
        else np.ascontiguousarray(arr, dtype=np.int64)
    )
    if values and ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < -1:
            raise_bad_id(lo, n_rows)
        if hi >= n_rows:
            raise_bad_id(hi, n_rows)
    return ids


def raise_bad_id(bad: int, n_rows: int) -> None:
    """Raise the error for one id outside ``[-1, n_rows)``."""
    raise IdOutOfRangeError(
        f"candidate_ids: id {bad} is out of range [0, {n_rows}) (-1 is padding); "
        "ids must be rows of vectors"
    )


def check_k(k: Any, n_candidates: int, n_rows: int) -> int:
    """Return ``k`` as an int ``>= 1`` that something could fill, or raise."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputError(f"k must be an integer, got {k!r}")
    value = int(k)
    if value < 1:
        raise InputError(f"k must be >= 1, got {value}")
    if value > n_candidates and value > n_rows:
        raise KTooLargeError(
            f"k={value} is larger than both the candidate list ({n_candidates}) and the corpus "
            f"({n_rows} rows); no call could fill it"
        )
    return value


def padded(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, scores)`` (already best first, at most k) padded to k with -1 / -inf."""
    out_ids = np.full(k, PAD_ID, dtype=np.int64)
    out_scores = np.full(k, PAD_SCORE, dtype=np.float32)
    out_ids[: ids.shape[0]] = ids
    out_scores[: scores.shape[0]] = scores
    return out_ids, out_scores


def numpy_scores(query: np.ndarray, rows: np.ndarray, metric: str) -> np.ndarray:
    """float32 scores ``(n,)`` of the gathered ``rows (n, d)`` against ``query (d,)``.

    float32 arithmetic throughout (BLAS for the dot products); overflow gives
    inf and inf - inf gives NaN, silently: they are part of the ordering rules.
    """
    with np.errstate(all="ignore"):
        if metric == "ip":
            return np.asarray(rows @ query, dtype=np.float32)
        if metric == "l2":
            diff = rows - query
            return np.asarray(-np.einsum("ij,ij->i", diff, diff), dtype=np.float32)
        dots = rows @ query
        den = np.sqrt(np.einsum("ij,ij->i", rows, rows)) * np.sqrt(np.dot(query, query))
        out = np.zeros(rows.shape[0], dtype=np.float32)
        np.divide(dots, den, out=out, where=den != 0)
        return out


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
        k = check_k(k, ids.shape[0], x.shape[0])
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
        k = check_k(k, ids.shape[1], x.shape[0])
        out_ids = np.empty((qs.shape[0], k), dtype=np.int64)
        out_scores = np.empty((qs.shape[0], k), dtype=np.float32)
        for r in range(qs.shape[0]):
            out_ids[r], out_scores[r] = self._rerank(qs[r], ids[r], x, k)
        return out_ids, out_scores

    def warmup(self, dim: int) -> int:
        """Run one tiny rerank of width ``dim``; return the nanoseconds it took."""
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise InputError(f"dim must be a non-negative integer, got {dim!r}")
        t0 = time.perf_counter_ns()
        x = np.ones((2, int(dim)), dtype=np.float32)
        self._rerank(np.ones(int(dim), dtype=np.float32), np.array([0, 1], dtype=np.int64), x, 1)
        return time.perf_counter_ns() - t0

    def _rerank(
        self, query: np.ndarray, ids: np.ndarray, vectors: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError(f"{type(self).__name__} must implement _rerank")

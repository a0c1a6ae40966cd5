"""Fusing two ranked candidate lists into one: reciprocal rank fusion and a weighted sum.

A hybrid retriever asks a dense index and a lexical one for candidates and must hand the next
stage one list. This module is that step, the ``fuse`` stage of a hybrid request:

- :func:`reciprocal_rank_fusion`: each id scores ``sum over lists of 1 / (k_rrf + rank)``,
  ``rank`` counted from 1 in each list it appears in (Cormack, Clarke and Buettcher, 2009;
  ``k_rrf = 60`` is their constant). Scores are not needed, only orders.
- :func:`weighted_fusion`: each list's scores are min-max normalised to [0, 1] over its own
  entries, then ``alpha * first + (1 - alpha) * second``; an id missing from a list gets 0 from
  it. A list whose entries all score the same (one entry, or a tie) normalises each to 1.

Both take corpus row ids as 1-D integer arrays, best first, where ``-1`` pads a short list (as
the indexes return them) and is skipped; an id listed twice in one list counts once, at its
best place. Both return ``(ids, scores)``: int64 ids and float64 fused scores, best first, ties
broken by the smaller id, at most ``limit`` of them (all distinct ids when ``limit`` is None).

Each function runs a compiled kernel (:mod:`ragbench.fusion._kernels`, numba) — the measured
fast path of the performance target "fusion of two 100-candidate lists: at most 5 µs and at
most 1.2x a plain dict-based fusion in Python" (``bench/test_bench_fusion.py``). The plain
Python versions, :func:`reciprocal_rank_fusion_plain` and :func:`weighted_fusion_plain`, are the
reference: ``tests/fusion/test_fusion.py`` checks, by property-based tests, that the kernels return
exactly what they return.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError, InputError, NonFiniteError

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "reciprocal_rank_fusion",
    "reciprocal_rank_fusion_plain",
    "weighted_fusion",
    "weighted_fusion_plain",
]

Fused = tuple["NDArray[np.int64]", "NDArray[np.float64]"]


#: The dtypes the kernels take (numpy's own instances: an array of that type holds this one).
_INT64, _FLOAT64 = np.dtype(np.int64), np.dtype(np.float64)
# module globals: a lookup each instead of two (np.empty: ~0.05 µs a call)
_empty, _ARRAY, _INF = np.empty, np.ndarray, math.inf


def _ids(ids: object, name: str) -> NDArray[np.int64]:
    """``ids`` as a C-contiguous 1-D int64 array, or an InputError naming ``name``.

    Ids below -1 are found by the kernels (they return :data:`_BAD_ID`): a second pass here
    would cost more than the fusion. The first test is the indexes' own output, checked by
    identity (``dtype is``, not ``==``, which builds a dtype from ``np.int64`` each call).
    """
    if type(ids) is np.ndarray and ids.dtype is _INT64 and ids.ndim == 1 and ids.flags.c_contiguous:
        return ids
    arr = np.asarray(ids)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise InputError(
            f"{name}: candidate ids must be a 1-D integer array, got {arr.dtype} {arr.shape}"
        )
    return np.ascontiguousarray(arr, dtype=np.int64)


def _counted(m: int) -> int:
    """A kernel's entry count, or the error its negative status stands for."""
    if m == -2:
        raise NonFiniteError("scores must be finite to be normalised")
    if m < 0:
        raise InputError("candidate ids must be row ids >= 0 (or -1 for padding)")
    return m


def _scores(scores: object, ids: NDArray[np.int64], name: str) -> NDArray[np.float64]:
    """``scores`` as a C-contiguous float64 array as long as ``ids`` (finiteness: the kernel's)."""
    if not (
        isinstance(scores, np.ndarray) and scores.dtype is _FLOAT64 and scores.flags.c_contiguous
    ):
        scores = np.ascontiguousarray(np.asarray(scores, dtype=np.float64))
    assert isinstance(scores, np.ndarray)
    if scores.shape != ids.shape:
        raise InputError(f"{name}: {scores.size} scores for {ids.size} ids")
    return scores


def _limit(limit: int | None) -> int:
    if limit is None:
        return -1
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be a whole number >= 1 or None, got {limit!r}")
    return limit


def _check_k_rrf(k_rrf: float) -> float:
    if type(k_rrf) is float and 0.0 <= k_rrf < math.inf:  # the default, without the checks below
        return k_rrf
    if (
        isinstance(k_rrf, bool)
        or not isinstance(k_rrf, (int, float))
        or not (0 <= k_rrf < math.inf)
    ):
        raise ConfigError(f"k_rrf must be a finite number >= 0, got {k_rrf!r}")
    return float(k_rrf)


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (0.0 <= alpha <= 1.0):
        raise ConfigError(f"alpha must be in [0, 1] (the first list's weight), got {alpha!r}")
    return float(alpha)


def reciprocal_rank_fusion(
    first: Sequence[int] | NDArray[np.integer],
    second: Sequence[int] | NDArray[np.integer],
    *,
    k_rrf: float = 60.0,
    limit: int | None = None,
) -> Fused:
    """Reciprocal rank fusion of two ranked id lists (see the module docstring).

    Written for the target "at most 5 µs" on two 100-candidate lists: int64 arrays (what the
    indexes return) go to the kernel unchecked here, since its one compiled signature (1-D,
    C-contiguous int64, read-only accepted) makes numba's dispatcher refuse anything else with
    a ``TypeError``; such arrays (strided, 2-D) are then converted or refused by :func:`_ids`,
    at the cost of the refusal (~0.2 ms). Other inputs (lists, other dtypes) are converted
    first. ``tests/fusion/test_fusion.py`` checks, by property-based tests, that it returns
    exactly what :func:`reciprocal_rank_fusion_plain` returns.
    """
    if type(k_rrf) is not float or not 0.0 <= k_rrf < _INF:  # the default: no call
        k_rrf = _check_k_rrf(k_rrf)
    n = -1 if limit is None else _limit(limit)
    a, b = first, second
    if not (type(a) is _ARRAY and type(b) is _ARRAY and a.dtype is _INT64 and b.dtype is _INT64):
        a, b = _ids(a, "first"), _ids(b, "second")
    size = a.size + b.size
    out_ids, out_scores = _empty(size, _INT64), _empty(size, _FLOAT64)
    try:
        m = _rrf(a, b, k_rrf, out_ids, out_scores)
    except TypeError:  # the kernel's signature refused them: 2-D, strided (InputError or a copy)
        m = _rrf(_ids(a, "first"), _ids(b, "second"), k_rrf, out_ids, out_scores)
    if m < 0:
        _counted(m)  # raises
    if 0 < n < m:
        m = n
    if m == size:
        return out_ids, out_scores
    return out_ids[:m], out_scores[:m]


def weighted_fusion(
    first: Sequence[int] | NDArray[np.integer],
    first_scores: Sequence[float] | NDArray[np.floating],
    second: Sequence[int] | NDArray[np.integer],
    second_scores: Sequence[float] | NDArray[np.floating],
    *,
    alpha: float = 0.5,
    limit: int | None = None,
) -> Fused:
    """Weighted sum of min-max normalised scores (higher is better in both lists)."""
    a, b = _ids(first, "first"), _ids(second, "second")
    sa, sb = _scores(first_scores, a, "first"), _scores(second_scores, b, "second")
    w, n = _check_alpha(alpha), _limit(limit)
    return _fused(n, a.size + b.size, _compiled().weighted, a, sa, b, sb, w)


def _fused(limit: int, size: int, kernel: Callable[..., int], *args: object) -> Fused:
    """Run ``kernel(*args, out_ids, out_scores)`` on fresh output arrays of ``size``; the
    first ``limit`` entries it fused (all of them when ``limit`` < 0)."""
    out_ids = np.empty(size, dtype=_INT64)
    out_scores = np.empty(size, dtype=_FLOAT64)
    m = _counted(kernel(*args, out_ids, out_scores))
    m = m if limit < 0 else min(m, limit)
    return out_ids[:m], out_scores[:m]


def _check_plain_ids(*lists: object) -> None:
    for ids in lists:
        arr = _ids(ids, "ids")
        if arr.size and int(arr.min()) < -1:
            _counted(-1)


_KERNELS: list[ModuleType] = []


def _first_rrf(*args: object) -> int:
    """The RRF kernel's first call: imports it (numba) and puts it in :data:`_rrf`."""
    global _rrf
    _rrf = _compiled().rrf
    return _rrf(*args)


#: The RRF kernel, called by module global (no call to :func:`_compiled` per fusion).
_rrf: Callable[..., int] = _first_rrf


def _compiled() -> ModuleType:
    """:mod:`ragbench.fusion._kernels`, imported (numba) on the first fusion."""
    if _KERNELS:
        return _KERNELS[0]
    from . import _kernels as module

    _KERNELS.append(module)
    return module


def _best_first(scores: dict[int, float], limit: int | None) -> Fused:
    order = sorted(scores, key=lambda i: (-scores[i], i))
    if limit is not None:
        order = order[: _limit(limit)]
    return np.array(order, dtype=np.int64), np.array([scores[i] for i in order], dtype=np.float64)


def reciprocal_rank_fusion_plain(
    first: Sequence[int] | NDArray[np.integer],
    second: Sequence[int] | NDArray[np.integer],
    *,
    k_rrf: float = 60.0,
    limit: int | None = None,
) -> Fused:
    """:func:`reciprocal_rank_fusion` written plainly with a dict: the reference."""
    k = _check_k_rrf(k_rrf)
    fused: dict[int, float] = {}
    _check_plain_ids(first, second)
    for ranked in (_ids(first, "first"), _ids(second, "second")):
        seen: set[int] = set()
        for rank, i in enumerate(ranked.tolist(), 1):
            if i >= 0 and i not in seen:
                seen.add(i)
                fused[i] = fused.get(i, 0.0) + 1.0 / (k + rank)
    return _best_first(fused, limit)


def _normalised(ids: NDArray[np.int64], scores: NDArray[np.float64]) -> dict[int, float]:
    """Each id's score min-max normalised over the list's entries (first place of a repeat)."""
    kept: dict[int, float] = {}
    for i, s in zip(ids.tolist(), scores.tolist(), strict=True):
        if i >= 0 and i not in kept:
            kept[i] = s
    if not kept:
        return {}
    low, high = min(kept.values()), max(kept.values())
    if high == low:
        return dict.fromkeys(kept, 1.0)
    return {i: (s - low) / (high - low) for i, s in kept.items()}


def weighted_fusion_plain(
    first: Sequence[int] | NDArray[np.integer],
    first_scores: Sequence[float] | NDArray[np.floating],
    second: Sequence[int] | NDArray[np.integer],
    second_scores: Sequence[float] | NDArray[np.floating],
    *,
    alpha: float = 0.5,
    limit: int | None = None,
) -> Fused:
    """:func:`weighted_fusion` written plainly with dicts: the reference."""
    a, b = _ids(first, "first"), _ids(second, "second")
    _check_plain_ids(a, b)
    sa, sb = _scores(first_scores, a, "first"), _scores(second_scores, b, "second")
    if not (np.isfinite(sa[a >= 0]).all() and np.isfinite(sb[b >= 0]).all()):
        _counted(-2)
    na, nb = _normalised(a, sa), _normalised(b, sb)
    w = _check_alpha(alpha)
    fused = {i: w * na.get(i, 0.0) + (1.0 - w) * nb.get(i, 0.0) for i in {**na, **nb}}
    return _best_first(fused, limit)

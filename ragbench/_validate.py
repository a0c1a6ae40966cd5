"""Input checks shared by every component (never ``assert``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DimensionError, IdOutOfRangeError, InputError, KTooLargeError, NonFiniteError


def as_matrix(
    x: Any, *, name: str = "vectors", dim: int | None = None, check_finite: bool = True
) -> np.ndarray:
    """Return ``x`` as a C-contiguous float32 ``(n, d)`` array, or raise.

    A 1-D input is accepted as one row.
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: not an array of numbers ({exc})") from None
    if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
        raise InputError(f"{name}: expected float32 numbers, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise DimensionError(f"{name}: expected shape (n, d), got {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise DimensionError(f"{name}: expected dimension {dim}, got {arr.shape[1]}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if check_finite and arr.size and not np.isfinite(arr).all():
        bad = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise NonFiniteError(f"{name}: row {bad} holds NaN or inf")
    return arr


def check_k(k: Any, limit: int, *, what: str = "the corpus") -> int:
    """Return ``k`` as an int in ``[1, limit]`` or raise."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputError(f"k must be an integer, got {k!r}")
    value = int(k)
    if value < 1:
        raise InputError(f"k must be >= 1, got {value}")
    if value > limit:
        raise KTooLargeError(f"k={value} is larger than {what} ({limit} items)")
    return value


def as_ids(
    ids: Any, n: int, *, name: str = "candidate_ids", ndim: int = 1, allow_padding: bool = True
) -> np.ndarray:
    """Return ids as C-contiguous int64 with every id in ``[0, n)`` (or ``-1``)."""
    arr = np.asarray(ids)
    if arr.size == 0:
        arr = arr.astype(np.int64).reshape(
            (0,) if ndim == 1 else (arr.shape[0] if arr.ndim else 0, 0)
        )
    if arr.dtype.kind not in "iu":
        raise InputError(f"{name}: ids must be integers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise DimensionError(f"{name}: expected {ndim}-D ids, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if arr.size:
        lo = -1 if allow_padding else 0
        mn, mx = int(arr.min()), int(arr.max())
        if mn < lo or mx >= n:
            bad = mn if mn < lo else mx
            raise IdOutOfRangeError(
                f"{name}: id {bad} is out of range [0, {n})"
                + (" (-1 is padding)" if allow_padding else "")
            )
    return arr

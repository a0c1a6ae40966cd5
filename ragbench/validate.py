"""Input and parameter checks shared by every component (never ``assert``).

Parameter checks (``positive_int``, ``positive_number``, ``bool_param``,
``check_metric``) raise :class:`~ragbench.errors.ConfigError` naming the owner
and the key; checks on data passed per call (``int_arg``, ``check_k``, ``check_ids``,
``as_float32``, ``as_matrix``, ``check_finite``) raise
:class:`~ragbench.errors.InputError` subclasses. Every message says what was
expected, so it tells the caller how to fix the call.

numpy is imported inside the array helpers only: ``import ragbench`` (which
loads the configuration checks) must not load it.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigError,
    DimensionError,
    IdOutOfRangeError,
    InputError,
    KTooLargeError,
    NonFiniteError,
)
from .files import open_regular

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "JSON_DEPTH",
    "METRICS",
    "as_float32",
    "available_memory",
    "as_matrix",
    "bad_id_error",
    "bool_param",
    "check_finite",
    "check_ids",
    "check_k",
    "check_memory",
    "check_metric",
    "int_arg",
    "json_loads",
    "load_npy",
    "positive_int",
    "positive_number",
]

#: The vector metrics: inner product, cosine similarity, (negated squared) L2 distance.
METRICS: tuple[str, ...] = ("ip", "cosine", "l2")


def positive_int(owner: str, name: str, value: Any, *, lo: int = 1, hi: int | None = None) -> int:
    """Return ``value`` as an int in ``[lo, hi]`` or raise :class:`ConfigError` naming ``owner``.

    Python and numpy integers are accepted; bools, floats (even ``2.0``) and
    strings are not.
    """
    problem = _int_problem(value, lo, hi)
    if problem:
        raise ConfigError(f"{owner}: {name} {problem}")
    return int(value)


def positive_number(owner: str, name: str, value: Any) -> float:
    """Return ``value`` as a finite float ``> 0`` or raise :class:`ConfigError`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not value > 0
    ):
        raise ConfigError(f"{owner}: {name} must be a positive number, got {value!r}")
    return float(value)


def _int_problem(value: Any, lo: int, hi: int | None) -> str:
    """What is wrong with ``value`` as an int in ``[lo, hi]`` ("" when nothing)."""
    if type(value) is not int and (
        isinstance(value, bool) or not isinstance(value, numbers.Integral)
    ):
        return f"must be an integer, got {value!r}"
    number = int(value)
    if number < lo or (hi is not None and number > hi):
        bounds = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        return f"must be {bounds}, got {number}"
    return ""


def bool_param(owner: str, name: str, value: Any) -> bool:
    """Return ``value`` as a bool if it is one (Python or numpy), else raise :class:`ConfigError`."""
    numpy = sys.modules.get("numpy")  # a numpy bool exists only once numpy is loaded
    if not isinstance(value, bool) and not (numpy is not None and isinstance(value, numpy.bool_)):
        raise ConfigError(f"{owner}: {name} must be true or false, got {value!r}")
    return bool(value)


def check_metric(owner: str, metric: Any, supported: tuple[str, ...] = METRICS) -> str:
    """Return ``metric`` if it is one of ``supported``, else raise :class:`ConfigError` listing them."""
    if not isinstance(metric, str) or metric not in supported:
        raise ConfigError(
            f"{owner}: metric {metric!r} is not supported; use one of: {', '.join(supported)}"
        )
    return metric


def int_arg(name: str, value: Any, *, lo: int = 1, hi: int | None = None) -> int:
    """Return an argument passed per call as an int in ``[lo, hi]``, or raise :class:`InputError`.

    The per-call twin of :func:`positive_int` (same rules and wording).
    """
    problem = _int_problem(value, lo, hi)
    if problem:
        raise InputError(f"{name} {problem}")
    return int(value)


def check_k(k: Any, limit: int, *, what: str = "the corpus") -> int:
    """Return ``k`` as an int in ``[1, limit]``, or raise.

    :class:`InputError` when ``k`` is not an integer ``>= 1``,
    :class:`KTooLargeError` when it exceeds ``limit`` (``what`` names what
    ``limit`` counts, for the message).
    """
    if type(k) is not int or k < 1:
        k = int_arg("k", k)
    if k > limit:
        raise KTooLargeError(f"k={k} is larger than {what} ({limit}); pass k <= {limit}")
    return k  # type: ignore[no-any-return]


def bad_id_error(bad: int, n_rows: int, *, name: str = "candidate_ids") -> IdOutOfRangeError:
    """The error for one id outside ``[-1, n_rows)`` (callers ``raise`` it)."""
    return IdOutOfRangeError(
        f"{name}: id {bad} is out of range [0, {n_rows}) (-1 is padding); "
        "ids must be rows of vectors"
    )


def check_ids(
    ids: Any, n_rows: int, *, ndim: int = 1, values: bool = True, name: str = "candidate_ids"
) -> np.ndarray:
    """Return ``ids`` as C-contiguous int64 of ``ndim`` dimensions, each in ``[-1, n_rows)``.

    ``-1`` is padding. An int64 C-contiguous array is returned as it is (never
    copied). ``values=False`` checks dtype and shape only (the numba kernels
    check the range as the first loop of the same compiled call).
    """
    import numpy as np

    try:
        arr = np.asarray(ids)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: not an array of integers ({exc})") from None
    if arr.ndim != ndim:
        want = "(n,)" if ndim == 1 else "(nq, n)"
        raise DimensionError(f"{name}: expected shape {want}, got {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            # np.asarray([]) is float64; an empty list is a fine empty id list.
            return np.zeros(arr.shape, dtype=np.int64)
        raise InputError(f"{name}: ids must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.itemsize == 8 and arr.size:
        top = int(arr.max())
        if top > np.iinfo(np.int64).max:
            raise bad_id_error(top, n_rows, name=name)
    out = (
        arr
        if (arr.dtype == np.int64 and arr.flags.c_contiguous)
        else np.ascontiguousarray(arr, dtype=np.int64)
    )
    if values and out.size:
        lo, hi = int(out.min()), int(out.max())
        if lo < -1:
            raise bad_id_error(lo, n_rows, name=name)
        if hi >= n_rows:
            raise bad_id_error(hi, n_rows, name=name)
    return out


def as_float32(x: Any, *, name: str) -> np.ndarray:
    """Return ``x`` as a C-contiguous float32 array of its own shape, or raise :class:`InputError`.

    Integer and float input is converted (a float32 C-contiguous array is
    returned as it is); bools, strings and objects are refused. A float64 value
    beyond float32's range becomes inf, for :func:`check_finite` to reject.
    """
    import numpy as np

    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: not an array of numbers ({exc})") from None
    if arr.dtype.kind not in "fiu":
        raise InputError(f"{name}: expected float32 numbers, got dtype {arr.dtype}")
    if arr.dtype == np.float32:
        return np.ascontiguousarray(arr)
    # numpy's cast-overflow warning would only repeat what check_finite reports.
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(arr, dtype=np.float32)


def check_finite(arr: np.ndarray, name: str) -> None:
    """Raise :class:`NonFiniteError` naming the first row of ``arr`` holding NaN or inf."""
    import numpy as np

    if arr.size and not np.isfinite(arr).all():
        if arr.ndim < 2:
            raise NonFiniteError(f"{name} holds NaN or inf")
        bad = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise NonFiniteError(f"{name}: row {bad} holds NaN or inf")


def as_matrix(
    x: Any, *, name: str = "vectors", dim: int | None = None, finite: bool = True
) -> np.ndarray:
    """Return ``x`` as a C-contiguous float32 ``(n, d)`` array, or raise.

    A 1-D input is accepted as one row. ``dim`` fixes ``d``
    (:class:`DimensionError` otherwise); ``finite`` rejects NaN and inf
    (:class:`NonFiniteError`).
    """
    arr = as_float32(x, name=name)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise DimensionError(f"{name}: expected shape (n, d), got {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise DimensionError(f"{name}: expected dimension {dim}, got {arr.shape[1]}")
    if finite:
        check_finite(arr, name)
    return arr


# --------------------------------------------------------------------------- files
# Checks for files ragbench reads or writes (index files, caches, shipped vectors):
# a FIFO or device never blocks a read, a size a header claims is checked against
# the file before anything is allocated, and a directory is checked writable
# before any work that would end in writing to it.

#: Deepest JSON nesting accepted in ragbench's own headers and sidecars (they nest 3).
JSON_DEPTH = 32


def json_loads(blob: bytes | str, what: str, error: type[Exception]) -> Any:
    """``json.loads`` raising ``error`` (one line) for bad JSON or nesting deeper than :data:`JSON_DEPTH`.

    The depth is measured on the text before parsing, so a crafted file of
    ``[[[[...`` is refused without the recursion the parser would need.
    """
    import json

    text = blob.decode("utf-8") if isinstance(blob, bytes) else blob
    if _json_depth(text) > JSON_DEPTH:
        raise error(f"{what}: JSON nested deeper than {JSON_DEPTH} levels; the file is corrupt")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise error(f"{what}: not valid JSON ({type(exc).__name__})") from None


def _json_depth(text: str) -> int:
    """Deepest bracket nesting of a JSON text (brackets inside strings are skipped)."""
    if "[" not in text and "{" not in text:
        return 0
    import re

    # Drop strings (with escapes) first; what is left is numbers, literals and brackets.
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", text)
    depth = deepest = 0
    for ch in re.sub(r"[^\[\]{}]", "", bare):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def load_npy(
    path: Any, what: str, error: type[Exception], *, rows: int | None = None
) -> np.ndarray:
    """Read a ``.npy`` file after checking its header against the file size (and ``rows``).

    The header's shape times the dtype's size must be exactly the bytes after
    the header, so a crafted header claiming 40 GB is refused before anything
    is allocated; object dtypes (pickles) are refused; ``rows`` (when given)
    must equal the first dimension. Raises ``error`` (one line) for all of
    these and for an unreadable file; ``FileNotFoundError`` propagates.
    """
    import numpy as np
    from numpy.lib import format as npy_format

    name = str(path)
    with open_regular(path, limit_bytes=None, what=what, error=error, os_errors=True) as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            version = npy_format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
        except (ValueError, OSError, EOFError) as exc:
            raise error(f"{what} {name}: not a readable .npy file ({exc})") from None
        if dtype.hasobject:
            raise error(
                f"{what} {name}: not a plain numeric .npy file (it holds Python objects; "
                "refusing to unpickle them)"
            )
        count = 1
        for n in shape:
            count *= int(n)
        want = count * dtype.itemsize
        have = size - fh.tell()
        if want != have:
            raise error(
                f"{what} {name}: header claims {dtype}{list(shape)} ({want} bytes) but the "
                f"file holds {have} bytes after it; the file is damaged"
            )
        if rows is not None and (not shape or int(shape[0]) != rows):
            raise error(f"{what} {name}: holds {list(shape)[:1] or 'no'} rows, expected {rows}")
        try:
            arr = np.fromfile(fh, dtype=dtype, count=count)
        except (ValueError, OSError) as exc:
            raise error(f"{what} {name}: unreadable ({exc})") from None
    if arr.size != count:
        raise error(f"{what} {name}: truncated while reading")
    out: np.ndarray = arr.reshape(tuple(int(n) for n in shape), order="F" if fortran else "C")
    return out


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable`` from /proc/meminfo), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(nbytes: int, what: str) -> None:
    """Raise :class:`ConfigError` when ``what`` would need more than the available memory."""
    free = available_memory()
    if free is not None and nbytes > free:
        raise ConfigError(
            f"{what} needs about {_gib(nbytes)} of memory, more than the {_gib(free)} "
            "available; choose smaller sizes"
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"

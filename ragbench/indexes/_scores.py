"""Compiled distance-to-score conversion for one hnswlib result row.

Private to :mod:`ragbench.indexes.hnswlib_index` (this module imports numba).

After a walk through a large graph the caches hold the graph, not numpy: a
numpy ufunc call on the ``(1, k)`` distance row then costs ~4 µs (its
dispatch code and data are cold), a compiled loop called through its entry
point ~1-2 µs less. Each kernel converts the row in place and returns the
best score, which the caller uses for its NaN/inf check.
"""

# numba types these functions from their arguments at each call; mypy does
# not look inside.
# mypy: ignore-errors

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, typeof


@njit(cache=True, nogil=True)
def _similarity(dist):
    # ip / cosine: hnswlib's distance is 1 - similarity. The same float32
    # operation as numpy's np.subtract(1, dist): bit-identical results.
    row = dist[0]
    for i in range(row.shape[0]):
        row[i] = np.float32(1.0) - row[i]
    return row[0]


@njit(cache=True, nogil=True)
def _negated(dist):
    # l2: hnswlib's distance is the squared distance; the score is its negation.
    row = dist[0]
    for i in range(row.shape[0]):
        row[i] = -row[i]
    return row[0]


def entry_point(metric: str) -> Any:
    """The compiled entry point converting a float32 C-contiguous ``(1, k)`` row in place.

    The entry point skips numba's argument typing: call it only with a
    writeable, aligned, C-contiguous float32 2-D array of one row.
    """
    kernel = _negated if metric == "l2" else _similarity
    probe = np.zeros((1, 1), dtype=np.float32)
    kernel(probe)
    return kernel.overloads[(typeof(probe),)].entry_point

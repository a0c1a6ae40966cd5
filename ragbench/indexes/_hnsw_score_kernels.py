"""Compiled distance-to-score conversion of hnswlib result rows.

Private to :mod:`ragbench.indexes.hnswlib_index` (this module imports numba).

After a walk through a large graph the caches hold the graph, not numpy: a
numpy ufunc call on the ``(1, k)`` distance row then costs ~4 µs (its
dispatch code and data are cold), a compiled loop called through its entry
point ~1-2 µs less; after a batch every numpy call costs tens of µs
(measured 70-90 µs after 200 queries through a 20k graph). Each kernel
converts every row in place and returns the sum of the rows' best scores,
which the caller uses for its NaN/inf check: it is finite exactly when every
row's best score is, but for an overflow, which the caller's exact check
tells apart.
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
    best = 0.0
    for r in range(dist.shape[0]):
        row = dist[r]
        for i in range(row.shape[0]):
            row[i] = np.float32(1.0) - row[i]
        best += row[0]
    return best


@njit(cache=True, nogil=True)
def _negated(dist):
    # l2: hnswlib's distance is the squared distance; the score is its negation.
    best = 0.0
    for r in range(dist.shape[0]):
        row = dist[r]
        for i in range(row.shape[0]):
            row[i] = -row[i]
        best += row[0]
    return best


def entry_point(metric: str) -> Any:
    """The compiled entry point converting a float32 C-contiguous ``(n, k)`` array in place.

    Returns the sum of column 0 (see the module docstring). The entry point
    skips numba's argument typing: call it only with a writeable, aligned,
    C-contiguous float32 2-D array.
    """
    kernel = _negated if metric == "l2" else _similarity
    probe = np.zeros((1, 1), dtype=np.float32)
    kernel(probe)
    return kernel.overloads[(typeof(probe),)].entry_point

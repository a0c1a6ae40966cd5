"""Constants and small helpers the index backends share: dtypes, finiteness, padding.

The base classes are in :mod:`ragbench.indexes.base`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
INF = math.inf
#: The largest finite float32, as a Python float: faiss's pad score (negated for ip).
FLT_MAX = float(np.finfo(np.float32).max)
#: Largest value of an integer parameter handed to faiss or hnswlib as a C ``int``.
INT32_MAX = 2**31 - 1

_max_reduce = np.maximum.reduce
_min_reduce = np.minimum.reduce


def batch_is_finite(q: np.ndarray) -> bool:
    """Whether a non-empty float32 query batch holds no NaN or +-inf (False when empty).

    A max and a min pass (numpy's own SIMD loops, one thread; both propagate
    NaN). Not ``vdot(q, q)`` as for a single row: on a batch that is a
    threaded BLAS call, and OpenBLAS's worker then spins on the other core
    while the index library's search threads want it (measured: +2.0 % on a
    500-query hnswlib batch of ~30 ms on 2 cores, vs -0.3 % for a numpy
    reduction).
    """
    if not q.size:
        return False
    return float(_min_reduce(q, axis=None)) > -INF and float(_max_reduce(q, axis=None)) < INF


#: Seconds each add call of a chunked build aims to take. A library's add call does not
#: return to Python inside itself, so Ctrl-C is answered between calls; a call's own cost
#: (hnswlib starts and joins its threads, ~0.1 ms) stays ~0.1 % of the build.
BUILD_CALL_S = 0.1
#: Rows of a chunked build's first add call, before any call was timed: few, as a slow
#: engine's rows can take milliseconds each (the chunks then double up to their size).
FIRST_BUILD_CHUNK = 64


def build_chunks(n: int, call_s: float = BUILD_CALL_S) -> Iterator[tuple[int, int]]:
    """Row ranges ``(start, stop)`` covering ``range(n)`` in order, one per add call of a build.

    The first has :data:`FIRST_BUILD_CHUNK` rows; each next one is sized from
    the time the last took (the caller's loop body between two ranges) to take
    about ``call_s``, at most twice the last one's rows, at least one row. Every
    backend that builds in chunks adds rows independently of how they are split,
    so the index is the one a single call builds; the chunks report progress
    and let Ctrl-C end a build within about ``call_s`` instead of after a
    library call of any length (10 000-row calls took seconds on a loaded
    machine, and Ctrl-C then ended ``scale`` only by the CLI's grace).
    """
    start, rows = 0, min(n, FIRST_BUILD_CHUNK)
    while start < n:
        stop = min(n, start + rows)
        t0 = time.perf_counter()
        yield start, stop
        took = time.perf_counter() - t0
        done = stop - start
        rows = min(2 * done, round(done * call_s / took)) if took > 0 else 2 * done
        rows = max(1, rows)
        start = stop


def fix_padding(ids: np.ndarray, scores: np.ndarray) -> None:
    """In place: ``-inf`` scores where ``ids == -1``, each row re-sorted best first.

    Libraries pad with ``±FLT_MAX`` (faiss) or leave holes anywhere in a row;
    the contract is ``-1`` ids with ``-inf`` scores at the end of the row.
    Only called on the rare path where a pad was seen.
    """
    pads = ids < 0
    ids[pads] = -1
    scores[pads] = -INF
    # Stable, so equal scores keep the library's order.
    order = np.argsort(-scores, axis=1, kind="stable")
    ids[...] = np.take_along_axis(ids, order, axis=1)
    scores[...] = np.take_along_axis(scores, order, axis=1)

"""Constants and small helpers the index backends share: dtypes, finiteness, padding.

The base classes are in :mod:`ragbench.indexes.base`.
"""

from __future__ import annotations

import math

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


_MIN_BUILD_STEP = 10_000


def build_step(n: int) -> int:
    """Rows per add call when an index is built in chunks to report progress.

    At least 10 000 rows, and at most 100 calls: a chunk takes long enough
    that the calls' overhead and each call's thread start and join stay far
    below the noise of a build; a corpus up to 10 000 rows is one call.
    """
    return max(_MIN_BUILD_STEP, -(-n // 100))


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

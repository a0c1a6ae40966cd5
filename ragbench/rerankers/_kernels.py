"""Numba kernels behind :class:`ragbench.rerankers.numba_reranker.NumbaReranker`.

Private module: import it only from the numba reranker (it imports numba).

Every kernel takes arrays whose *types* were checked in Python (float32 query
and C-contiguous ``(N, d)`` float32 vectors, C-contiguous int64 ids) and
starts with a value check of its own: every id in ``[-1, N)`` and every query
component finite. Rows of ``vectors`` are read only after that check passed;
otherwise the kernel returns a status code and the Python side raises. The
check lives in the kernel because the same two passes done with numpy
(``ids.min()``, ``ids.max()``, ``np.isfinite(q).all()``) cost about 5 µs of
ufunc overhead, more than the whole rerank of 100 candidates.

Scores are accumulated in float32 with ``fastmath={"reassoc", "contract"}``
on the scoring loops only, so LLVM vectorises them (16 partial sums, FMA).
Only those two flags: ``nnan``/``ninf`` would let LLVM drop the NaN tests the
ordering relies on. Rows are scored four per pass (``q`` is loaded once for
four rows; measured about 1.4x faster than one row at a time at 1k-10k
candidates), by loops inlined into the one scan function (see ``_scan``). A
short or padded group repeats one of its rows, so every score comes out of the
same compiled loop and identical rows get bit-identical scores: ties really go
to the smaller id.

Ordering ("better" first): real scores descending (``+inf`` first, ``-inf``
last among them), then NaN scores; equal scores (and NaN vs NaN) by smaller
id.
"""

# numba types these functions from their arguments at each call; Python
# annotations would not be checked, so mypy does not look inside.
# mypy: ignore-errors

from __future__ import annotations

import numpy as np
from llvmlite import ir
from llvmlite.binding import llvm_version_info
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

IP = 0
COSINE = 1
L2 = 2

OK = 0
BAD_ID = 1
NONFINITE_QUERY = 2

_FASTMATH = {"reassoc", "contract"}

# Up to this k the kept entries are a sorted run (an insertion counts its
# place without branching and slides about k/2 entries; the end needs no
# sort; measured 0.25 µs less per call at 100 candidates than a compare-and-
# slide loop, the same from 1k on);
# above it a heap (log k per insertion). Measured (100k x 384 base, random
# ids, interleaved medians, whole kernel): 100 candidates, k=10: 4.61 µs vs
# 4.75 with the heap, k=16: 4.96 vs 5.18; 1000 candidates, k=10 or 32: no
# difference; k=64: the run 3% slower.
SMALL_K = 16
_NEG_INF = np.float32(-np.inf)


# The intrinsic is mangled on its pointer type: typed pointers before LLVM 17.
_PREFETCH = "llvm.prefetch.p0" if llvm_version_info >= (17,) else "llvm.prefetch.p0i8"


@intrinsic
def prefetch_row(typingctx, vectors, row):
    """Hint the CPU to start loading the first cache line of ``vectors[row]``.

    A prefetch never faults, whatever the address. Issued one group of four
    rows ahead it lets the next rows' memory misses overlap the current
    group's arithmetic: measured 1.2x faster at 1k-10k candidates and 1.1x at
    100k (from 1.3x the read floor to 1.03x-1.08x).
    """
    if not (
        isinstance(vectors, types.Array) and vectors.ndim == 2 and isinstance(row, types.Integer)
    ):
        return None

    def codegen(context, builder, signature, args):
        arrty = signature.args[0]
        arr = context.make_array(arrty)(context, builder, args[0])
        index = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = cgutils.get_item_pointer2(
            context,
            builder,
            data=arr.data,
            shape=cgutils.unpack_tuple(builder, arr.shape),
            strides=cgutils.unpack_tuple(builder, arr.strides),
            layout=arrty.layout,
            inds=[index, context.get_constant(types.intp, 0)],
            wraparound=False,
            boundscheck=False,
        )
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH)
        # read, keep in all cache levels, data cache
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(vectors, row), codegen


@njit(cache=True, nogil=True)
def _worse(s1, i1, s2, i2):
    """True when (s1, i1) ranks after (s2, i2)."""
    # Two real, different scores settle it in one or two compares (the
    # common case inside the heap); NaN makes both compares false.
    if s1 < s2:
        return True
    if s1 > s2:
        return False
    n1 = s1 != s1
    if n1 != (s2 != s2):
        return n1
    return i1 > i2


@njit(cache=True, nogil=True)
def _sift_up(hs, hi, c):
    # Root holds the worst kept entry, so a child must never be worse than its parent.
    while c > 0:
        p = (c - 1) >> 1
        if _worse(hs[c], hi[c], hs[p], hi[p]):
            hs[c], hs[p] = hs[p], hs[c]
            hi[c], hi[p] = hi[p], hi[c]
            c = p
        else:
            break


@njit(cache=True, nogil=True)
def _sift_down(hs, hi, c, m):
    while True:
        left = 2 * c + 1
        if left >= m:
            break
        w = left
        right = left + 1
        if right < m and _worse(hs[right], hi[right], hs[left], hi[left]):
            w = right
        if _worse(hs[w], hi[w], hs[c], hi[c]):
            hs[c], hs[w] = hs[w], hs[c]
            hi[c], hi[w] = hi[w], hi[c]
            c = w
        else:
            break


@njit(cache=True, nogil=True, inline="always")
def _contains(hi, m, row):
    """Whether ``row`` is among the m kept ids (a full pass, no early exit to mispredict)."""
    found = False
    for t in range(m):
        found |= hi[t] == row
    return found


@njit(cache=True, nogil=True, inline="always")
def _count_worse(hs, hi, m, s, row):
    """How many of the m kept entries rank after (s, row), without branching.

    The same order as :func:`_worse`, written as arithmetic on comparisons so
    that an insertion costs no mispredicted branch (a sorted run, worst first,
    has exactly these entries as its prefix).
    """
    c = 0
    s_nan = s != s
    s_real = s == s
    for t in range(m):
        a = hs[t]
        a_nan = a != a
        c += (
            (a < s)
            | ((a == s) & (hi[t] > row))
            | (a_nan & s_real)
            | (a_nan & s_nan & (hi[t] > row))
        )
    return c


@njit(cache=True, nogil=True, inline="always")
def _offer(hs, hi, m, s, row):
    """Offer (s, row) to the m kept entries; return the new count.

    The worst kept entry is always at index 0 (the scan's threshold test
    reads it there). Up to SMALL_K entries are kept as a sorted run, worst
    first (the insertion point counted without branches, then a slide),
    beyond that as a heap with the worst at the root.
    """
    k = hs.shape[0]
    if k <= SMALL_K:
        # Every insertion checks for the id, so nothing is ever kept twice,
        # whatever order duplicates arrive in.
        if _contains(hi, m, row):
            return m
        c = _count_worse(hs, hi, m, s, row)
        if m == k:
            if c == 0:
                return m  # not better than the worst kept
            # Drop the worst; the c - 1 others worse than (s, row) slide down one.
            for t in range(c - 1):
                hs[t] = hs[t + 1]
                hi[t] = hi[t + 1]
            hs[c - 1] = s
            hi[c - 1] = row
            return m
        # Entries better than (s, row) slide up one.
        for t in range(m, c, -1):
            hs[t] = hs[t - 1]
            hi[t] = hi[t - 1]
        hs[c] = s
        hi[c] = row
        return m + 1
    if m == k:
        if not _worse(hs[0], hi[0], s, row):
            return m
        if _contains(hi, m, row):
            return m
        hs[0] = s
        hi[0] = row
        _sift_down(hs, hi, 0, m)
        return m
    if _contains(hi, m, row):
        return m
    hs[m] = s
    hi[m] = row
    _sift_up(hs, hi, m)
    return m + 1


@njit(cache=True, nogil=True)
def _finish(hs, hi, m):
    """Order the m kept entries best first in place, then pad to k."""
    if hs.shape[0] <= SMALL_K:
        # A sorted run, worst first: reverse it.
        lo = 0
        up = m - 1
        while lo < up:
            hs[lo], hs[up] = hs[up], hs[lo]
            hi[lo], hi[up] = hi[up], hi[lo]
            lo += 1
            up -= 1
    else:
        # Heap sort: the root (the worst) goes to the end, repeatedly.
        end = m
        while end > 1:
            end -= 1
            hs[0], hs[end] = hs[end], hs[0]
            hi[0], hi[end] = hi[end], hi[0]
            _sift_down(hs, hi, 0, end)
    for t in range(m, hs.shape[0]):
        hs[t] = _NEG_INF
        hi[t] = -1


@njit(cache=True, nogil=True, fastmath=_FASTMATH, inline="always")
def _ip4(vectors, r0, r1, r2, r3, q):
    # Four rows per pass: q is loaded once for four rows and four independent
    # sums keep the FMA units and the memory system busy (see the module
    # docstring for the measurement).
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    for j in range(q.shape[0]):
        qj = q[j]
        a0 += vectors[r0, j] * qj
        a1 += vectors[r1, j] * qj
        a2 += vectors[r2, j] * qj
        a3 += vectors[r3, j] * qj
    return a0, a1, a2, a3


@njit(cache=True, nogil=True, fastmath=_FASTMATH, inline="always")
def _l2_4(vectors, r0, r1, r2, r3, q):
    # Direct sum of squared differences (not |x|^2 - 2x.q + |q|^2, which cancels).
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    for j in range(q.shape[0]):
        qj = q[j]
        t0 = vectors[r0, j] - qj
        t1 = vectors[r1, j] - qj
        t2 = vectors[r2, j] - qj
        t3 = vectors[r3, j] - qj
        a0 += t0 * t0
        a1 += t1 * t1
        a2 += t2 * t2
        a3 += t3 * t3
    return -a0, -a1, -a2, -a3


@njit(cache=True, nogil=True, inline="always")
def _cos(dot, xx, qnorm):
    # Same rule as the numpy reference: a zero denominator (a zero row or a
    # zero query) scores 0.0.
    den = np.float32(np.sqrt(xx)) * qnorm
    if den == 0.0:
        return np.float32(0.0)
    return np.float32(dot / den)


@njit(cache=True, nogil=True, fastmath=_FASTMATH, inline="always")
def _cos4(vectors, r0, r1, r2, r3, q, qnorm):
    d0 = np.float32(0.0)
    d1 = np.float32(0.0)
    d2 = np.float32(0.0)
    d3 = np.float32(0.0)
    n0 = np.float32(0.0)
    n1 = np.float32(0.0)
    n2 = np.float32(0.0)
    n3 = np.float32(0.0)
    for j in range(q.shape[0]):
        qj = q[j]
        x0 = vectors[r0, j]
        x1 = vectors[r1, j]
        x2 = vectors[r2, j]
        x3 = vectors[r3, j]
        d0 += x0 * qj
        d1 += x1 * qj
        d2 += x2 * qj
        d3 += x3 * qj
        n0 += x0 * x0
        n1 += x1 * x1
        n2 += x2 * x2
        n3 += x3 * x3
    return _cos(d0, n0, qnorm), _cos(d1, n1, qnorm), _cos(d2, n2, qnorm), _cos(d3, n3, qnorm)


@njit(cache=True, nogil=True, inline="always")
def _score4(vectors, r0, r1, r2, r3, q, metric, qnorm):
    if metric == IP:
        return _ip4(vectors, r0, r1, r2, r3, q)
    if metric == L2:
        return _l2_4(vectors, r0, r1, r2, r3, q)
    return _cos4(vectors, r0, r1, r2, r3, q, qnorm)


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _scan(q, ids, start, stop, vectors, metric, qnorm, hs, hi):
    """The fused pass: score ids[start:stop] in place, keep the best in (hs, hi).

    Rows are scored four at a time by the scoring loops inlined here (a call
    per group, with its array arguments and reference counts, cost 1.1-1.3x
    the read floor at 1k-100k candidates; inlined, 1.02-1.08x). Inlining
    needs ``fastmath`` on this function: numba inlines at its own IR level, so
    the callee's flags do not travel; the same two flags are harmless on the
    compares here, which only ``nnan`` would change. There is exactly one
    scoring site: a short or padded group repeats one of its rows and goes
    through it too, so identical rows always get bit-identical scores.

    The threshold test is written out here, not behind a call, so a rejected
    candidate costs one compare after its dot product (``not s < t`` also
    lets NaN through to the exact NaN-aware test).
    """
    k = hs.shape[0]
    m = 0
    p = start
    neg = np.int64(-1)
    while p < stop:
        if p + 4 <= stop:
            r0 = ids[p]
            r1 = ids[p + 1]
            r2 = ids[p + 2]
            r3 = ids[p + 3]
        else:
            r0 = ids[p]
            r1 = ids[p + 1] if p + 1 < stop else neg
            r2 = ids[p + 2] if p + 2 < stop else neg
            r3 = neg
        p += 4
        if p + 4 <= stop:
            for t in range(p, p + 4):
                if ids[t] >= 0:
                    prefetch_row(vectors, ids[t])
        x0 = r0
        x1 = r1
        x2 = r2
        x3 = r3
        if (r0 | r1 | r2 | r3) < 0:
            # Padding slots repeat a valid row, so every score comes out of
            # the one scoring loop below.
            first = r0
            if first < 0:
                first = r1
            if first < 0:
                first = r2
            if first < 0:
                first = r3
            if first < 0:
                continue
            if x0 < 0:
                x0 = first
            if x1 < 0:
                x1 = first
            if x2 < 0:
                x2 = first
            if x3 < 0:
                x3 = first
        s0, s1, s2, s3 = _score4(vectors, x0, x1, x2, x3, q, metric, qnorm)
        if (m < k or not s0 < hs[0]) and r0 >= 0:
            m = _offer(hs, hi, m, s0, r0)
        if (m < k or not s1 < hs[0]) and r1 >= 0:
            m = _offer(hs, hi, m, s1, r1)
        if (m < k or not s2 < hs[0]) and r2 >= 0:
            m = _offer(hs, hi, m, s2, r2)
        if (m < k or not s3 < hs[0]) and r3 >= 0:
            m = _offer(hs, hi, m, s3, r3)
    return m


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _query_norm(q):
    acc = np.float32(0.0)
    for j in range(q.shape[0]):
        acc += q[j] * q[j]
    return np.float32(np.sqrt(acc))


@njit(cache=True, nogil=True)
def _check_ids(ids, n_rows):
    lo = np.int64(0)
    hi = np.int64(-1)
    for p in range(ids.shape[0]):
        v = ids[p]
        lo = min(lo, v)
        hi = max(hi, v)
    if lo < -1:
        return lo
    if hi >= n_rows:
        return hi
    return np.int64(-1)


@njit(cache=True, nogil=True)
def _finite(q):
    # On the bit pattern: an all-ones exponent is inf or NaN. Integer max
    # vectorises without fastmath (a float test would be a serial chain).
    bits = q.view(np.int32)
    top = np.int32(0)
    for j in range(bits.shape[0]):
        top = max(top, bits[j] & np.int32(0x7F800000))
    return top != np.int32(0x7F800000)


@njit(cache=True, nogil=True)
def rerank_serial(q, ids, vectors, metric, out_i, out_s):
    """One query, one thread, into ``out_i``/``out_s`` (length k, allocated by
    the caller: returning arrays allocated here costs ~0.7 µs more per call).
    Returns the status (OK, BAD_ID, NONFINITE_QUERY); for BAD_ID the offending
    id is left in ``out_i[0]`` (one int, not a tuple, goes back to Python)."""
    bad = _check_ids(ids, vectors.shape[0])
    if bad != -1:
        out_i[0] = bad
        return BAD_ID
    if not _finite(q):
        return NONFINITE_QUERY
    qnorm = _query_norm(q) if metric == COSINE else np.float32(0.0)
    m = _scan(q, ids, 0, ids.shape[0], vectors, metric, qnorm, out_s, out_i)
    _finish(out_s, out_i, m)
    return OK


@njit(cache=True, nogil=True, parallel=True)
def rerank_chunked(q, ids, vectors, metric, chunks, out_i, out_s):
    """One query, candidates split in ``chunks`` parts across threads; each
    part keeps its own top-k, then the parts are merged. As rerank_serial."""
    bad = _check_ids(ids, vectors.shape[0])
    if bad != -1:
        out_i[0] = bad
        return BAD_ID
    if not _finite(q):
        return NONFINITE_QUERY
    qnorm = _query_norm(q) if metric == COSINE else np.float32(0.0)
    n = ids.shape[0]
    k = out_s.shape[0]
    part_s = np.empty((chunks, k), dtype=np.float32)
    part_i = np.empty((chunks, k), dtype=np.int64)
    part_m = np.zeros(chunks, dtype=np.int64)
    for c in prange(chunks):
        start = c * n // chunks
        stop = (c + 1) * n // chunks
        part_m[c] = _scan(q, ids, start, stop, vectors, metric, qnorm, part_s[c], part_i[c])
    m = 0
    for c in range(chunks):
        for t in range(part_m[c]):
            m = _offer(out_s, out_i, m, part_s[c, t], part_i[c, t])
    _finish(out_s, out_i, m)
    return OK


@njit(cache=True, nogil=True, parallel=True)
def rerank_many(queries, ids, vectors, metric, out_i, out_s):
    """Many queries, spread over threads; ids and outputs are ``(nq, n)`` and
    ``(nq, k)``. As rerank_serial; the bad id, or the row of a non-finite
    query, is left in ``out_i[0, 0]``."""
    nq = queries.shape[0]
    for r in range(nq):
        bad = _check_ids(ids[r], vectors.shape[0])
        if bad != -1:
            out_i[0, 0] = bad
            return BAD_ID
    for r in range(nq):
        if not _finite(queries[r]):
            out_i[0, 0] = r
            return NONFINITE_QUERY
    n = ids.shape[1]
    for r in prange(nq):
        q = queries[r]
        qnorm = _query_norm(q) if metric == COSINE else np.float32(0.0)
        m = _scan(q, ids[r], 0, n, vectors, metric, qnorm, out_s[r], out_i[r])
        _finish(out_s[r], out_i[r], m)
    return OK

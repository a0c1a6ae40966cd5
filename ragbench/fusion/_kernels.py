"""The compiled fusion kernels behind :mod:`ragbench.fusion` (numba; imported on first use).

Target served: fusing two 100-candidate lists in at most 5 µs and at most 1.2x a plain
dict-based fusion (``bench/test_bench_fusion.py``). The plain versions in
``ragbench/fusion/__init__.py`` are the reference; ``tests/fusion/test_fusion.py`` checks that these
return exactly what they return.

How, and why it is exact:

- Ids are matched across the two lists through a small open-addressing table (a power of two
  at least twice the candidates, linear probing), so a fusion is linear in the candidates;
  a sort of the ids would cost more than the rest (numba's argsort of 200 values takes several
  µs).
- RRF (:func:`rrf`) does not sort the entries found in one list only: their score falls with
  the place, so walking the places in order (at one place, the smaller id first) lists them
  best first (unless ``k_rrf`` is so large that neighbouring places can share a score:
  :data:`_DISTINCT_RANKS`). Only the entries in both lists (a few dozen) are sorted, apart, and merged in
  from the back. The weighted sum (:func:`weighted`) walks the lists interleaved (first[0],
  second[0], first[1], ...), so entries are met nearly in fused order, and closes with an
  insertion sort.
- Every fused score is the same IEEE expression the reference computes: a sum of two terms
  (commutative, so the order the lists are met in does not matter) or one weighted expression.
  The order is the reference's: score descending, then smaller id.
"""

# numba types these functions from their arguments; mypy does not look inside.
# mypy: ignore-errors

from __future__ import annotations

import numpy as np
from numba import njit, types

_EMPTY = -1
BAD_ID = -1  # a kernel's return value when an id is below -1
NONFINITE = -2  # a kernel's return value when a listed id's score is NaN or infinite


@njit(cache=True, nogil=True)
def _table_size(n):
    cap = 16
    while cap < 2 * n:
        cap *= 2
    return cap


@njit(cache=True, nogil=True)
def _place(keys, slots, mask, i):
    """The table position of id ``i``: where it is stored, or the empty slot it would take."""
    h = ((i * 2654435761) ^ (i >> 15)) & mask
    while keys[h] != _EMPTY and keys[h] != i:
        h = (h + 1) & mask
    return h


@njit(cache=True, nogil=True)
def _collect(a, b, out_ids, bits, raw_a, raw_b):
    """Distinct ids of both lists into ``out_ids`` (interleaved order), with each list's place.

    ``bits[j]``: 1 if entry j is in ``a``, 2 if in ``b``; ``raw_a[j]``/``raw_b[j]``: its
    0-based place in that list (first place of a repeat). Returns the number of entries.
    """
    cap = _table_size(a.size + b.size)
    keys = np.full(cap, _EMPTY, dtype=np.int64)
    slots = np.empty(cap, dtype=np.int64)
    mask = cap - 1
    m = 0
    for r in range(max(a.size, b.size)):
        for which in range(2):
            ranked = a if which == 0 else b
            if r >= ranked.size:
                continue
            i = ranked[r]
            if i < 0:
                if i < -1:
                    return BAD_ID
                continue
            h = _place(keys, slots, mask, i)
            bit = 1 << which
            if keys[h] == _EMPTY:
                keys[h] = i
                slots[h] = m
                out_ids[m] = i
                bits[m] = 0
                m += 1
            j = slots[h]
            if bits[j] & bit:
                continue  # a repeat in the same list counts once, at its first place
            bits[j] |= bit
            if which == 0:
                raw_a[j] = r
            else:
                raw_b[j] = r
    return m


@njit(cache=True, nogil=True)
def _sort_best_first(ids, scores, m):
    """Insertion sort of the first ``m`` entries: score descending, then smaller id."""
    for j in range(1, m):
        i, s = ids[j], scores[j]
        p = j - 1
        while p >= 0 and (scores[p] < s or (scores[p] == s and ids[p] > i)):
            ids[p + 1] = ids[p]
            scores[p + 1] = scores[p]
            p -= 1
        ids[p + 1] = i
        scores[p + 1] = s


@njit(cache=True, nogil=True)
def _before(s, i, t, j):
    """Whether (score ``s``, id ``i``) comes before (``t``, ``j``): higher score, then smaller id."""
    return s > t or (s == t and i < j)


#: Below this ``k_rrf + rank``, neighbouring ranks never share a score: the two sums are at
#: least 1 - 2**-13 apart (a double's step under 2**40 is at most 2**-13), so their reciprocals
#: differ by about 2**-40 of their value, far beyond the 2**-53 each is rounded by.
_DISTINCT_RANKS = 2.0**40

_IDS = types.Array(types.int64, 1, "C", readonly=True)  # takes writable arrays too
_RRF_SIGNATURE = types.int64(
    _IDS, _IDS, types.float64, types.Array(types.int64, 1, "C"), types.Array(types.float64, 1, "C")
)


# How rrf fuses, in one function (a call between compiled functions costs ~4 % of it, A/B):
# 1. ``a`` into the table, each distinct id with its place; ``alone_a[r]``: 1 at the first
#    place of an id, 0 at a pad or a repeat.
# 2. ``b`` through the table: an id of ``a`` met for the first time is in both lists: its
#    score goes to the end of the output and its place in ``a`` stops being alone. A new id
#    goes in the table, alone in ``b``.
# 3. The entries in both lists are sorted (insertion sort: a few dozen).
# 4. The entries alone in a list are written at the front, place by place (a score falls
#    with its place): at one place, a's first unless b has one alone there with a smaller id;
#    the longer list's tail follows. Branch-free: each candidate is written, and kept (the
#    next written after it) only if alone. At a k_rrf so large that neighbouring places can
#    share a score (see _DISTINCT_RANKS), they are sorted (by id within a score).
# 5. Those in both are merged in from the back.
# The two regions never meet: every id in both lists takes two places of the input and one
# of the output, so the single entries end before size - 2 * both, where those in both start
# after size - both.
@njit(_RRF_SIGNATURE, cache=True)
def rrf(a, b, k_rrf, out_ids, out_scores):
    """Reciprocal rank fusion of ``a`` and ``b`` into the output arrays (``a.size + b.size``
    each); returns the count. One signature: numba's dispatcher refuses (``TypeError``) any
    other argument (a list, another dtype, 2-D, strided). Holds the GIL (releasing it: +0.06 µs).
    """
    na, nb = a.size, b.size
    size = na + nb
    cap = _table_size(size)
    mask = cap - 1
    work = np.empty(2 * cap + size, dtype=np.int64)  # one allocation for all the scratch
    keys, places = work[:cap], work[cap : 2 * cap]
    alone_a, alone_b = work[2 * cap : 2 * cap + na], work[2 * cap + na :]
    keys[:] = _EMPTY
    for r in range(na):  # 1.
        i = a[r]
        alone_a[r] = 0
        if i < 0:
            if i < -1:
                return BAD_ID
            continue
        h = _place(keys, places, mask, i)
        if keys[h] == _EMPTY:
            keys[h] = i
            places[h] = r
            alone_a[r] = 1
    both = 0
    for r in range(nb):  # 2.
        i = b[r]
        alone_b[r] = 0
        if i < 0:
            if i < -1:
                return BAD_ID
            continue
        h = _place(keys, places, mask, i)
        if keys[h] == _EMPTY:
            keys[h] = i
            places[h] = -1  # alone in b: a later repeat finds -1 and counts nothing
            alone_b[r] = 1
        elif places[h] >= 0:  # first met in a: in both lists
            ra = places[h]
            places[h] = -1
            alone_a[ra] = 0
            both += 1
            out_ids[size - both] = i
            out_scores[size - both] = 1.0 / (k_rrf + (ra + 1)) + 1.0 / (k_rrf + (r + 1))
    first_both = size - both
    _sort_best_first(out_ids[first_both:], out_scores[first_both:], both)  # 3.
    ones = 0  # 4.
    common = min(na, nb)
    for r in range(common):
        s = 1.0 / (k_rrf + (r + 1))  # the reference's 1 / (k_rrf + rank)
        ia, keep_a, ib, keep_b = a[r], alone_a[r], b[r], alone_b[r]
        b_first = keep_a & keep_b & (ib < ia)
        out_ids[ones] = ib if b_first else ia
        out_scores[ones] = s
        ones += keep_a
        out_ids[ones] = ia if b_first else ib
        out_scores[ones] = s
        ones += keep_b
    rest, alone = (a, alone_a) if na > nb else (b, alone_b)
    for r in range(common, rest.size):  # (a loop apart: 0.94x the kernel's time, A/B)
        out_ids[ones] = rest[r]
        out_scores[ones] = 1.0 / (k_rrf + (r + 1))
        ones += alone[r]
    if k_rrf + max(na, nb) >= _DISTINCT_RANKS:
        _sort_best_first(out_ids, out_scores, ones)
    i, j = ones - 1, size - 1  # 5.
    for w in range(ones + both - 1, -1, -1):
        if j < first_both:
            break
        if i >= 0 and not _before(out_scores[i], out_ids[i], out_scores[j], out_ids[j]):
            out_ids[w] = out_ids[i]
            out_scores[w] = out_scores[i]
            i -= 1
        else:
            out_ids[w] = out_ids[j]
            out_scores[w] = out_scores[j]
            j -= 1
    return ones + both


@njit(cache=True, nogil=True)
def _span(ids, scores, bits, place, bit, m):
    """(low, high) of the list's scores over the entries it holds (first place of each)."""
    low, high = np.inf, -np.inf
    for j in range(m):
        if bits[j] & bit:
            s = scores[place[j]]
            low = min(low, s)
            high = max(high, s)
    return low, high


@njit(cache=True, nogil=True)
def _unit(s, low, high):
    return 1.0 if high == low else (s - low) / (high - low)


@njit(cache=True, nogil=True)
def weighted(a, sa, b, sb, alpha, out_ids, out_scores):
    """``alpha * norm(a) + (1 - alpha) * norm(b)`` into the output arrays; returns the count."""
    n = a.size + b.size
    bits = np.empty(n, dtype=np.int64)
    place_a = np.empty(n, dtype=np.int64)
    place_b = np.empty(n, dtype=np.int64)
    m = _collect(a, b, out_ids, bits, place_a, place_b)
    if m < 0:
        return m
    for r in range(a.size):
        if a[r] >= 0 and not np.isfinite(sa[r]):
            return NONFINITE
    for r in range(b.size):
        if b[r] >= 0 and not np.isfinite(sb[r]):
            return NONFINITE
    low_a, high_a = _span(a, sa, bits, place_a, 1, m)
    low_b, high_b = _span(b, sb, bits, place_b, 2, m)
    for j in range(m):
        na = _unit(sa[place_a[j]], low_a, high_a) if bits[j] & 1 else 0.0
        nb = _unit(sb[place_b[j]], low_b, high_b) if bits[j] & 2 else 0.0
        out_scores[j] = alpha * na + (1.0 - alpha) * nb
    _sort_best_first(out_ids, out_scores, m)
    return m

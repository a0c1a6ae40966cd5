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
- The lists are walked interleaved (first[0], second[0], first[1], ...), so entries are met
  nearly in fused order and the closing insertion sort moves few of them. For RRF the entries
  found in one list only are met exactly in fused order (their score falls with the place;
  at the same place, the smaller id goes first: one swap); only the ones in both lists move
  up, so those are sorted apart (a few dozen) and merged in (:func:`_order_rrf`), instead of
  each being carried up the whole list.
- Every fused score is the same IEEE expression the reference computes: a sum of two terms
  (commutative, so the order the lists are met in does not matter) or one weighted expression.
  The order is the reference's: score descending, then smaller id.
"""

# numba types these functions from their arguments; mypy does not look inside.
# mypy: ignore-errors

from __future__ import annotations

import numpy as np
from numba import njit

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


@njit(cache=True, nogil=True)
def _order_rrf(ids, scores, bits, m, both_ids, both_scores):
    """The first ``m`` entries best first, for RRF scores (see the module docstring).

    The entries of one list keep their order, moved down over the gaps the others leave; the
    others go to ``both_*``, are sorted there and merged in from the back.
    """
    ones = 0
    both = 0
    for j in range(m):
        if bits[j] == 3:
            both_ids[both] = ids[j]
            both_scores[both] = scores[j]
            both += 1
        else:
            ids[ones] = ids[j]
            scores[ones] = scores[j]
            ones += 1
    _sort_best_first(ids, scores, ones)  # in order but for ties at one place: a swap each
    _sort_best_first(both_ids, both_scores, both)
    i, j = ones - 1, both - 1
    for w in range(m - 1, -1, -1):  # the last place takes the later of the two lists' last
        if j < 0:
            break
        if i >= 0 and not _before(scores[i], ids[i], both_scores[j], both_ids[j]):
            ids[w] = ids[i]
            scores[w] = scores[i]
            i -= 1
        else:
            ids[w] = both_ids[j]
            scores[w] = both_scores[j]
            j -= 1


@njit(cache=True, nogil=True)
def rrf(a, b, k_rrf, out_ids, out_scores):
    """Reciprocal rank fusion of ``a`` and ``b`` into the output arrays; returns the count."""
    n = a.size + b.size
    work = np.empty(4 * n, dtype=np.int64)  # bits, places in a and b, ids found in both
    bits, place_a, place_b, both_ids = work[:n], work[n : 2 * n], work[2 * n : 3 * n], work[3 * n :]
    m = _collect(a, b, out_ids, bits, place_a, place_b)
    if m < 0:
        return m
    for j in range(m):
        s = 0.0
        if bits[j] & 1:
            s = s + 1.0 / (k_rrf + (place_a[j] + 1))
        if bits[j] & 2:
            s = s + 1.0 / (k_rrf + (place_b[j] + 1))
        out_scores[j] = s
    _order_rrf(out_ids, out_scores, bits, m, both_ids, np.empty(n, dtype=np.float64))
    return m


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

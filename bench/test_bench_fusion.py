"""The fusion kernel against a plain dict-based fusion written inline (issue 31's targets).

Targets: reciprocal rank fusion of two 100-candidate lists (``ragbench.fusion``, the public
call with its checks) in at most 5 µs, and at most 1.2x a plain dict-based RRF written inline
in Python on the same lists (expected far below). The weighted sum is timed and printed the
same way, against its own inline version, and held to the ratio bound; its microseconds are
printed, not asserted (the target names RRF, the default fusion: on an AVX2 EPYC the weighted
kernel's insertion sort took 8-14 us on quiet attempts, 2026-12-02).

Workload: two lists of 100 distinct row ids out of 10 000, 30 shared (a dense and a lexical
retriever agree on some candidates), int64 arrays as the indexes return them. Each round calls
both sides ``CALLS`` times, alternating which goes first; the figure is each side's median
per-call time over the rounds.

Run: ``.venv/bin/pytest bench/test_bench_fusion.py -s -p no:cacheprovider`` (prints each
attempt's kernel and inline µs and their ratio, then judges both bounds on the quiet attempts).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from time import perf_counter_ns

import numpy as np
from _quick import attempts, judge, need, pick, until_met

need("numba")

from ragbench.fusion import reciprocal_rank_fusion, weighted_fusion  # noqa: E402

ROUNDS = pick(41, 15)
CALLS = pick(400, 200)
BOUND_US = 5.0
BOUND_RATIO = 1.2


def _lists() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    pool = rng.permutation(10_000)
    shared = pool[:30]
    a = rng.permutation(np.concatenate([shared, pool[30:100]])).astype(np.int64)
    b = rng.permutation(np.concatenate([shared, pool[100:170]])).astype(np.int64)
    sa = np.sort(rng.random(100))[::-1].copy()
    sb = np.sort(rng.random(100) * 20)[::-1].copy()
    return a, b, sa, sb


def _inline_rrf(a: np.ndarray, b: np.ndarray) -> list[int]:
    fused: dict[int, float] = {}
    for ranked in (a.tolist(), b.tolist()):
        for rank, i in enumerate(ranked, 1):
            fused[i] = fused.get(i, 0.0) + 1.0 / (60.0 + rank)
    return sorted(fused, key=lambda i: (-fused[i], i))


def _inline_weighted(a: np.ndarray, sa: np.ndarray, b: np.ndarray, sb: np.ndarray) -> list[int]:
    def norm(ids: list[int], s: list[float]) -> dict[int, float]:
        low, high = min(s), max(s)
        return {i: (x - low) / (high - low) for i, x in zip(ids, s, strict=True)}

    na, nb = norm(a.tolist(), sa.tolist()), norm(b.tolist(), sb.tolist())
    fused = {i: 0.5 * na.get(i, 0.0) + 0.5 * nb.get(i, 0.0) for i in {**na, **nb}}
    return sorted(fused, key=lambda i: (-fused[i], i))


def _per_call_us(fn: Callable[[], object]) -> float:
    t0 = perf_counter_ns()
    for _ in range(CALLS):
        fn()
    return (perf_counter_ns() - t0) / CALLS / 1e3


def _measure(kernel: Callable[[], object], inline: Callable[[], object]) -> tuple[float, float]:
    """(kernel µs, inline µs): medians over interleaved rounds."""
    ks, ps = [], []
    for r in range(ROUNDS):
        if r % 2:
            ps.append(_per_call_us(inline))
            ks.append(_per_call_us(kernel))
        else:
            ks.append(_per_call_us(kernel))
            ps.append(_per_call_us(inline))
    return statistics.median(ks), statistics.median(ps)


def _gate(
    name: str, kernel: Callable[[], object], inline: Callable[[], object], *, judge_us: bool = True
) -> None:
    kernel()  # compile (or load the cache) outside the timing
    runs = attempts(
        lambda: _measure(kernel, inline),
        until_met((lambda v: v[0], BOUND_US, False), (lambda v: v[0] / v[1], BOUND_RATIO, False)),
    )
    for a in runs:  # both figures of every attempt, whatever the judging below skips
        kernel_us, inline_us = a.value
        print(
            f"\n{name}: kernel {kernel_us:.2f} µs, inline dict {inline_us:.2f} µs per fusion, "
            f"kernel / inline {kernel_us / inline_us:.3f}"
        )
    if judge_us:
        judge(
            f"{name}: kernel µs per fusion",
            runs,
            lambda v: v[0],
            bound=BOUND_US,
            higher_is_better=False,
            unit=" µs",
        )
    judge(
        f"{name}: kernel / inline dict",
        runs,
        lambda v: v[0] / v[1],
        bound=BOUND_RATIO,
        higher_is_better=False,
    )


def test_rrf_kernel_against_inline_dict() -> None:
    a, b, _, _ = _lists()
    assert reciprocal_rank_fusion(a, b)[0].tolist() == _inline_rrf(a, b)  # the same answer first
    _gate("rrf 100+100", lambda: reciprocal_rank_fusion(a, b), lambda: _inline_rrf(a, b))


def test_weighted_kernel_against_inline_dict() -> None:
    a, b, sa, sb = _lists()
    assert weighted_fusion(a, sa, b, sb)[0].tolist() == _inline_weighted(a, sa, b, sb)
    _gate(
        "weighted 100+100",
        lambda: weighted_fusion(a, sa, b, sb),
        lambda: _inline_weighted(a, sa, b, sb),
        judge_us=False,  # reported: the 5 us target is RRF's (module docstring)
    )

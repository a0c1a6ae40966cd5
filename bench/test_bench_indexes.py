"""Index wrappers: overhead over the raw library call, and recall vs latency.

1. Wrapper vs raw call (targets in shared PERF.md: single query ≤ 1.03× and
   ≤ 2 µs added; batch within 2 %), for ``hnsw`` and ``faiss-hnsw`` at
   ``ef=64`` and for ``flat``, on the same underlying library index. Calls
   alternate wrapper/raw (order flipped every pair) in one process; the
   figures are medians of per-call times. The "added" figure is also
   measured on a 2 000-vector index, where the search itself is short and
   the fixed cost of the wrapper is not hidden in search-time jitter.
2. Recall@10 and p50 latency per single query (one query per call, one
   thread) on 100k × 384 clustered, normalized synthetic vectors (seeded),
   for hnsw / faiss-hnsw at ef 16/64/256, ivf at two nprobe values and lsh
   (raw Hamming ranking, and its top-100 / top-1000 re-scored exactly with
   numpy). Reference figures from PERF.md are printed alongside; the data
   here is synthetic, so recall differs from theirs at equal ef.

Run (about 5–8 minutes on 2 cores, mostly the two 100k HNSW builds)::

    .venv/bin/pytest bench/test_bench_indexes.py --benchmark-only -s -p no:cacheprovider
"""

from __future__ import annotations

import os
import statistics
import time
from time import perf_counter_ns

import numpy as np
import pytest

import ragbench as rb
from ragbench import threads

# RAGBENCH_BENCH_N shrinks the corpus for a quick look (the figures then do
# not compare with PERF.md).
N = int(os.environ.get("RAGBENCH_BENCH_N", "100000"))
DIM, N_QUERIES, K = 384, 500, 10
SEED = 20240601

# PERF.md reference: (recall, p50 µs) per ef, plain library calls, same shape of data.
REF_HNSWLIB = {16: (0.895, 78), 64: (0.991, 182), 256: (0.9999, 574)}
REF_FAISS_HNSW = {16: (0.896, 76), 64: (0.993, 198), 256: (0.9999, 605)}


def clustered(n: int, dim: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Normalized vectors around 1 000 Gaussian centres; queries from the same mixture."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, dim)).astype(np.float32)

    def draw(m: int) -> np.ndarray:
        out = centres[rng.integers(0, len(centres), m)]
        out += 0.35 * rng.standard_normal((m, dim)).astype(np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    return draw(n), draw(n_queries)


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ vectors.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    return top


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return hits / truth.size


@pytest.fixture(scope="module")
def data() -> dict[str, object]:
    vectors, queries = clustered(N, DIM, N_QUERIES, SEED)
    truth = exact_top(vectors, queries, K)
    return {"vectors": vectors, "queries": queries, "truth": truth}


BUILD_PARAMS = {
    "hnsw": {"M": 16, "ef_construction": 200},
    "faiss-hnsw": {"M": 16, "ef_construction": 200},
    "ivf": {"nlist": 512},
    "lsh": {"nbits": 512},
    "flat": {},
}


class _Built(dict):
    """Indexes over the module's data, each built on first use (``-k`` runs build less)."""

    def __init__(self, vectors: np.ndarray) -> None:
        super().__init__()
        self.vectors = vectors

    def __missing__(self, name: str):
        params = BUILD_PARAMS[name]
        cached = _cache_path(name, params)
        if cached is not None and os.path.exists(cached):
            index = rb.indexes.load(cached)
            print(f"\nloaded {name} {params} on {N} x {DIM} from {cached}")
        else:
            index = rb.indexes.create(name, dim=DIM, metric="ip", **params)
            index.build(self.vectors)
            print(
                f"\nbuilt {name} {params} on {N} x {DIM}: {index.build_seconds:.1f} s, "
                f"{index.memory_bytes() / 1e6:.0f} MB"
            )
            if cached is not None:
                index.save(cached)
        self[name] = index
        return index


def _cache_path(name: str, params: dict) -> str | None:
    """Where to keep a built index between runs (``RAGBENCH_BENCH_CACHE`` dir), or None.

    The 100k HNSW builds take ~50 s each; the key holds everything the data
    and the graph depend on, so a stale file is never picked up.
    """
    root = os.environ.get("RAGBENCH_BENCH_CACHE")
    if not root:
        return None
    os.makedirs(root, exist_ok=True)
    tag = "-".join(f"{key}{value}" for key, value in sorted(params.items())) or "default"
    return os.path.join(root, f"{name}-{tag}-n{N}-d{DIM}-s{SEED}-rb{rb.__version__}.rbidx")


@pytest.fixture(scope="module")
def built(data) -> _Built:
    return _Built(data["vectors"])


def _paired(wrapper, raw, rows, rounds: int = 5) -> tuple[float, float, float]:
    """Per-call ns of wrapper and raw over the same rows, in alternating blocks.

    Each round runs every row through one function, then every row through
    the other (the order flips each round), so both see the same cache
    history: a query never runs right after itself. Per row, the minimum
    over rounds is kept (load from other processes only ever adds time);
    returns the medians over rows of wrapper, raw and wrapper − raw.
    """
    w_ns = np.full((rounds, len(rows)), np.inf)
    r_ns = np.full((rounds, len(rows)), np.inf)
    for rnd in range(rounds):
        order = ((wrapper, w_ns), (raw, r_ns)) if rnd % 2 == 0 else ((raw, r_ns), (wrapper, w_ns))
        for fn, out in order:
            for i, row in enumerate(rows):
                t0 = perf_counter_ns()
                fn(row)
                out[rnd, i] = perf_counter_ns() - t0
    w_row, r_row = w_ns.min(axis=0), r_ns.min(axis=0)
    return float(np.median(w_row)), float(np.median(r_row)), float(np.median(w_row - r_row))


def _raw_single(index, ef: int):
    """The plain library call the wrapper stands for, on the same library object."""
    lib = index._index
    if index.name == "hnsw":
        lib.set_ef(ef)
        knn = lib.knn_query
        return lambda q: knn(q, k=K)
    if index.name == "faiss-hnsw":
        import faiss

        params = faiss.SearchParametersHNSW(efSearch=ef)
        return lambda q: lib.search(q, K, params=params)
    return lambda q: lib.search(q, K)


def _wrapper_single(index, ef: int):
    search = index.search
    if index.name in ("hnsw", "faiss-hnsw"):
        return lambda q: search(q, K, ef=ef)
    return lambda q: search(q, K)


@pytest.mark.parametrize("name", ["hnsw", "faiss-hnsw", "flat"])
def test_wrapper_overhead_single(benchmark, data, built, name) -> None:
    before = threads.get_threads()
    threads.set_threads(1)
    try:
        index = built[name]
        rows = [q[None, :].copy() for q in data["queries"]]
        if name == "flat":
            rows = rows[:100]  # ~6 ms each: exact search is memory bound
        wrapper, raw = _wrapper_single(index, 64), _raw_single(index, 64)
        # Results must agree before timing means anything.
        for row in rows[:20]:
            ids_w, _ = wrapper(row)
            ids_r = raw(row)[0] if name == "hnsw" else raw(row)[1]
            assert (ids_w == ids_r.astype(np.int64)).all()
        for row in rows[:50]:
            wrapper(row), raw(row)
        w, r, d = _paired(wrapper, raw, rows, rounds=21 if name != "flat" else 5)

        # Fixed cost on a small index at ef=16 (search ~15 µs), where 1 µs is visible.
        small_vectors, small_queries = clustered(2000, DIM, 500, SEED + 1)
        small = rb.indexes.create(name, dim=DIM, metric="ip")
        small.build(small_vectors)
        small_rows = [q[None, :].copy() for q in small_queries]
        sw, sr = _wrapper_single(small, 16), _raw_single(small, 16)
        for row in small_rows[:50]:
            sw(row), sr(row)
        sw_ns, sr_ns, sd = _paired(sw, sr, small_rows, rounds=15)
    finally:
        threads.set_threads(before)
    ratio = w / r
    benchmark.extra_info.update(
        wrapper_ns=w,
        raw_ns=r,
        ratio=ratio,
        added_ns=d,
        small_wrapper_ns=sw_ns,
        small_raw_ns=sr_ns,
        small_added_ns=sd,
    )
    print(
        f"\n{name} single query, {N} x 384, ef=64: wrapper {w / 1e3:.1f} µs vs raw "
        f"{r / 1e3:.1f} µs -> {ratio:.3f}x, added {d / 1e3:+.2f} µs (paired median)"
        f"\n{name} single query, 2k x 384, ef=16 (fixed cost): wrapper {sw_ns / 1e3:.2f} µs vs raw "
        f"{sr_ns / 1e3:.2f} µs -> added {sd / 1e3:+.2f} µs   [target ≤ 1.03x, ≤ 2 µs]"
    )
    benchmark.pedantic(wrapper, args=(rows[0],), rounds=50, iterations=1)
    assert ratio <= 1.03, f"{name}: wrapper is {ratio:.3f}x the raw call"
    assert sd <= 2_000, f"{name}: wrapper adds {sd / 1e3:.2f} µs per call"


@pytest.mark.parametrize("name", ["hnsw", "faiss-hnsw", "flat"])
def test_wrapper_overhead_batch(benchmark, data, built, name) -> None:
    index = built[name]
    n_threads = threads.get_threads()
    queries = data["queries"] if name != "flat" else data["queries"][:100]
    lib = index._index
    if name == "hnsw":
        lib.set_ef(64)

        def raw(q):
            return lib.knn_query(q, k=K, num_threads=n_threads)
    elif name == "faiss-hnsw":
        import faiss

        params = faiss.SearchParametersHNSW(efSearch=64)

        def raw(q):
            return lib.search(q, K, params=params)
    else:

        def raw(q):
            return lib.search(q, K)

    kw = {"ef": 64} if name != "flat" else {}

    def wrapper(q):
        return index.search(q, K, **kw)

    wrapper(queries), raw(queries)
    w, r, d = _paired(wrapper, raw, [queries], rounds=20)
    ratio = w / r
    benchmark.extra_info.update(wrapper_ns=w, raw_ns=r, ratio=ratio, threads=n_threads)
    print(
        f"\n{name} batch of {len(queries)} on {n_threads} threads: wrapper {w / 1e6:.2f} ms vs "
        f"raw {r / 1e6:.2f} ms -> {ratio:.3f}x  [target within 2%]"
    )
    benchmark.pedantic(wrapper, args=(queries,), rounds=3, iterations=1)
    assert ratio <= 1.02, f"{name}: batch wrapper is {ratio:.3f}x the raw call"


def _latencies(search, rows, **params) -> tuple[np.ndarray, list[int]]:
    ids = np.empty((len(rows), K), dtype=np.int64)
    times: list[int] = []
    for i, row in enumerate(rows):
        t0 = perf_counter_ns()
        found, _ = search(row, K, **params)
        times.append(perf_counter_ns() - t0)
        ids[i] = found[0]
    return ids, times


def test_recall_latency_table(benchmark, data, built) -> None:
    before = threads.get_threads()
    threads.set_threads(1)
    vectors, truth = data["vectors"], data["truth"]
    rows = [q[None, :].copy() for q in data["queries"]]
    lines = []
    try:
        for name, ref in (("hnsw", REF_HNSWLIB), ("faiss-hnsw", REF_FAISS_HNSW)):
            for ef in (16, 64, 256):
                _latencies(built[name].search, rows[:50], ef=ef)
                ids, times = _latencies(built[name].search, rows, ef=ef)
                ref_r, ref_us = ref[ef]
                lines.append(
                    (
                        f"{name} ef={ef}",
                        recall(ids, truth),
                        statistics.median(times) / 1e3,
                        f"{ref_r} / {ref_us}",
                    )
                )
        ivf = built["ivf"]
        for nprobe in (8, 32):
            _latencies(ivf.search, rows[:50], nprobe=nprobe)
            ids, times = _latencies(ivf.search, rows, nprobe=nprobe)
            lines.append(
                (
                    f"ivf nlist=512 nprobe={nprobe}",
                    recall(ids, truth),
                    statistics.median(times) / 1e3,
                    "-",
                )
            )
        lsh = built["lsh"]
        _latencies(lsh.search, rows[:50])
        ids, times = _latencies(lsh.search, rows)
        lines.append(
            ("lsh 512 bits raw", recall(ids, truth), statistics.median(times) / 1e3, "0.39 / 164")
        )
        for depth, ref_txt in ((100, "0.91 / 257"), (1000, "0.999 / 996")):
            found = np.empty((len(rows), K), dtype=np.int64)
            times = []
            for i, row in enumerate(rows):
                t0 = perf_counter_ns()
                cand, _ = lsh.search(row, depth)
                exact = vectors[cand[0]] @ row[0]
                best = cand[0][np.argsort(-exact)[:K]]
                times.append(perf_counter_ns() - t0)
                found[i] = best
            lines.append(
                (
                    f"lsh top-{depth} + numpy exact rescoring",
                    recall(found, truth),
                    statistics.median(times) / 1e3,
                    ref_txt,
                )
            )
        flat = built["flat"]
        ids, times = _latencies(flat.search, rows[:50])
        lines.append(
            ("flat (exact)", recall(ids, truth[:50]), statistics.median(times) / 1e3, "1.0 / ~6300")
        )
    finally:
        threads.set_threads(before)
    print(
        f"\nrecall@{K} vs p50 latency, {N} x {DIM} clustered normalized, ip, one query per "
        f"call, 1 thread ({N_QUERIES} queries)"
    )
    print(f"{'index':42s} {'recall@10':>10s} {'p50 µs':>9s}   PERF.md ref (recall / µs)")
    for label, rec, p50, ref_txt in lines:
        print(f"{label:42s} {rec:10.4f} {p50:9.1f}   {ref_txt}")
    benchmark.extra_info["table"] = [
        {"index": label, "recall": rec, "p50_us": p50} for label, rec, p50, _ in lines
    ]
    benchmark.pedantic(lambda: time.sleep(0), rounds=1, iterations=1)
    by_label = {label: rec for label, rec, _, _ in lines}
    # Exact search is exact; a deeper beam never loses recall on average.
    assert by_label["flat (exact)"] == 1.0
    assert by_label["hnsw ef=256"] >= by_label["hnsw ef=16"]

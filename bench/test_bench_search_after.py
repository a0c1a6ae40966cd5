"""Why engines search slower inside pydocs' whole requests: a search right after other work.

On pydocs every request embeds its query with MiniLM (a forward pass of
milliseconds) and then searches; the sweep embeds every query first and then
searches back to back. To tell what the forward pass does to the search after
it, each engine's single-query search (k=10, the pydocs compare's parameters,
one process, shipped MiniLM vectors) is timed right after each of:

- ``back_to_back``: nothing (the sweep's situation);
- ``embed``: MiniLM embedding one query text on one torch thread (the request's);
- ``sleep``: ``time.sleep`` of the embed's median time (the core idle that long);
- ``spin``: a Python busy loop of that time (the core busy, the caches barely touched);
- ``thrash``: summing a 64 MiB numpy array for that time (the caches evicted).

The five take turns within each round (rotated every round, each on another
query), so drift in the machine's load reaches all of them alike. Recorded in
``extra_info``: each condition's p50 over back-to-back's, with its 95 %
bootstrap interval (``ragbench.intervals``). Nothing is asserted on them: this
is an explanation, not a target; the test asserts that every condition was
measured on every round.

Run (a few minutes on 2 cores)::

    .venv/bin/pytest bench/test_bench_search_after.py --benchmark-only -s -p no:cacheprovider
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import Any

import numpy as np
import pytest
from _quick import QUICK, need, pick

import ragbench as rb
from ragbench import intervals, threads

K = 10
ROUNDS = pick(80, 6)
#: build and query parameters of the pydocs compare (docs/findings/commands.toml)
HNSW = {"M": 16, "ef_construction": 100}
ENGINES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "hnsw": (HNSW, {"ef": 20}, ""),
    "usearch": (HNSW, {"ef": 40}, "usearch"),
    "qdrant-edge": (HNSW, {"ef": 20}, "qdrant_edge"),
    "chroma": ({**HNSW, "ef_search": 40}, {}, "chromadb"),
    "pgvector": (HNSW, {"ef": 20}, "psycopg"),
    "lancedb": (
        {**HNSW, "index_type": "ivf_hnsw_sq"},
        {"nprobes": 10, "ef": 40, "refine_factor": 2},
        # not imported here: ragbench's backend imports lancedb with a `datasets` folder on
        # sys.path hidden (run from this checkout, transformers has imported it as a package)
        "",
    ),
}
CONDITIONS = ("back_to_back", "embed", "sleep", "spin", "thrash")


class Work:
    """The pydocs vectors, the query texts, the embedder and what runs before each search."""

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ragbench.embedders.minilm import MiniLMEmbedder

        ds = rb.datasets.load("pydocs")
        self.x, self.q = ds.corpus_vectors("minilm"), ds.query_vectors("minilm")
        self.texts = list(ds.queries.texts)
        self.embedder = MiniLMEmbedder()
        self.embedder.load()
        took = []
        for i in range(25):
            t0 = time.perf_counter()
            self.embedder.embed([self.texts[i]])
            took.append(time.perf_counter() - t0)
        self.embed_s = float(np.median(took[5:]))
        self._buf = np.ones(64 * 2**20 // 8)  # 64 MiB: more than this CPU's caches
        self.before: dict[str, Callable[[int], Any]] = {
            "back_to_back": lambda i: None,
            "embed": lambda i: self.embedder.embed([self.texts[i % len(self.texts)]]),
            "sleep": lambda i: time.sleep(self.embed_s),
            "spin": lambda i: self._for(self.embed_s, lambda: None),
            "thrash": lambda i: self._for(self.embed_s, self._buf.sum),
        }

    @staticmethod
    def _for(seconds: float, step: Callable[[], Any]) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            step()


@pytest.fixture(scope="module")
def work() -> Iterator[Work]:
    need("torch", "embed")
    before = threads.get_threads()
    threads.set_threads(1)  # one thread for every library, as a request's stages run
    try:
        yield Work()
    finally:
        threads.set_threads(before)


def _measure(index: Any, work: Work, query: dict[str, Any]) -> dict[str, np.ndarray]:
    """ns of each search after each condition, the conditions rotated round by round."""
    got: dict[str, list[int]] = {c: [] for c in CONDITIONS}
    nq = len(work.q)
    for r in range(ROUNDS):
        turn = CONDITIONS[r % len(CONDITIONS) :] + CONDITIONS[: r % len(CONDITIONS)]
        for j, cond in enumerate(turn):
            i = (r * len(CONDITIONS) + j) % nq
            work.before[cond](i)
            t0 = perf_counter_ns()
            index.search(work.q[i : i + 1], K, **query)
            got[cond].append(perf_counter_ns() - t0)
    return {c: np.asarray(v, dtype=np.float64) for c, v in got.items()}


@pytest.mark.parametrize("engine", ["hnsw"] if QUICK else list(ENGINES))
def test_search_right_after_other_work(benchmark: Any, work: Work, engine: str) -> None:
    build, query, module = ENGINES[engine]
    if module:
        need(module, engine)
    index = rb.indexes.create(engine, dim=int(work.x.shape[1]), metric="ip", **build)
    try:
        index.build(work.x)
        for i in range(20):  # warm
            index.search(work.q[i : i + 1], K, **query)
        ns = _measure(index, work, query)
        benchmark.pedantic(index.search, args=(work.q[:1], K), kwargs=query, rounds=pick(50, 1))
    finally:
        close = getattr(index, "close", None)
        if close is not None:
            close()
    assert all(v.size == ROUNDS for v in ns.values())
    base = ns["back_to_back"]
    info = benchmark.extra_info
    info["embed ms"] = round(work.embed_s * 1e3, 2)
    info["back_to_back p50 us"] = round(float(np.median(base)) / 1e3, 1)
    line = []
    for cond in CONDITIONS[1:]:
        iv = intervals.ratio(base, ns[cond], "p50")
        info[f"after_{cond}_over_back_to_back"] = round(iv.value, 3)
        info[f"after_{cond}_over_back_to_back 95% low"] = round(iv.low, 3)
        info[f"after_{cond}_over_back_to_back 95% high"] = round(iv.high, 3)
        line.append(f"{cond} {iv.value:.2f} [{iv.low:.2f}-{iv.high:.2f}]")
    info["loadavg_1min"] = round(os.getloadavg()[0], 2)
    print(
        f"\n{engine}: back-to-back p50 {info['back_to_back p50 us']} µs; after " + ", ".join(line)
    )

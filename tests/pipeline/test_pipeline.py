from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from time import perf_counter_ns
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench.datasets import Corpus, Dataset, Queries
from ragbench.errors import ConfigError, KTooLargeError
from ragbench.generators import FirstToken
from ragbench.pipeline import STAGES
from ragbench.results.report import Report
from ragbench.timing import run_stages
from ragbench.transports.inproc import InprocTransport

SMALL = {"name": "synthetic", "n": 1500, "dim": 32, "n_queries": 40, "seed": 3}


def config(**tables):
    cfg = {
        "dataset": dict(SMALL),
        "run": {"queries": 40, "warmup": 3, "k": 10, "k_candidates": 50},
        "retrieve": {"backend": "flat"},
        "rerank": {"backend": "numba"},
        "serialize": {"backend": "json"},
        "transport": {"backend": "inproc"},
    }
    for table, value in tables.items():
        cfg[table] = {**cfg.get(table, {}), **value}
    return cfg


def run(cfg, **kw) -> Report:
    with rb.Pipeline.from_config(cfg) as pipe:
        return pipe.run(**kw)


def test_flat_pipeline_times_every_stage_and_recall_is_exact() -> None:
    report = run(config())
    assert report.stage_names == [s for s in STAGES if s != "cache"]
    assert report.samples_ns.shape == (40, len(report.stage_names))
    assert report.samples_ns.dtype == np.int64
    assert report.mean_recall == 1.0
    assert (report.payload_bytes > 0).all()
    assert {"index_build", "jit_compile", "warmup"} <= set(report.setup_ns)


# ---------------------------------------------------------------- stage times

MS = 1_000_000
# Known sleeps (ms) per stage, not monotone in request order, so a column
# shifted either way puts a shorter sleep under a longer one's lower bound.
SLEEP_MS = {"rerank": 2, "serialize": 6, "transport": 3, "deserialize": 8, "generate": 5}


def nap(stage: str) -> None:
    time.sleep(SLEEP_MS[stage] / 1000)


class SleepyReranker:
    """numpy rerank after a known sleep."""

    name = "test-sleepy"

    def __init__(self, metric: str = "ip", **params: Any) -> None:
        self.metric = metric
        self._inner = rb.rerankers.create("numpy", metric=metric, **params)

    def rerank(self, *args: Any) -> Any:
        nap("rerank")
        return self._inner.rerank(*args)

    def rerank_batch(self, *args: Any) -> Any:
        return self._inner.rerank_batch(*args)

    def warmup(self, dim: int) -> int:
        return 0


class SleepyCodec:
    """stdlib JSON after a known sleep each way (the far side imports it by name)."""

    name = "test-sleepy"

    def __init__(self, **params: Any) -> None:
        self._inner = rb.codecs.create("json", **params)
        self.content_type = self._inner.content_type
        self.max_payload_bytes = self._inner.max_payload_bytes

    def encode(self, result: Any) -> bytes:
        nap("serialize")
        return self._inner.encode(result)

    def decode(self, payload: bytes) -> Any:
        nap("deserialize")
        return self._inner.decode(payload)


class SleepyTransport(InprocTransport):
    name = "test-sleepy"

    def send(self, payload: bytes, query: str) -> Any:
        nap("transport")
        return super().send(payload, query)


class SleepyGenerator:
    name = "test-sleepy"
    simulated = False

    def __init__(self, **params: Any) -> None:
        pass

    def start(self) -> int:
        return 0

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        nap("generate")
        return FirstToken("x", 0)

    def close(self) -> None:
        pass


@pytest.fixture
def sleepy() -> Iterator[None]:
    """Registers the test-sleepy rerank, codec, transport and generator backends."""
    regs = (
        (rb.rerankers, SleepyReranker),
        (rb.codecs, SleepyCodec),
        (rb.transports, SleepyTransport),
        (rb.generators, SleepyGenerator),
    )
    for registry, factory in regs:
        registry.register("test-sleepy", factory)
    try:
        yield
    finally:
        for registry, _ in regs:
            registry.registry.unregister("test-sleepy")


def sleepy_config(**tables: Any) -> dict[str, Any]:
    sleepy = {
        t: {"backend": "test-sleepy"} for t in ("rerank", "serialize", "transport", "generate")
    }
    return config(**{**sleepy, **tables})


def test_each_stage_column_holds_that_stages_own_time(sleepy: None) -> None:
    report = run(sleepy_config(), queries=8, warmup=1)
    assert report.stage_names == [s for s in STAGES if s != "cache"]
    cols = dict(zip(report.stage_names, report.samples_ns.T, strict=True))
    for stage, ms in SLEEP_MS.items():
        # sleep never returns early: a safe lower bound on a noisy machine
        assert (cols[stage] >= ms * MS).all(), (stage, (cols[stage] // 1000).tolist())
    for stage in report.stage_names:
        assert (cols[stage] >= 0).all(), stage


def test_stages_add_up_against_an_outside_clock(sleepy: None) -> None:
    with rb.Pipeline.from_config(sleepy_config()) as pipe:
        pipe.setup()
        pipe.warm(1)
        pipe.begin()
        outside = []
        for i in range(10):
            t0 = perf_counter_ns()
            pipe.request(i)
            outside.append(perf_counter_ns() - t0)
        report = pipe.report()
    outside_ns = np.asarray(outside)
    totals = report.totals_ns
    assert report.requests == 10
    # The report never counts more than happened, and misses no stage: the
    # stages sleep ~24 ms per request, the loop around them costs microseconds.
    assert (totals <= outside_ns).all(), (totals - outside_ns).tolist()
    assert (totals >= outside_ns - 1 * MS).all(), (outside_ns - totals).tolist()
    assert (totals >= sum(SLEEP_MS.values()) * MS).all()


@pytest.mark.integration
def test_far_side_split_adds_up_to_the_transport_stamps(sleepy: None, monkeypatch) -> None:
    """http: the far side's decode and prompt times are carved out of the loop's transport time."""
    stamps: list[list[int]] = []

    def recording(stages: Any, ctx: Any, row: list[int]) -> None:
        run_stages(stages, ctx, row)
        stamps.append(list(row))

    # The codec sleeps in the child's decode; the transport is the real http one.
    cfg = sleepy_config(transport={"backend": "http"})
    with rb.Pipeline.from_config(cfg) as pipe:
        pipe.setup()
        monkeypatch.setattr("ragbench.pipeline.run_stages", recording)
        pipe.begin()
        for i in range(6):
            pipe.request(i)
        report = pipe.report()
    assert len(stamps) == report.requests == 6
    loop_names = [n for n in report.stage_names if n not in ("deserialize", "prompt")]
    loop = np.diff(np.asarray(stamps, dtype=np.int64), axis=1)
    assert loop.shape == (6, len(loop_names))
    cols = dict(zip(report.stage_names, report.samples_ns.T, strict=True))
    for j, name in enumerate(loop_names):
        if name != "transport":
            np.testing.assert_array_equal(cols[name], loop[:, j], err_msg=name)
    split = cols["transport"] + cols["deserialize"] + cols["prompt"]
    np.testing.assert_array_equal(split, loop[:, loop_names.index("transport")])
    for name in ("transport", "deserialize", "prompt"):
        assert (cols[name] >= 0).all(), (name, cols[name].tolist())
    # the child's decode sleeps, so its time must land in deserialize
    assert (cols["deserialize"] >= SLEEP_MS["deserialize"] * MS).all()
    assert (cols["prompt"] > 0).all()
    np.testing.assert_array_equal(report.totals_ns, loop.sum(axis=1))


def test_hnsw_with_python_rerank_and_protobuf() -> None:
    """Each stage did its job: hnsw's candidates, python's exact re-ranking, protobuf's bytes."""
    cfg = config(
        retrieve={"backend": "hnsw", "search": {"ef": 64}},
        rerank={"backend": "python"},
        serialize={"backend": "protobuf"},
    )
    codec = rb.codecs.create("protobuf")
    with rb.Pipeline.from_config(cfg) as pipe:
        pipe.setup()
        assert (pipe.info["rerank"], pipe.info["codec"]) == ("python", "protobuf")
        assert pipe.info["index"]["backend"] == "hnsw"
        ds = pipe.dataset
        corpus = ds.vectors
        for i in range(10):
            ctx = pipe.context(i)
            run_stages(pipe.stages, ctx, [0] * (len(pipe.stages) + 1))
            cands = ctx.candidate_ids
            assert cands.shape == (50,) and len(set(cands.tolist())) == 50
            # the python reranker's top 10: the exact best of hnsw's 50 candidates, sorted
            exact = corpus[cands] @ ctx.query_vector.ravel()
            best = cands[np.argsort(-exact, kind="stable")[:10]]
            assert set(ctx.hit_ids.tolist()) == set(best.tolist())
            assert np.all(np.diff(ctx.hit_scores) <= 0)
            np.testing.assert_allclose(
                ctx.hit_scores, corpus[ctx.hit_ids] @ ctx.query_vector.ravel(), rtol=1e-5
            )
            # the payload is protobuf (a JSON payload does not parse) holding those hits
            got = codec.decode(ctx.payload)
            assert [h.doc_id for h in got.hits] == [ds.corpus.ids[j] for j in ctx.hit_ids]
            np.testing.assert_allclose([h.score for h in got.hits], ctx.hit_scores, rtol=1e-6)
            assert ds.corpus.texts[ctx.hit_ids[0]] in ctx.prompt  # decoded on the far side
        report = pipe.run()
    assert report.mean_recall > 0.9
    assert {"rerank", "serialize", "deserialize"} <= set(report.stage_names)


def test_rerank_none_keeps_retriever_order() -> None:
    report = run(config(rerank={"backend": "none"}))
    assert report.mean_recall == 1.0  # flat already returns the exact top k


def near_duplicates(seed: int = 5) -> Dataset:
    """Texts for a text index: 40 groups of 12 one-word variants of a base text, 500
    unrelated fillers; query i is another variant of base i, and the last query
    shares no word with the corpus."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    texts: list[str] = []
    queries: list[str] = []

    def variant(words: list[str]) -> str:
        out = list(words)
        out[rng.randrange(len(out))] = rng.choice(vocab)
        return " ".join(out)

    for _ in range(40):
        base = rng.sample(vocab, 30)
        texts += [variant(base) for _ in range(12)]
        queries.append(variant(base))
    texts += [" ".join(rng.sample(vocab, 30)) for _ in range(500)]
    queries.append(" ".join(f"z{i}" for i in range(30)))
    ids = [f"d{i}" for i in range(len(texts))]
    return Dataset(
        "near-duplicates",
        Corpus(ids, texts, [{} for _ in texts]),
        Queries([f"q{i}" for i in range(len(queries))], queries),
    )


def test_text_index_feeds_texts_and_rerank_sorts_its_candidates() -> None:
    ds = near_duplicates()
    n = len(ds.queries.ids)

    def recall_with(index: str) -> np.ndarray:
        cfg = config(
            retrieve={"backend": index}, embed={"backend": "hashing", "dim": 256}, run={"k": 10}
        )
        with rb.Pipeline.from_config(cfg) as pipe:
            report = pipe.run(ds, queries=n, warmup=0)
        assert report.requests == n
        return report.recall

    text = recall_with("minhash-lsh")
    # Every exact top 10 is inside the query's group of near duplicates, which
    # minhash finds (estimated Jaccard ~0.8 against a 0.3 threshold) and the
    # exact rerank orders: measured 1.0 on every query of this data.
    assert text[:-1].min() >= 0.9 and text[:-1].mean() >= 0.97
    # A query sharing no word with the corpus has exact neighbours in vector
    # space, but no text candidate: the hits come from the text index.
    assert text[-1] == 0.0
    assert recall_with("flat")[-1] == 1.0


def test_lru_cache_hits_repeated_queries() -> None:
    report = run(config(cache={"backend": "lru", "size": 100}), queries=80, warmup=0)
    assert "cache" in report.stage_names
    assert report.cache_hit_rate == pytest.approx(0.5)
    assert report.mean_recall == 1.0


def test_records_round_trip_and_are_json() -> None:
    report = run(config(), queries=10, warmup=1)
    (rec,) = report.to_records()
    text = json.dumps(rec)
    back = Report.from_record(json.loads(text))
    np.testing.assert_array_equal(back.samples_ns, report.samples_ns)
    assert back.mean_recall == report.mean_recall
    assert rec["schema"] == "ragbench.run/1"
    env = rec["env"]
    for key in (
        "cpu",
        "cores",
        "python",
        "libraries",
        "threads",
        "protobuf_backend",
        "git_revision",
    ):
        assert key in env
    assert set(rec["samples_ns"]) == set(report.stage_names)


def test_table_lists_every_stage_and_share() -> None:
    report = run(config(), queries=10, warmup=0)
    table = report.table()
    for name in report.stage_names:
        assert name in table
    assert "before first token" in table and "recall@10" in table


def test_run_another_dataset_through_the_same_stages() -> None:
    other = rb.datasets.load("synthetic", n=800, dim=32, n_queries=12, seed=9)
    with rb.Pipeline.from_config(config()) as pipe:
        report = pipe.run(other, queries=12, warmup=0)
    assert report.dataset["n"] == 800


def test_k_larger_than_corpus_is_an_error() -> None:
    with pytest.raises(KTooLargeError):
        run(config(dataset={"n": 20, "n_queries": 5}, run={"k": 30, "k_candidates": 30}))


def test_precomputed_embedder_needs_vectors() -> None:
    with pytest.raises(ConfigError, match="precomputed"):
        run({"dataset": {"name": "pydocs"}, "embed": {"backend": "precomputed"}})


def test_unknown_backend_param_names_the_key() -> None:
    with pytest.raises(ConfigError, match="bogus"):
        run(config(retrieve={"backend": "hnsw", "build": {"bogus": 1}}))


def test_bad_backends_fail_at_creation_before_any_set_up(monkeypatch) -> None:
    from ragbench import datasets

    def no_loading(*a, **k):
        raise AssertionError("the dataset was loaded before the config was checked")

    monkeypatch.setattr(datasets, "load", no_loading)
    monkeypatch.setattr(datasets.catalogue, "load", no_loading)  # from_table calls it
    for tables, word in (
        ({"retrieve": {"backend": "no-such"}}, "no-such"),
        ({"rerank": {"backend": "no-such"}}, "no-such"),
        ({"serialize": {"backend": "no-such"}}, "no-such"),
        ({"transport": {"backend": "no-such"}}, "no-such"),
        ({"generate": {"backend": "no-such"}}, "no-such"),
        ({"embed": {"backend": "no-such"}}, "no-such"),
        ({"retrieve": {"backend": "hnsw", "build": {"bogus": 1}}}, "bogus"),
        ({"retrieve": {"backend": "hnsw", "search": {"bogus": 1}}}, "bogus"),
        ({"retrieve": {"backend": "hnsw", "search": {"ef": -3}}}, "ef"),
        ({"retrieve": {"backend": "ivf", "search": {"nprobe": "8"}}}, "nprobe"),
        ({"rerank": {"backend": "numba", "bogus": 1}}, "bogus"),
        ({"serialize": {"backend": "json", "bogus": 1}}, "bogus"),
        ({"transport": {"backend": "http", "bogus": 1}}, "bogus"),
        ({"generate": {"backend": "stub", "bogus": 1}}, "bogus"),
        ({"embed": {"backend": "hashing", "bogus": 1}}, "bogus"),
    ):
        with pytest.raises(ConfigError, match=word):
            rb.Pipeline.from_config(config(**tables))


def test_a_second_run_reports_only_its_own_requests() -> None:
    with rb.Pipeline.from_config(config()) as pipe:
        first = pipe.run(queries=7, warmup=0)
        second = pipe.run(queries=5, warmup=0)
    assert first.requests == 7 and second.requests == 5
    assert second.recall.shape == (5,)


def test_a_second_dataset_on_a_set_up_pipeline_is_refused() -> None:
    other = rb.datasets.load("synthetic", n=700, dim=32, n_queries=5, seed=11)
    with rb.Pipeline.from_config(config()) as pipe:
        pipe.run(queries=3, warmup=0)
        with pytest.raises(ConfigError, match="another Pipeline"):
            pipe.run(other, queries=3, warmup=0)


def test_close_restores_the_thread_setting() -> None:
    from ragbench import threads

    before = threads.get_threads()
    pipe = rb.Pipeline.from_config(config(run={"threads": 1}))
    try:
        pipe.setup()
        assert threads.get_threads() == 1
    finally:
        pipe.close()
    assert threads.get_threads() == before


@pytest.mark.integration
def test_far_side_dying_mid_run_stops_with_a_record_and_keeps_finished_requests(tmp_path) -> None:
    import os
    import signal

    from ragbench.results.records import append_record, read_records

    pipe = rb.Pipeline.from_config(config(transport={"backend": "http"}))
    done = []

    def kill_after_five(n: int) -> None:
        done.append(n)
        if len(done) == 5:
            os.kill(pipe.transport.pid, signal.SIGKILL)

    try:
        report = pipe.run(queries=10, warmup=2, progress=kill_after_five)
    finally:
        pipe.close()
    assert report.error is not None and "TransportError" in report.error
    assert report.requests == 5  # the finished requests are kept, the failed one is not counted
    out = tmp_path / "r.jsonl"
    for rec in report.to_records():
        append_record(out, rec)
    (rec,) = read_records(out)
    assert rec["error"] == report.error and rec["requests"] == 5
    assert "STOPPED EARLY" in report.table()


@pytest.mark.integration
def test_stub_llm_generate_stage_is_timed_and_labelled_simulated() -> None:
    report = run(
        config(generate={"backend": "stub", "base_ms": 1.0, "prefill_ms_per_1k_tokens": 0.0}),
        queries=5,
        warmup=1,
    )
    assert report.simulated == ["generate=stub"]
    assert "SIMULATED" in report.table() and "generate (simulated)" in report.table()
    (rec,) = report.to_records()
    assert rec["simulated"] == ["generate=stub"]
    # a modelled 1 ms before the first token is a floor on the generate stage
    assert (report.samples_ns[:, report.stage_names.index("generate")] >= 1_000_000).all()


@pytest.mark.integration
def test_openai_generator_against_a_real_streaming_server() -> None:
    from ragbench.generators.stub_server import serve

    server, port = serve("127.0.0.1", 0, base_ms=0.0, prefill_ms_per_1k_tokens=0.0)
    try:
        report = run(
            config(generate={"backend": "openai", "base_url": f"http://127.0.0.1:{port}/v1"}),
            queries=5,
            warmup=1,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert report.simulated == []  # the openai backend measures whatever it talks to
    assert report.requests == 5 and report.error is None

from __future__ import annotations

import json

import numpy as np
import pytest

import ragbench as rb
from ragbench.errors import ConfigError, KTooLargeError
from ragbench.pipeline import STAGES
from ragbench.report import Report

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
    assert (report.samples_ns >= 0).all()
    # stages add up to the request total by construction of the stamps
    np.testing.assert_array_equal(report.totals_ns, report.samples_ns.sum(axis=1))
    assert report.mean_recall == 1.0
    assert (report.payload_bytes > 0).all()
    shares = report.shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert {"index_build", "jit_compile", "warmup"} <= set(report.setup_ns)


def test_hnsw_with_python_rerank_and_protobuf() -> None:
    report = run(
        config(
            retrieve={"backend": "hnsw", "search": {"ef": 64}},
            rerank={"backend": "python"},
            serialize={"backend": "protobuf"},
        )
    )
    assert report.mean_recall > 0.9


def test_rerank_none_keeps_retriever_order() -> None:
    report = run(config(rerank={"backend": "none"}))
    assert report.mean_recall == 1.0  # flat already returns the exact top k


def test_text_index_feeds_texts_and_rerank_sorts_its_candidates() -> None:
    report = run(config(retrieve={"backend": "minhash-lsh"}, run={"k_candidates": 200}))
    assert report.requests == 40
    assert 0.0 <= report.mean_recall <= 1.0


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

    from ragbench.records import append_record, read_records

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

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]


def test_fixtures_are_available_to_any_pytest_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import ragbench as rb

        def test_payload(rb_result):
            r = rb_result(n_hits=4, text_bytes=200, metadata=2, dim=8)
            assert len(r.hits) == 4
            assert all(len(h.text) == 200 and len(h.metadata) == 2 for h in r.hits)
            assert r.hits[0].vector().shape == (8,)
            assert rb_result(n_hits=4, text_bytes=200, metadata=2, dim=8) == r

        def test_index_and_pipeline(rb_synthetic, rb_index, rb_pipeline):
            ds = rb_synthetic(n=500, dim=16, n_queries=10)
            idx = rb_index("flat", ds)
            ids, scores = idx.search(ds.query_vectors_precomputed[:2], k=3)
            assert ids.shape == (2, 3)
            assert rb_index("flat", ds) is idx
            pipe = rb_pipeline({"dataset": {"name": "synthetic", "n": 500, "dim": 16, "n_queries": 10},
                                "retrieve": {"backend": "flat"}, "serialize": {"backend": "json"}})
            report = pipe.run(queries=5, warmup=0)
            assert report.requests == 5
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_rb_bench_returns_the_report_with_a_one_line_repr(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import re

        CONFIG = {"dataset": {"name": "synthetic", "n": 500, "dim": 16, "n_queries": 10},
                  "retrieve": {"backend": "flat"}, "serialize": {"backend": "json"}}

        def test_fields(rb_bench):
            report = rb_bench(CONFIG, requests=20, warmup=2)
            assert report.requests == 20 and report.k == 10
            assert report.samples_ns.shape == (20, len(report.stage_names))
            assert report.total().p50_ns > 0 and report.mean_recall == 1.0
            text = repr(report)
            assert re.fullmatch(
                r"<Report flat/numba/json/inproc: 20 requests, p50 total [\\d.]+ (µs|ms), "
                r"p99 [\\d.]+ (µs|ms|s), recall@10 1\\.000>", text), text

        def test_failure_shows_the_short_repr(rb_bench):
            report = rb_bench(CONFIG, requests=5, warmup=0)
            assert report.mean_recall < 0.5
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    failure = result.stdout.str()
    assert "<Report flat/numba/json/inproc: 5 requests, p50 total" in failure
    assert "samples_ns=array" not in failure and "config={" not in failure


INDEX_CACHE_SESSION = """
import json, os
import numpy as np

def test_hnsw(rb_synthetic, rb_index):
    ds = rb_synthetic(n=2000, dim=16, n_queries=20)
    idx = rb_index("hnsw", ds, M=8, ef_construction=40)
    ids, scores = idx.search(ds.query_vectors_precomputed, k=5, ef=32)
    with open(os.environ["RB_OUT"], "w") as fh:
        json.dump({"ids": ids.tolist(), "scores": scores.tolist(),
                   "record": idx.build_record}, fh)
"""

# counts the backend's own builds, apart from ragbench's record of them
COUNT_BUILDS = """
import os
from ragbench.indexes.hnswlib_index import HnswIndex

builds = []
_build = HnswIndex.build

def counted(self, data):
    builds.append(len(data))
    return _build(self, data)

HnswIndex.build = counted

def pytest_sessionfinish(session):
    with open(os.environ["RB_BUILDS"], "w") as fh:
        fh.write(str(len(builds)))
"""


def _session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tag: str, *args: str
) -> tuple[dict[str, Any], int]:
    out, builds = pytester.path / f"{tag}.json", pytester.path / f"{tag}.builds"
    monkeypatch.setenv("RB_OUT", str(out))
    monkeypatch.setenv("RB_BUILDS", str(builds))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    return json.loads(out.read_text()), int(builds.read_text())


def test_rb_index_reuses_the_built_index_cache_across_sessions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytester.makepyfile(INDEX_CACHE_SESSION)
    pytester.makeconftest(COUNT_BUILDS)
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RAGBENCH_INDEX_CACHE_MIN_S", "0")  # cache even a quick build
    first, first_builds = _session(pytester, monkeypatch, "first")
    second, second_builds = _session(pytester, monkeypatch, "second")
    assert (first_builds, second_builds) == (1, 0)  # the second session built nothing
    assert first["record"]["cached"] is False and second["record"]["cached"] is True
    assert (second["ids"], second["scores"]) == (first["ids"], first["scores"])
    assert list((tmp_path / "cache" / "indexes").glob("*/*.rbi"))
    # opting out: the session builds again, and the cache is left alone
    # (the same reproducible one-thread build, so the same neighbours: a CI run on two threads
    # once built another graph here)
    third, third_builds = _session(pytester, monkeypatch, "third", "--rb-no-index-cache")
    assert third_builds == 1 and third["ids"] == first["ids"]
    assert third["record"]["cached"] is False and third["record"]["threads"] == 1


def test_embed_runtime_takes_a_typed_config_too() -> None:
    # rb_pipeline/rb_bench take whatever a Pipeline takes, the typed Config included (issue 30)
    from ragbench.settings import parse_config
    from ragbench.testing import with_embed_runtime

    typed = parse_config("hashing")
    assert with_embed_runtime(typed, None) is typed
    on_onnx = parse_config(with_embed_runtime(typed, "onnx"))
    assert (on_onnx.embed.backend, on_onnx.embed.params()["runtime"]) == ("minilm", "onnx")
    assert on_onnx.retrieve == typed.retrieve and on_onnx.run == typed.run
    from_name = parse_config(with_embed_runtime("hashing", "onnx-int8"))
    assert from_name.embed.params()["runtime"] == "onnx-int8"

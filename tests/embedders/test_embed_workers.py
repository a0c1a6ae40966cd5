"""MiniLM's runtimes under concurrency (issue 29): an ONNX Runtime session per worker thread,
`ragbench load` with thread, process and asyncio workers, and the pytest fixtures."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from ragbench.cli import main
from ragbench.embedders import _runtimes
from ragbench.embedders.minilm import MiniLMEmbedder

pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytestmark = [pytest.mark.integration, pytest.mark.slow]  # MiniLM loads, its graph exports

pytest_plugins = ["pytester"]

QUERIES = ["how do I read a file", "sort a list of tuples", "asyncio gather", "dict merge"]


def _in_threads(emb: MiniLMEmbedder, n: int) -> list[np.ndarray]:
    """Every query embedded in each of ``n`` threads at once: one (4, 384) array per thread."""
    start = threading.Barrier(n)
    out: list[np.ndarray] = [np.zeros(0)] * n

    def work(i: int) -> None:
        start.wait()
        out[i] = np.vstack([emb.embed([q]) for q in QUERIES])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_each_worker_thread_runs_its_own_session() -> None:
    emb = MiniLMEmbedder(runtime="onnx")
    alone = np.vstack([emb.embed([q]) for q in QUERIES])  # the set-up thread's session
    assert emb.describe()["sessions"] == 1
    got = _in_threads(emb, 3)
    assert emb.describe()["sessions"] == 4  # one more per worker thread
    for vectors in got:
        np.testing.assert_array_equal(vectors, alone)


def test_threads_past_the_cap_share_the_first_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtimes, "MAX_SESSIONS", 2)
    emb = MiniLMEmbedder(runtime="onnx")
    alone = np.vstack([emb.embed([q]) for q in QUERIES])
    for vectors in _in_threads(emb, 4):
        np.testing.assert_array_equal(vectors, alone)
    assert emb.describe()["sessions"] == 2


@pytest.mark.parametrize("kind", ["thread", "process", "asyncio"])
def test_load_runs_the_runtime_in_every_worker_kind(kind: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "load.jsonl"
    argv = ["load", "--dataset", "pydocs", "--embed", "minilm", "--embed-runtime", "onnx-int8"]
    argv += ["--set", "embed.query_only=true", "--set", 'retrieve.backend="flat"']
    argv += ["--set", 'rerank.backend="none"', "--qps", "8", "--duration", "1", "--warmup", "2"]
    argv += ["--worker-kind", kind, "--workers", "2", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["config"]["embed"]["runtime"] == "onnx-int8" and rec["worker_kind"] == kind
    assert rec["completed"] > 0 and rec["failed"] == 0 and rec["dead_workers"] in (0, [], None)
    assert rec["env"]["threads"]["ragbench_threads"] == 1  # pinned
    assert "minilm:onnx-int8+query-only" in rec["label"] or rec["label"] == "embed=onnx-int8"


def test_load_puts_the_runtimes_side_by_side(tmp_path: Path, capsys) -> None:
    """``load --embed-runtime torch,onnx-int8``: one curve per runtime, each record naming it."""
    out = tmp_path / "load.jsonl"
    argv = [
        "load",
        "--dataset",
        "pydocs",
        "--embed",
        "minilm",
        "--embed-runtime",
        "torch,onnx-int8",
    ]
    argv += ["--set", "embed.query_only=true", "--set", 'retrieve.backend="flat"']
    argv += ["--set", 'rerank.backend="none"', "--qps", "6", "--duration", "1", "--warmup", "2"]
    argv += ["--worker-kind", "thread", "--workers", "1", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in recs] == ["embed=torch", "embed=onnx-int8"]
    assert [r["config"]["embed"]["runtime"] for r in recs] == ["torch", "onnx-int8"]
    assert all(r["completed"] > 0 and r["failed"] == 0 for r in recs)
    shown = capsys.readouterr().out
    assert "embed=torch" in shown and "embed=onnx-int8" in shown


def test_the_fixtures_take_the_runtime(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        CONFIG = {
            "dataset": {"name": "pydocs"},
            "embed": {"query_only": True},
            "retrieve": {"backend": "flat"},
            "rerank": {"backend": "none"},
        }

        def test_pipeline(rb_pipeline):
            pipe = rb_pipeline(CONFIG, embed_runtime="onnx-int8")
            embedder = pipe.built.embedding.embedder
            assert embedder.runtime == "onnx-int8" and embedder.query_only

        def test_bench(rb_bench, benchmark):
            rb_bench(CONFIG, requests=5, warmup=1, embed_runtime="onnx")
            info = benchmark.extra_info["ragbench"]
            assert info["embedder"]["runtime"] == "onnx"
            assert set(info["embed_parts"]) == {"tokenize", "forward", "pool"}
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-disable")
    result.assert_outcomes(passed=2)

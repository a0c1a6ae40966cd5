"""``ragbench sweep`` with several embedders (issue 29): the grid once per MiniLM runtime (or
embedder), each on its own vectors, run as a user runs it: the installed command, from a
folder outside the repository.

A sweep times the index, not the embedding; what the embedder axis changes there is the
vectors: recall against exact search over that embedder's vectors, answer quality where the
dataset has judgments, and the top-10 agreement with MiniLM on torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb

pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytestmark = [pytest.mark.integration, pytest.mark.slow]  # MiniLM loads, its graph exports

RAGBENCH = [sys.executable, "-m", "ragbench"]


def _sweep(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RAGBENCH, "sweep", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(Path(rb.__file__).resolve().parents[1])},
    )


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_query_side_runtimes_on_pydocs(tmp_path: Path) -> None:
    """torch and int8 queries against the shipped torch corpus: two sets of points, each named
    by its embedder, recall against exact search over exactly those vectors (flat finds all
    of it), nDCG@10 from the pydocs judgments, and int8's agreement with torch."""
    out = tmp_path / "sweep.jsonl"
    proc = _sweep(
        tmp_path, "--dataset", "pydocs", "--embed", "minilm",
        "--embed-runtime", "torch,onnx-int8", "--set", "embed.query_only=true",
        "--index", "flat,hnsw", "--param", "ef=10,40", "--queries", "30", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recs = _records(out)
    labels = [r["embedder"] for r in recs]
    assert sorted(set(labels)) == ["minilm:onnx-int8+query-only", "minilm:torch"]
    assert labels.count("minilm:torch") == labels.count("minilm:onnx-int8+query-only") == 3
    for r in recs:
        assert r["judged"]["ndcg_at_10"] > 0  # pydocs has judgments
        if r["index"] == "flat":  # exact search over the point's own vectors: all found
            assert r["recall"] == 1.0
    torch_rec = next(r for r in recs if r["embedder"] == "minilm:torch")
    int8 = next(r for r in recs if r["embedder"] != "minilm:torch")
    assert torch_rec["embed_agreement"] is None  # the reference itself
    got = int8["embed_agreement"]
    assert got["reference"] == "minilm torch" and got["k"] == 10
    assert 0.5 <= got["top_k_mean"] < 1.0 and got["top_k_min"] <= got["top_k_mean"]
    assert 0.97 <= got["cosine_p1"] <= got["cosine_mean"] < 0.9999
    # the same judged answers, different queries: int8's flat nDCG@10 is its own
    flat = {r["embedder"]: r["judged"]["ndcg_at_10"] for r in recs if r["index"] == "flat"}
    assert flat["minilm:torch"] != flat["minilm:onnx-int8+query-only"]
    # every table and reading line names its embedder
    assert "embedder minilm:torch — the reference" in proc.stdout
    assert "embedder minilm:onnx-int8+query-only — against minilm torch: top-10 agreement" in (
        proc.stdout
    )
    assert "minilm:onnx-int8+query-only: unfiltered: fastest point per index" in proc.stdout
    assert "minilm:onnx-int8+query-only: answer quality: nDCG@10" in proc.stdout


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A text folder of 40 pydocs passages and 8 queries (no judgments)."""
    ds = rb.datasets.load("pydocs")
    root = tmp_path_factory.mktemp("texts")
    (root / "corpus").mkdir()
    for i, text in enumerate(ds.corpus.texts[:40]):
        (root / "corpus" / f"p{i:02d}.txt").write_text(text)
    (root / "queries.txt").write_text("\n".join(ds.queries.texts[:8]) + "\n")
    return root


def test_each_runtime_embeds_the_corpus_with_itself(folder: Path, tmp_path: Path) -> None:
    """Without query_only the corpus is embedded by each runtime: exact search over onnx's
    own vectors is what its flat point finds, and fp32 ONNX agrees with torch."""
    out = tmp_path / "sweep.jsonl"
    proc = _sweep(
        tmp_path, "--dataset", str(folder), "--embed", "minilm",
        "--embed-runtime", "torch,onnx", "--index", "flat", "--queries", "8", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recs = _records(out)
    assert [r["embedder"] for r in recs] == ["minilm:torch", "minilm:onnx"]
    assert all(r["recall"] == 1.0 and r.get("judged") is None for r in recs)
    got = recs[1]["embed_agreement"]
    assert got["top_k_mean"] >= 0.975 and got["cosine_p1"] > 0.999  # fp32: ties aside, equal


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--embed", "minilm", "--embed-runtime", "torch,tensorrt"],
            "unknown runtime 'tensorrt'; known: torch, torch-bf16, onnx, onnx-int8, openvino",
        ),
        (
            ["--embed", "minilm", "--set", "embed.runtime=torch,onnx"],
            "several runtimes side by side: --embed-runtime a,b",
        ),
        (["--embed", "model2vec", "--embed-runtime", "onnx"], "--embed-runtime is minilm's"),
        (["--set", "retrieve.backend=flat"], "--set takes [embed] keys only"),
        (["--embed", "minilm", "--set", "embed.query_only=3"], "query_only must be true or false"),
    ],
)
def test_bad_embedder_choices_are_refused_before_anything_is_embedded(
    folder: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    proc = _sweep(tmp_path, "--dataset", str(folder), "--index", "flat", *args)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "loading the MiniLM model" not in proc.stderr

"""The MiniLM query embedder in every runtime: torch, ONNX Runtime (fp32, int8) and OpenVINO.

Vectors are checked against sentence-transformers' own ``encode`` of the same
shipped weights (the reference a user would compare with); the ONNX graphs
are exported once into the session's cache (tests/conftest.py) and reused by
every test here but the cache test, which has a cache of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench.embedders.minilm import MiniLMEmbedder
from ragbench.timing import Parts

pytestmark = pytest.mark.integration

FP32 = ("torch", "onnx", "openvino")
RAGBENCH = [sys.executable, "-m", "ragbench"]


@pytest.fixture(scope="module")
def passages() -> list[str]:
    return rb.datasets.load("pydocs").corpus.texts[:200]


@pytest.fixture(scope="module")
def reference(passages: list[str]) -> np.ndarray:
    """sentence-transformers' encode of the 200 passages: float32 (200, 384), unit rows."""
    emb = MiniLMEmbedder()
    emb.load()
    out = emb.model.encode(passages, normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(out, dtype=np.float32)


def _cosines(runtime: str, passages: list[str], reference: np.ndarray) -> tuple[Any, Any]:
    """Cosines to the reference of the batch path (200 passages) and the one-text path (20)."""
    emb = MiniLMEmbedder(runtime=runtime, threads=1)
    batch = emb.embed(passages)
    one = np.vstack([emb.embed([t]) for t in passages[:20]])
    for v in (batch, one):
        assert v.dtype == np.float32 and v.flags.c_contiguous
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    return (batch * reference).sum(axis=1), (one * reference[:20]).sum(axis=1)


@pytest.mark.parametrize("runtime", FP32)
def test_fp32_runtimes_give_sentence_transformers_vectors(
    runtime: str, passages: list[str], reference: np.ndarray
) -> None:
    batch, one = _cosines(runtime, passages, reference)
    assert batch.min() >= 0.999 and one.min() >= 0.999, (batch.min(), one.min())


def test_int8_is_close_but_not_the_same(passages: list[str], reference: np.ndarray) -> None:
    """Per-channel int8 weights: mean cosine 0.994, min 0.989 measured on these passages (per
    tensor it was 0.95 / 0.92); the figures the docs show come from bench/test_bench_embed_runtimes.py."""
    batch, one = _cosines("onnx-int8", passages, reference)
    assert batch.min() >= 0.97 and one.min() >= 0.97, (batch.min(), one.min())
    assert batch.mean() < 0.9999  # quantized: not the fp32 vectors


def test_an_int8_vector_does_not_depend_on_its_batch(passages: list[str]) -> None:
    """Dynamic quantization scales activations per tensor: batched, a text's vector would
    depend on its neighbours and padding; the embedder runs int8 one text at a time."""
    emb = MiniLMEmbedder(runtime="onnx-int8", threads=1)
    texts = [passages[0][:40], *passages[1:8]]
    alone = np.vstack([emb.embed([t]) for t in texts])
    np.testing.assert_array_equal(emb.embed(texts), alone)


@pytest.mark.parametrize("runtime", ("torch", "onnx"))
def test_one_query_is_timed_in_three_parts(runtime: str) -> None:
    emb = MiniLMEmbedder(runtime=runtime)
    emb.embed(["load the model first"])
    parts = []
    for text in ("how do I read a file", "sort a list of tuples by the second item"):
        emb.embed([text])
        parts.append(emb.last_parts())
    assert all(isinstance(p, Parts) and min(p.ns) > 0 for p in parts)
    assert all(list(p) == ["tokenize", "forward", "pool"] for p in parts)
    assert parts[0].ns != parts[1].ns  # measured per call, not a constant


def test_truncation_at_the_model_length_is_counted() -> None:
    emb = MiniLMEmbedder(runtime="onnx")
    long = " ".join(["file"] * 600)  # 600 WordPiece tokens plus [CLS] and [SEP]
    emb.embed(["a short query"])
    emb.embed(["a short one", "another short one"])
    assert emb.describe()["truncated_texts"] == 0
    emb.embed([long])
    emb.embed([long, "short"])
    info = emb.describe()
    assert info["truncated_texts"] == 2 and info["max_length"] == 256
    # the vector is that of the first 254 tokens: extra tokens change nothing
    np.testing.assert_allclose(
        emb.embed([long]), emb.embed([" ".join(["file"] * 300)]), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("runtime", ("onnx", "onnx-int8", "openvino"))
def test_an_empty_query_is_embedded_as_torch_embeds_it(runtime: str) -> None:
    """An empty query is [CLS] [SEP] to the tokenizer, as with torch (handled as today: a
    vector, not an error), in every runtime; an empty batch is no rows."""
    want = MiniLMEmbedder().embed([""])
    emb = MiniLMEmbedder(runtime=runtime)
    got = emb.embed([""])
    assert got.shape == (1, 384) and abs(float(np.linalg.norm(got)) - 1.0) < 1e-5
    assert float((got * want).sum()) >= (0.97 if runtime == "onnx-int8" else 0.999)
    assert emb.last_parts() is not None and emb.describe()["truncated_texts"] == 0
    assert emb.embed([]).shape == (0, 384)


def test_a_query_runs_on_one_thread_that_does_not_spin() -> None:
    """ONNX Runtime: one intra-op thread per request, spinning off (so it does not take the core
    the index needs next); OpenVINO: one inference thread and the latency hint, fp32."""
    emb = MiniLMEmbedder(runtime="onnx")
    emb.embed(["one query"])
    session = emb._forward._session(1)  # type: ignore[union-attr]  # the request path's
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1 and options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    ov = MiniLMEmbedder(runtime="openvino")
    ov.embed(["one query"])
    compiled = ov._forward._compiled.get(1)  # type: ignore[union-attr]
    assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 1
    assert str(compiled.get_property("PERFORMANCE_HINT")) in ("LATENCY", "PerformanceMode.LATENCY")
    assert "float32" in str(compiled.get_property("INFERENCE_PRECISION_HINT"))  # not bf16


def test_int8_record_names_the_cpu_int8_kernels() -> None:
    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0].split()
    want = next((f for f in ("avx512_vnni", "avx_vnni") if f in flags), "none")
    assert MiniLMEmbedder(runtime="onnx-int8").describe()["int8_kernels"] == want


def test_a_cached_graph_is_checked_by_hash_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path))
    text = ["what does a corrupt export do"]
    first = MiniLMEmbedder(runtime="onnx-int8")
    v = first.embed(text)
    info = first.describe()
    assert info["exported"] is True
    second = MiniLMEmbedder(runtime="onnx-int8")
    np.testing.assert_array_equal(second.embed(text), v)
    assert second.describe()["exported"] is False
    fp32 = next(p for p in (tmp_path / "onnx").iterdir() if not p.name.endswith("-int8.onnx"))
    int8 = Path(info["onnx_file"])
    # a foreign graph under the fp32 name: a valid ONNX file, not this export
    fp32.write_bytes(int8.read_bytes())
    third = MiniLMEmbedder(runtime="onnx")
    fp32_vector = third.embed(text)
    assert third.describe()["exported"] is True
    assert float((fp32_vector * v).sum()) < 1.0  # fp32 again, not the int8 graph's vector
    # a truncated int8 graph
    int8.write_bytes(int8.read_bytes()[:1000])
    fourth = MiniLMEmbedder(runtime="onnx-int8")
    np.testing.assert_array_equal(fourth.embed(text), v)
    assert fourth.describe()["exported"] is True


# ---------------------------------------------------------------- through the CLI


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RAGBENCH, *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **env},
    )


def test_unknown_runtime_lists_the_known_ones() -> None:
    proc = _cli("run", "-c", "default", "--set", "embed.runtime=tensorrt", "--queries", "2")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "'tensorrt'" in lines[0] and "torch, torch-bf16, onnx, onnx-int8, openvino" in lines[0]


def test_bf16_is_close_and_names_the_cpus_bf16_instructions(
    passages: list[str], reference: np.ndarray
) -> None:
    """torch on a bfloat16 copy of the weights: not fp32, so a floor, not 0.999 (the bench
    records the measured cosines); the record says which bf16 instructions ran it."""
    pytest.importorskip("torch")
    from ragbench.embedders import _runtimes

    if _runtimes.bf16_kernels() in ("none", "unknown"):
        pytest.skip("this CPU has no bfloat16 instructions: the refusal is tested below")
    emb = MiniLMEmbedder(runtime="torch-bf16", threads=1)
    got = np.vstack([emb.embed([t]) for t in passages[:50]])
    cos = (got * reference[:50]).sum(axis=1)
    assert cos.min() >= 0.99 and cos.mean() < 1.0 - 1e-7  # close, and not the fp32 vectors
    assert emb.describe()["bf16_kernels"] in _runtimes.BF16_FLAGS


def test_bf16_is_refused_on_a_cpu_without_bf16_instructions() -> None:
    code = (
        "import ragbench.embedders._runtimes as r; r.cpu_flags = lambda: {'avx2', 'fma'}\n"
        "from ragbench.cli import main\n"
        "import sys; sys.argv = ['ragbench', 'run', '-c', 'default', '--set',"
        " 'embed.runtime=torch-bf16', '--queries', '2']\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "'torch-bf16' needs a CPU with bfloat16 instructions" in line
    assert "amx_bf16 or avx512_bf16" in line


@pytest.mark.parametrize(
    "bench", ["bench/test_bench_embed_runtimes.py", "bench/test_bench_embed_cold.py"]
)
def test_the_benches_say_why_bf16_has_no_row_on_a_cpu_without_it(
    bench: str, tmp_path: Path
) -> None:
    """On a CPU without bfloat16 instructions each runtime bench skips torch-bf16 before
    measuring anything, and the skip names the flags the CPU lacks."""
    (tmp_path / "no_bf16_cpu.py").write_text(
        "import ragbench.embedders._runtimes as r\nr.cpu_flags = lambda: {'avx2', 'fma'}\n"
    )
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(tmp_path), str(root), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", bench, "-p", "no_bf16_cpu", "-p", "no:cacheprovider",
         "-k", "bf16", "-rs", "-q"],
        capture_output=True, text=True, timeout=300, cwd=root,
        env={**os.environ, "PYTHONPATH": path, "RAGBENCH_BENCH_QUICK": ""},
    )  # fmt: skip
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr  # 5: every test skipped
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped, proc.stdout
    for line in skipped:
        assert "torch-bf16 not run: this CPU has none of amx_bf16, avx512_bf16" in line
    assert " passed" not in proc.stdout and " failed" not in proc.stdout


@pytest.mark.parametrize(
    ("runtime", "module", "extra"),
    [("openvino", "openvino", "openvino"), ("onnx-int8", "onnxruntime", "onnx")],
)
def test_a_missing_runtime_package_names_its_extra(runtime: str, module: str, extra: str) -> None:
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from ragbench.cli import main\n"
        f"sys.argv = ['ragbench', 'run', '-c', 'default', '--set', 'embed.runtime={runtime}',"
        " '--queries', '2']\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"ragbench: error: {module} is not installed; install it with: "
        f"pip install 'ragbench[{extra}]'"
    ]


def _record(path: Path) -> dict[str, Any]:
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    rec: dict[str, Any] = json.loads(lines[0])
    return rec


def test_run_query_side_only_on_pydocs_records_the_parts(tmp_path: Path) -> None:
    """The documented command: the corpus keeps the shipped torch vectors, the queries run on
    ONNX Runtime; the record and the table carry the embed stage's three parts."""
    out = tmp_path / "run.jsonl"
    proc = _cli(
        "run", "-c", "default", "--dataset", "pydocs", "--set", "embed.runtime=onnx",
        "--set", "embed.query_only=true", "--queries", "10", "--warmup", "2", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rec = _record(out)
    info = rec["info"]
    assert rec["label"].endswith("/minilm:onnx+query-only")  # every table names the runtime
    assert info["embedder_info"]["runtime"] == "onnx"
    assert info["embedder_info"]["query_only"] is True
    parts = info["embed_parts"]
    assert list(parts) == ["tokenize", "forward", "pool"]
    assert all(parts[p]["p50_ns"] > 0 for p in parts)
    top = max(parts, key=lambda p: parts[p]["p50_ns"])
    assert "/minilm:onnx+query-only: embed p50 split: tokenize" in proc.stdout
    assert f"; {top} dominates" in proc.stdout
    events = rec["cache_events"]
    corpus = [e for e in events if e["what"].startswith("corpus_vectors")]
    assert corpus and all(e.get("shipped") for e in corpus), corpus  # torch's shipped vectors


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A text folder of 40 pydocs passages (one over 256 tokens) and 6 queries."""
    ds = rb.datasets.load("pydocs")
    root = tmp_path_factory.mktemp("texts")
    (root / "corpus").mkdir()
    for i, text in enumerate(ds.corpus.texts[:39]):
        (root / "corpus" / f"p{i:02d}.txt").write_text(text)
    (root / "corpus" / "long.txt").write_text(" ".join(ds.corpus.texts[:12]))
    (root / "queries.txt").write_text("\n".join(ds.queries.texts[:6]) + "\n")
    return root


@pytest.mark.parametrize("runtime", ("onnx-int8", "openvino"))
def test_compare_embeds_the_corpus_with_the_runtime(
    folder: Path, tmp_path: Path, runtime: str
) -> None:
    out = tmp_path / "run.jsonl"
    proc = _cli(
        "compare", "--dataset", str(folder), "--embed", "minilm", "--index", "flat",
        "--rerank", "none", "--set", f"embed.runtime={runtime}", "--queries", "6",
        "--warmup", "1", "--re-embed", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rec = _record(out)
    assert rec["info"]["embedder_info"]["runtime"] == runtime
    # the long passage (--re-embed: embedded now, not read from an earlier run's cache)
    assert rec["info"]["embedder_info"]["truncated_texts"] >= 1
    events = [e for e in rec["cache_events"] if e["what"].startswith("corpus_vectors")]
    assert events and not any(e.get("shipped") for e in events)
    # exact search over this runtime's own vectors finds what the runtime's queries ask
    assert rec["recall_at_k"] == 1.0


def test_compare_puts_the_runtimes_side_by_side(folder: Path, tmp_path: Path) -> None:
    """``--embed-runtime`` is an axis: one row per runtime, interleaved like every compare axis,
    each embedding the corpus with its own runtime."""
    out = tmp_path / "runs.jsonl"
    proc = _cli(
        "compare", "--dataset", str(folder), "--embed", "minilm",
        "--embed-runtime", "torch,onnx,onnx-int8", "--index", "flat", "--rerank", "none",
        "--queries", "4", "--warmup", "1", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in recs] == ["embed=torch", "embed=onnx", "embed=onnx-int8"]
    assert [r["info"]["embedder_info"]["runtime"] for r in recs] == ["torch", "onnx", "onnx-int8"]
    assert all(r["info"]["embed_parts"]["forward"]["p50_ns"] > 0 for r in recs)
    for runtime in ("torch", "onnx", "onnx-int8"):
        assert f"embed={runtime}: embed p50 split: tokenize" in proc.stdout
    # agreement with torch's vectors: none for torch itself, exact for fp32, close for int8
    assert "embed_agreement" not in recs[0]["info"]
    onnx, int8 = recs[1]["info"]["embed_agreement"], recs[2]["info"]["embed_agreement"]
    assert onnx["top_k_mean"] >= 0.975 and onnx["cosine_p1"] > 0.999  # fp32: ties aside, equal
    assert 0.5 <= int8["top_k_mean"] <= 1.0 and 0.97 <= int8["cosine_p1"] < 0.9999
    assert "embed=onnx-int8: against minilm torch: top-10 agreement" in proc.stdout


def test_an_unknown_runtime_in_the_axis_is_refused_before_set_up(folder: Path) -> None:
    proc = _cli(
        "compare", "--dataset", str(folder), "--embed", "minilm",
        "--embed-runtime", "torch,tensorrt", "--index", "flat", "--queries", "2",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert (
        "'tensorrt'" in proc.stderr
        and "torch, torch-bf16, onnx, onnx-int8, openvino" in proc.stderr
    )
    assert "Traceback" not in proc.stderr

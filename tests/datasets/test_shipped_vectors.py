"""Vectors shipped with bundled datasets: used only when they apply, never when damaged.

The real pydocs/MiniLM files are checked against the real model on a sample
(so they cannot drift from it silently); the rules (fingerprint, content hash,
checksum, ``re_embed``) are tested on a small bundled folder with the
model-free ``hashing`` embedder, which has a fingerprint of its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragbench import datasets, embedders, progress
from ragbench.cli import main
from ragbench.datasets.shipped import array_sha256, find_shipped, sidecar_path, write_shipped
from ragbench.errors import ConfigError, DatasetError
from ragbench.pipeline import Pipeline
from ragbench.results.tables.cells import event_text
from ragbench.settings.sources import normalize

PYDOCS = Path(__file__).resolve().parents[2] / "datasets" / "pydocs"


class _Recorder(progress.NullReporter):
    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, description: str, total: int, unit: str) -> int:
        self.started.append(description)
        return 0


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def bundled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A datasets folder holding ``tiny`` (300 passages, 12 queries) with shipped hashing vectors."""
    root = tmp_path / "datasets"
    folder = root / "tiny"
    folder.mkdir(parents=True)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    with (folder / "corpus.jsonl").open("w") as fh:
        for i in range(300):
            text = " ".join(words[(i * j) % len(words)] for j in range(1, 9)) + f" doc {i}"
            fh.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w") as fh:
        for i in range(12):
            fh.write(json.dumps({"id": f"q{i}", "text": f"{words[i]} {words[-i]} doc"}) + "\n")
    monkeypatch.setenv("RAGBENCH_DATASETS_DIR", str(root))
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=64)
    arrays = {"corpus": emb.embed(ds.corpus.texts), "queries": emb.embed(ds.queries.texts)}
    write_shipped(folder, "hashing", emb.fingerprint, (ds.corpus_hash, ds.queries_hash), arrays)
    return folder


# ------------------------------------------------------------------ the real files


def test_pydocs_sidecar_names_the_pinned_embedder_and_these_texts() -> None:
    from ragbench.embedders.minilm import MiniLMEmbedder

    ds = datasets.load("pydocs")
    found = find_shipped(ds.shipped_dir, "minilm")
    assert found is not None
    # known without loading the model, so finding the file never pays for a load
    emb = MiniLMEmbedder()
    assert emb._model is None
    assert found.matches(emb.fingerprint, ds.corpus_hash, ds.queries_hash)
    assert found.parts["corpus"]["shape"] == [len(ds.corpus), 384]
    assert found.parts["queries"]["shape"] == [len(ds.queries), 384]
    size = sum(found.path(w).stat().st_size for w in ("corpus", "queries"))
    assert size < 5_000_000
    assert ds.shipped_vectors(emb) == found


@pytest.mark.integration
def test_pydocs_shipped_vectors_match_the_real_model() -> None:
    """Re-embed a sample with MiniLM: every row within cosine 0.9999 of the shipped one."""
    ds = datasets.load("pydocs")
    # one torch thread: no OpenMP pool to fight the faiss/numba pools earlier tests started
    emb = embedders.create("minilm", threads=1)
    shipped_corpus = ds.corpus_vectors(emb)
    shipped_queries = ds.query_vectors(emb)
    assert [e.shipped for e in ds.cache_events] == [True, True]
    rng = np.random.default_rng(12)
    rows = np.sort(rng.choice(len(ds.corpus), 32, replace=False))
    qrows = np.sort(rng.choice(len(ds.queries), 8, replace=False))
    rec = _Recorder()
    with progress.installed(rec):
        fresh = emb.embed([ds.corpus.texts[i] for i in rows])
    assert rec.started == ["loading the MiniLM model"]  # the model load draws a bar too
    fresh_q = emb.embed([ds.queries.texts[i] for i in qrows])
    cos = np.einsum("ij,ij->i", fresh, shipped_corpus[rows])
    cos_q = np.einsum("ij,ij->i", fresh_q, shipped_queries[qrows])
    assert cos.min() >= 0.9999, (rows[np.argmin(cos)], cos.min())
    assert cos_q.min() >= 0.9999, (qrows[np.argmin(cos_q)], cos_q.min())
    # a different passage is far away: the comparison can tell rows apart
    assert float(fresh[0] @ shipped_corpus[rows[1]]) < 0.99


# ------------------------------------------------------------------ the rules


def test_matching_fingerprint_uses_the_shipped_vectors(bundled: Path) -> None:
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=64)
    vectors = ds.corpus_vectors(emb)
    queries = ds.query_vectors(emb)
    events = ds.cache_events
    assert [(e.what, e.shipped, e.hit) for e in events] == [
        ("corpus_vectors[hashing]", True, True),
        ("queries_vectors[hashing]", True, True),
    ]
    assert events[0].path == str(bundled / "vectors-hashing-corpus.npy")
    text = event_text({k: getattr(events[0], k) for k in events[0].__dataclass_fields__})
    assert text.startswith("corpus_vectors[hashing]: shipped in ")
    assert text.endswith(f"[{bundled / 'vectors-hashing-corpus.npy'}]")
    # float16 on disk, float32 unit rows in use, within float16 rounding of the embedder's own
    direct = emb.embed(ds.corpus.texts)
    assert vectors.dtype == np.float32 and vectors.shape == direct.shape
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert np.einsum("ij,ij->i", vectors, direct).min() > 0.9999
    assert queries.shape == (12, 64)
    # nothing was embedded into the cache
    assert not (Path(datasets.cache_dir()) / "arrays").exists() or not any(
        (Path(datasets.cache_dir()) / "arrays").glob("tiny-corpus-*")
    )


def test_other_fingerprint_embeds_instead(bundled: Path) -> None:
    ds = datasets.load("tiny")
    other = embedders.create("hashing", dim=64, seed=7)  # same name, another fingerprint
    vectors = ds.corpus_vectors(other)
    assert [(e.shipped, e.hit) for e in ds.cache_events] == [(False, False)]
    np.testing.assert_array_equal(vectors, other.embed(ds.corpus.texts))


def test_changed_texts_embed_instead(bundled: Path) -> None:
    lines = (bundled / "queries.jsonl").read_text().splitlines()
    lines[0] = json.dumps({"id": "q0", "text": "a question that was edited"})
    (bundled / "queries.jsonl").write_text("\n".join(lines) + "\n")
    ds = datasets.load("tiny")
    ds.query_vectors(embedders.create("hashing", dim=64))
    assert [(e.shipped, e.hit) for e in ds.cache_events] == [(False, False)]


def test_damaged_array_is_a_dataset_error(bundled: Path) -> None:
    npy = bundled / "vectors-hashing-corpus.npy"
    arr = np.load(npy)
    arr[5, 3] += np.float16(0.25)  # same dtype and shape, other bytes
    np.save(npy, arr)
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=64)
    with pytest.raises(DatasetError, match="sha256 of the array does not match"):
        ds.corpus_vectors(emb)
    # the undamaged part still loads; --re-embed is the way around the damaged one
    ds.query_vectors(emb)
    assert ds.corpus_vectors(emb, re_embed=True).shape == (300, 64)


def test_wrong_shape_and_bad_sidecar_are_dataset_errors(bundled: Path) -> None:
    side = sidecar_path(bundled, "hashing")
    meta = json.loads(side.read_text())
    meta["parts"]["queries"]["shape"] = [11, 64]
    side.write_text(json.dumps(meta))
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=64)
    with pytest.raises(DatasetError, match=r"says float16\[11, 64\]"):
        ds.query_vectors(emb)
    side.write_text("{not json")
    with pytest.raises(DatasetError, match="sidecar .* unreadable"):
        ds.corpus_vectors(emb)


def test_re_embed_computes_and_still_caches(bundled: Path) -> None:
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=64)
    first = ds.corpus_vectors(emb, re_embed=True)
    again = ds.corpus_vectors(emb, re_embed=True)
    shipped = ds.corpus_vectors(emb)
    events = ds.cache_events
    assert [(e.shipped, e.hit) for e in events] == [(False, False), (False, False), (True, True)]
    assert events[0].note == "recomputed on request"
    assert Path(events[0].path).is_file() and events[0].path == events[1].path
    np.testing.assert_array_equal(first, emb.embed(ds.corpus.texts))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, shipped)  # float16 rounding: they really are different files


def test_exact_neighbors_follow_the_vectors_in_use(bundled: Path) -> None:
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=64)
    shipped_truth = ds.exact_neighbors(5, embedder=emb)
    want = datasets.brute_force_neighbors(ds.query_vectors(emb), ds.corpus_vectors(emb), 5)
    np.testing.assert_array_equal(shipped_truth, want)
    embedded_truth = ds.exact_neighbors(5, embedder=emb, re_embed=True)
    want = datasets.brute_force_neighbors(
        emb.embed(ds.queries.texts), emb.embed(ds.corpus.texts), 5
    )
    np.testing.assert_array_equal(embedded_truth, want)
    paths = {e.path for e in ds.cache_events if e.what.startswith("exact_neighbors")}
    assert len(paths) == 2  # cached apart


def test_pipeline_config_re_embed(bundled: Path) -> None:
    base = {
        "dataset": {"name": "tiny"},
        "embed": {"backend": "hashing", "dim": 64},
        "retrieve": {"backend": "flat"},
        "rerank": {"backend": "numpy"},
        "run": {"queries": 4, "warmup": 0},
    }
    with Pipeline.from_config(base) as pipe:
        pipe.setup()
        assert [e["shipped"] for e in pipe.cache_events] == [True, True]
    forced = {**base, "embed": {"backend": "hashing", "dim": 64, "re_embed": True}}
    with Pipeline.from_config(forced) as pipe:
        pipe.setup()
        assert [(e["shipped"], e["hit"]) for e in pipe.cache_events] == [(False, False)] * 2
    with pytest.raises(ConfigError, match=r"^embed\.re_embed: expected bool, got str$"):
        normalize({"embed": {"re_embed": "yes"}})


def test_cli_re_embed_flag(
    bundled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "compare",
        "--dataset",
        "tiny",
        "--embed",
        "hashing",
        "--set",
        "embed.dim=64",
        "--index",
        "flat",
        "--rerank",
        "numpy",
        "--queries",
        "4",
        "--warmup",
        "0",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "cache: corpus_vectors[hashing]: shipped in" in out
    assert main([*args, "--re-embed"]) == 0
    out = capsys.readouterr().out
    assert "cache: corpus_vectors[hashing]: miss (computed and stored)" in out
    assert "(recomputed on request)" in out


def test_ship_vectors_tool_round_trips(tmp_path: Path) -> None:
    """tools/ship_vectors.py's writer: a sidecar that find_shipped reads back, checksums verified."""
    folder = tmp_path / "d"
    folder.mkdir()
    arrays = {
        "corpus": np.eye(4, 8, dtype=np.float32),
        "queries": np.eye(2, 8, dtype=np.float32),
    }
    write_shipped(folder, "e", "e:v1", ("c", "q"), arrays)
    found = find_shipped(folder, "e")
    assert found is not None and found.matches("e:v1", "c", "q")
    assert not found.matches("e:v2", "c", "q")
    np.testing.assert_array_equal(found.load("corpus"), arrays["corpus"])
    assert found.parts["corpus"]["sha256"] == array_sha256(arrays["corpus"].astype(np.float16))
    shutil.rmtree(folder)
    assert find_shipped(folder, "e") is None

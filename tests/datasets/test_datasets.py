"""Datasets: synthetic generator, bundled pydocs, the vector cache and exact neighbours."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench import datasets
from ragbench.datasets import Corpus, Dataset, Queries
from ragbench.errors import (
    ConfigError,
    DatasetError,
    DimensionError,
    InputError,
    KTooLargeError,
    NonFiniteError,
)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="module")
def small() -> Dataset:
    return datasets.load("synthetic", n=600, dim=32, n_queries=20, seed=1)


# --------------------------------------------------------------------------- synthetic


def test_synthetic_same_seed_is_identical_and_other_seed_differs() -> None:
    a = datasets.load("synthetic", n=400, dim=16, n_queries=10, seed=7)
    b = datasets.load("synthetic", n=400, dim=16, n_queries=10, seed=7)
    c = datasets.load("synthetic", n=400, dim=16, n_queries=10, seed=8)
    assert a.vectors is not None and b.vectors is not None and c.vectors is not None
    assert np.array_equal(a.vectors, b.vectors)
    assert np.array_equal(a.query_vectors_precomputed, b.query_vectors_precomputed)
    assert a.corpus.texts == b.corpus.texts and a.queries.texts == b.queries.texts
    assert a.content_hash == b.content_hash
    assert not np.allclose(a.vectors, c.vectors)
    assert a.corpus.texts != c.corpus.texts
    assert a.content_hash != c.content_hash


_SYNTH_DIGEST = """
import hashlib, sys
from ragbench.datasets.synthetic_data import synthetic
ds = synthetic(n=1500, dim=48, n_queries=30, seed=11)
print(hashlib.sha256(ds.vectors.tobytes() + ds.query_vectors_precomputed.tobytes()).hexdigest())
"""


def test_synthetic_bits_do_not_depend_on_simd_kernels() -> None:
    # The seeded vectors are the same bits whichever SIMD kernels the CPU gets: an AVX2 machine
    # hashed them differently while the low-rank product ran through BLAS. Each run is a fresh
    # interpreter: numpy's dispatch limited to its baseline (no AVX2/AVX-512 loops), and
    # OpenBLAS forced to its AVX2 (Haswell) and SSE3 (Prescott) kernels where the environment
    # does not already fix OPENBLAS_CORETYPE (this workplace sets it on some CPUs, not to be moved).
    variants: list[dict[str, str]] = [
        {},
        {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"},
    ]
    if "OPENBLAS_CORETYPE" not in os.environ:
        variants += [{"OPENBLAS_CORETYPE": "Haswell"}, {"OPENBLAS_CORETYPE": "Prescott"}]
    digests = set()
    for extra in variants:
        env = {**os.environ, **extra}
        out = subprocess.run(
            [sys.executable, "-c", _SYNTH_DIGEST],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


def test_synthetic_shapes_dtypes_and_normalization(small: Dataset) -> None:
    assert small.vectors is not None and small.query_vectors_precomputed is not None
    assert small.vectors.shape == (600, 32) and small.vectors.dtype == np.float32
    assert small.vectors.flags.c_contiguous
    assert small.query_vectors_precomputed.shape == (20, 32)
    np.testing.assert_allclose(np.linalg.norm(small.vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        np.linalg.norm(small.query_vectors_precomputed, axis=1), 1.0, atol=1e-5
    )
    assert small.default_embedder == "precomputed" and small.metric == "ip"
    assert small.corpus.ids[17] == "s0000017"
    assert len(set(small.corpus.ids)) == 600 and len(set(small.queries.ids)) == 20
    assert len(small.corpus) == 600 and len(small.queries) == 20


def test_synthetic_clusters_are_power_law_sized_and_queries_are_not_copies() -> None:
    ds = datasets.load("synthetic", n=5000, dim=24, n_queries=50, seed=0)
    sizes = sorted(Counter(m["cluster"] for m in ds.corpus.metadata).values(), reverse=True)
    assert sizes[0] > 10 * sizes[len(sizes) // 2]
    # no fixed number of topics: a 4x larger corpus reaches further into the tail
    bigger = datasets.load("synthetic", n=20_000, dim=24, n_queries=5, seed=0)
    n_bigger = len({m["cluster"] for m in bigger.corpus.metadata})
    assert 1.5 * len(sizes) < n_bigger < 4 * len(sizes)
    assert ds.vectors is not None and ds.query_vectors_precomputed is not None
    sims = ds.query_vectors_precomputed @ ds.vectors.T
    assert sims.max() < 0.9999  # a query is never one of the corpus points
    # ...but it sits in a cluster: its nearest neighbour is much closer than average.
    assert np.median(sims.max(axis=1)) > np.median(sims) + 0.3


def test_synthetic_texts_follow_clusters(small: Dataset) -> None:
    labels = np.array([int(m["cluster"]) for m in small.corpus.metadata])
    words = [set(t.split()) for t in small.corpus.texts]
    assert all(12 <= len(t.split()) <= 20 for t in small.corpus.texts)
    same, other = [], []
    big = int(np.bincount(labels).argmax())
    members = np.flatnonzero(labels == big)[:20]
    outsiders = np.flatnonzero(labels != big)[:20]
    for i in members:
        for j in members:
            if i < j:
                same.append(len(words[i] & words[j]) / len(words[i] | words[j]))
        for j in outsiders:
            other.append(len(words[i] & words[j]) / len(words[i] | words[j]))
    assert np.mean(same) > 3 * np.mean(other)


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"n": 0}, "n"),
        ({"dim": 1}, "dim"),
        ({"n_queries": -1}, "n_queries"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_synthetic_rejects_bad_values(params: dict[str, object], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        datasets.load("synthetic", **params)


# --------------------------------------------------------------------------- pydocs


def test_pydocs_loads_with_sane_passages_and_queries() -> None:
    ds = datasets.load("pydocs")
    assert len(ds.corpus) >= 2000
    lengths = np.array([len(t) for t in ds.corpus.texts])
    assert lengths.min() >= 150 and lengths.max() <= 1200
    assert 300 <= np.median(lengths) <= 1000
    assert len(set(ds.corpus.ids)) == len(ds.corpus)
    assert len(set(ds.corpus.texts)) == len(ds.corpus)
    assert len(ds.queries) >= 200
    assert len(set(ds.queries.ids)) == len(ds.queries)
    assert len(set(ds.queries.texts)) == len(ds.queries)
    assert all(t.strip() and len(t) < 200 for t in ds.queries.texts)
    assert all({"source", "title"} <= set(m) for m in ds.corpus.metadata)
    sources = {m["source"].split(":")[0].split("/")[0] for m in ds.corpus.metadata}
    assert {"pydoc_data.topics", "Lib"} <= sources
    assert ds.vectors is None and ds.default_embedder == "minilm" and ds.metric == "ip"
    assert any("nonlocal" in t for t in ds.corpus.texts)


def test_pydocs_judgments_cover_exactly_the_pool_and_ragbench_reads_them() -> None:
    """datasets/pydocs/qrels.tsv grades every pooled pair once (0, 1 or 2), and only those."""
    folder = Path(datasets.__file__).resolve().parents[2] / "datasets" / "pydocs"
    pool_lines = (folder / "pool.tsv").read_text(encoding="utf-8").splitlines()
    qrels_lines = (folder / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    assert pool_lines[0] == "query-id\tcorpus-id\tbm25-rank\tminilm-rank"
    assert qrels_lines[0] == "query-id\tcorpus-id\tscore"
    pooled = [tuple(line.split("\t")[:2]) for line in pool_lines[1:]]
    judged = {tuple(line.split("\t")[:2]): line.split("\t")[2] for line in qrels_lines[1:]}
    assert len(judged) == len(qrels_lines) - 1  # no pair judged twice
    assert sorted(judged) == sorted(pooled)
    assert set(judged.values()) <= {"0", "1", "2"}
    ds = datasets.load("pydocs")
    assert ds.qrels is not None
    assert {(q, d) for q, docs in ds.qrels.items() for d in docs} == set(judged)
    assert all(ds.qrels[q][d] == int(g) for (q, d), g in judged.items())
    assert set(ds.qrels) == set(ds.queries.ids)  # every query has its pool judged
    grades = ds.judgments()
    assert grades is not None and len(grades) == len(ds.queries)
    second = (folder / "qrels-second-pass.tsv").read_text(encoding="utf-8").splitlines()
    assert second[0] == qrels_lines[0]
    again = {tuple(line.split("\t")[:2]): line.split("\t")[2] for line in second[1:]}
    assert len(again) == len(second) - 1 and set(again) <= set(judged)
    assert set(again.values()) <= {"0", "1", "2"}


def test_names_and_describe_list_bundled_datasets() -> None:
    assert datasets.names()[:2] == ["pydocs", "synthetic"]
    info = {d["name"]: d for d in datasets.describe()}
    assert set(info) == {"pydocs", "synthetic"}
    for entry in info.values():
        assert {"name", "size", "source", "description"} <= set(entry)
    ds = datasets.load("pydocs")
    assert str(len(ds.corpus)) in info["pydocs"]["size"]
    assert str(len(ds.queries)) in info["pydocs"]["size"]
    assert "PSF" in info["pydocs"]["licence"]


def test_datasets_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "bundle"
    (root / "tiny").mkdir(parents=True)
    (root / "tiny" / "corpus.jsonl").write_text(
        '{"id": "a", "text": "alpha"}\n{"id": "b", "text": "beta"}\n'
    )
    (root / "tiny" / "queries.jsonl").write_text('{"id": "q", "text": "alpha?"}\n')
    monkeypatch.setenv("RAGBENCH_DATASETS_DIR", str(root))
    assert datasets.names()[:2] == ["tiny", "synthetic"]
    ds = datasets.load("tiny")
    assert ds.corpus.texts == ["alpha", "beta"] and ds.queries.ids == ["q"]


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(DatasetError, match="unknown dataset 'nope'.*pydocs.*synthetic"):
        datasets.load("nope")


def test_unknown_params_are_named() -> None:
    with pytest.raises(ConfigError, match="'size'"):
        datasets.load("synthetic", size=10)
    with pytest.raises(ConfigError, match="'n'"):
        datasets.load("pydocs", n=10)


LAZY_PROBE = """
import sys
import ragbench as rb
loaded_at_import = "ragbench.datasets" in sys.modules
first = rb.datasets
print(loaded_at_import, first is sys.modules["ragbench.datasets"], rb.datasets is first,
      "datasets" in vars(rb), first.load.__module__)
"""


def test_lazy_attribute_on_package() -> None:
    """In a fresh interpreter: ``import ragbench`` leaves datasets unloaded; the attribute loads it once.

    (In this process the test module has imported ragbench.datasets already, so
    the check must run where nothing has.)
    """
    import subprocess
    import sys

    root = Path(rb.__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", LAZY_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "True", "ragbench.datasets"]
    assert rb.datasets is datasets  # and here, the module the tests use


def test_path_loads_are_remembered_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "mycorpus"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"id": "a", "text": "x"}\n')
    (folder / "queries.jsonl").write_text('{"id": "q", "text": "y"}\n')
    assert "mycorpus" not in datasets.names()
    datasets.load(folder)
    assert "mycorpus" in datasets.names()
    assert datasets.load("mycorpus").corpus.ids == ["a"]
    shutil.rmtree(folder)
    assert "mycorpus" not in datasets.names()


# --------------------------------------------------------------------------- cache


def test_cache_miss_then_hit(small: Dataset) -> None:
    ds = small.subset(20)  # a fresh event list
    first = ds.corpus_vectors("hashing", dim=64)
    second = ds.corpus_vectors("hashing", dim=64)
    assert first.shape == (600, 64) and first.dtype == np.float32 and first.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(first, second)
    assert [e.hit for e in ds.cache_events] == [False, True]
    assert ds.cache_events[0].path == ds.cache_events[1].path
    assert Path(ds.cache_events[0].path).is_file()
    assert ds.cache_events[0].what == "corpus_vectors[hashing]"
    # Another embedder setting is another entry.
    ds.corpus_vectors("hashing", dim=32)
    assert ds.cache_events[-1].hit is False
    assert ds.cache_events[-1].path != ds.cache_events[0].path


def _corrupt_truncate(npy: Path) -> None:
    data = npy.read_bytes()
    npy.write_bytes(data[: len(data) // 2])


def _corrupt_flip(npy: Path) -> None:
    data = bytearray(npy.read_bytes())
    data[-5] ^= 0xFF
    npy.write_bytes(bytes(data))


def _corrupt_sidecar(npy: Path) -> None:
    npy.with_suffix(".json").write_text("{not json")


def _corrupt_shape(npy: Path) -> None:
    side = npy.with_suffix(".json")
    meta = json.loads(side.read_text())
    meta["shape"] = [meta["shape"][0] + 1, meta["shape"][1]]
    side.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "corrupt", [_corrupt_truncate, _corrupt_flip, _corrupt_sidecar, _corrupt_shape]
)
def test_corrupt_cache_entry_is_rebuilt(
    small: Dataset, corrupt, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    ds = small.subset(20)
    want = ds.query_vectors("hashing", dim=48)
    npy = Path(ds.cache_events[-1].path)
    corrupt(npy)
    with caplog.at_level(logging.WARNING, logger="ragbench"):
        got = ds.query_vectors("hashing", dim=48)
    assert np.array_equal(got, want)
    event = ds.cache_events[-1]
    assert event.hit is False and event.note.startswith("rebuilt")
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    # The rebuilt entry verifies again.
    ds.query_vectors("hashing", dim=48)
    assert ds.cache_events[-1].hit is True


def test_precomputed_vectors_bypass_the_cache(small: Dataset) -> None:
    ds = small.subset(5)
    assert ds.corpus_vectors("precomputed") is ds.vectors
    assert ds.query_vectors("precomputed").shape == (5, 32)
    assert ds.cache_events == []
    pydocs = datasets.load("pydocs")
    with pytest.raises(DatasetError, match="no precomputed vectors"):
        pydocs.corpus_vectors("precomputed")


def test_unknown_embedder_is_a_config_error(small: Dataset) -> None:
    with pytest.raises(ConfigError, match="unknown embedders backend 'bert'.*minilm"):
        small.corpus_vectors("bert")


# --------------------------------------------------------------------------- neighbours


def _reference(q: np.ndarray, x: np.ndarray, k: int, metric: str) -> np.ndarray:
    """Exact top-k in integer arithmetic; ties go to the smaller row."""
    qi, xi = q.astype(np.int64), x.astype(np.int64)
    # For l2 a larger score is a smaller distance.
    score = qi @ xi.T if metric == "ip" else -((qi[:, None, :] - xi[None, :, :]) ** 2).sum(-1)
    out = np.empty((len(q), k), np.int64)
    for r in range(len(q)):
        order = sorted(range(len(x)), key=lambda j: (-score[r, j], j))
        out[r] = order[:k]
    return out


def _int_dataset(seed: int, n: int = 150, nq: int = 12, d: int = 6) -> Dataset:
    # Small integer coordinates: float32 scores are exact and ties are common.
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, (n, d)).astype(np.float32)
    q = rng.integers(-2, 3, (nq, d)).astype(np.float32)
    return Dataset(
        f"ints{seed}",
        Corpus([f"d{i}" for i in range(n)], [f"doc {i}" for i in range(n)], [{} for _ in range(n)]),
        Queries([f"q{i}" for i in range(nq)], [f"query {i}" for i in range(nq)]),
        vectors=x,
        query_vectors_precomputed=q,
    )


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("k", [1, 7, 40])
def test_exact_neighbors_match_independent_brute_force(
    metric: str, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = _int_dataset(seed=k)
    # Blocks of 9 rows: the cross-block merge and the tie handling both run.
    monkeypatch.setattr(datasets.neighbors, "_NEIGHBORS_BLOCK_BYTES", 4 * 12 * 9)
    got = ds.exact_neighbors(k, metric=metric)
    assert got.dtype == np.int64 and got.shape == (12, k)
    assert ds.vectors is not None and ds.query_vectors_precomputed is not None
    want = _reference(ds.query_vectors_precomputed, ds.vectors, k, metric)
    np.testing.assert_array_equal(got, want)


def test_exact_neighbors_break_heavy_ties_toward_smaller_rows() -> None:
    # Scores take 5 values over 2000 rows: argpartition alone would pick
    # arbitrary members of the tie at the cut.
    rng = np.random.default_rng(0)
    x = rng.integers(-1, 2, (2000, 2)).astype(np.float32)
    q = rng.integers(-1, 2, (5, 2)).astype(np.float32)
    q[0] = 0  # every score ties: the answer is simply the first k rows
    got = datasets.brute_force_neighbors(q, x, 5)
    np.testing.assert_array_equal(got, _reference(q, x, 5, "ip"))
    np.testing.assert_array_equal(got[0], np.arange(5))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    nq=st.integers(1, 5),
    d=st.integers(1, 4),
    block_rows=st.integers(1, 70),
    seed=st.integers(0, 2**32 - 1),
    metric=st.sampled_from(["ip", "l2"]),
    data=st.data(),
)
def test_brute_force_property(
    n: int, nq: int, d: int, block_rows: int, seed: int, metric: str, data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, n))
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, (n, d)).astype(np.float32)
    q = rng.integers(-2, 3, (nq, d)).astype(np.float32)
    old = datasets.neighbors._NEIGHBORS_BLOCK_BYTES
    datasets.neighbors._NEIGHBORS_BLOCK_BYTES = 4 * nq * block_rows
    try:
        got = datasets.brute_force_neighbors(q, x, k, metric)
    finally:
        datasets.neighbors._NEIGHBORS_BLOCK_BYTES = old
    np.testing.assert_array_equal(got, _reference(q, x, k, metric))


def test_exact_neighbors_cosine_matches_float64() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 16)).astype(np.float32) * rng.uniform(0.1, 5, (300, 1)).astype(
        np.float32
    )
    q = rng.standard_normal((9, 16)).astype(np.float32)
    ds = Dataset(
        "cos",
        Corpus([str(i) for i in range(300)], [f"t{i}" for i in range(300)], [{}] * 300),
        Queries([str(i) for i in range(9)], [f"q{i}" for i in range(9)]),
        metric="cosine",
        vectors=x,
        query_vectors_precomputed=q,
    )
    x64 = x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    scores = q.astype(np.float64) @ x64.T
    want = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    got = ds.exact_neighbors(5)
    np.testing.assert_allclose(
        np.take_along_axis(scores, got, 1), np.take_along_axis(scores, want, 1), atol=1e-6
    )
    assert (got == want).mean() > 0.95


def test_exact_neighbors_are_cached_and_reused() -> None:
    ds = _int_dataset(seed=5)
    first = ds.exact_neighbors(5)
    second = ds.exact_neighbors(5)
    assert np.array_equal(first, second)
    assert [e.hit for e in ds.cache_events] == [False, True]
    ds.exact_neighbors(5, metric="l2")
    assert ds.cache_events[-1].hit is False


def test_exact_neighbors_with_text_embedder(small: Dataset) -> None:
    ds = small.subset(8)
    got = ds.exact_neighbors(3, embedder="hashing")
    x = ds.corpus_vectors("hashing")
    q = ds.query_vectors("hashing")
    scores = q.astype(np.float64) @ x.T.astype(np.float64)
    np.testing.assert_allclose(
        np.take_along_axis(scores, got, 1), -np.sort(-scores, axis=1)[:, :3], atol=1e-6
    )


def test_brute_force_validates_inputs() -> None:
    x = np.ones((4, 3), np.float32)
    with pytest.raises(DimensionError, match="expected dimension 3"):
        datasets.brute_force_neighbors(np.ones((2, 2), np.float32), x, 1)
    with pytest.raises(NonFiniteError):
        datasets.brute_force_neighbors(np.full((1, 3), np.nan, np.float32), x, 1)
    with pytest.raises(ConfigError, match="metric"):
        datasets.brute_force_neighbors(x, x, 1, "hamming")
    with pytest.raises(KTooLargeError):
        datasets.brute_force_neighbors(x, x, 5)


def test_exact_neighbors_bad_k(small: Dataset) -> None:
    with pytest.raises(KTooLargeError):
        small.exact_neighbors(601)
    with pytest.raises(InputError):
        small.exact_neighbors(0)
    with pytest.raises(ConfigError, match="metric"):
        small.exact_neighbors(3, metric="manhattan")


def test_shipped_ground_truth_is_used_when_it_fits() -> None:
    ds = _int_dataset(seed=2)
    brute = ds.exact_neighbors(4)
    shipped = np.ascontiguousarray(brute[:, ::-1])  # deliberately not brute force's order
    with_gt = Dataset(
        ds.name,
        ds.corpus,
        ds.queries,
        vectors=ds.vectors,
        query_vectors_precomputed=ds.query_vectors_precomputed,
        ground_truth=shipped,
    )
    np.testing.assert_array_equal(with_gt.exact_neighbors(3), shipped[:, :3])
    # k beyond what ships, or another metric: brute force.
    np.testing.assert_array_equal(
        with_gt.exact_neighbors(4, metric="l2"), ds.exact_neighbors(4, metric="l2")
    )
    np.testing.assert_array_equal(with_gt.exact_neighbors(5), ds.exact_neighbors(5))
    sub = with_gt.subset(3)
    assert sub.ground_truth is not None and sub.ground_truth.shape == (3, 4)
    np.testing.assert_array_equal(sub.exact_neighbors(2), shipped[:3, :2])


def test_subset_slices_queries_and_keeps_corpus(small: Dataset) -> None:
    sub = small.subset(5)
    assert sub.queries.ids == small.queries.ids[:5]
    assert sub.corpus is small.corpus
    assert sub.corpus_hash == small.corpus_hash
    assert sub.content_hash != small.content_hash
    assert small.query_vectors_precomputed is not None
    np.testing.assert_array_equal(
        sub.query_vectors("precomputed"), small.query_vectors_precomputed[:5]
    )
    with pytest.raises(KTooLargeError):
        small.subset(21)


def test_dataset_validates_its_parts() -> None:
    corpus = Corpus(["a"], ["x"], [{}])
    queries = Queries(["q"], ["y"])
    with pytest.raises(DatasetError, match="same length"):
        Corpus(["a", "b"], ["x"], [{}])
    with pytest.raises(DatasetError, match="together"):
        Dataset("d", corpus, queries, vectors=np.zeros((1, 2), np.float32))
    with pytest.raises(DatasetError, match="vectors must be float32"):
        Dataset(
            "d",
            corpus,
            queries,
            vectors=np.zeros((2, 2), np.float32),
            query_vectors_precomputed=np.zeros((1, 2), np.float32),
        )
    with pytest.raises(DatasetError, match="no queries"):
        Dataset("d", corpus, Queries([], []))
    with pytest.raises(ConfigError, match="metric"):
        Dataset("d", corpus, queries, metric="dot")

"""Contract, recall and persistence tests for every index backend (small synthetic data)."""

from __future__ import annotations

import json
import struct

import index_contract
import numpy as np
import pgshared
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench import threads
from ragbench._registry import BUILTIN_INDEXES
from ragbench.errors import (
    ConfigError,
    DimensionError,
    IndexFileError,
    InputError,
    KTooLargeError,
    NonFiniteError,
    NotBuiltError,
)
from ragbench.indexes.hybrid_index import Pair
from ragbench.indexes.persist import read_index_file, write_index_file

N, DIM, NQ = 2000, 32, 50
# Every list below is derived from the registry lines and the classes (index_contract.py),
# never typed: a backend added to the registry joins the tests of its family.
SHIPPED = list(BUILTIN_INDEXES)
TEXT_BACKENDS = {
    n
    for n in rb.indexes.names()
    if index_contract.installed(n) and index_contract.probe(n).input_kind == "texts"
}
# indexes of vectors and texts together (hybrid: a Pair of both in, see data_for)
BOTH_BACKENDS = {
    n
    for n in rb.indexes.names()
    if index_contract.installed(n) and index_contract.probe(n).input_kind == "both"
}
# ragbench.indexes.compressed (binary codes: ip and cosine only, like lsh)
COMPRESSED = [
    n for n in SHIPPED if BUILTIN_INDEXES[n].target.startswith("ragbench.indexes.compressed:")
]
NO_L2 = {n for n in index_contract.dense() if "l2" not in index_contract.probe(n).supported_metrics}
# vector database engines (ragbench.indexes.usearch_index, .qdrant_edge_index, .lancedb_index,
# .chroma_index: in process; .pgvector: a PostgreSQL server ragbench starts): the
# shipped backends not over faiss, hnswlib or datasketch
VECTORDB = [
    n
    for n in index_contract.builtin(index_contract.dense())
    if index_contract.probe(n).library not in ("faiss", "hnswlib", "datasketch")
]
# chroma's per-query ef is checked by Chroma when the query runs, not by the cached
# validation this list's test is about
VECTORDB_QUERY_PARAMS = [name for name in VECTORDB if name != "chroma"]
#: The shipped dense backends over faiss and hnswlib with float32 vectors.
FLOAT32 = [
    n
    for n in index_contract.builtin(index_contract.dense())
    if n not in COMPRESSED and n not in VECTORDB
]


def clustered(n: int, dim: int, seed: int, n_clusters: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim))
    x = centres[rng.integers(0, n_clusters, n)] + 0.4 * rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


VECTORS = clustered(N, DIM, seed=1)
QUERIES = clustered(NQ, DIM, seed=2)


def make_texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = np.array([f"word{i}" for i in range(4000)])
    return [" ".join(vocab[rng.integers(0, len(vocab), 60)]) for _ in range(n)]


TEXTS = make_texts(400, seed=3)


def edit_text(text: str, fraction: float, seed: int) -> str:
    """Replace ``fraction`` of the words with words absent from the corpus vocabulary."""
    rng = np.random.default_rng(seed)
    words = text.split()
    for i in rng.choice(len(words), int(len(words) * fraction), replace=False):
        words[i] = f"novel{seed}x{i}"
    return " ".join(words)


TEXT_QUERIES = [edit_text(TEXTS[i], 0.05, seed=i) for i in range(20)]


def exact(vectors: np.ndarray, queries: np.ndarray, k: int, metric: str = "ip"):
    """Brute-force top-k scores/ids in the package's score convention."""
    v, q = vectors.astype(np.float64), queries.astype(np.float64)
    if metric == "cosine":
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    if metric == "l2":
        s = -((q**2).sum(1)[:, None] - 2 * q @ v.T + (v**2).sum(1)[None, :])
    else:
        s = q @ v.T
    ids = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(s, ids, axis=1)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return hits / truth.size


def data_for(name: str):
    if name in BOTH_BACKENDS:
        return Pair(VECTORS[: len(TEXTS)], TEXTS)
    return TEXTS if name in TEXT_BACKENDS else VECTORS


def queries_for(name: str):
    if name in BOTH_BACKENDS:
        return Pair(QUERIES[: len(TEXT_QUERIES)], TEXT_QUERIES)
    return TEXT_QUERIES if name in TEXT_BACKENDS else QUERIES


def create(name: str, **params):
    # One call for every backend: minhash-lsh ignores dim and records metric for reranking;
    # pgvector goes to the session's shared server (tests calling rb.indexes.create
    # directly let it start and stop its own).
    return rb.indexes.create(name, dim=DIM, metric="ip", **pgshared.params(name), **params)


@pytest.fixture(scope="module")
def built() -> dict[str, object]:
    out = {}
    for name in rb.indexes.names():
        index = create(name)
        index.build(data_for(name))
        out[name] = index
    return out


ALL = rb.indexes.names()


# -- the contract -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_protocol_and_attributes(built, name) -> None:
    index = built[name]
    assert isinstance(index, rb.indexes.Index)
    assert index.name == name
    kind = "both" if name in BOTH_BACKENDS else "texts" if name in TEXT_BACKENDS else "vectors"
    assert index.input_kind == kind
    assert index.ntotal == len(data_for(name))
    assert isinstance(index.build_seconds, float) and index.build_seconds > 0
    assert set(index.default_query_params) == set(index.query_params)
    info = index.info()
    assert info["backend"] == name
    assert info["threads"] == threads.get_threads()
    assert info["library_version"] not in ("", "unknown")
    assert info["params"] == index.build_params
    json.dumps(info)  # records must be JSON-able
    assert index.memory_bytes() > 0


@pytest.mark.parametrize("name", ALL)
def test_search_shapes_dtypes_sorted(built, name) -> None:
    index = built[name]
    ids, scores = index.search(queries_for(name), 10)
    nq = len(queries_for(name))
    assert ids.shape == scores.shape == (nq, 10)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert ((ids >= -1) & (ids < index.ntotal)).all()
    assert (scores[:, :-1] >= scores[:, 1:]).all(), "scores must be sorted best first"
    assert (np.isneginf(scores) == (ids == -1)).all()
    for row in ids:
        real = row[row >= 0]
        assert len(set(real.tolist())) == len(real), "an id appears twice in one row"


@pytest.mark.parametrize("name", ALL)
def test_k_errors(built, name) -> None:
    index = built[name]
    q = queries_for(name)[:1]
    with pytest.raises(KTooLargeError):
        index.search(q, index.ntotal + 1)
    with pytest.raises(InputError):
        index.search(q, 0)
    with pytest.raises(InputError):
        index.search(q, 2.5)
    ids, _ = index.search(q, np.int64(3))
    assert ids.shape == (1, 3)


@pytest.mark.parametrize("name", ALL)
def test_not_built(name) -> None:
    index = create(name)
    with pytest.raises(NotBuiltError):
        index.search(queries_for(name)[:1], 1)
    with pytest.raises(NotBuiltError):
        index.save("/nonexistent/never-written")
    assert index.ntotal == 0


@pytest.mark.parametrize("name", ALL)
def test_unknown_params(built, name) -> None:
    with pytest.raises(ConfigError, match="nonsense") as err:
        create(name, nonsense=1)
    for valid in create(name).build_params:
        assert valid in str(err.value)
    with pytest.raises(ConfigError, match="bogus"):
        built[name].search(queries_for(name)[:1], 1, bogus=3)


@pytest.mark.parametrize("name", ALL)
def test_empty_corpus(name) -> None:
    index = create(name)
    with pytest.raises(InputError, match="empty"):
        index.build(data_for(name)[:0])


@pytest.mark.parametrize("name", ALL)
def test_build_twice_replaces(name) -> None:
    index = create(name)
    index.build(data_for(name))
    small = data_for(name)[:300]
    index.build(small)
    assert index.ntotal == 300
    ids, _ = index.search(queries_for(name)[:5], 5)
    assert ids.max() < 300


@pytest.mark.parametrize("name", sorted(set(ALL) - TEXT_BACKENDS - BOTH_BACKENDS))
def test_vector_input_errors(built, name) -> None:
    index = built[name]
    with pytest.raises(DimensionError):
        index.search(np.zeros((1, DIM + 1), np.float32), 1)
    with pytest.raises(DimensionError):
        index.search(np.zeros((2, 2, DIM), np.float32), 1)
    for bad in (np.nan, np.inf, -np.inf):
        q = QUERIES[:3].copy()
        q[1, 4] = bad
        with pytest.raises(NonFiniteError, match="row 1"):
            index.search(q, 1)
    with pytest.raises(InputError):
        index.search([["a"] * DIM], 1)
    corpus = VECTORS[:100].copy()
    corpus[7, 0] = np.nan
    with pytest.raises(NonFiniteError, match="row 7"):
        create(name).build(corpus)
    with pytest.raises(DimensionError):
        create(name).build(VECTORS[:, :5])


@pytest.mark.parametrize("name", sorted(set(ALL) - TEXT_BACKENDS - BOTH_BACKENDS))
def test_slow_path_inputs_match_fast_path(built, name) -> None:
    """float64, strided, 1-D and huge-but-finite queries give the fast path's answer."""
    index = built[name]
    kw = {"ef": 64} if "ef" in index.query_params else {}
    ids, scores = index.search(QUERIES[:4], 5, **kw)
    ids64, _ = index.search(QUERIES[:4].astype(np.float64), 5, **kw)
    assert (ids64 == ids).all()
    strided = np.asfortranarray(QUERIES[:4])
    assert (index.search(strided, 5, **kw)[0] == ids).all()
    one, _ = index.search(QUERIES[0], 5, **kw)
    assert one.shape == (1, 5) and (one[0] == ids[0]).all()
    # A strided (1, dim) row right after the same contiguous one (the repeat
    # fast path's case): the same answer, not a read of the wrong floats.
    index.search(QUERIES[:1], 5, **kw)
    column = np.asfortranarray(QUERIES[:2])[:1]
    assert not column.flags.c_contiguous
    assert (index.search(column, 5, **kw)[0] == ids[:1]).all()
    # |x| ~ 1e20 overflows the float32 sum of squares used by the fast check;
    # the full check must accept it. Scaling keeps ip/lsh rankings.
    if index.metric == "ip":
        huge, _ = index.search(QUERIES[:4] * np.float32(1e20), 5, **kw)
        assert huge.shape == (4, 5) and (huge >= 0).all()
    # An all-zero query is valid for ip (every score 0).
    zero_ids, zero_scores = index.search(np.zeros((1, DIM), np.float32), 3, **kw)
    assert zero_ids.shape == (1, 3)


@pytest.mark.parametrize("name", [*FLOAT32, *COMPRESSED, *VECTORDB])
def test_unsupported_metric_and_dim(name) -> None:
    with pytest.raises(ConfigError, match="use one of: ip, cosine"):
        rb.indexes.create(name, dim=DIM, metric="manhattan")
    with pytest.raises(ConfigError, match="dim"):
        rb.indexes.create(name, metric="ip")
    with pytest.raises(ConfigError, match="dim"):
        rb.indexes.create(name, dim=0)


def test_lsh_rejects_l2_and_minhash_rejects_vectors() -> None:
    with pytest.raises(ConfigError, match="use one of: ip, cosine$"):
        rb.indexes.create("lsh", dim=DIM, metric="l2")
    index = rb.indexes.create("minhash-lsh")
    with pytest.raises(InputError):
        index.build(VECTORS)
    with pytest.raises(InputError):
        index.build("one string is not a corpus")


def test_minhash_is_created_like_a_vector_index(tmp_path) -> None:
    plain = rb.indexes.create("minhash-lsh", metric=None)
    assert (plain.metric, plain.rescore_metric, plain.dim) == ("jaccard", None, None)
    index = rb.indexes.create("minhash-lsh", dim=DIM, metric="cosine", threshold=0.5)
    # dim is ignored (it hashes texts); the vector metric is what reranking re-scores with.
    assert (index.metric, index.rescore_metric, index.dim) == ("jaccard", "cosine", None)
    with pytest.raises(ConfigError, match="manhattan.*jaccard, ip, cosine, l2"):
        rb.indexes.create("minhash-lsh", metric="manhattan")
    with pytest.raises(ConfigError, match="dim"):
        rb.indexes.create("minhash-lsh", dim=0)
    index.build(TEXTS)
    index.save(tmp_path / "m.idx")
    loaded = rb.indexes.load(tmp_path / "m.idx")
    assert (loaded.metric, loaded.rescore_metric) == ("jaccard", "cosine")
    ids, scores = index.search(TEXT_QUERIES, 3)
    loaded_ids, loaded_scores = loaded.search(TEXT_QUERIES, 3)
    np.testing.assert_array_equal(ids, loaded_ids)
    np.testing.assert_array_equal(scores, loaded_scores)


@pytest.mark.parametrize("name", ["flat", "hnsw", "faiss-hnsw", "ivf", *COMPRESSED, *VECTORDB])
def test_cosine_zero_rows_rejected(name) -> None:
    index = rb.indexes.create(name, dim=DIM, metric="cosine")  # 300: ivfpq trains 256 codes
    corpus = VECTORS[:300].copy()
    corpus[3] = 0
    with pytest.raises(InputError, match="row 3 has zero norm"):
        index.build(corpus)
    index.build(VECTORS[:300])
    q = QUERIES[:3].copy()
    q[2] = 0
    with pytest.raises(InputError, match="row 2 has zero norm"):
        index.search(q, 1)
    with pytest.raises(InputError, match="zero norm"):
        index.search(q[2:], 1)


def test_bad_build_param_values() -> None:
    with pytest.raises(ConfigError, match="M must be"):
        rb.indexes.create("hnsw", dim=DIM, M=1)
    with pytest.raises(ConfigError, match="ef_construction"):
        rb.indexes.create("faiss-hnsw", dim=DIM, ef_construction="high")
    with pytest.raises(ConfigError, match="threshold"):
        rb.indexes.create("minhash-lsh", threshold=1.5)
    with pytest.raises(ConfigError, match="rotate_data"):
        rb.indexes.create("lsh", dim=DIM, rotate_data="yes")
    with pytest.raises(ConfigError, match="rotate_data=True"):
        rb.indexes.create("lsh", dim=DIM, nbits=64, rotate_data=False).build(VECTORS)
    with pytest.raises(ConfigError, match="nlist=5000 is larger than the corpus"):
        rb.indexes.create("ivf", dim=DIM, nlist=5000).build(VECTORS)
    index = rb.indexes.create("hnsw", dim=DIM)
    index.build(VECTORS[:100])
    with pytest.raises(ConfigError, match="ef must be"):
        index.search(QUERIES[:1], 1, ef=0)


# -- fewer than k results: -1 padding -----------------------------------------------------


def _check_padded(ids: np.ndarray, scores: np.ndarray) -> None:
    pads = ids == -1
    assert pads.any(), "expected some -1 padding"
    assert (np.isneginf(scores) == pads).all()
    # pads come last in each row
    for row in pads:
        if row.any():
            first = int(np.argmax(row))
            assert row[first:].all()


def test_padding_ivf_tiny_lists() -> None:
    index = rb.indexes.create("ivf", dim=DIM, nlist=200)
    index.build(VECTORS)  # ~10 vectors per list
    ids, scores = index.search(QUERIES, 50, nprobe=1)
    _check_padded(ids, scores)
    assert (ids[:, 0] >= 0).all()
    # nprobe = nlist scans everything: no padding
    ids_all, _ = index.search(QUERIES, 50, nprobe=200)
    assert (ids_all >= 0).all()


def test_padding_minhash_high_threshold() -> None:
    index = rb.indexes.create("minhash-lsh", threshold=0.9)
    index.build(TEXTS)
    ids, scores = index.search(TEXT_QUERIES[:5] + ["", "nothing like the corpus at all"], 3)
    _check_padded(ids, scores)
    assert (ids[5:] == -1).all()


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_padding_hnsw_disconnected_graph(metric) -> None:
    # 5 distinct points, 40 copies each: with M=4 hnswlib's graph cannot reach
    # 100 items from a query, so it raises; ragbench pads instead.
    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 8)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    corpus = np.repeat(base, 40, axis=0)
    index = rb.indexes.create("hnsw", dim=8, metric=metric, M=4, ef_construction=10)
    # One build thread: with more, hnswlib's graph depends on thread timing.
    before = threads.get_threads()
    threads.set_threads(1)
    try:
        index.build(corpus)
    finally:
        threads.set_threads(before)
    ids, scores = index.search(corpus[::40], 100, ef=10)
    _check_padded(ids, scores)
    # what was found is the query's own duplicates first (score ~1 or ~0)
    expected_best = 1.0 if metric == "ip" else 0.0
    assert np.allclose(scores[:, 0], expected_best, atol=1e-5)
    assert (ids[:, 0] // 40 == np.arange(5)).all()


@pytest.mark.parametrize("name", ["hnsw", "faiss-hnsw", "flat", "ivf", *VECTORDB])
def test_single_query_fast_path_matches_batch_and_exact_scores(built, name) -> None:
    # One (1, dim) float32 row takes the wrappers' fast path, a batch the
    # checked one; alternating k exercises the per-k caches of both.
    index = built[name]
    kw = {"ef": 200} if "ef" in index.query_params else {}
    for k in (10, 3, 10, 1):
        batch_ids, batch_scores = index.search(QUERIES[:6], k, **kw)
        for row in range(6):
            ids, scores = index.search(QUERIES[row : row + 1].copy(), k, **kw)
            assert ids.dtype == np.int64 and scores.dtype == np.float32
            assert ids.shape == scores.shape == (1, k)
            assert (ids[0] == batch_ids[row]).all()
            assert np.allclose(scores[0], batch_scores[row], atol=1e-6)
            assert np.allclose(scores[0], VECTORS[ids[0]] @ QUERIES[row], atol=1e-5)


@pytest.mark.parametrize(
    "name",
    [
        "hnsw",
        "faiss-hnsw",
        "ivf",
        "ivfpq",
        "ivfpq-fs",
        "ivf-sq8",
        "hnsw-sq",
        "binary-hnsw",
        *VECTORDB_QUERY_PARAMS,
    ],
)
def test_query_param_cache_keeps_validating(built, name) -> None:
    index = built[name]
    param = "nprobe" if "nprobe" in index.query_params else "ef"
    q = QUERIES[:1].copy()
    good, _ = index.search(q, 5, **{param: 40})
    assert (good >= 0).all()
    for bad in (0, -3, None, True, 2.5, "40"):
        with pytest.raises(ConfigError, match=f"{param} must be"):
            index.search(q, 5, **{param: bad})
    # the cached value is still used correctly after the failures
    again, _ = index.search(q, 5, **{param: 40})
    assert (again == good).all()
    with pytest.raises(ConfigError, match="bogus"):
        index.search(q, 5, bogus=1, **{param: 40})


@pytest.mark.parametrize("name", ["flat", "lsh", "ivf", "hnsw", *VECTORDB])
def test_query_params_of_other_backends_rejected(built, name) -> None:
    other = "ef" if name in ("flat", "lsh", "ivf") else "nprobe"
    with pytest.raises(ConfigError, match=other):
        built[name].search(queries_for(name)[:1], 1, **{other: 8})


def test_hnsw_ef_below_k_is_raised_to_k(built) -> None:
    ids, _ = built["hnsw"].search(QUERIES[:3], 40, ef=5)
    assert (ids >= 0).all()
    ids, _ = built["faiss-hnsw"].search(QUERIES[:3], 40, ef=5)
    assert (ids >= 0).all()


# -- recall against brute force ----------------------------------------------------------


@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
def test_flat_matches_brute_force(metric) -> None:
    rng = np.random.default_rng(5)
    corpus = rng.standard_normal((500, DIM)).astype(np.float32) * 3  # not normalized
    queries = rng.standard_normal((20, DIM)).astype(np.float32)
    index = rb.indexes.create("flat", dim=DIM, metric=metric)
    index.build(corpus)
    ids, scores = index.search(queries, 10)
    want_ids, want_scores = exact(corpus, queries, 10, metric)
    assert recall(ids, want_ids) == 1.0
    np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-3)


@settings(max_examples=15, deadline=None)
@given(k=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_flat_property_any_k(k, seed) -> None:
    rng = np.random.default_rng(seed)
    corpus = rng.standard_normal((300, 8)).astype(np.float32)
    q = rng.standard_normal((2, 8)).astype(np.float32)
    index = rb.indexes.create("flat", dim=8, metric="l2")
    index.build(corpus)
    ids, scores = index.search(q, k)
    _, want = exact(corpus, q, k, "l2")
    np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-3)
    assert (ids >= 0).all()


# Floors: on 2 000 clustered 32-d points, HNSW at ef=128 explores a large
# share of the graph, so recall@10 is essentially 1 (measured 1.0); 0.95
# leaves room for graph randomness. IVF with nprobe = nlist scans every list,
# i.e. exact search. Raw LSH ranks by Hamming distance only (measured ~0.55
# here); re-scoring its top 100 exactly must recover nearly all true
# neighbours (measured ~0.99; floor 0.9: on 100k x 384 it was measured at 0.91).
@pytest.mark.parametrize(
    ("name", "params", "floor"),
    [
        ("hnsw", {"ef": 128}, 0.95),
        ("faiss-hnsw", {"ef": 128}, 0.95),
        ("usearch", {"ef": 128}, 0.95),
        ("qdrant-edge", {"ef": 128}, 0.95),
        ("lancedb", {}, 0.99),  # flat (the default index_type): exact
        ("pgvector", {"ef": 128}, 0.95),
    ],
)
def test_hnsw_recall(built, name, params, floor) -> None:
    truth, _ = exact(VECTORS, QUERIES, 10)
    ids, _ = built[name].search(QUERIES, 10, **params)
    assert recall(ids, truth) >= floor


def test_ivf_full_probe_is_exact(built) -> None:
    index = built["ivf"]
    nlist = index.info()["nlist"]
    _, want_scores = exact(VECTORS, QUERIES, 10)
    ids, scores = index.search(QUERIES, 10, nprobe=nlist)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
    few_ids, _ = index.search(QUERIES, 10, nprobe=1)
    assert recall(few_ids, ids) < 1.0  # one list is not everything


def test_lsh_rerank_recall(built) -> None:
    truth, _ = exact(VECTORS, QUERIES, 10)
    index = built["lsh"]
    raw, hamming = index.search(QUERIES, 10)
    assert (hamming <= 0).all() and (hamming >= -index.build_params["nbits"]).all()
    cand, _ = index.search(QUERIES, 100)
    reranked = np.array(
        [c[np.argsort(-(VECTORS[c] @ q))[:10]] for c, q in zip(cand, QUERIES, strict=True)]
    )
    assert recall(reranked, truth) >= 0.9
    assert recall(reranked, truth) > recall(raw, truth)


def test_minhash_finds_near_duplicates(built) -> None:
    # Each query is a corpus text with 5% of its words replaced: its shingle
    # Jaccard with the source is ~0.75, far above the 0.3 threshold, and
    # ~0 with unrelated random texts; the source must rank first.
    ids, scores = built["minhash-lsh"].search(TEXT_QUERIES, 5)
    assert (ids[:, 0] == np.arange(len(TEXT_QUERIES))).mean() >= 0.95
    assert (scores[:, 0] > 0.5).all()
    exact_ids, exact_scores = built["minhash-lsh"].search(TEXTS[:5], 1)
    assert (exact_ids[:, 0] == np.arange(5)).all() and (exact_scores[:, 0] == 1.0).all()


# -- threads ---------------------------------------------------------------------------


def test_batch_search_applies_thread_setting(built) -> None:
    import faiss

    before = threads.get_threads()
    try:
        threads.set_threads(1)
        faiss.omp_set_num_threads(2)  # someone else changed it behind ragbench's back
        built["flat"].search(QUERIES, 5)
        assert faiss.omp_get_max_threads() == 1
        assert built["hnsw"].info()["threads"] == 1
    finally:
        threads.set_threads(before)


# -- persistence ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_save_load_round_trip(built, name, tmp_path) -> None:
    index = built[name]
    path = tmp_path / f"{name}.rbi"
    index.save(path)
    loaded = rb.indexes.load(path)
    assert type(loaded) is type(index)
    assert loaded.ntotal == index.ntotal
    assert loaded.build_params == index.build_params and loaded.metric == index.metric
    q = queries_for(name)
    kw = {"ef": 64} if "ef" in index.query_params else {}
    ids, scores = index.search(q, 10, **kw)
    ids2, scores2 = loaded.search(q, 10, **kw)
    assert (ids == ids2).all()
    np.testing.assert_array_equal(scores, scores2)
    header, _ = read_index_file(path)
    assert header["magic"] == "ragbench-index" and header["backend"] == name
    assert header["count"] == index.ntotal and header["dim"] == index.dim
    assert header["library"]["name"] == index.library


@pytest.mark.parametrize("name", ALL)
def test_truncated_and_corrupt_files(built, name, tmp_path) -> None:
    path = tmp_path / "index.rbi"
    built[name].save(path)
    blob = path.read_bytes()
    for cut in (10, 30, len(blob) // 2, len(blob) - 1):
        (tmp_path / "cut.rbi").write_bytes(blob[:cut])
        with pytest.raises(IndexFileError):
            rb.indexes.load(tmp_path / "cut.rbi")
    flipped = bytearray(blob)
    flipped[-5] ^= 0xFF
    (tmp_path / "flip.rbi").write_bytes(bytes(flipped))
    with pytest.raises(IndexFileError, match="checksum"):
        rb.indexes.load(tmp_path / "flip.rbi")
    (tmp_path / "magic.rbi").write_bytes(b"ragbench-indey" + blob[14:])
    with pytest.raises(IndexFileError, match="magic"):
        rb.indexes.load(tmp_path / "magic.rbi")
    (tmp_path / "extra.rbi").write_bytes(blob + b"\0")
    with pytest.raises(IndexFileError, match="trailing"):
        rb.indexes.load(tmp_path / "extra.rbi")


def test_foreign_files(tmp_path) -> None:
    import faiss

    raw = faiss.IndexFlatIP(DIM)
    raw.add(VECTORS[:10])
    faiss.write_index(raw, str(tmp_path / "faiss.index"))
    for path in (tmp_path / "faiss.index", tmp_path / "empty"):
        path.touch()
        with pytest.raises(IndexFileError, match="not a ragbench index"):
            rb.indexes.load(path)
    with pytest.raises(IndexFileError, match="cannot read"):
        rb.indexes.load(tmp_path / "missing")
    bad_json = b"ragbench-index" + struct.pack("<HQ", 1, 5) + b"{oops"
    (tmp_path / "json").write_bytes(bad_json)
    with pytest.raises(IndexFileError, match="JSON"):
        rb.indexes.load(tmp_path / "json")
    future = b"ragbench-index" + struct.pack("<HQ", 99, 2) + b"{}"
    (tmp_path / "future").write_bytes(future)
    with pytest.raises(IndexFileError, match="version 99"):
        rb.indexes.load(tmp_path / "future")


def _rewrite(src, dst, **changes) -> None:
    """Re-save ``src`` with header fields changed and a valid checksum."""
    header, payload = read_index_file(src)
    for key in ("magic", "format_version", "payload"):
        header.pop(key)
    header.update(changes)
    write_index_file(dst, header, payload)


@pytest.mark.parametrize("name", ALL)
def test_header_mismatches(built, name, tmp_path) -> None:
    path = tmp_path / "index.rbi"
    index = built[name]
    index.save(path)
    bad = tmp_path / "bad.rbi"
    _rewrite(path, bad, count=index.ntotal + 1)
    with pytest.raises(IndexFileError):
        rb.indexes.load(bad)
    if index.dim is not None:
        _rewrite(path, bad, dim=index.dim * 2)
        with pytest.raises(IndexFileError):
            rb.indexes.load(bad)
    _rewrite(path, bad, backend="no-such-backend")
    with pytest.raises(IndexFileError, match="no-such-backend"):
        rb.indexes.load(bad)
    other = "flat" if name != "flat" else "hnsw"
    _rewrite(path, bad, backend=other)
    with pytest.raises(IndexFileError):
        rb.indexes.load(bad)
    _rewrite(path, bad, build_params={"nonsense": 1})
    with pytest.raises(IndexFileError, match="invalid parameters"):
        rb.indexes.load(bad)


def test_hnsw_payload_structure_is_checked(built, tmp_path) -> None:
    """A payload with a valid checksum but an out-of-range neighbour never reaches hnswlib."""
    path = tmp_path / "index.rbi"
    built["hnsw"].save(path)
    header, payload = read_index_file(path)
    for key in ("magic", "format_version", "payload"):
        header.pop(key)
    data = bytearray(payload)
    first_neighbour = 96 + 4  # after hnswlib's header and element 0's link count
    data[first_neighbour : first_neighbour + 4] = struct.pack("<I", 10**9)
    write_index_file(tmp_path / "evil.rbi", header, bytes(data))
    with pytest.raises(IndexFileError, match="neighbour id is out of range"):
        rb.indexes.load(tmp_path / "evil.rbi")
    data = bytearray(payload)
    data[16:24] = struct.pack("<Q", 10**12)  # element count
    write_index_file(tmp_path / "count.rbi", header, bytes(data))
    with pytest.raises(IndexFileError, match="element count"):
        rb.indexes.load(tmp_path / "count.rbi")
    write_index_file(tmp_path / "short.rbi", header, bytes(payload[:-8]))
    with pytest.raises(IndexFileError):
        rb.indexes.load(tmp_path / "short.rbi")


def test_batch_is_finite() -> None:
    from ragbench.indexes._arrays import batch_is_finite

    q = QUERIES[:5].copy()
    assert batch_is_finite(q)
    assert batch_is_finite(np.full((2, DIM), 3e38, np.float32))  # huge but finite
    assert not batch_is_finite(np.empty((0, DIM), np.float32))  # empty: the slow path decides
    for bad in (np.nan, np.inf, -np.inf):
        q = QUERIES[:5].copy()
        q[3, 17] = bad
        assert not batch_is_finite(q)
        assert not batch_is_finite(q[1::2])  # a strided view holding row 3


@pytest.mark.parametrize(
    ("name", "metric"),
    [
        (name, metric)
        for name in (*FLOAT32, *COMPRESSED, *VECTORDB)
        for metric in ("ip", "cosine", "l2")
        if not (name in NO_L2 and metric == "l2")  # no l2 (their own tests)
    ],
)
def test_single_query_non_finite(name: str, metric: str) -> None:
    """One float32 (1, dim) row, the fast path of every backend: NaN/inf raise,
    huge-but-finite and (ip/l2) zero rows are answered. hnsw checks ip/l2 rows
    on hnswlib's answer rather than before the search: same outcome."""
    index = rb.indexes.create(name, dim=DIM, metric=metric)
    index.build(VECTORS[:500])
    kw = {"ef": 64} if "ef" in index.query_params else {}
    for warm in (False, True):
        if warm:  # a good query first: the next ones take the repeat fast paths
            index.search(QUERIES[:1], 5, **kw)
        for col in (0, 17, DIM - 1):
            for bad in (np.nan, np.inf, -np.inf):
                q = QUERIES[:1].copy()
                q[0, col] = bad
                with pytest.raises(NonFiniteError, match="NaN or inf"):
                    index.search(q, 5, **kw)
    # A batch with one bad row, last or first (hnsw checks ip/l2 batches on
    # every row's best score after the search): the row is named.
    for row in (3, 0):
        for bad in (np.nan, np.inf, -np.inf):
            batch = QUERIES[:4].copy()
            batch[row, 17] = bad
            with pytest.raises(NonFiniteError, match=f"row {row}"):
                index.search(batch, 5, **kw)
    huge_batch, _ = index.search(QUERIES[:4] * np.float32(1e20), 5, **kw)
    assert huge_batch.shape == (4, 5)
    # The same index still answers normally afterwards.
    ids, scores = index.search(QUERIES[:1], 5, **kw)
    assert ids.shape == (1, 5) and (ids >= 0).all() and np.isfinite(scores).all()
    # |x| ~ 1e20 is finite: answered whatever the scores overflow to.
    huge_ids, _ = index.search(QUERIES[:1] * np.float32(1e20), 5, **kw)
    assert huge_ids.shape == (1, 5)
    zero = np.zeros((1, DIM), np.float32)
    if metric == "cosine":
        with pytest.raises(InputError, match="zero norm"):
            index.search(zero, 5, **kw)
    else:
        assert index.search(zero, 5, **kw)[0].shape == (1, 5)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_hnsw_repeat_fast_path(metric: str) -> None:
    """Repeated single queries (same k and ef) take hnsw's repeat fast path:
    identical answers to the checked path, scores exactly hnswlib's distances
    converted, and any ef change in between (single or batch) is honoured."""
    index = rb.indexes.create("hnsw", dim=DIM, metric=metric)
    index.build(VECTORS)
    lib = index._index
    first = [index.search(QUERIES[i : i + 1], 10, ef=32) for i in range(5)]
    assert index._fast is not None  # recorded by the checked path
    again = [index.search(QUERIES[i : i + 1], 10, ef=32) for i in range(5)]
    for (ids1, s1), (ids2, s2) in zip(first, again, strict=True):
        assert ids2.dtype == np.int64 and s2.dtype == np.float32
        assert np.array_equal(ids1, ids2) and np.array_equal(s1, s2)
    labels, dist = lib.knn_query(QUERIES[:1], 10)
    want = np.float32(1) - dist if metric == "ip" else -dist
    assert np.array_equal(again[0][1], want)
    assert np.array_equal(again[0][0], labels.astype(np.int64))
    # ef follows every call, whichever path it takes.
    index.search(QUERIES[:1], 10, ef=200)
    assert lib.ef == 200
    index.search(QUERIES[:1], 10, ef=32)
    assert lib.ef == 32
    index.search(QUERIES[:4], 10, ef=100)  # a batch with another ef
    assert lib.ef == 100
    ids, _ = index.search(QUERIES[:1], 10, ef=32)
    assert lib.ef == 32 and np.array_equal(ids, first[0][0])
    # k larger than ef: hnswlib needs ef >= k.
    ids, _ = index.search(QUERIES[:1], 50, ef=32)
    assert ids.shape == (1, 50) and lib.ef == 50
    # Bad input still fails on the fast path, and leaves it usable.
    for bad in (np.nan, np.inf):
        q = QUERIES[:1].copy()
        q[0, 3] = bad
        with pytest.raises(NonFiniteError):
            index.search(q, 50, ef=32)
    assert np.array_equal(index.search(QUERIES[:1], 50, ef=32)[0], ids)
    with pytest.raises(ConfigError, match="unknown"):
        index.search(QUERIES[:1], 50, ef=32, nprobe=3)


def test_hnsw_cosine_has_no_repeat_fast_path() -> None:
    index = rb.indexes.create("hnsw", dim=DIM, metric="cosine")
    index.build(VECTORS[:300])
    index.search(QUERIES[:1], 5)
    index.search(QUERIES[:1], 5)
    assert index._fast is None
    with pytest.raises(InputError, match="zero norm"):
        index.search(np.zeros((1, DIM), np.float32), 5)


def test_hnsw_loaded_index_takes_the_fast_path(tmp_path) -> None:
    index = rb.indexes.create("hnsw", dim=DIM, metric="ip")
    index.build(VECTORS[:500])
    index.save(tmp_path / "h.rbidx")
    loaded = rb.indexes.load(tmp_path / "h.rbidx")
    want = index.search(QUERIES[:1], 7)
    for _ in range(2):
        got = loaded.search(QUERIES[:1], 7)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert loaded._fast is not None


def test_build_timed_reports_kernel_loading_apart() -> None:
    hnsw = rb.indexes.create("hnsw", dim=DIM, metric="ip")
    build_ns, compile_ns = rb.indexes.build_timed(hnsw, VECTORS[:300])
    assert build_ns > 0 and compile_ns > 0 and hnsw.compile_ns > 0
    flat = rb.indexes.create("flat", dim=DIM, metric="ip")
    build_ns, compile_ns = rb.indexes.build_timed(flat, VECTORS[:300])
    assert build_ns > 0 and compile_ns == 0

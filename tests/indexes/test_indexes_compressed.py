"""Compressed indexes (ragbench.indexes.compressed): recall after exact re-scoring, code
sizes, seeded training, errors, and how sweeps measure them."""

from __future__ import annotations

import numpy as np
import pytest

import ragbench as rb
from ragbench.errors import ConfigError
from ragbench.sweeps import SweepData, sweep_points

N, DIM, NQ, K, CANDIDATES = 5000, 64, 60, 10, 100


def clustered(n: int, dim: int, seed: int, n_clusters: int = 50) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim))
    x = centres[rng.integers(0, n_clusters, n)] + 0.5 * rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


VECTORS = clustered(N, DIM, seed=11)


def near(x: np.ndarray, nq: int, seed: int) -> np.ndarray:
    """Queries drawn from the corpus's clusters: corpus rows moved by noise, unit length."""
    rng = np.random.default_rng(seed)
    q = x[rng.integers(0, len(x), nq)] + 0.3 * rng.standard_normal((nq, x.shape[1]))
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


QUERIES = near(VECTORS, NQ, seed=12)
TRUTH = np.argsort(-(QUERIES.astype(np.float64) @ VECTORS.T.astype(np.float64)), axis=1)[:, :K]

# (backend, build params, query params, code bytes per vector, candidates re-scored,
# recall floor after re-scoring). Coarser codes need more candidates: 64 sign bits
# rank the true top 10 of 5000 rows within their top 1000 ~93 % of the time.
CASES = [
    ("ivfpq", {"nlist": 32, "m": 8, "nbits": 8}, {"nprobe": 8}, 8, 200, 0.92),
    ("ivfpq-fs", {"nlist": 32, "m": 16}, {"nprobe": 8}, 8, 500, 0.92),
    ("ivf-sq8", {"nlist": 32}, {"nprobe": 8}, DIM, 100, 0.92),
    ("hnsw-sq", {"M": 16}, {"ef": 128}, DIM, 100, 0.97),
    ("hnsw-fp16", {"M": 16}, {"ef": 128}, 2 * DIM, 100, 0.97),
    ("binary-flat", {}, {}, DIM // 8, 1000, 0.88),
    ("binary-hnsw", {"M": 16}, {"ef": 1000}, DIM // 8, 1000, 0.88),
]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return hits / truth.size


@pytest.fixture(scope="module")
def built() -> dict[str, object]:
    out = {}
    for name, build, *_ in CASES:
        index = rb.indexes.create(name, dim=DIM, metric="ip", **build)
        index.build(VECTORS)
        out[name] = index
    return out


@pytest.mark.parametrize(("name", "build", "query", "code", "candidates", "floor"), CASES)
def test_rescored_recall_and_code_size(built, name, build, query, code, candidates, floor) -> None:
    index = built[name]
    cand, _ = index.search(QUERIES, candidates, **query)
    reranker = rb.rerankers.create("numba", metric="ip")
    rescored = np.stack(
        [reranker.rerank(q, c, VECTORS, K)[0] for q, c in zip(QUERIES, cand, strict=True)]
    )
    before, after = recall(cand[:, :K], TRUTH), recall(rescored, TRUTH)
    assert after >= floor, (name, before, after)
    assert after >= before  # exact scores of the same candidates never rank worse overall
    assert index.code_bytes_per_vector() == code
    assert index.info()["code_bytes_per_vector"] == code
    # the whole index holds at least its codes (plus ids / links / centroids)
    assert index.memory_bytes() >= N * code
    if "train_size" in index.build_params:
        assert index.info()["train_rows"] == min(N, index.build_params["train_size"])
    else:  # fp16 and sign bits learn nothing from the data
        assert index.info().get("train_rows", 0) == 0


def test_codes_are_far_smaller_than_float32(built) -> None:
    for name in ("ivfpq", "ivfpq-fs", "binary-flat"):
        assert built[name].memory_bytes() / N < DIM * 4 / 4, name


def test_pq_code_size_follows_m_and_nbits() -> None:
    for m, nbits, want in ((4, 8, 4), (16, 8, 16), (8, 6, 6), (8, 4, 4)):
        index = rb.indexes.create("ivfpq", dim=DIM, nlist=16, m=m, nbits=nbits)
        index.build(VECTORS[:2000])
        assert index.code_bytes_per_vector() == want, (m, nbits)
    # default m: dim // 8 sub-quantizers, 8 bits each
    default = rb.indexes.create("ivfpq", dim=DIM, nlist=16)
    default.build(VECTORS[:2000])
    assert default.build_params["m"] == DIM // 8
    assert default.code_bytes_per_vector() == DIM // 8


@pytest.mark.parametrize("name", ["ivfpq", "ivfpq-fs", "ivf-sq8", "hnsw-sq"])
def test_training_sample_is_seeded(name) -> None:
    """The same seed builds the same index twice; train_size caps the sample."""
    build = {"train_size": 1500, "seed": 7}
    if name.startswith("ivf"):
        build["nlist"] = 16
    a = rb.indexes.create(name, dim=DIM, **build)
    b = rb.indexes.create(name, dim=DIM, **build)
    a.build(VECTORS)
    b.build(VECTORS)
    assert a.info()["train_rows"] == 1500 and a.info()["train_seed"] == 7
    kw = {"nprobe": 4} if "nprobe" in a.query_params else {"ef": 32}
    ids_a, scores_a = a.search(QUERIES, K, **kw)
    ids_b, scores_b = b.search(QUERIES, K, **kw)
    np.testing.assert_array_equal(ids_a, ids_b)
    np.testing.assert_array_equal(scores_a, scores_b)
    other = rb.indexes.create(name, dim=DIM, **{**build, "seed": 8})
    other.build(VECTORS)
    _, scores_o = other.search(QUERIES, K, **kw)
    assert not np.array_equal(scores_a, scores_o)  # another sample, other codebooks


def test_train_sample_is_deterministic_and_sorted() -> None:
    from ragbench.indexes.compressed import train_sample

    s1 = train_sample(VECTORS, 100, seed=3)
    s2 = train_sample(VECTORS, 100, seed=3)
    assert s1.shape == (100, DIM) and s1.flags.c_contiguous
    np.testing.assert_array_equal(s1, s2)
    assert not np.array_equal(s1, train_sample(VECTORS, 100, seed=4))
    assert train_sample(VECTORS, N + 5, seed=3) is VECTORS


def test_binary_codes_are_sign_bits() -> None:
    from ragbench.indexes.compressed import BinaryFlatIndex

    x = np.array([[1.0, -1.0, 0.0, 2.0, -0.5, 0.1, 0.2, -3.0, 5.0]], np.float32)
    codes = BinaryFlatIndex.codes(x)
    assert codes.shape == (1, 2) and codes.dtype == np.uint8
    assert codes[0, 0] == 0b01101001 and codes[0, 1] == 1  # bit j of byte j // 8
    index = rb.indexes.create("binary-flat", dim=9)
    index.build(np.vstack([x, -x, np.abs(x)]))
    ids, scores = index.search(x, 3)
    assert ids[0, 0] == 0 and scores[0, 0] == 0  # identical code, Hamming 0
    assert ids[0, 2] == 1 and scores[0, 2] == -8  # -x flips every non-zero sign (0 stays 0)


def test_errors() -> None:
    with pytest.raises(ConfigError, match="m=5 must divide dim=64"):
        rb.indexes.create("ivfpq", dim=DIM, m=5)
    with pytest.raises(ConfigError, match="nbits"):
        rb.indexes.create("ivfpq", dim=DIM, nbits=0)
    with pytest.raises(ConfigError, match="nbits"):
        rb.indexes.create("ivfpq-fs", dim=DIM, nbits=4)  # fixed at 4: not a parameter
    with pytest.raises(ConfigError, match="train_size"):
        rb.indexes.create("ivf-sq8", dim=DIM, train_size=0)
    with pytest.raises(ConfigError, match="train_size"):
        rb.indexes.create("hnsw-fp16", dim=DIM, train_size=100)  # fp16 trains nothing
    with pytest.raises(ConfigError, match="needs at least 1024 training rows"):
        rb.indexes.create("ivfpq", dim=DIM, nlist=4, nbits=10).build(VECTORS[:1000])
    with pytest.raises(ConfigError, match="needs at least 64 training rows"):
        rb.indexes.create("ivf-sq8", dim=DIM, nlist=64, train_size=50).build(VECTORS)
    for name in ("binary-flat", "binary-hnsw"):
        with pytest.raises(ConfigError, match="use one of: ip, cosine"):
            rb.indexes.create(name, dim=DIM, metric="l2")
    with pytest.raises(ConfigError, match="nprobe"):
        index = rb.indexes.create("binary-flat", dim=DIM)
        index.build(VECTORS[:100])
        index.search(QUERIES[:1], 1, nprobe=4)


@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
def test_metrics_rescored(metric) -> None:
    """Every supported metric re-scores to a high recall against its own exact truth."""
    scale = np.linspace(0.5, 2.0, N, dtype=np.float32)[:, None]
    x = np.ascontiguousarray(VECTORS * scale)  # norms vary, so ip, cosine and l2 differ
    exact = rb.indexes.create("flat", dim=DIM, metric=metric)
    exact.build(x)
    truth, _ = exact.search(QUERIES, K)
    reranker = rb.rerankers.create("numba", metric=metric)
    for name in ("ivfpq", "ivf-sq8", "hnsw-sq"):
        index = rb.indexes.create(name, dim=DIM, metric=metric)
        index.build(x)
        cand, _ = index.search(QUERIES, CANDIDATES)
        found = np.stack(
            [reranker.rerank(q, c, x, K)[0] for q, c in zip(QUERIES, cand, strict=True)]
        )
        assert recall(found, truth) >= 0.85, (name, metric)


def test_sweep_reports_recall_before_after_and_bytes(tmp_path) -> None:
    data = SweepData("clustered", VECTORS, QUERIES[:30], [], [], TRUTH[:30].copy(), "ip")
    recs = sweep_points(
        data,
        ["ivfpq", "flat"],
        k=K,
        build_grid={"nlist": [32], "m": [8]},
        query_grid={"nprobe": [8], "rescore": [10, 100]},
    )
    pq = {r["rescore"]: r for r in recs if r["index"] == "ivfpq"}
    assert set(pq) == {10, 100}
    for r in recs:
        assert len(r["recall_per_query"]) == 30
        assert r["recall"] == pytest.approx(np.mean(r["recall_per_query"]))
        assert r["recall_p10"] == pytest.approx(np.percentile(r["recall_per_query"], 10))
        assert r["bytes_per_vector"] == pytest.approx(r["memory_bytes"] / N)
        assert r["rescore_bytes_per_vector"] == DIM * 4
        assert "recall_before_rescore" in r and "rescore_p50_us" in r
    assert pq[100]["code_bytes_per_vector"] == 8
    assert pq[100]["recall"] > pq[100]["recall_before_rescore"]
    # the index's own top k is the same whatever the number of candidates
    assert pq[10]["recall_before_rescore"] == pq[100]["recall_before_rescore"]
    flat = [r for r in recs if r["index"] == "flat"]
    assert all(r["code_bytes_per_vector"] is None for r in flat)
    from ragbench.results.tables import render

    table = render(recs)
    assert "recall p10" in table and "before rescore" in table and "+ 256" in table
    from ragbench.results.plots import figure, pyplot

    fig = figure(recs)
    try:
        assert len(fig.axes) == 2  # recall-latency and recall-memory
        assert "memory" in fig.axes[1].get_title()
        assert fig.axes[1].get_xscale() == "log"
    finally:
        pyplot().close(fig)


def test_cli_sweep_on_compressed(tmp_path) -> None:
    """``ragbench sweep`` over a compressed index with re-scoring, as a user runs it."""
    import json
    import subprocess
    import sys

    out = tmp_path / "sweep.jsonl"
    png = tmp_path / "sweep.png"
    cmd = [
        sys.executable, "-m", "ragbench", "sweep", "--n", "3000", "--dim", "32",
        "--index", "ivf-sq8,binary-flat", "--build", "nlist=16", "--param", "nprobe=4",
        "--param", "rescore=50", "--queries", "20", "--out", str(out), "--plot", str(png),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["index"] for r in recs} == {"ivf-sq8", "binary-flat"}
    sq = next(r for r in recs if r["index"] == "ivf-sq8")
    assert sq["code_bytes_per_vector"] == 32 and sq["rescore_bytes_per_vector"] == 128
    assert "recall p10" in proc.stdout and "B/vector" in proc.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_scale_tunes_compressed_with_rescoring_and_automatic_nlist() -> None:
    """``scale`` tunes nprobe of an IVF index built with nlist=None (automatic), and measures
    a compressed one with its top SCALE_RESCORE candidates re-scored."""
    import functools

    from ragbench.sweeps import SCALE_RESCORE, scale_points, synthetic_data

    make = functools.partial(synthetic_data, 3000, dim=32, n_queries=20, seed=0, k=K)
    recs = scale_points([(3000, make)], ["ivf", "ivfpq"], k=K, target=0.9, build={})
    by = {r["index"]: r for r in recs}
    assert by["ivf"]["rescore"] is None and "nprobe" in by["ivf"]["query"]
    assert by["ivfpq"]["rescore"] == SCALE_RESCORE
    assert by["ivfpq"]["recall"] > by["ivfpq"]["recall_before_rescore"]
    assert by["ivfpq"]["rescore_bytes_per_vector"] == 32 * 4
    assert by["ivfpq"]["code_bytes_per_vector"] == 4  # m = 32 // 8, 8 bits


@pytest.mark.parametrize("name", ["ivfpq", "ivfpq-fs", "ivf-sq8", "hnsw-sq", "hnsw-fp16"])
def test_compressed_payload_layout_is_walked(built, name, tmp_path) -> None:
    """Saved compressed faiss indexes load back, and their payload is walked before faiss
    reads it: a length field claiming more bytes than exist, or bytes after the index,
    are refused even under a valid checksum (faiss itself would allocate / ignore them)."""
    from ragbench.errors import IndexFileError
    from ragbench.indexes.persist import read_index_file, write_index_file

    path = tmp_path / "index.rbi"
    built[name].save(path)
    loaded = rb.indexes.load(path)
    np.testing.assert_array_equal(loaded.search(QUERIES, K)[0], built[name].search(QUERIES, K)[0])
    header, payload = read_index_file(path)
    for key in ("magic", "format_version", "payload"):
        header.pop(key)
    write_index_file(tmp_path / "extra.rbi", header, bytes(payload) + b"\0" * 8)
    with pytest.raises(IndexFileError, match="bytes after the index"):
        rb.indexes.load(tmp_path / "extra.rbi")
    data = bytearray(payload)
    # the quantizer's vector count sits after the IVF header; HNSW's assign_probas count
    # right after the index header: both 8-byte counts claiming 10**12 items
    at = 4 + 33 + 16 + 4 + 33 if name.startswith("ivf") else 4 + 33
    data[at : at + 8] = (10**12).to_bytes(8, "little")
    write_index_file(tmp_path / "huge.rbi", header, bytes(data))
    with pytest.raises(IndexFileError, match="claims"):
        rb.indexes.load(tmp_path / "huge.rbi")


def test_fastscan_remove_ids_breaks_later_adds() -> None:
    """Why ``ivfpq-fs`` refuses ``delete``: in faiss's own IndexIVFPQFastScan, rows added
    after a ``remove_ids`` stop being found by their own vectors (all are found without
    the removes). If this starts failing, faiss fixed it: offer ``delete`` again."""
    import faiss

    from ragbench.errors import UnsupportedOperationError

    x = np.random.default_rng(0).standard_normal((3000, 32)).astype(np.float32)

    def self_found(remove: bool) -> float:
        index = faiss.IndexIVFPQFastScan(faiss.IndexFlatL2(32), 32, 8, 16, 4)
        index.train(x)
        index.add_with_ids(x[:2000], np.arange(2000))
        index.nprobe = 8
        kept = []
        for b in range(10):
            ids = np.arange(2000 + 40 * b, 2040 + 40 * b)
            index.add_with_ids(x[ids], ids)
            if remove:
                index.remove_ids(np.concatenate([ids[:15], np.arange(b * 20, b * 20 + 5)]))
            kept.append(ids[15:])
        rows = np.concatenate(kept)
        _, found = index.search(x[rows], 1)
        return float((found[:, 0] == rows).mean())

    assert self_found(remove=False) == 1.0
    assert self_found(remove=True) < 0.9
    index = rb.indexes.create("ivfpq-fs", dim=DIM, nlist=8)
    index.build(VECTORS)
    with pytest.raises(UnsupportedOperationError, match="remove_ids breaks later adds"):
        index.delete([0])

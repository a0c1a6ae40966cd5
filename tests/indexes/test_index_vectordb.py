"""Engine-specific behaviour of the vector database backends: ``usearch`` and ``qdrant-edge``."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import ragbench as rb
from ragbench.errors import ConfigError, KTooLargeError, NotBuiltError

N, DIM, NQ = 1500, 32, 20


def _data(seed: int, n: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


X = _data(1, N)
Q = _data(2, NQ)


def _truth(metric: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    x, q = X.astype(np.float64), Q.astype(np.float64)
    s = -((q**2).sum(1)[:, None] - 2 * q @ x.T + (x**2).sum(1)) if metric == "l2" else q @ x.T
    ids = np.argsort(-s, axis=1)[:, :k]
    return ids, np.take_along_axis(s, ids, axis=1)


@pytest.mark.parametrize("name", ["usearch", "qdrant-edge"])
@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
def test_scores_follow_the_ragbench_convention(name: str, metric: str) -> None:
    """Scores are similarities (ip/cosine) or negated squared distances (l2), as flat's."""
    index = rb.indexes.create(name, dim=DIM, metric=metric)
    index.build(X * np.float32(2.0) if metric == "cosine" else X)  # cosine ignores the scale
    ids, scores = index.search(Q, 10, ef=200)
    want_ids, want_scores = _truth(metric, 10)
    hits = sum(len(set(a) & set(b)) for a, b in zip(ids.tolist(), want_ids.tolist(), strict=True))
    assert hits / want_ids.size >= 0.95
    exact = X[ids] @ Q[:, :, None]
    got = exact[:, :, 0] if metric != "l2" else -np.square(X[ids] - Q[:, None, :]).sum(-1)
    np.testing.assert_allclose(scores, got, atol=2e-4)
    same = ids[:, 0] == want_ids[:, 0]  # approximate: a rare query misses its best row
    assert same.mean() >= 0.9
    np.testing.assert_allclose(scores[same, 0], want_scores[same, 0], atol=2e-4)


@pytest.mark.parametrize("dtype", ["f16", "i8"])
def test_usearch_quantized_storage(dtype: str) -> None:
    index = rb.indexes.create("usearch", dim=DIM, metric="cosine", dtype=dtype)
    index.build(X)
    full = rb.indexes.create("usearch", dim=DIM, metric="cosine")
    full.build(X)
    assert index.info()["dtype"] == dtype
    assert index.memory_bytes() < full.memory_bytes()
    ids, _ = index.search(Q, 10, ef=200)
    truth, _ = _truth("cosine", 10)
    hits = sum(len(set(a) & set(b)) for a, b in zip(ids.tolist(), truth.tolist(), strict=True))
    # i8 keeps one byte per component: its ranking is approximate (measured 0.97 here)
    assert hits / truth.size >= (0.95 if dtype == "f16" else 0.85)


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
@pytest.mark.parametrize("metric", ["ip", "l2", "cosine"])
def test_usearch_single_nonfinite_query_after_a_good_one(dtype: str, metric: str) -> None:
    """The repeat fast path checks a query on usearch's answer: NaN/inf still raise.

    i8 storage quantizes the query (a NaN becomes a finite code and finite
    distances), so it must keep the check before the search.
    """
    from ragbench.errors import NonFiniteError

    index = rb.indexes.create("usearch", dim=DIM, metric=metric, dtype=dtype)
    index.build(X)
    good, _ = index.search(Q[:1], 5)
    for bad in (np.nan, np.inf, -np.inf):
        index.search(Q[:1], 5)  # the last call was a good single query
        q = Q[:1].copy()
        q[0, 3] = bad
        with pytest.raises(NonFiniteError, match="NaN or inf"):
            index.search(q, 5)
    assert (index.search(Q[:1], 5)[0] == good).all()


def test_qdrant_edge_graph_walk_below_the_full_scan_threshold() -> None:
    """full_scan_threshold=1 KB makes Qdrant walk its HNSW graph (filtered or not)."""
    index = rb.indexes.create("qdrant-edge", dim=DIM, full_scan_threshold=1)
    index.build(X)
    truth, _ = _truth("ip", 10)
    ids, _ = index.search(Q, 10, ef=200)
    hits = sum(len(set(a) & set(b)) for a, b in zip(ids.tolist(), truth.tolist(), strict=True))
    assert hits / truth.size >= 0.95
    allow = np.arange(0, N, 3)
    ids, _ = index.search(Q, 10, filter=allow, strategy="in-graph")
    assert (ids >= 0).all() and set(ids.ravel().tolist()) <= set(allow.tolist())


def test_build_param_errors() -> None:
    with pytest.raises(ConfigError, match="dtype='f64' is not one of f32, f16, i8"):
        rb.indexes.create("usearch", dim=DIM, dtype="f64")
    with pytest.raises(ConfigError, match="M must be"):
        rb.indexes.create("qdrant-edge", dim=DIM, M=1)
    with pytest.raises(ConfigError, match="hnsw_ef"):
        rb.indexes.create("qdrant-edge", dim=DIM, hnsw_ef=3)


def test_qdrant_edge_folder_removed_on_close_and_collect() -> None:
    index = rb.indexes.create("qdrant-edge", dim=DIM)
    index.build(X[:200])
    folder = index._folder
    assert folder is not None and os.path.isdir(folder)
    assert "not the Qdrant server" in index.info()["engine"]
    index.close()
    assert not os.path.exists(folder)
    with pytest.raises(NotBuiltError):
        index.search(Q, 1)
    other = rb.indexes.create("qdrant-edge", dim=DIM)
    other.build(X[:200])
    folder = other._folder
    assert folder is not None
    del other
    gc.collect()
    assert not os.path.exists(folder)


@pytest.mark.parametrize("name", ["usearch", "qdrant-edge"])
def test_add_delete_and_k_bounds(name: str) -> None:
    index = rb.indexes.create(name, dim=DIM)
    index.build(X[:500])
    new = index.add(X[500:600], ids=np.arange(10_000, 10_100))
    assert index.ntotal == 600 and new.tolist() == list(range(10_000, 10_100))
    ids, scores = index.search(X[550:551], 1)
    assert ids[0, 0] == 10_050 and scores[0, 0] == pytest.approx(1.0, abs=1e-4)
    index.delete([10_050, 3])
    assert index.ntotal == 598
    ids, _ = index.search(np.vstack([X[550], X[3]]), 5)
    assert 10_050 not in ids and 3 not in ids
    with pytest.raises(KTooLargeError):
        index.search(Q, 599)


def test_environment_records_engine_versions() -> None:
    from ragbench.env import environment

    libs = environment()["libraries"]
    assert libs["usearch"] not in (None, "", "unknown")
    assert libs["qdrant-edge-py"] not in (None, "", "unknown")


@pytest.mark.parametrize("dtype", ["f16", "i8"])
def test_usearch_quantized_save_load(dtype: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    index = rb.indexes.create("usearch", dim=DIM, metric="cosine", dtype=dtype)
    index.build(X)
    index.save(tmp_path / "u.rbi")
    loaded = rb.indexes.load(tmp_path / "u.rbi")
    assert loaded.build_params["dtype"] == dtype
    ids, scores = index.search(Q, 5)
    ids2, scores2 = loaded.search(Q, 5)
    assert (ids == ids2).all()
    np.testing.assert_array_equal(scores, scores2)


def test_usearch_payload_structure_is_checked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A payload with a valid checksum but an out-of-range neighbour never reaches usearch."""
    import struct

    from ragbench.errors import IndexFileError
    from ragbench.indexes.persist import read_index_file, write_index_file

    index = rb.indexes.create("usearch", dim=DIM)
    index.build(X[:300])
    index.save(tmp_path / "u.rbi")
    header, payload = read_index_file(tmp_path / "u.rbi")
    for key in ("magic", "format_version", "payload"):
        header.pop(key)
    # vectors (8 + 300 x 128 B), head (64 B), graph header (40 B), levels (300 x 2 B),
    # then node 0: key (8 B), level (2 B), neighbour count (4 B), first slot
    first_slot = 8 + 300 * DIM * 4 + 64 + 40 + 600 + 10 + 4
    data = bytearray(payload)
    data[first_slot : first_slot + 4] = struct.pack("<I", 10**9)
    write_index_file(tmp_path / "evil.rbi", header, bytes(data))
    with pytest.raises(IndexFileError, match="neighbour slot is out of range"):
        rb.indexes.load(tmp_path / "evil.rbi")
    data = bytearray(payload)
    data[8 + 5 * 4 : 8 + 6 * 4] = struct.pack("<f", float("nan"))
    write_index_file(tmp_path / "nan.rbi", header, bytes(data))
    with pytest.raises(IndexFileError, match="NaN or inf"):
        rb.indexes.load(tmp_path / "nan.rbi")
    write_index_file(tmp_path / "short.rbi", header, bytes(payload[:-8]))
    with pytest.raises(IndexFileError):
        rb.indexes.load(tmp_path / "short.rbi")

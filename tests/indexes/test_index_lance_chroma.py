"""Engine-specific behaviour of the ``lancedb`` and ``chroma`` backends (embedded engines)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import ragbench as rb
from ragbench.errors import ConfigError, KTooLargeError, NotBuiltError
from ragbench.timing import Parts

N, DIM, NQ = 1500, 32, 20
ROOT = Path(__file__).resolve().parents[2]


def _data(seed: int, n: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


X = _data(1, N)
Q = _data(2, NQ)


def _truth(metric: str, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    x, q = X.astype(np.float64), Q.astype(np.float64)
    s = -((q**2).sum(1)[:, None] - 2 * q @ x.T + (x**2).sum(1)) if metric == "l2" else q @ x.T
    if mask is not None:
        s[:, ~mask] = -np.inf
    ids = np.argsort(-s, axis=1)[:, :k]
    return ids, np.take_along_axis(s, ids, axis=1)


def _recall(ids: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(a) & set(b)) for a, b in zip(ids.tolist(), truth.tolist(), strict=True))
    return hits / truth.size


def _own_scores(metric: str, ids: np.ndarray, q: np.ndarray) -> np.ndarray:
    if metric == "l2":
        return -np.square(X[ids] - q[:, None, :]).sum(-1)
    return (X[ids] @ q[:, :, None])[:, :, 0]


@pytest.mark.parametrize("name", ["lancedb", "chroma"])
@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
def test_scores_follow_the_ragbench_convention(name: str, metric: str) -> None:
    """LanceDB's ``_distance`` and Chroma's distances become similarities / -squared distances."""
    params = {"ef_search": 200} if name == "chroma" else {}
    index = rb.indexes.create(name, dim=DIM, metric=metric, **params)
    index.build(X * np.float32(2.0) if metric == "cosine" else X)  # cosine ignores the scale
    ids, scores = index.search(Q, 10)
    want_ids, want_scores = _truth(metric, 10)
    np.testing.assert_allclose(scores, _own_scores(metric, ids, Q), atol=2e-5)
    if name == "lancedb":  # flat: exact
        assert (ids == want_ids).all()
        np.testing.assert_allclose(scores, want_scores, atol=2e-5)
    else:
        assert _recall(ids, want_ids) >= 0.95
        same = ids[:, 0] == want_ids[:, 0]
        assert same.mean() >= 0.9
        np.testing.assert_allclose(scores[same, 0], want_scores[same, 0], atol=2e-5)


@pytest.mark.parametrize("index_type", ["ivf_flat", "ivf_pq", "ivf_sq", "ivf_hnsw_sq"])
def test_lancedb_index_types_and_query_params(index_type: str) -> None:
    """nprobes/refine_factor/ef reach LanceDB per call: all partitions + refine is exact."""
    index = rb.indexes.create(
        "lancedb", dim=DIM, index_type=index_type, num_partitions=8, num_sub_vectors=8
    )
    index.build(X)
    assert index.info()["index_type"] == index_type
    truth, want_scores = _truth("ip", 10)
    ids, scores = index.search(Q, 10, nprobes=8, refine_factor=10, ef=200)
    assert _recall(ids, truth) >= 0.95
    np.testing.assert_allclose(scores, _own_scores("ip", ids, Q), atol=2e-5)
    one, _ = index.search(Q, 10, nprobes=1, refine_factor=10, ef=200)
    assert _recall(one, truth) < _recall(ids, truth)  # one of 8 lists misses neighbours
    if index_type in ("ivf_pq", "ivf_sq"):
        # without refine the scores are the codes' approximations, not the exact ones
        _, approx = index.search(Q, 10, nprobes=8)
        assert not np.allclose(approx, _own_scores("ip", _, Q), atol=1e-4)


def test_lancedb_bad_params() -> None:
    with pytest.raises(ConfigError, match="index_type='hnsw' is not one of flat, ivf_flat"):
        rb.indexes.create("lancedb", dim=DIM, index_type="hnsw")
    with pytest.raises(ConfigError, match="num_partitions"):
        rb.indexes.create("lancedb", dim=DIM, num_partitions=-1)
    index = rb.indexes.create("lancedb", dim=DIM)
    index.build(X[:100])
    with pytest.raises(ConfigError, match="nprobes must be"):
        index.search(Q[:1], 1, nprobes=0)
    assert index.search(Q[:1], 1, refine_factor=0)[0].shape == (1, 1)
    with pytest.raises(ConfigError, match="ef_search"):
        rb.indexes.create("chroma", dim=DIM, ef_search=0)
    # chroma takes ef per query (its ef_search, reopened on one build), checked like ef_search
    chroma = rb.indexes.create("chroma", dim=DIM)
    chroma.build(X[:100])
    try:
        with pytest.raises(ConfigError, match="ef"):
            chroma.search(Q[:1], 1, ef=0)
    finally:
        chroma.close()


def test_chroma_ef_search_is_a_build_parameter() -> None:
    """ef_search set at creation reaches Chroma's HNSW: a tiny one loses neighbours."""
    x = np.random.default_rng(5).standard_normal((6000, DIM)).astype(np.float32)
    q = np.random.default_rng(6).standard_normal((40, DIM)).astype(np.float32)
    truth = np.argsort(-(q @ x.T), axis=1)[:, :10]
    got = {}
    for ef in (10, 400):
        index = rb.indexes.create("chroma", dim=DIM, M=8, ef_construction=40, ef_search=ef)
        index.build(x)
        ids, _ = index.search(q, 10)
        got[ef] = _recall(ids, truth)
        index.close()
    assert got[400] >= 0.9 and got[10] < got[400]


@pytest.mark.parametrize("name", ["lancedb", "chroma"])
def test_filters_reach_the_engine(name: str) -> None:
    """in-graph is LanceDB's SQL prefilter / Chroma's ids=; only allowed rows come back."""
    index = rb.indexes.create(name, dim=DIM, **({"ef_search": 200} if name == "chroma" else {}))
    index.build(X)
    mask = np.random.default_rng(3).random(N) < 0.1
    truth, _ = _truth("ip", 10, mask)
    ids, scores = index.search(Q, 10, filter=mask, strategy="in-graph")
    assert mask[ids].all()
    if name == "lancedb":
        assert (ids == truth).all()  # flat + prefilter: the exact filtered top-k
    else:
        assert _recall(ids, truth) >= 0.95
    ids, scores = index.search(Q[:3], 10, filter=np.array([4, 9, 700]), strategy="in-graph")
    assert (np.sort(ids[:, :3], axis=1) == [4, 9, 700]).all() and (ids[:, 3:] == -1).all()
    assert np.isneginf(scores[:, 3:]).all()


@pytest.mark.parametrize("name", ["lancedb", "chroma"])
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


def test_lancedb_added_rows_are_searched_beside_its_ivf_index() -> None:
    index = rb.indexes.create("lancedb", dim=DIM, index_type="ivf_flat", num_partitions=4)
    index.build(X[:1000])
    new = index.add(X[1000:1010])
    ids, _ = index.search(X[1000:1010], 1, nprobes=4)
    assert (ids[:, 0] == new).all()


@pytest.mark.parametrize("name", ["lancedb", "chroma"])
def test_threads_searching_at_once_get_serial_answers(name: str) -> None:
    index = rb.indexes.create(name, dim=DIM)
    index.build(X)
    want = [index.search(Q[i : i + 1], 10) for i in range(NQ)]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(offset: int) -> None:
        try:
            start.wait()
            for rnd in range(5):
                for i in range(NQ):
                    j = (i + offset + rnd) % NQ
                    ids, scores = index.search(Q[j : j + 1], 10)
                    assert (ids == want[j][0]).all()
                    np.testing.assert_array_equal(scores, want[j][1])
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]


@pytest.mark.parametrize("name", ["lancedb", "chroma"])
def test_folder_removed_on_close_and_collect(name: str) -> None:
    index = rb.indexes.create(name, dim=DIM)
    index.build(X[:200])
    folder = index._folder  # type: ignore[attr-defined]
    assert folder is not None and os.path.isdir(folder)
    index.close()  # type: ignore[attr-defined]
    assert not os.path.exists(folder)
    with pytest.raises(NotBuiltError):
        index.search(Q, 1)
    other = rb.indexes.create(name, dim=DIM)
    other.build(X[:200])
    folder = other._folder  # type: ignore[attr-defined]
    del other
    gc.collect()
    assert not os.path.exists(folder)


def test_lancedb_last_parts() -> None:
    from time import perf_counter_ns

    index = rb.indexes.create("lancedb", dim=DIM)
    assert index.last_parts() is None  # type: ignore[attr-defined]
    index.build(X)
    t0 = perf_counter_ns()
    index.search(Q[:4], 5)
    wall = perf_counter_ns() - t0
    parts = index.last_parts()  # type: ignore[attr-defined]
    assert isinstance(parts, Parts) and list(parts) == ["prepare", "query", "decode"]
    assert all(v > 0 for v in parts.values()) and sum(parts.values()) <= wall
    assert parts["query"] > parts["decode"]
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(index.last_parts()))  # type: ignore[attr-defined]
    t.start()
    t.join()
    assert seen == [None]  # per thread
    index.search(Q[:2], 5, filter=np.arange(10), strategy="in-graph")
    assert index.last_parts() is None  # type: ignore[attr-defined]
    # an empty batch or a refused k makes no LanceDB call: a filtered search after it
    # (post: an unfiltered LanceDB call inside) still has no parts
    assert index.search(Q[:0], 5)[0].shape == (0, 5)
    with pytest.raises(rb.errors.InputError):
        index.search(Q[:1], 0)
    for strategy in ("post", "in-graph"):
        index.search(Q[:1], 5, filter=np.arange(50), strategy=strategy)
        assert index.last_parts() is None, strategy  # type: ignore[attr-defined]


_OFFLINE = """
import os, socket, sys, threading
attempts = []
def refuse(*args, **kwargs):
    attempts.append(args[1:] if len(args) > 1 else args)
    raise OSError("network unreachable (test)")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.getaddrinfo = refuse
socket.create_connection = refuse
import numpy as np
import ragbench as rb
x = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
for name in ("chroma", "lancedb"):
    idx = rb.indexes.create(name, dim=16, metric="cosine")
    idx.build(x)
    ids, _ = idx.search(x[:3], 2)
    assert (ids[:, 0] == [0, 1, 2]).all(), ids
    idx.add(x[:2]); idx.delete([0])
    idx.close()
print("attempts", len(attempts), attempts[:3])
print("posthog", "posthog" in sys.modules)
print("threads", sorted({t.name for t in threading.enumerate()}))
"""


def test_no_network_no_telemetry_no_model_download(tmp_path: Path) -> None:
    """With sockets refused: both engines work, nothing tried to connect, no model folder."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("CHROMA_SERVER_HOST", None)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_OFFLINE)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["attempts"].startswith("0 "), lines["attempts"]
    assert lines["posthog"] == "False"
    assert "posthog" not in lines["threads"].lower()
    # Chroma's default embedding function would download its ONNX model to
    # ~/.cache/chroma/onnx_models; nothing at all is written under HOME
    created = [str(p.relative_to(home)) for p in home.rglob("*")]
    assert created == [], created


def test_environment_records_engine_versions() -> None:
    from ragbench.env import environment

    libs = environment()["libraries"]
    for dist in ("lancedb", "chromadb", "pyarrow"):
        assert libs[dist] not in (None, "", "unknown"), dist


def test_lancedb_beside_a_foreign_datasets_module(tmp_path: Path) -> None:
    """A ``datasets`` namespace package (ragbench's own corpora folder, imported by
    transformers from a checkout) made ``import lancedb`` fail; the index works beside it."""
    (tmp_path / "datasets").mkdir()
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import datasets\n"
        "import numpy as np, ragbench as rb\n"
        "x = np.eye(8, dtype=np.float32)\n"
        "idx = rb.indexes.create('lancedb', dim=8); idx.build(x); idx.add(x[:2])\n"
        "print(idx.search(x[3:4], 1)[0][0, 0], 'Dataset' in dir(sys.modules['datasets']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["3", "False"]


# -- lancedb: attribute columns, filters as a SQL prefilter -----------------------------------

_NAMES = np.asarray(["plain", "it's", "o''k", 'say "hi"', "a\\b", "x') OR (1=1", "ünï"])
_RNG = np.random.default_rng(11)
_SCORE = _RNG.random(N)
_SCORE[::9] = np.nan  # null in the table: never allowed (numpy's comparisons agree)
ATTRS = {
    "tenant": _RNG.integers(0, 15, N),
    "year": _RNG.integers(1990, 2020, N),
    "score": _SCORE,
    "category": _NAMES[_RNG.integers(0, _NAMES.size, N)],
}
SPECS = [
    {"tenant": 3},
    {"tenant": [1, 4, 9]},
    {"year": [2000, 2004]},
    {"year": [2000.5, 2004.2]},
    {"score": [0.25, 0.5]},
    {"category": "it's"},
    {"category": ["o''k", 'say "hi"']},
    {"category": "a\\b", "tenant": [0, 1, 2, 3, 4, 5]},
    {"category": "x') OR (1=1"},
    {"category": "ünï", "year": [1990, 2010]},
]


def test_lancedb_where_prefilters_equal_the_allow_list_and_the_exact_neighbours() -> None:
    from ragbench.attributes import mask_of

    index = rb.indexes.create("lancedb", dim=DIM)
    index.set_attributes(ATTRS)
    index.build(X)
    assert index.filter_path == "where"
    assert index.info()["attribute_columns"] == {
        "tenant": "int64", "year": "int64", "score": "float64", "category": "string",
    }  # fmt: skip
    for spec in SPECS:
        allow = mask_of(ATTRS, spec)
        assert 0 < allow.sum() < N, spec
        ids, scores = index.search(Q, 10, where=spec)
        by_ids, by_ids_scores = index.search(Q, 10, filter=allow, strategy="in-graph")
        np.testing.assert_array_equal(ids, by_ids, err_msg=str(spec))
        np.testing.assert_allclose(scores, by_ids_scores, atol=1e-6)
        truth, _ = _truth("ip", 10, allow)
        for row, want in zip(ids, truth, strict=True):
            assert row[row >= 0].tolist() == want[: min(10, int(allow.sum()))].tolist(), spec
    per_query = [SPECS[i % len(SPECS)] for i in range(NQ)]
    ids, _ = index.search(Q, 10, where=per_query)
    masks = np.stack([mask_of(ATTRS, s) for s in per_query])
    np.testing.assert_array_equal(ids, index.search(Q, 10, filter=masks, strategy="in-graph")[0])


def test_lancedb_where_text_is_escaped_sql() -> None:
    from ragbench.indexes.attribute_filters import AttributeColumns, spec_terms, where_text

    attrs = AttributeColumns("t", ATTRS, ("id", "vector"))
    text = where_text(
        spec_terms(attrs, {"category": ["it's", "x') OR (1=1"], "year": [2000.5, 2004]})
    )
    assert (
        text == "(`category` IN ('it''s', 'x'') OR (1=1')) AND (`year` >= 2001 AND `year` <= 2004)"
    )
    assert where_text(spec_terms(attrs, {})) is None


def test_lancedb_where_fallbacks_and_added_rows() -> None:
    plain = rb.indexes.create("lancedb", dim=DIM)
    plain.build(X)
    assert plain.filter_path == "ids"
    with pytest.raises(ConfigError, match="set_attributes before build"):
        plain.search(Q, 10, where={"tenant": 3})
    allow = ATTRS["tenant"] == 3
    ids, _ = plain.search(Q, 10, where={"tenant": 3}, filter=allow)  # the mask decides
    np.testing.assert_array_equal(ids, plain.search(Q, 10, filter=allow, strategy="in-graph")[0])
    index = rb.indexes.create("lancedb", dim=DIM)
    with pytest.raises(ConfigError, match="backtick"):
        index.set_attributes({"a`b": ATTRS["tenant"]})
    with pytest.raises(ConfigError, match="taken by the table's own columns"):
        index.set_attributes({"vector": ATTRS["tenant"]})
    index.set_attributes(ATTRS)
    index.build(X)
    index.add(X[:5], ids=np.arange(5000, 5005))  # no attributes: null, never allowed by where=
    ids, _ = index.search(X[:5], 3, where={"tenant": [int(t) for t in range(15)]})
    assert not np.isin(ids, np.arange(5000, 5005)).any()
    index.delete([int(ids[0, 0])])
    again, _ = index.search(X[:5], 3, where={"tenant": list(range(15))})
    assert int(ids[0, 0]) not in again


def test_lancedb_saved_with_attribute_columns(tmp_path: Path) -> None:
    """Loaded from a file, the table's columns are used only when set_attributes names them."""
    index = rb.indexes.create("lancedb", dim=DIM)
    index.set_attributes(ATTRS)
    index.build(X)
    index.save(tmp_path / "l.rbi")
    loaded = rb.indexes.load(tmp_path / "l.rbi")
    assert loaded.filter_path == "ids"  # no set_attributes: the allow-list
    allow = ATTRS["tenant"] == 3
    want, _ = index.search(Q, 10, where={"tenant": 3})
    np.testing.assert_array_equal(loaded.search(Q, 10, where={"tenant": 3}, filter=allow)[0], want)


# -- lancedb: query parameters LanceDB refuses are ConfigErrors, from the API and the CLI -----


def test_lancedb_ef_below_k_times_refine_is_a_config_error() -> None:
    index = rb.indexes.create("lancedb", dim=DIM, index_type="ivf_hnsw_sq", num_partitions=4)
    index.build(X)
    assert index.search(Q, 10, ef=100, refine_factor=10)[0].shape == (NQ, 10)  # ef = k × rf
    assert index.search(Q, 10, ef=10)[0].shape == (NQ, 10)  # ef = k
    with pytest.raises(ConfigError, match=r"ef=80 is below k × refine_factor = 10 × 10 = 100"):
        index.search(Q, 10, ef=80, refine_factor=10)
    with pytest.raises(ConfigError, match=r"ef=9 is below k = 10"):
        index.search(Q, 10, ef=9)
    with pytest.raises(ConfigError, match="ef=20 is below k × refine_factor"):
        index.search(Q[:2], 10, filter=np.arange(500), strategy="in-graph", ef=20, refine_factor=5)
    # refine_factor=2**31-1 made LanceDB allocate 343 GB and abort the process
    with pytest.raises(ConfigError, match="candidates is more than 10000000"):
        index.search(Q, 10, ef=2**31 - 1, refine_factor=2**31 - 1)
    index.close()
    ivf = rb.indexes.create("lancedb", dim=DIM, index_type="ivf_pq", num_partitions=4)
    ivf.build(X)  # no HNSW: no ef rule
    assert ivf.search(Q, 10, ef=5, refine_factor=10)[0].shape == (NQ, 10)
    with pytest.raises(ConfigError, match="candidates is more than"):
        ivf.search(Q, 10, refine_factor=2**31 - 1)
    ivf.close()


def test_lancedb_search_errors_name_the_parameters_sent() -> None:
    from ragbench.indexes._lance_checks import search_error

    exc = RuntimeError(
        "lance error: LanceError(Index): something, /root/.cargo/x/src/a.rs:12:5\nmore"
    )
    err = search_error(exc, (("nprobes", 20), ("ef", 64)), 10)
    assert isinstance(err, ConfigError)
    assert str(err) == (
        "index 'lancedb': LanceDB refused the search (k=10, nprobes=20, ef=64): "
        "lance error: LanceError(Index): something"
    )


def test_cli_sweep_lancedb_ef_below_k_times_refine_is_one_line_exit_2(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAGBENCH_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "ragbench", "sweep", "--index", "lancedb"]
    cmd += ["--build", "index_type=ivf_hnsw_sq", "--param", "ef=80", "--param", "refine_factor=10"]
    cmd += ["--n", "1000", "--dim", "16", "--queries", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ragbench: error:")]
    assert len(errors) == 1 and "ef=80 is below k × refine_factor = 10 × 10 = 100" in errors[0]


def test_lancedb_with_attribute_columns_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached load would lose the attribute columns (the ``where`` path): such builds are not cached."""
    from ragbench.indexes import builds

    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(builds.CACHE_MIN_ENV, "0")
    cols = {"tenant": np.arange(N, dtype=np.int64) % 7}
    for _ in range(2):
        index = rb.indexes.create("lancedb", dim=DIM)
        index.set_attributes(cols)
        done = builds.build(index, X)
        assert done.index is index and index.info()["build"]["cached"] is False
        assert index.filter_path == "where"  # type: ignore[attr-defined]
        index.close()
    assert not (tmp_path / "indexes").exists()
    plain = rb.indexes.create("lancedb", dim=DIM)
    builds.build(plain, X)  # without attribute columns the cache takes it
    again = builds.build(rb.indexes.create("lancedb", dim=DIM), X)
    assert again.index.info()["build"]["cached"] is True
    assert np.array_equal(again.index.search(Q, 5)[0], plain.search(Q, 5)[0])
    plain.close()
    again.index.close()

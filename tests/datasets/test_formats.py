"""Field formats: each one round-trips, and each kind of broken file names itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench import datasets
from ragbench.datasets.formats import read_vecs
from ragbench.errors import ConfigError, DatasetError, MissingDependencyError


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))


def write_vecs(path: Path, arr: np.ndarray) -> None:
    """texmex layout: each row is an int32 dimension then the values."""
    n, d = arr.shape
    if path.suffix == ".bvecs":
        rec = np.empty((n, 4 + d), np.uint8)
        rec[:, :4] = np.array([d], "<i4").view(np.uint8)
        rec[:, 4:] = arr.astype(np.uint8)
    else:
        rec = np.empty((n, 1 + d), "<i4")
        rec[:, 0] = d
        body = arr.astype("<f4" if path.suffix == ".fvecs" else "<i4")
        rec[:, 1:] = body.view("<i4")
    rec.tofile(path)


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def rng_matrix(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


# --------------------------------------------------------------------------- HDF5


def write_hdf5(
    path: Path,
    distance: str,
    train: np.ndarray,
    test: np.ndarray,
    neighbors: np.ndarray | None = None,
) -> None:
    import h5py

    with h5py.File(path, "w") as fh:
        fh.attrs["distance"] = distance
        fh.create_dataset("train", data=train)
        fh.create_dataset("test", data=test)
        if neighbors is not None:
            fh.create_dataset("neighbors", data=neighbors)
            fh.create_dataset("distances", data=np.zeros(neighbors.shape, np.float32))


@pytest.mark.parametrize(
    ("distance", "metric"),
    [("angular", "cosine"), ("euclidean", "l2"), ("dot", "ip"), ("ip", "ip")],
)
def test_hdf5_round_trip_and_metric(tmp_path: Path, distance: str, metric: str) -> None:
    train, test = rng_matrix(50, 8), rng_matrix(4, 8, seed=1)
    neighbors = np.arange(40, dtype=np.int32).reshape(4, 10)[:, ::-1] % 50
    path = tmp_path / "tiny-8-angular.hdf5"
    write_hdf5(path, distance, train, test, neighbors)
    ds = datasets.load(path)
    assert ds.name == "tiny-8-angular" and ds.metric == metric
    assert ds.vectors is not None and ds.query_vectors_precomputed is not None
    np.testing.assert_array_equal(ds.vectors, train)
    np.testing.assert_array_equal(ds.query_vectors_precomputed, test)
    assert ds.ground_truth is not None and ds.ground_truth.dtype == np.int64
    np.testing.assert_array_equal(ds.ground_truth, neighbors)
    # The shipped neighbours are what recall is measured against.
    np.testing.assert_array_equal(ds.exact_neighbors(10), neighbors)
    assert ds.default_embedder == "precomputed"
    assert ds.corpus.texts[17] == "vector 17" and ds.queries.texts[3] == "query 3"
    assert ds.corpus_vectors("precomputed") is ds.vectors


def test_hdf5_metric_override_drops_shipped_ground_truth(tmp_path: Path) -> None:
    path = tmp_path / "x.h5"
    write_hdf5(path, "angular", rng_matrix(30, 4), rng_matrix(3, 4, 1), np.zeros((3, 5), np.int32))
    ds = datasets.load(path, metric="l2")
    assert ds.metric == "l2" and ds.ground_truth is None
    with pytest.raises(ConfigError, match="metric"):
        datasets.load(path, metric="hamming")
    with pytest.raises(ConfigError, match="'nprobe'"):
        datasets.load(path, nprobe=3)


def test_hdf5_without_h5py_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.hdf5"
    write_hdf5(path, "angular", rng_matrix(5, 2), rng_matrix(1, 2))
    monkeypatch.setitem(sys.modules, "h5py", None)  # makes `import h5py` fail
    with pytest.raises(MissingDependencyError, match=r"ragbench\[formats\]"):
        datasets.load(path)


def test_hdf5_broken_files(tmp_path: Path) -> None:
    import h5py

    nan = tmp_path / "nan.hdf5"
    train = rng_matrix(10, 4)
    train[3, 2] = np.nan
    write_hdf5(nan, "angular", train, rng_matrix(2, 4))
    with pytest.raises(DatasetError, match=r"nan\.hdf5.*train row 3"):
        datasets.load(nan)

    missing = tmp_path / "missing.hdf5"
    with h5py.File(missing, "w") as fh:
        fh.create_dataset("train", data=rng_matrix(5, 2))
    with pytest.raises(DatasetError, match=r"missing\.hdf5.*test"):
        datasets.load(missing)

    jaccard = tmp_path / "jac.hdf5"
    write_hdf5(jaccard, "jaccard", rng_matrix(5, 2), rng_matrix(1, 2))
    with pytest.raises(DatasetError, match=r"jac\.hdf5.*jaccard"):
        datasets.load(jaccard)

    bad_gt = tmp_path / "gt.hdf5"
    write_hdf5(
        bad_gt, "euclidean", rng_matrix(5, 2), rng_matrix(2, 2), np.full((2, 3), 9, np.int32)
    )
    with pytest.raises(DatasetError, match=r"gt\.hdf5.*outside \[0, 5\)"):
        datasets.load(bad_gt)

    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not an hdf5 file at all")
    with pytest.raises(DatasetError, match=r"garbage\.h5"):
        datasets.load(garbage)

    empty = tmp_path / "empty.hdf5"
    empty.write_bytes(b"")
    with pytest.raises(DatasetError, match=r"empty\.hdf5"):
        datasets.load(empty)


# --------------------------------------------------------------------------- texmex


@pytest.mark.parametrize("ext", ["fvecs", "bvecs"])
def test_texmex_folder_and_base_file(tmp_path: Path, ext: str) -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (40, 12)).astype(np.float32)
    query = rng.integers(0, 256, (5, 12)).astype(np.float32)
    gt = rng.integers(0, 40, (5, 7)).astype(np.int32)
    folder = tmp_path / "siftsmall"
    folder.mkdir()
    write_vecs(folder / f"siftsmall_base.{ext}", base)
    write_vecs(folder / f"siftsmall_query.{ext}", query)
    write_vecs(folder / "siftsmall_groundtruth.ivecs", gt)
    write_vecs(folder / f"siftsmall_learn.{ext}", base[:3])  # ignored

    for target in (folder, folder / f"siftsmall_base.{ext}"):
        ds = datasets.load(target)
        assert ds.name == "siftsmall" and ds.metric == "l2"
        assert ds.vectors is not None and ds.vectors.dtype == np.float32
        np.testing.assert_array_equal(ds.vectors, base)
        np.testing.assert_array_equal(ds.query_vectors_precomputed, query)
        np.testing.assert_array_equal(ds.ground_truth, gt)
        np.testing.assert_array_equal(ds.exact_neighbors(7), gt)


def test_texmex_without_ground_truth_uses_brute_force(tmp_path: Path) -> None:
    base, query = rng_matrix(30, 4), rng_matrix(3, 4, 1)
    write_vecs(tmp_path / "a_base.fvecs", base)
    write_vecs(tmp_path / "a_query.fvecs", query)
    ds = datasets.load(tmp_path / "a_base.fvecs")
    assert ds.ground_truth is None
    dist = ((query[:, None, :].astype(np.float64) - base[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(ds.exact_neighbors(4), np.argsort(dist, axis=1)[:, :4])


def test_read_vecs_round_trips_each_kind(tmp_path: Path) -> None:
    f = rng_matrix(6, 3)
    write_vecs(tmp_path / "x.fvecs", f)
    np.testing.assert_array_equal(read_vecs(tmp_path / "x.fvecs"), f)
    i = np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    write_vecs(tmp_path / "x.ivecs", i)
    got = read_vecs(tmp_path / "x.ivecs")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, i)
    b = np.arange(8, dtype=np.uint8).reshape(2, 4) * 30
    write_vecs(tmp_path / "x.bvecs", b)
    got = read_vecs(tmp_path / "x.bvecs")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, b.astype(np.float32))


def test_texmex_broken_files(tmp_path: Path) -> None:
    good = rng_matrix(5, 4)
    path = tmp_path / "t_base.fvecs"
    write_vecs(path, good)
    write_vecs(tmp_path / "t_query.fvecs", good[:2])

    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with pytest.raises(DatasetError, match=r"t_base\.fvecs: truncated"):
        datasets.load(path)

    # Same total size, but record 2 claims another dimension.
    patched = bytearray(data)
    patched[2 * 20 : 2 * 20 + 4] = np.array([7], "<i4").tobytes()
    path.write_bytes(bytes(patched))
    with pytest.raises(DatasetError, match=r"t_base\.fvecs: record 2 declares dimension 7"):
        datasets.load(path)

    nan = good.copy()
    nan[4, 0] = np.inf
    write_vecs(path, nan)
    with pytest.raises(DatasetError, match=r"t_base\.fvecs: vector row 4 holds NaN or inf"):
        datasets.load(path)

    path.write_bytes(b"")
    with pytest.raises(DatasetError, match=r"t_base\.fvecs: empty file"):
        datasets.load(path)

    path.write_bytes(np.array([-4], "<i4").tobytes())
    with pytest.raises(DatasetError, match=r"t_base\.fvecs: record 0 declares dimension -4"):
        datasets.load(path)

    write_vecs(path, good)
    write_vecs(tmp_path / "t_query.fvecs", rng_matrix(2, 3))
    with pytest.raises(
        DatasetError, match=r"t_base\.fvecs: corpus vectors have dimension 4 but queries have 3"
    ):
        datasets.load(path)

    (tmp_path / "t_query.fvecs").unlink()
    with pytest.raises(DatasetError, match=r"t_base\.fvecs: no queries: expected .*t_query\.fvecs"):
        datasets.load(path)

    lone = tmp_path / "vectors.fvecs"
    write_vecs(lone, good)
    with pytest.raises(DatasetError, match=r"vectors\.fvecs: expected the texmex layout"):
        datasets.load(lone)

    with pytest.raises(DatasetError, match=r"\.ivecs file holds ground truth"):
        write_vecs(tmp_path / "g.ivecs", np.zeros((1, 1), np.int32))
        datasets.load(tmp_path / "g.ivecs")


def test_texmex_ground_truth_out_of_range(tmp_path: Path) -> None:
    write_vecs(tmp_path / "s_base.fvecs", rng_matrix(5, 2))
    write_vecs(tmp_path / "s_query.fvecs", rng_matrix(2, 2))
    write_vecs(tmp_path / "s_groundtruth.ivecs", np.array([[0, 5], [1, 2]], np.int32))
    with pytest.raises(DatasetError, match=r"s_base\.fvecs: ground truth holds ids outside"):
        datasets.load(tmp_path)


# --------------------------------------------------------------------------- BEIR / JSONL


def test_beir_folder(tmp_path: Path) -> None:
    folder = tmp_path / "scifact"
    (folder / "qrels").mkdir(parents=True)
    write_jsonl(
        folder / "corpus.jsonl",
        [
            {
                "_id": "4983",
                "title": "Microstructural development",
                "text": "Alterations of the ...",
                "metadata": {},
            },
            {"_id": "5836", "title": "", "text": "Induction of myelodysplasia"},
        ],
    )
    write_jsonl(
        folder / "queries.jsonl",
        [{"_id": "1", "text": "0-dimensional biomaterials", "metadata": {}}],
    )
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t4983\t1\n")
    ds = datasets.load(folder)
    assert ds.name == "scifact"
    assert ds.corpus.ids == ["4983", "5836"]
    assert ds.corpus.texts == [
        "Microstructural development\nAlterations of the ...",
        "Induction of myelodysplasia",
    ]
    assert ds.corpus.metadata[0] == {"title": "Microstructural development"}
    assert ds.queries.ids == ["1"] and ds.queries.texts == ["0-dimensional biomaterials"]
    # the qrels are read now (issue 31): judged answers, by id and by row
    assert ds.qrels == {"1": {"4983": 1}}
    assert ds.qrels_source == str(folder / "qrels" / "test.tsv")
    judgments = ds.judgments()
    assert judgments is not None and judgments.grades == [{0: 1}]
    assert ds.vectors is None and ds.default_embedder == "minilm"


def test_jsonl_file_with_sibling_queries(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "docs.jsonl",
        [
            {"id": "a", "text": "first", "metadata": {"source": "x", "page": 3}},
            {"id": "b", "text": "second"},
        ],
    )
    (tmp_path / "queries.jsonl").write_text('{"id": "q1", "text": "which?"}\n\n')  # blank lines ok
    ds = datasets.load(tmp_path / "docs.jsonl")
    assert ds.name == "docs"
    assert ds.corpus.texts == ["first", "second"]
    assert ds.corpus.metadata == [{"source": "x", "page": "3"}, {}]
    assert ds.queries.texts == ["which?"]
    v1 = ds.corpus_vectors("hashing")
    v2 = datasets.load(tmp_path / "docs.jsonl").corpus_vectors("hashing")
    assert np.array_equal(v1, v2)


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        ('{"id": "a", "text": "x"}\n{"id": "b", "text": oops}\n', r"docs\.jsonl:2: bad JSON"),
        ('{"id": "a", "text": "x"}\n{"id": "b"}\n', r"docs\.jsonl:2: missing key 'text'"),
        ('{"text": "x"}\n', r"docs\.jsonl:1: missing key 'id'"),
        ('{"id": "a", "text": 5}\n', r"docs\.jsonl:1: text must be a string"),
        ('["a", "x"]\n', r"docs\.jsonl:1: expected a JSON object"),
        (
            '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n',
            r"docs\.jsonl:2: duplicate id 'a'",
        ),
        (
            '{"id": "a", "text": "x", "metadata": [1]}\n',
            r"docs\.jsonl:1: metadata must be an object",
        ),
        ("", r"docs\.jsonl: empty file"),
        ("\n\n", r"docs\.jsonl: empty file"),
    ],
)
def test_jsonl_malformed(tmp_path: Path, content: str, pattern: str) -> None:
    (tmp_path / "docs.jsonl").write_text(content)
    write_jsonl(tmp_path / "queries.jsonl", [{"id": "q", "text": "?"}])
    with pytest.raises(DatasetError, match=pattern):
        datasets.load(tmp_path / "docs.jsonl")


def test_jsonl_queries_problems(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "docs.jsonl", [{"id": "a", "text": "x"}])
    with pytest.raises(DatasetError, match=r"docs\.jsonl: no queries: expected .*queries\.jsonl"):
        datasets.load(tmp_path / "docs.jsonl")
    (tmp_path / "queries.jsonl").write_text('{"id": "q"\n')
    with pytest.raises(DatasetError, match=r"queries\.jsonl:1: bad JSON"):
        datasets.load(tmp_path / "docs.jsonl")
    (tmp_path / "queries.jsonl").write_text("")
    with pytest.raises(DatasetError, match=r"queries\.jsonl: empty file"):
        datasets.load(tmp_path / "docs.jsonl")


# --------------------------------------------------------------------------- npy


@pytest.mark.parametrize("queries_name", ["base_queries.npy", "queries.npy"])
def test_npy_with_sibling_queries(tmp_path: Path, queries_name: str) -> None:
    base, queries = rng_matrix(20, 5), rng_matrix(3, 5, 1)
    np.save(tmp_path / "base.npy", base.astype(np.float64))
    np.save(tmp_path / queries_name, queries)
    ds = datasets.load(tmp_path / "base.npy")
    assert ds.vectors is not None and ds.vectors.dtype == np.float32
    np.testing.assert_array_equal(ds.vectors, base)
    np.testing.assert_array_equal(ds.query_vectors_precomputed, queries)
    assert ds.metric == "ip" and ds.ground_truth is None
    want = np.argsort(-(queries.astype(np.float64) @ base.T.astype(np.float64)), axis=1)[:, :3]
    np.testing.assert_array_equal(ds.exact_neighbors(3), want)


def test_npy_broken(tmp_path: Path) -> None:
    path = tmp_path / "base.npy"
    np.save(path, rng_matrix(4, 3))
    with pytest.raises(
        DatasetError, match=r"base\.npy: no queries: expected base_queries\.npy or queries\.npy"
    ):
        datasets.load(path)
    np.save(tmp_path / "queries.npy", rng_matrix(2, 3))

    bad = rng_matrix(4, 3)
    bad[1, 1] = np.nan
    np.save(path, bad)
    with pytest.raises(DatasetError, match=r"base\.npy: vector row 1 holds NaN"):
        datasets.load(path)

    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DatasetError, match=r"base\.npy: not a plain numeric \.npy file"):
        datasets.load(path)

    np.save(path, np.zeros(5, np.float32))
    with pytest.raises(DatasetError, match=r"base\.npy: expected a 2-D float matrix"):
        datasets.load(path)

    np.save(path, np.zeros((0, 3), np.float32))
    with pytest.raises(DatasetError, match=r"base\.npy: the corpus has no vectors"):
        datasets.load(path)

    np.save(path, rng_matrix(4, 3))
    full = path.read_bytes()
    path.write_bytes(full[: len(full) - 7])
    with pytest.raises(DatasetError, match=r"base\.npy"):
        datasets.load(path)

    path.write_bytes(b"")
    with pytest.raises(DatasetError, match=r"base\.npy"):
        datasets.load(path)


# --------------------------------------------------------------------------- dispatch


def test_unknown_extension_and_empty_folder(tmp_path: Path) -> None:
    odd = tmp_path / "data.parquet"
    odd.write_bytes(b"PAR1")
    with pytest.raises(DatasetError, match=r"data\.parquet: unknown dataset format '\.parquet'"):
        datasets.load(odd)
    with pytest.raises(DatasetError, match="folder holds no dataset"):
        datasets.load(tmp_path)
    with pytest.raises(DatasetError, match="no such file"):
        datasets.load(tmp_path / "nothing.hdf5")

"""Filtered-search workloads: corpus attributes, filters at a selectivity, filtered truth, pipeline and sweep."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ragbench as rb
from ragbench import attributes, datasets
from ragbench.errors import ConfigError
from ragbench.results.records import filter_cliffs, read_records
from ragbench.settings.sources import normalize


@pytest.fixture(scope="module")
def synth() -> datasets.Dataset:
    return datasets.load("synthetic", n=3000, dim=32, n_queries=40, seed=3)


def test_synthetic_vectors_and_texts_unchanged_by_attributes(
    synth: datasets.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The attributes draw from a seed stream of their own: replacing them changes no vector bit.
    ds = datasets.load("synthetic", n=3000, dim=32, n_queries=20, seed=3)
    assert ds.vectors is not None and ds.query_vectors_precomputed is not None
    calls: list[int] = []

    def other_attributes(labels: np.ndarray, docs: np.ndarray, seed: int) -> dict[str, np.ndarray]:
        calls.append(seed)
        return {"tenant": np.zeros(labels.size, np.int64)}

    monkeypatch.setattr(attributes, "synthetic_attributes", other_attributes)
    from ragbench.datasets.synthetic_data import synthetic

    bare = synthetic(n=3000, dim=32, n_queries=20, seed=3)
    assert calls == [3] and set(bare.corpus.attributes) == {"tenant"}
    assert bare.vectors is not None and bare.query_vectors_precomputed is not None
    assert np.array_equal(bare.vectors, ds.vectors)
    assert np.array_equal(bare.query_vectors_precomputed, ds.query_vectors_precomputed)
    assert bare.corpus.texts == ds.corpus.texts and bare.queries.texts == ds.queries.texts
    # The same bits on every CPU (synthetic-v4 does its products without BLAS): digests taken on
    # an AMD EPYC with AVX-512 and reproduced there with OpenBLAS's Haswell (AVX2) and Prescott
    # kernels forced and numpy's SIMD dispatch limited to its baseline
    # (tests/datasets/test_datasets.py::test_synthetic_bits_do_not_depend_on_simd_kernels).
    assert (
        hashlib.sha256(ds.vectors.tobytes()).hexdigest()
        == "01743bf10073b5bf1d2d54dfc4e5048ff075c668aa9bcd9012fc4748f437f800"
    )
    assert (
        hashlib.sha256(ds.query_vectors_precomputed.tobytes()).hexdigest()
        == "8f65d7ad3d7f14391740aa4a0299fe7abef048730f361bfe4ab574ab91321acc"
    )
    # texts come from integer draws only: unchanged since before attributes existed (2fc8cb1)
    assert hashlib.sha256("".join(ds.corpus.texts).encode()).hexdigest()[:16] == "675cb935a1eff1d8"


def test_synthetic_attributes_shapes_and_laws(synth: datasets.Dataset) -> None:
    at = synth.corpus.attributes
    assert set(at) == {"tenant", "category", "year"}
    assert all(col.shape == (3000,) for col in at.values())
    _, counts = np.unique(at["tenant"], return_counts=True)
    counts = np.sort(counts)[::-1]
    assert counts[0] > 10 * np.median(counts)  # a heavy head: Zipf, not uniform
    assert at["year"].min() >= 1970 and at["year"].max() <= 2025
    # category follows topics: rows of one topic mostly share a category
    topics = np.asarray([int(m["cluster"]) for m in synth.corpus.metadata])
    big = np.bincount(topics).argmax()
    _, cat_counts = np.unique(at["category"][topics == big], return_counts=True)
    assert cat_counts.max() / cat_counts.sum() > 0.8
    again = datasets.load("synthetic", n=3000, dim=32, n_queries=40, seed=3)
    assert all(np.array_equal(at[k], again.corpus.attributes[k]) for k in at)


@pytest.mark.parametrize("attr", ["tenant", "category", "year"])
@pytest.mark.parametrize("correlated", [False, True])
@pytest.mark.parametrize("sel", [0.3, 0.03])
def test_achieved_selectivity_close_to_requested(
    synth: datasets.Dataset, attr: str, correlated: bool, sel: float
) -> None:
    qf = synth.query_filters({"attribute": attr, "selectivity": sel, "correlated": correlated})
    assert qf.masks.shape == (40, 3000)
    assert abs(qf.selectivity.mean() - sel) <= 0.15 * sel
    summary = qf.summary()
    assert summary["achieved_min"] <= summary["achieved_mean"] <= summary["achieved_max"]
    assert summary["achieved_per_query"] == pytest.approx(qf.masks.mean(axis=1).tolist())
    for i in range(0, 40, 7):
        # each written-out filter selects exactly its mask (an independent path)
        again = attributes.mask_of(synth.corpus.attributes, qf.specs[i])
        assert np.array_equal(again, qf.masks[i])
        assert qf.selectivity[i] == pytest.approx(again.mean())


def test_correlated_filters_allow_the_query_neighbourhood(synth: datasets.Dataset) -> None:
    near = synth.exact_neighbors(20)
    table = {"attribute": "category", "selectivity": 0.05}
    rand = synth.query_filters({**table, "correlated": False})
    corr = synth.query_filters({**table, "correlated": True})

    def near_allowed(qf: attributes.QueryFilters) -> float:
        return float(np.take_along_axis(qf.masks, near, axis=1).mean())

    assert near_allowed(corr) > 3 * near_allowed(rand)


def _numpy_filtered_topk(
    q: np.ndarray, x: np.ndarray, masks: np.ndarray, k: int
) -> list[list[int]]:
    out = []
    for i in range(len(q)):
        allowed = np.flatnonzero(masks[i])
        scores = x[allowed] @ q[i]
        order = allowed[np.lexsort((allowed, -scores))][:k]
        out.append(order.tolist() + [-1] * (k - len(order)))
    return out


def test_filtered_truth_equals_numpy(synth: datasets.Dataset) -> None:
    assert synth.vectors is not None and synth.query_vectors_precomputed is not None
    for table in (
        {"attribute": "tenant", "selectivity": 0.05},
        {"attribute": "year", "selectivity": 0.002},  # ~6 rows: some queries have < k
    ):
        qf = synth.query_filters(table)
        got = synth.exact_neighbors(10, filters=qf)
        want = _numpy_filtered_topk(synth.query_vectors_precomputed, synth.vectors, qf.masks, 10)
        assert got.tolist() == want
        assert (got == -1).any() == bool((qf.masks.sum(axis=1) < 10).any())
    plain = synth.exact_neighbors(10)
    assert not np.array_equal(plain, got)


def test_filter_table_errors(synth: datasets.Dataset) -> None:
    with pytest.raises(ConfigError, match="selectivity"):
        synth.query_filters({"attribute": "tenant", "selectivity": 0})
    with pytest.raises(ConfigError, match="not one of"):
        synth.query_filters({"attribute": "colour", "selectivity": 0.1})
    with pytest.raises(ConfigError, match="unknown key"):
        normalize({"retrieve": {"filter": {"selectivty": 0.1}}})
    with pytest.raises(ConfigError, match="filter_strategy"):
        normalize({"retrieve": {"filter_strategy": "sideways"}})


def test_pydocs_category_is_the_module() -> None:
    ds = datasets.load("pydocs")
    cat = ds.corpus.attributes["category"]
    src = [m["source"] for m in ds.corpus.metadata]
    i = next(j for j, s in enumerate(src) if s.startswith("Lib/logging/handlers.py"))
    assert cat[i] == "logging.handlers"
    i = next(j for j, s in enumerate(src) if s.startswith("pydoc_data.topics"))
    assert cat[i] == "pydoc_data.topics"
    assert len(set(cat.tolist())) > 50


def _jsonl_dataset(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        words = " ".join(f"w{int(w)}" for w in rng.integers(0, 30, 8))
        rows.append({"id": f"d{i}", "text": words, "tenant": i % 4, "year": 2000 + i % 10})
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    queries = [
        {"id": "q0", "text": "w1 w2 w3", "filter": {"tenant": 3}},
        {"id": "q1", "text": "w4 w5 w6", "filter": {"year": [2002, 2004]}},
        {"id": "q2", "text": "w7 w8", "filter": {"tenant": [0, 1], "year": [2000, 2005]}},
        {"id": "q3", "text": "w9 w10"},
    ]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    return tmp_path


def test_jsonl_fields_become_attributes_and_query_filters(tmp_path: Path) -> None:
    ds = datasets.load(_jsonl_dataset(tmp_path))
    at = ds.corpus.attributes
    assert at["tenant"].dtype == np.int64 and at["tenant"].tolist()[:5] == [0, 1, 2, 3, 0]
    qf = ds.query_filters({"from": "queries"})
    tenant, year = at["tenant"], at["year"]
    assert np.array_equal(qf.masks[0], tenant == 3)
    assert np.array_equal(qf.masks[1], (year >= 2002) & (year <= 2004))
    assert np.array_equal(qf.masks[2], np.isin(tenant, [0, 1]) & (year <= 2005))
    assert qf.masks[3].all()


def _filtered_pipeline_config(backend: str, strategy: str, table: dict[str, object]) -> dict:
    return {
        "dataset": {"name": "synthetic", "n": 3000, "dim": 32, "n_queries": 40, "seed": 3},
        "retrieve": {"backend": backend, "filter": table, "filter_strategy": strategy},
        "run": {"queries": 40, "warmup": 2, "k": 10, "k_candidates": 50},
        "cache": {"backend": "lru"},
    }


@pytest.mark.parametrize(
    ("backend", "strategy"), [("flat", "pre"), ("hnsw", "post"), ("hnsw", "in-graph")]
)
def test_pipeline_returns_only_allowed_rows(
    synth: datasets.Dataset, backend: str, strategy: str
) -> None:
    table = {"attribute": "tenant", "selectivity": 0.02}
    masks = synth.query_filters(table).masks
    with rb.Pipeline(_filtered_pipeline_config(backend, strategy, table)) as p:
        report = p.run()
        for i in range(40):
            hits = p.serve(i).hit_ids
            hits = hits[hits >= 0]
            assert len(hits) == min(10, int(masks[i].sum()))
            assert masks[i][hits].all()
    rec = report.to_record()
    assert rec["info"]["filter"]["strategy"] == strategy
    assert rec["info"]["filter"]["achieved_mean"] == pytest.approx(masks.mean())
    assert len(rec["recall"]) == 40
    if backend == "flat":
        assert rec["recall_at_k"] == 1.0 and rec["recall_p10"] == 1.0


def test_pipeline_filters_from_the_queries_file(tmp_path: Path) -> None:
    path = _jsonl_dataset(tmp_path)
    ds = datasets.load(path)
    masks = ds.query_filters({"from": "queries"}).masks
    cfg = {
        "dataset": {"path": str(path)},
        "embed": {"backend": "hashing"},
        "retrieve": {"backend": "flat", "filter": {"from": "queries"}, "filter_strategy": "pre"},
        "run": {"queries": 4, "warmup": 0, "k": 5, "k_candidates": 5},
    }
    with rb.Pipeline(cfg) as p:
        rec = p.run().to_record()
        for i in range(4):
            hits = p.serve(i).hit_ids
            assert masks[i][hits[hits >= 0]].all()
    assert rec["recall_at_k"] == 1.0


def test_text_index_with_filter_is_refused_at_setup() -> None:
    cfg = _filtered_pipeline_config("minhash-lsh", "post", {"selectivity": 0.1})
    cfg["embed"] = {"backend": "hashing"}
    with rb.Pipeline(cfg) as p, pytest.raises(ConfigError, match="filter"):
        p.setup()


def test_filter_cliffs_on_planted_lines() -> None:
    def pt(strategy: str, sel: float, recall: float, p50: float) -> dict[str, object]:
        return {
            "index": "hnsw",
            "build": {},
            "query": {"ef": 32},
            "rescore": None,
            "strategy": strategy,
            "selectivity": sel,
            "recall": recall,
            "p50_us": p50,
        }

    points = [
        pt("post", 0.5, 0.99, 100),
        pt("post", 0.05, 0.95, 150),
        pt("post", 0.005, 0.40, 160),  # recall cliff
        pt("pre", 0.5, 1.0, 900),
        pt("pre", 0.05, 1.0, 100),
        pt("pre", 0.005, 1.0, 20),  # none
        pt("in-graph", 0.5, 0.99, 100),
        pt("in-graph", 0.05, 0.98, 450),  # latency cliff
        pt("in-graph", 0.005, 0.97, 2000),
    ]
    cliffs = {c["strategy"]: c for c in filter_cliffs(points, target=0.9).values()}
    assert cliffs["post"]["selectivity"] == 0.005 and "recall" in cliffs["post"]["reason"]
    assert cliffs["post"]["above"] == 0.05
    assert cliffs["pre"]["selectivity"] is None
    assert cliffs["in-graph"]["selectivity"] == 0.05 and "p50" in cliffs["in-graph"]["reason"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragbench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_sweep_cli_marks_the_cliff_of_a_starved_index(tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    # ivf with nprobe=1 over 64 lists: a filter allowing 0.5 % of rows leaves most
    # probed lists empty of allowed rows, so in-graph recall falls; pre stays exact
    res = _cli(
        "sweep",
        "--dataset", "synthetic", "--n", "3000", "--dim", "32", "--seed", "3",
        "--index", "ivf", "--build", "nlist=64", "--param", "nprobe=1",
        "--queries", "40",
        "--filter-selectivity", "0.5,0.005", "--filter-strategy", "pre,in-graph",
        "--filter-attribute", "tenant",
        "--out", str(out), "--plot", str(tmp_path / "sweep.png"),
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    recs = read_records(out)
    filtered = [r for r in recs if r.get("strategy")]
    assert len(recs) == 5 and len(filtered) == 4
    by = {(r["strategy"], r["selectivity"]): r for r in filtered}
    assert by[("pre", 0.005)]["recall"] == 1.0
    assert by[("pre", 0.005)]["filter_cliff"]["selectivity"] is None
    starved = by[("in-graph", 0.005)]
    assert starved["recall"] < 0.9
    assert starved["filter_cliff"]["selectivity"] in (0.5, 0.005)
    assert all(r["filter_violations"] == 0 for r in filtered)
    assert len(starved["recall_per_query"]) == 40
    assert abs(starved["filter"]["achieved_mean"] - 0.005) < 0.002
    assert "filter cliff: ivf" in res.stdout and "◀" in res.stdout
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_run_cli_takes_the_filter_by_set(tmp_path: Path) -> None:
    res = _cli(
        "run", "-c", "hashing",
        "--set", "dataset.name=synthetic", "--set", "dataset.n=2000", "--set", "dataset.dim=32",
        "--set", "embed.backend=precomputed", "--queries", "20",
        "--set", "retrieve.filter.selectivity=0.05",
        "--set", "retrieve.filter.attribute=year",
        "--set", "retrieve.filter_strategy=pre",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "p10 1.00, at 0: 0 / 20 requests (vs exact filtered search)" in res.stdout
    assert "filter on year at selectivity 0.05 (random): achieved mean" in res.stdout
    assert "strategy pre" in res.stdout


def test_compare_cli_varies_selectivity_and_strategy(tmp_path: Path) -> None:
    out = tmp_path / "compare.jsonl"
    res = _cli(
        "compare", "--dataset", "synthetic", "--n", "2000", "--dim", "32",
        "--index", "flat", "--queries", "10",
        "--filter-selectivity", "0.5,0.01", "--filter-strategy", "pre,post",
        "--out", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    recs = read_records(out)
    got = {(r["info"]["filter"]["selectivity"], r["info"]["filter"]["strategy"]) for r in recs}
    assert got == {(0.5, "pre"), (0.5, "post"), (0.01, "pre"), (0.01, "post")}
    assert all(r["recall_at_k"] == 1.0 for r in recs)
    assert "sel=0.01/post" in res.stdout and "recall p10" in res.stdout


def test_a_filter_strategy_without_a_filter_is_refused() -> None:
    from ragbench.errors import ConfigError

    with pytest.raises(ConfigError, match="no \\[retrieve\\] filter"):
        normalize({"retrieve": {"backend": "hnsw", "filter_strategy": "pre"}})
    cfg = normalize(
        {"retrieve": {"backend": "hnsw", "filter_strategy": "pre", "filter": {"selectivity": 0.1}}}
    )
    assert cfg["retrieve"]["filter_strategy"] == "pre"


def test_a_value_longer_than_the_column_matches_nothing() -> None:
    """A str column's numpy width (here <U3) must not truncate the wanted value."""
    cols = {"tenant": np.array(["ab", "abc", "b", "abc"]), "year": np.arange(4, dtype=np.int64)}
    assert cols["tenant"].dtype == np.dtype("<U3")
    assert not attributes.mask_of(cols, {"tenant": "abcd"}).any()  # was rows 1 and 3
    assert not attributes.mask_of(cols, {"tenant": ["abcdef", "bb"]}).any()
    assert attributes.mask_of(cols, {"tenant": ["abcd", "abc"]}).tolist() == [0, 1, 0, 1]
    assert attributes.mask_of(cols, {"tenant": "ab"}).tolist() == [1, 0, 0, 0]
    assert attributes.mask_of(cols, {"tenant": "abcd", "year": [0, 3]}).sum() == 0
    qf = attributes.filters_from_specs(cols, [{"tenant": "abcd"}, None, {"tenant": "b"}])
    assert qf.masks.sum(axis=1).tolist() == [0, 4, 1]


def test_sweep_cli_sends_lancedb_the_filter_specs(tmp_path: Path) -> None:
    """A filtered sweep of a database index runs its ``where`` path and says so per point."""
    out = tmp_path / "sweep.jsonl"
    res = _cli(
        "sweep",
        "--dataset", "synthetic", "--n", "2000", "--dim", "16", "--seed", "3",
        "--index", "lancedb,hnsw", "--queries", "15",
        "--filter-selectivity", "0.05", "--filter-strategy", "auto,in-graph,post",
        "--filter-attribute", "tenant", "--out", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    recs = [r for r in read_records(out) if r.get("strategy")]
    lance = {r["strategy"]: r for r in recs if r["index"] == "lancedb"}
    assert {s: r["filter"]["path"] for s, r in lance.items()} == {
        "auto": "where",
        "in-graph": "where",
        "post": "post",
    }
    assert lance["in-graph"]["recall"] == 1.0  # flat table, SQL prefilter: exact
    assert all(r["filter_violations"] == 0 for r in recs)
    assert all("path" not in r["filter"] for r in recs if r["index"] == "hnsw")

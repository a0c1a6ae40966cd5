"""Issue 27: engines compared at equal recall (iso-recall reading), recall gaps warned about."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbench.cli import main
from ragbench.results import reading
from ragbench.results.reading.isorecall import Point, at_recall, frontier

ROOT = Path(__file__).resolve().parents[2]
SYN = ["--dataset", "synthetic", "--n", "3000", "--dim", "32", "--queries", "40"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


# A planted frontier: (recall, p50 µs, p99 µs); the 0.93 point is beaten by the 0.96 one on
# both axes (off the frontier), so it must not be one of the two bracketing points.
PLANTED = [
    Point(0.80, 100.0, 400.0),
    Point(0.90, 200.0, 600.0),
    Point(0.93, 700.0, 2000.0),
    Point(0.96, 500.0, 1500.0),
]


def test_interpolation_on_a_planted_frontier_equals_the_hand_computation() -> None:
    assert frontier(PLANTED) == [PLANTED[0], PLANTED[1], PLANTED[3]]
    at = at_recall(PLANTED, 0.95)
    # by hand: 0.95 is 5/6 of the way from 0.90 to 0.96
    assert at.how == "interpolated" and (at.below, at.above) == (PLANTED[1], PLANTED[3])
    assert at.p50_us == pytest.approx(200.0 + (5 / 6) * (500.0 - 200.0))  # 450
    assert at.p99_us == pytest.approx(600.0 + (5 / 6) * (1500.0 - 600.0))  # 1350
    exact = at_recall(PLANTED, 0.90)
    assert (exact.how, exact.p50_us, exact.p99_us) == ("measured", 200.0, 600.0)
    # never extrapolated: above the best point, and under the cheapest one
    high = at_recall(PLANTED, 0.99)
    assert high.how == "not reached" and not high.figure and high.below == PLANTED[3]
    low = at_recall(PLANTED, 0.70)
    assert low.how == "below the grid" and not low.figure and low.above == PLANTED[0]


def _point(index: str, recall: float, p50: float, p99: float, **query: Any) -> dict[str, Any]:
    return {
        "kind": "sweep",
        "index": index,
        "recall": recall,
        "p50_us": p50,
        "p99_us": p99,
        "query": query,
        "recall_target": 0.9,
        "recall_targets": [0.9, 0.95, 0.99],
    }


def test_the_sweep_reading_gives_each_index_at_equal_recall_and_their_ratio() -> None:
    recs = [_point("hnsw", p.recall, p.p50_us, p.p99_us, ef=i) for i, p in enumerate(PLANTED)]
    # lsh: 0.90 → 0.98 from 900 to 1700 µs: at 0.95, 900 + (5/8)·800 = 1400 µs
    recs += [_point("lsh", 0.90, 900.0, 1000.0, rescore=10)]
    recs += [_point("lsh", 0.98, 1700.0, 3000.0, rescore=100)]
    lines = reading.sweep_reading(recs)
    iso = [x for x in lines if "interpolated on each index's frontier" in x]
    assert iso == [
        "unfiltered: at recall 0.9, p50 / p99 interpolated on each index's frontier: "
        "hnsw 200 µs / 600 µs; lsh 900 µs / 1,000 µs (4.50× hnsw)",
        "unfiltered: at recall 0.95, p50 / p99 interpolated on each index's frontier: "
        "hnsw 450 µs / 1,350 µs; lsh 1,400 µs / 2,250 µs (3.11× hnsw)",
        "unfiltered: at recall 0.99, p50 / p99 interpolated on each index's frontier: "
        "hnsw not reached (best 0.960); lsh not reached (best 0.980)",
    ]


def _lerp_at(recs: list[dict[str, Any]], target: float) -> float | None:
    """By hand: the p50 at ``target`` between the frontier's two points around it."""
    front: list[tuple[float, float]] = []
    for r in sorted(recs, key=lambda r: (-r["recall"], r["p50_us"])):
        if not front or r["p50_us"] < front[-1][1]:
            front.append((r["recall"], r["p50_us"]))
    front.reverse()
    for (r0, t0), (r1, t1) in zip(front, front[1:], strict=False):
        if r0 < target <= r1:
            return t0 + (target - r0) / (r1 - r0) * (t1 - t0)
    return None


def test_sweep_cli_reads_its_points_at_the_recall_targets(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SYN, "--index", "hnsw", "--param", "ef=4,8,16,64", "--build", "M=4"]
    code, stdout, err = cli(capsys, *argv, "--recall-target", "0.95,0.8", "--out", str(out))
    assert code == 0, err
    recs = _records(out)
    assert {r["recall_target"] for r in recs} == {0.8}  # the lowest: cliffs, the cheapest point
    assert all(r["recall_targets"] == [0.8, 0.95] for r in recs)
    lines = [x for x in stdout.splitlines() if "interpolated on each index's frontier" in x]
    assert [x.split(",")[0] for x in lines] == [
        "unfiltered: at recall 0.8",
        "unfiltered: at recall 0.95",
    ]
    for line, target in zip(lines, (0.8, 0.95), strict=True):
        want = _lerp_at(recs, target)
        if want is None:
            assert "hnsw not reached" in line or "hnsw ≤" in line
            continue
        (shown,) = re.findall(r"hnsw ([0-9.,]+) µs(?: \[[^\]]*\])? /", line)
        assert float(shown.replace(",", "")) == pytest.approx(want, rel=0.01, abs=0.06)


@pytest.mark.parametrize("value", ["0.9,1.5", "0,0.9", "x", "0.9,,0.95"])
def test_a_bad_recall_target_is_one_line_and_exit_2(value: str, capsys) -> None:
    code, stdout, err = cli(capsys, "sweep", *SYN, "--index", "hnsw", "--recall-target", value)
    assert code == 2 and "--recall-target" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_compare_at_different_recall_warns_with_the_gap(tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.jsonl"
    argv = ["compare", "--dataset", "synthetic", "--n", "2000", "--dim", "32", "--queries", "25"]
    argv += ["--index", "flat,lsh", "--k-candidates", "10", "--out", str(out)]
    code, stdout, err = cli(capsys, *argv)
    assert code == 0, err
    recs = {r["label"]: r["recall_at_k"] for r in _records(out)}
    low, high = min(recs, key=recs.__getitem__), max(recs, key=recs.__getitem__)
    assert recs[high] - recs[low] > 0.01, "lsh should lose recall against flat here"
    (warning,) = [x for x in stdout.splitlines() if "not at equal recall" in x]
    assert warning.startswith(
        f"WARNING: the rows are not at equal recall: {low} {recs[low]:.3f} vs {high} "
        f"{recs[high]:.3f}, a gap of {recs[high] - recs[low]:.3f} (more than 0.01)"
    )


def test_compare_of_one_index_with_two_codecs_gets_no_recall_warning(capsys) -> None:
    argv = ["compare", "--dataset", "synthetic", "--n", "2000", "--dim", "32", "--queries", "10"]
    code, stdout, err = cli(capsys, *argv, "--index", "lsh", "--codec", "json,protobuf")
    assert code == 0, err
    assert "not at equal recall" not in stdout


def _hooks() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_hooks", module)
    spec.loader.exec_module(module)
    return module


def test_the_engines_table_reads_the_sweeps_at_equal_recall(tmp_path: Path) -> None:
    run = {
        "schema": "ragbench.run/1",
        "kind": "run",
        "label": "hnsw+ef=20",
        "dataset": {"name": "d"},
        "requests": 3,
        "recall_at_k": 0.95,
        "recall_p10": 0.9,
        "setup_s": {"index_build": 1.0},
        "summary": {"retrieve": {"p50_us": 200.0, "p50_us_ci": [190, 210], "p99_us": 300.0}},
        "samples_ns": {"retrieve": [100_000, 200_000, 300_000]},
        "info": {"index": {"backend": "hnsw", "params": {}, "build": {"deterministic": True}}},
    }
    sweep = [
        {"schema": "ragbench.sweep/1", **_point("hnsw", p.recall, p.p50_us, p.p99_us)}
        for p in PLANTED
    ]
    sweep += [{"schema": "ragbench.sweep/1", **_point("usearch", 0.90, 600.0, 900.0)}]
    sweep += [{"schema": "ragbench.sweep/1", **_point("usearch", 0.99, 1500.0, 3000.0)}]
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    (tmp_path / "sweep.jsonl").write_text("\n".join(map(json.dumps, sweep)) + "\n")
    text = _hooks().expand("<!-- gen: engines runs.jsonl sweep.jsonl -->", tmp_path)
    rows = {ln.split(" | ")[0]: ln.strip("| ").split(" | ") for ln in text.splitlines()}
    # usearch at 0.95: 600 + (5/9)·900 = 1,100 µs; hnsw 450 (above): 2.44×
    assert rows["| `hnsw` sweep"][1:] == ["200 / 600", "450 / 1,350", "not reached (best 0.960)"]
    assert rows["| `usearch` sweep"][1:] == [
        "600 / 900 (3.00×)",
        "1,100 / 2,067 (2.44×)",
        "1,500 / 3,000",
    ]


# ---------------------------------------------------------------- recall as the user meets it


def _zero_cells(table: str, label: str) -> list[str]:
    """The ``N / M`` cells of ``label``'s row of a printed table."""
    row = next(ln for ln in table.splitlines() if ln.startswith(f"│ {label} "))
    return re.findall(r"\b\d[\d,]* / \d[\d,]*\b", row)


def test_compare_records_and_shows_the_requests_at_recall_zero(tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.jsonl"
    argv = ["compare", "--dataset", "synthetic", "--n", "2000", "--dim", "32", "--queries", "20"]
    code, stdout, err = cli(
        capsys, *argv, "--index", "flat,lsh", "--k-candidates", "10", "--out", str(out)
    )
    assert code == 0, err
    recs = _records(out)
    for rec in recs:
        zero = sum(1 for v in rec["recall"] if v == 0)
        assert rec["recall_zero"] == zero
        assert _zero_cells(stdout, rec["label"]) == [f"{zero} / {len(rec['recall'])}"]
    assert "recall 0" in stdout
    # a record written before recall_zero: counted from its per-request recalls, shown by report
    planted = dict(recs[1])
    del planted["recall_zero"]
    planted["recall"] = [0.0, 0.0, 0.0] + planted["recall"][3:]
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(recs[0]) + "\n" + json.dumps(planted) + "\n")
    code, shown, err = cli(capsys, "report", str(old))
    assert code == 0, err
    want = sum(1 for v in planted["recall"] if v == 0)
    assert want >= 3
    assert _zero_cells(shown, planted["label"]) == [f"{want} / {len(planted['recall'])}"]
    one = tmp_path / "run.jsonl"
    argv = ["run", "-c", "hashing", "--dataset", "synthetic", "--queries", "12", "--out", str(one)]
    code, shown, err = cli(capsys, *argv, "--set", "retrieve.search.ef=1")
    assert code == 0, err
    (rec,) = _records(one)
    zero = sum(1 for v in rec["recall"] if v == 0)
    assert f"at 0: {zero} / {len(rec['recall'])} requests" in shown


def test_sweep_records_and_shows_the_queries_at_recall_zero(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SYN, "--index", "hnsw", "--param", "ef=1,64", "--build", "M=2"]
    code, stdout, err = cli(capsys, *argv, "--out", str(out))
    assert code == 0, err
    for rec in _records(out):
        zero = sum(1 for v in rec["recall_per_query"] if v == 0)
        assert rec["recall_zero"] == zero
        row = next(
            ln
            for ln in stdout.splitlines()
            if f" ef={rec['query']['ef']}" in ln and ln.startswith("│")
        )
        assert f" {zero} / {len(rec['recall_per_query'])} " in row


# ---------------------------------------------------------------- equal threads


def test_qdrant_searches_with_the_configured_threads(monkeypatch, tmp_path: Path) -> None:
    """Its search pool is ``search_threads`` (1 by default), not the build's thread count, at
    build (one thread or --fast-build) and at load (the index cache's path) alike."""
    import numpy as np
    import qdrant_edge

    from ragbench import indexes, threads
    from ragbench.indexes import builds

    seen: list[tuple[str, int]] = []
    real = qdrant_edge.EdgeShard

    class Spy:
        @staticmethod
        def create(path: str, config: Any) -> Any:
            seen.append(("create", config.max_search_threads))
            return real.create(path, config)

        @staticmethod
        def load(path: str, config: Any) -> Any:
            seen.append(("load", config.max_search_threads))
            return real.load(path, config)

    monkeypatch.setattr(qdrant_edge, "EdgeShard", Spy)
    before = threads.get_threads()
    threads.set_threads(2)
    try:
        X = np.random.default_rng(0).standard_normal((200, 8)).astype(np.float32)
        for fast in (False, True):
            idx = indexes.create("qdrant-edge", dim=8)
            builds.build(idx, X, fast=fast)
            assert idx.info()["search_threads"] == 1
            idx.save(tmp_path / f"q{fast}.rbi")
            loaded = indexes.load(tmp_path / f"q{fast}.rbi")
            assert loaded.info()["search_threads"] == 1
            loaded.search(X[:1], 5)
        three = indexes.create("qdrant-edge", dim=8, search_threads=3)
        builds.build(three, X)
        three.search(X[:1], 5)
    finally:
        threads.set_threads(before)
    assert seen == [("create", 1), ("load", 1), ("create", 1), ("load", 1), ("create", 3)]


@pytest.mark.parametrize("value", [0, 257, "two"])
def test_a_bad_qdrant_search_threads_is_refused(value: Any) -> None:
    from ragbench import indexes
    from ragbench.errors import ConfigError

    with pytest.raises(ConfigError, match="search_threads"):
        indexes.create("qdrant-edge", dim=8, search_threads=value)


def test_sweep_records_and_shows_every_engines_search_threads(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "500", "--dim", "16", "--queries", "10"]
    argv += ["--index", "hnsw,qdrant-edge", "--param", "ef=16", "--out", str(out)]
    code, stdout, err = cli(capsys, *argv)
    assert code == 0, err
    recs = _records(out)
    assert {(r["index"], r["search_threads"]) for r in recs} == {("hnsw", 1), ("qdrant-edge", 1)}
    assert {r["build"]["search_threads"] for r in recs if r["index"] == "qdrant-edge"} == {1}
    assert "; search threads per query: 1; cache state: hot" in stdout.replace(" ", " ")


def test_compare_records_and_shows_every_engines_search_threads(tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.jsonl"
    argv = ["compare", "--dataset", "synthetic", "--n", "500", "--dim", "16", "--queries", "10"]
    code, stdout, err = cli(capsys, *argv, "--index", "hnsw,qdrant-edge", "--out", str(out))
    assert code == 0, err
    got = {
        r["info"]["index"]["backend"]: r["info"]["index"]["search_threads"] for r in _records(out)
    }
    assert got == {"hnsw": 1, "qdrant-edge": 1}
    (title,) = [ln for ln in stdout.splitlines() if ln.startswith("side by side")]
    assert "; search threads per query: 1; cache state: after-stages" in title


# ---------------------------------------------------------------- determinism, checked


def _build_cases() -> list[tuple[str, dict[str, Any]]]:
    from ragbench import indexes

    cases = [(name, {}) for name in indexes.names()]
    return cases + [("pgvector", {"index": "flat"})]


#: The backends whose one-thread builds are known to differ (their records say so).
NOT_REPRODUCIBLE = {("chroma", ""), ("pgvector", "")}


@pytest.mark.parametrize(
    ("name", "build"), _build_cases(), ids=lambda v: v if isinstance(v, str) else str(v or "")
)
def test_a_backend_called_deterministic_builds_the_same_index_twice(
    name: str, build: dict[str, Any], monkeypatch, tmp_path: Path
) -> None:
    """Two one-thread builds of the same data (through ragbench.indexes.builds, as every driver
    builds): identical ids and scores when the record says ``deterministic: true``."""
    # two real builds: no index cache (a slow build would be saved, the second one loaded)
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RAGBENCH_INDEX_CACHE_MIN_S", "inf")
    import numpy as np
    from pgshared import params as pg_params

    from ragbench import indexes
    from ragbench.indexes import builds

    rng = np.random.default_rng(7)
    X = rng.standard_normal((3000, 32)).astype(np.float32)
    Q = rng.standard_normal((60, 32)).astype(np.float32)
    texts = [f"doc {i} alpha{i % 37} beta{i % 11} gamma{i % 5}" for i in range(3000)]
    results, claims = [], set()
    for _ in range(2):
        idx = indexes.create(name, dim=32, **build, **pg_params(name))
        data, queries = (texts, texts[:60]) if idx.input_kind == "texts" else (X, Q)
        if idx.input_kind == "both":  # hybrid: vectors and texts together
            from ragbench.indexes.hybrid_index import Pair

            data, queries = Pair(X, texts), Pair(Q, texts[:60])
        built = builds.build(idx, data)
        assert not built.index.build_record.get("cached")
        claims.add(bool(built.index.build_record["deterministic"]))
        results.append(built.index.search(queries, 10))
        close = getattr(built.index, "close", None)
        if callable(close):
            close()
    (claim,) = claims
    if (name, build.get("index", "")) in NOT_REPRODUCIBLE:
        assert claim is False  # and a record of it says "deterministic: false"
        return
    assert claim is True, f"{name} no longer claims reproducible builds: add it to the set"
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_chroma_builds_do_differ_so_it_is_not_called_deterministic() -> None:
    """The reason chroma is in NOT_REPRODUCIBLE: the same rows twice give other neighbours."""
    import numpy as np

    from ragbench import indexes
    from ragbench.indexes import builds

    rng = np.random.default_rng(7)
    X = rng.standard_normal((3000, 32)).astype(np.float32)
    Q = rng.standard_normal((60, 32)).astype(np.float32)
    ids = []
    for _ in range(2):
        idx = indexes.create("chroma", dim=32, ef_search=10)
        ids.append(builds.build(idx, X).index.search(Q, 10)[0])
        idx.close()
    assert not np.array_equal(ids[0], ids[1])


@pytest.mark.parametrize(
    ("name", "grid"),
    [
        ("chroma", ["ef=8,128"]),
        ("lancedb", ["nprobes=1,4", "refine_factor=0,2"]),
        ("hnsw", ["ef=8,128"]),
    ],
)
def test_a_query_parameter_sweep_builds_once(
    name: str, grid: list[str], tmp_path: Path, capsys, monkeypatch
) -> None:
    from ragbench import indexes

    cls = type(indexes.create(name, dim=32))
    built: list[int] = []
    real = cls.build

    def counted(self: Any, data: Any) -> None:
        built.append(len(data))
        real(self, data)

    monkeypatch.setattr(cls, "build", counted)
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SYN, "--index", name, *[a for g in grid for a in ("--param", g)]]
    code, stdout, err = cli(capsys, *argv, "--out", str(out))
    assert code == 0, err
    recs = _records(out)
    assert len(recs) == np.prod([len(g.split("=")[1].split(",")) for g in grid]) >= 2
    # one build of the 3000 rows, every query-parameter point measured on it (the memory
    # reading's throw-away build of the engine on 2000 rows is not one: ragbench.sweeps.memory)
    assert built.count(3000) == 1 and len(built) <= 2
    if name == "chroma":  # and the ef asked for is the one searched with
        low, high = sorted(recs, key=lambda r: r["query"]["ef"])
        assert low["recall"] < high["recall"]
        assert all(r["build_info"]["deterministic"] is False for r in recs)


def test_an_engine_that_cannot_be_limited_says_so_in_the_header(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "500", "--dim", "16", "--queries", "10"]
    argv += ["--index", "hnsw,lancedb", "--out", str(out)]
    code, stdout, err = cli(capsys, *argv)
    assert code == 0, err
    assert {(r["index"], r["search_threads"]) for r in _records(out)} == {
        ("hnsw", 1),
        ("lancedb", None),
    }
    assert "; search threads per query: 1, except lancedb not limited" in stdout


def test_a_codec_ranking_says_it_measures_the_stage_not_the_library(capsys) -> None:
    argv = ["compare", "--dataset", "synthetic", "--n", "500", "--dim", "16", "--queries", "10"]
    code, stdout, err = cli(capsys, *argv, "--codec", "json,protobuf")
    assert code == 0, err
    lines = stdout.splitlines()
    ranked = next(i for i, ln in enumerate(lines) if ln.startswith("codec (serialize + "))
    assert lines[ranked + 1 :].index(reading.runs.CODEC_NOTE) <= 1  # right under it
    # and the same codecs ranked on their library calls alone, from the records' own figures
    alone = next(ln for ln in lines if ln.startswith("codec, the library calls alone"))
    ranked_alone = alone.split("): ", 1)[1]
    assert ("protobuf" in ranked_alone) and ("json" in ranked_alone)
    assert re.search(r"\d\.\d\d× faster than", ranked_alone), alone


def test_the_codec_library_figures_are_recorded_and_match_a_direct_timing(tmp_path: Path) -> None:
    """Each run record carries its codec's library round trip; the figures are of the real
    calls: the protobuf round trip reads faster than stdlib json's, as the calls timed here do."""
    import timeit

    out = tmp_path / "c.jsonl"
    argv = ["compare", "--dataset", "synthetic", "--n", "500", "--dim", "16", "--queries", "10"]
    assert main([*argv, "--codec", "json,protobuf", "--out", str(out)]) == 0
    recs = {r["config"]["serialize"]["backend"]: r for r in _records(out)}
    ns = {name: recs[name]["info"]["codec_library_ns"] for name in ("json", "protobuf")}
    assert all(len(v) == 41 and min(v) > 0 for v in ns.values())
    from ragbench import codecs
    from ragbench.types import Hit, RetrievalResult

    result = RetrievalResult(
        "q", "query", [Hit(f"d{i}", 1.0 / (i + 1), "t" * 200) for i in range(10)]
    )
    direct = {
        name: min(
            timeit.repeat(codecs.create(name).library_round_trip(result), number=200, repeat=5)
        )
        for name in ("json", "protobuf")
    }
    assert (direct["protobuf"] < direct["json"]) == (
        float(np.median(ns["protobuf"])) < float(np.median(ns["json"]))
    )


def test_the_engines_table_says_when_compare_and_sweep_read_other_queries(tmp_path: Path) -> None:
    run = {
        "schema": "ragbench.run/1",
        "kind": "run",
        "label": "hnsw+ef=20",
        "dataset": {"name": "d"},
        "config": {"run": {"queries": 120}},
        "requests": 3,
        "recall_at_k": 0.95,
        "recall_p10": 0.9,
        "setup_s": {"index_build": 1.0},
        "summary": {"retrieve": {"p50_us": 200.0, "p50_us_ci": [190, 210], "p99_us": 300.0}},
        "samples_ns": {"retrieve": [100_000, 200_000, 300_000]},
        "info": {"index": {"backend": "hnsw", "params": {}, "build": {"deterministic": True}}},
    }
    sweep = [
        {"schema": "ragbench.sweep/1", "queries": 100, **_point("hnsw", p.recall, p.p50_us, 1.0)}
        for p in PLANTED
    ]
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    (tmp_path / "sweep.jsonl").write_text("\n".join(map(json.dumps, sweep)) + "\n")
    hooks = _hooks()
    text = hooks.expand("<!-- gen: engines runs.jsonl sweep.jsonl -->", tmp_path)
    assert "NOT the same queries: the sweep measured the dataset's first 100 queries, " in text
    assert "the compare its first 120" in text
    run["config"]["run"]["queries"] = 100
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    assert "NOT the same queries" not in hooks.expand(
        "<!-- gen: engines runs.jsonl sweep.jsonl -->", tmp_path
    )
    # (the memory method's sentence sits between the threads and the cache state)
    assert "; search threads per query not recorded (older records); memory " in text
    run["info"]["index"]["search_threads"] = 1
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    text = hooks.expand("<!-- gen: engines runs.jsonl sweep.jsonl -->", tmp_path)
    assert (
        "; search threads per query: 1; memory " in text and "; cache state: after-stages" in text
    )

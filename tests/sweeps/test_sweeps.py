from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ragbench import indexes
from ragbench.cli import main
from ragbench.results.records import growth_exponents, pareto
from ragbench.sweeps.points import EF_RAISED_TO_CANDIDATES, effective_query

SYN = ["--dataset", "synthetic", "--n", "3000", "--dim", "32", "--queries", "40"]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_pareto_marks_undominated_points() -> None:
    pts = [
        {"recall": 0.90, "qps_batch": 1000},
        {"recall": 0.95, "qps_batch": 500},
        {"recall": 0.85, "qps_batch": 400},  # dominated by the first
        {"recall": 0.99, "qps_batch": 100},
        {"recall": 0.95, "qps_batch": 300},  # dominated by the second
    ]
    assert pareto(pts, y="qps_batch") == [True, True, False, True, False]
    single = [{"recall": p["recall"], "qps_single": p["qps_batch"]} for p in pts]
    assert pareto(single) == [True, True, False, True, False]  # the default axis


def test_growth_exponent_of_a_linear_series_is_one() -> None:
    recs = [
        {"kind": "scale", "index": "flat", "n": n, "p50_us": n / 100}
        for n in (1000, 10_000, 100_000)
    ]
    recs += [
        {"kind": "scale", "index": "hnsw", "n": n, "p50_us": 50.0} for n in (1000, 10_000, 100_000)
    ]
    exps = growth_exponents(recs)
    assert exps["flat"] == pytest.approx(1.0)
    assert exps["hnsw"] == pytest.approx(0.0, abs=1e-9)


def test_sweep_cli_records_every_point_and_marks_pareto(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep.jsonl"
    png = tmp_path / "frontier.png"
    code, stdout, err = cli(
        capsys,
        "sweep",
        *SYN,
        "--index",
        "hnsw,ivf,lsh",
        "--param",
        "ef=8,64",
        "--param",
        "nprobe=1,16",
        "--param",
        "rescore=10,200",
        "--build",
        "nlist=32",
        "--out",
        str(out),
        "--plot",
        str(png),
    )
    assert code == 0, err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    by_index: dict[str, list[dict]] = {}
    for r in recs:
        by_index.setdefault(r["index"], []).append(r)
    # ef applies to hnsw only, nprobe to ivf only, rescore to all: 2x2, 2x2, 1x2
    assert len(by_index["hnsw"]) == 4 and len(by_index["ivf"]) == 4 and len(by_index["lsh"]) == 2
    for r in recs:
        assert r["schema"] == "ragbench.sweep/1"
        # re-scored points time the search and the re-scoring as separate steps
        assert ("rescore_p50_us" in r) == (r["rescore"] is not None)
        assert r["memory_bytes"] > 0 and r["build_s"] > 0 and r["qps_batch"] > 0
        assert "env" in r
    hnsw = {(r["query"]["ef"], r["rescore"]): r["recall"] for r in by_index["hnsw"]}
    assert hnsw[(64, 200)] >= hnsw[(8, 10)]
    ivf = {(r["query"]["nprobe"], r["rescore"]): r["recall"] for r in by_index["ivf"]}
    assert ivf[(16, 200)] >= ivf[(1, 10)]
    lsh = {r["rescore"]: r["recall"] for r in by_index["lsh"]}
    assert lsh[200] > lsh[10]
    assert "★" in stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    # the saved points render again through `ragbench report`
    code, stdout2, err = cli(capsys, "report", str(out), "--format", "md")
    assert code == 0, err
    assert stdout2.count("| sweep |") == len(recs)


def test_sweep_rejects_parameters_no_index_takes(capsys) -> None:
    code, _, err = cli(capsys, "sweep", *SYN, "--index", "hnsw", "--param", "nprobes=1")
    assert code == 2 and "nprobes" in err


def test_scale_cli_tunes_to_the_target_and_fits_growth(tmp_path: Path, capsys) -> None:
    out = tmp_path / "scale.jsonl"
    code, stdout, err = cli(
        capsys,
        "scale",
        "--index",
        "hnsw,flat,lsh",
        "--n",
        "1k,4k",
        "--dim",
        "16",
        "--queries",
        "30",
        "--recall",
        "0.9",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 6
    for r in recs:
        assert r["schema"] == "ragbench.scale/1"
        if r["reached"]:
            assert r["recall"] >= 0.9
    assert all(r["recall"] == 1.0 for r in recs if r["index"] == "flat")
    assert "growth of p50 latency" in stdout
    assert "ef=" in stdout and "rescore=" in stdout


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_verdicts_compare_points_only_within_one_filter_strategy_and_selectivity(
    tmp_path: Path, capsys
) -> None:
    """A pre-filtered point at 2 % is never ranked against an unfiltered or post-filtered one."""
    out = tmp_path / "s.jsonl"
    code, stdout, err = cli(
        capsys,
        "sweep",
        *SYN,
        "--index",
        "hnsw,flat",
        "--param",
        "ef=16",
        "--filter-selectivity",
        "0.5,0.02",
        "--filter-strategy",
        "pre,post",
        "--out",
        str(out),
    )
    assert code == 0, err
    groups: dict[str, dict[str, list[dict]]] = {}
    for r in _records(out):
        if r.get("strategy") is None:
            name = "unfiltered"
        else:
            f = r["filter"]
            how = "correlated" if f.get("correlated") else "random"
            name = (
                f"filtered on {f['attribute']} ({how}) at selectivity {r['selectivity']:g}, "
                f"strategy {r['strategy']}"
            )
        groups.setdefault(name, {}).setdefault(r["index"], []).append(r)
    assert len(groups) == 5  # unfiltered + 2 strategies x 2 selectivities
    verdicts = [x for x in stdout.splitlines() if "point per index" in x]
    for name, by_index in groups.items():
        # the best recall every index reaches, within this group alone
        reach = min(max(p["recall"] for p in pts) for pts in by_index.values())
        mine = [x for x in verdicts if x.startswith(name + ": ")]
        assert any(f"fastest point per index at recall ≥ {reach:.3f}" in x for x in mine), name
        assert any("cheapest point per index reaching recall ≥ 0.9" in x for x in mine), name
    # every verdict line names its group
    assert all(any(x.startswith(g + ": ") for g in groups) for x in verdicts)
    assert len(verdicts) == 2 * len(groups)


def test_labels_say_what_ran_build_params_and_ef_raised_to_k(tmp_path: Path, capsys) -> None:
    """One --build value is named (not "(defaults)"); ef under k reads ef=4→10, as it ran."""
    out = tmp_path / "s.jsonl"
    code, stdout, err = cli(
        capsys,
        "sweep",
        *SYN,
        "--index",
        "hnsw,lsh",
        "--param",
        "ef=4,32",
        "--build",
        "nbits=256",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = {(r["index"], r["query"].get("ef")): r for r in _records(out)}
    assert recs[("lsh", None)]["build"]["nbits"] == 256
    assert recs[("lsh", None)]["build_given"] == {"nbits": 256}
    assert recs[("hnsw", 4)]["effective_query"] == {"ef": 10}  # k = 10
    assert recs[("hnsw", 32)]["effective_query"] is None
    rows = {line.split("│")[2].strip(): line for line in stdout.splitlines() if "│" in line}
    assert rows["lsh"].split("│")[3].strip() == "nbits=256"
    hnsw = [line.split("│")[3].strip() for line in stdout.splitlines() if "│ hnsw " in line]
    assert sorted(hnsw) == ["ef=32", "ef=4→10"]
    assert "(defaults)" not in stdout
    assert re.search(
        r"^ef=4→10: an ef under the number of candidates a search asks for \(k=10", stdout, re.M
    )


def test_with_rescore_the_label_says_ef_ran_at_the_candidates(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SYN, "--index", "hnsw", "--param", "ef=16,200", "--param", "rescore=50"]
    code, stdout, err = cli(capsys, *argv, "--out", str(out))
    assert code == 0, err
    recs = {r["query"]["ef"]: r for r in _records(out)}
    assert recs[16]["effective_query"] == {"ef": 50}
    assert recs[200]["effective_query"] is None
    assert "ef=16→50 rescore=50" in stdout and "ef=200 rescore=50" in stdout
    assert re.search(r"^rescore=N: the index returns its top N candidates", stdout, re.M)


@pytest.mark.parametrize("name", sorted(EF_RAISED_TO_CANDIDATES))
def test_ef_below_the_candidates_runs_as_the_candidates(name: str) -> None:
    """The backends the sweep labels ``ef=1→10`` do run ef=1 as ef=10 (and ef matters)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 32)).astype(np.float32)
    Q = rng.standard_normal((30, 32)).astype(np.float32)
    # Qdrant scans exactly under full_scan_threshold KB (this corpus is 375 KB): force its graph
    build = {"full_scan_threshold": 1} if name == "qdrant-edge" else {}
    index = indexes.create(name, dim=32, metric="ip", **build)
    index.build(X)
    ids = {ef: index.search(Q, 10, ef=ef)[0] for ef in (1, 10, 400)}
    assert effective_query(name, index, {"ef": 1}, 10) == {"ef": 10}
    assert (ids[1] == ids[10]).all()
    assert (ids[1] >= 0).all()
    assert not (ids[10] == ids[400]).all()  # ef is not ignored: the equality above means something


def test_each_point_is_warmed_up_before_its_timed_queries(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """The first search of every point (params, filter, strategy) is untimed: pre's copy is not a sample."""
    import importlib

    from ragbench.indexes.hnswlib_index import HnswIndex

    # the module, not the function ragbench.sweeps re-exports under the same name
    measure_module = importlib.import_module("ragbench.sweeps.measure")

    timing = [False]
    calls: list[tuple[str, bool]] = []
    run_stages, search = measure_module.run_stages, HnswIndex.search

    def timed(*args, **kwargs):
        timing[0] = True
        try:
            return run_stages(*args, **kwargs)
        finally:
            timing[0] = False

    def spied(self, queries, k, **kwargs):
        point = repr(sorted((n, v) for n, v in kwargs.items() if n != "filter"))
        calls.append((point + repr(kwargs.get("filter") is not None), timing[0]))
        return search(self, queries, k, **kwargs)

    monkeypatch.setattr(measure_module, "run_stages", timed)
    monkeypatch.setattr(HnswIndex, "search", spied)
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SYN, "--index", "hnsw", "--param", "ef=16,32", "--filter-selectivity", "0.05"]
    code, stdout, err = cli(capsys, *argv, "--filter-strategy", "pre,in-graph", "--out", str(out))
    assert code == 0, err
    first: dict[str, bool] = {}
    for point, was_timed in calls:
        first.setdefault(point, was_timed)
    # the memory reading's search with default parameters and its throw-away index's
    # (ragbench.sweeps.memory) are no points, and untimed
    assert first.pop("[]False") is False
    assert len(first) == 6  # 2 ef x (unfiltered, pre, in-graph)
    assert not any(first.values())  # no point's first search is a timed sample
    assert sum(t for _, t in calls) == 6 * 40  # and every query is still timed once
    assert all(r["warmup"] == 1 for r in _records(out))
    assert "after an untimed warm-up search per point" in stdout


def test_an_unfiltered_sweep_names_the_cheapest_point_reaching_the_target(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SYN, "--index", "hnsw,lsh", "--param", "ef=16,64", "--build", "nbits=16"]
    code, stdout, err = cli(capsys, *argv, "--recall-target", "0.95", "--out", str(out))
    assert code == 0, err
    recs = _records(out)
    assert {r["recall_target"] for r in recs} == {0.95}
    (line,) = [x for x in stdout.splitlines() if "cheapest point per index" in x]
    assert line.startswith("unfiltered: cheapest point per index reaching recall ≥ 0.95: ")
    hnsw = [r for r in recs if r["index"] == "hnsw" and r["recall"] >= 0.95]
    assert hnsw, "the data should let hnsw reach 0.95"
    best = min(hnsw, key=lambda r: r["p50_us"])
    assert f"hnsw ef={best['query']['ef']} (recall {best['recall']:.3f}, p50 " in line
    (lsh,) = [r for r in recs if r["index"] == "lsh"]
    assert lsh["recall"] < 0.95  # 16 bits over 32 dimensions
    assert f"lsh not reached (best {lsh['recall']:.3f} at lsh nbits=16)" in line


def test_a_filtered_ef_label_says_post_raises_it_further(capsys) -> None:
    argv = ["sweep", *SYN, "--index", "hnsw", "--param", "ef=4", "--filter-selectivity", "0.5"]
    code, stdout, err = cli(capsys, *argv, "--filter-strategy", "pre,post")
    assert code == 0, err
    (note,) = [x for x in stdout.splitlines() if x.startswith("ef=4→10: ")]
    assert note.endswith("`post` asks for more candidates, so its ef rises with them")

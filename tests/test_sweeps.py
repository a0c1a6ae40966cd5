from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.records import growth_exponents, pareto

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

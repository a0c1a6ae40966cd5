"""Issue 27: sweep's default grid is dense near the recall targets it reports (ragbench.sweeps.grid)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ragbench import indexes
from ragbench.cli import main
from ragbench.results.reading.isorecall import Point, at_recall
from ragbench.sweeps import grid
from ragbench.sweeps.grid import BRACKET, Knob, knob_of, next_value

TARGETS = (0.9, 0.95, 0.99)


def _walk(recall_of: Any, knob: Knob, targets: tuple[float, ...] = TARGETS) -> dict[int, float]:
    """Every value the default grid measures against a planted recall curve."""
    measured: dict[int, float] = {}
    while (v := next_value(measured, knob, targets)) is not None:
        assert v not in measured  # never the same value twice
        measured[v] = recall_of(v)
    return measured


def _bracket(measured: dict[int, float], target: float) -> tuple[float, float]:
    """Recalls of the two measured values around ``target`` in the knob's order."""
    values = sorted(measured)
    hi = next(v for v in values if measured[v] >= target)
    return measured[values[values.index(hi) - 1]], measured[hi]


def test_planted_curve_is_bracketed_within_the_bound_at_every_target() -> None:
    # recall rising with log(ef) as an HNSW graph's does: 0.75 at ef=10, 0.999 by ef=400
    def curve(ef: int) -> float:
        return min(0.999, 0.75 + 0.075 * (ef / 10) ** 0.5)

    measured = _walk(curve, Knob("ef", 10, 1000))
    # the coarse pass doubles from k until the highest target is reached
    assert [v for v in sorted(measured) if v in (10, 20, 40, 80, 160)] == [10, 20, 40, 80, 160]
    for target in TARGETS:
        low, high = _bracket(measured, target)
        assert low < target <= high
        assert high - low <= BRACKET
    assert len(measured) <= grid.MAX_POINTS


def test_a_fixed_doubling_grid_leaves_the_gap_the_refinement_closes() -> None:
    def curve(ef: int) -> float:
        return min(0.999, 0.75 + 0.075 * (ef / 10) ** 0.5)

    coarse = {v: curve(v) for v in (10, 20, 40, 80, 160)}
    low, high = _bracket(coarse, 0.95)
    assert high - low > BRACKET  # what the old default left: the refinement is needed


def test_plateau_ends_the_coarse_pass_and_unreached_targets_are_left_alone() -> None:
    # a quantized index without re-scoring: recall stops at 0.93
    measured = _walk(lambda v: min(0.93, 0.6 + 0.01 * v), Knob("nprobe", 1, 4096))
    assert max(measured) < 4096  # stopped on the plateau, not at the cap
    # 0.9 is bracketed within the bound; 0.95 and 0.99 are not reached: no point for them
    low, high = _bracket(measured, 0.9)
    assert high - low <= BRACKET
    assert max(measured.values()) < 0.95


def test_adjacent_integers_end_the_refinement_when_one_step_jumps_past_the_bound() -> None:
    measured = _walk(lambda v: 0.5 if v < 7 else 1.0, Knob("ef", 1, 1000))
    assert measured[6] == 0.5 and measured[7] == 1.0  # split down to the step, then stopped


def test_knobs_of_the_built_in_indexes() -> None:
    def knob(name: str, **build: Any) -> Knob | None:
        return knob_of(indexes.create(name, dim=8, metric="ip", **build), {}, 10)

    assert knob("hnsw") == Knob("ef", 10, 1000)
    assert knob("ivf") == Knob("nprobe", 1, 4096)
    assert knob("flat") is None and knob("lsh") is None
    # LanceDB: flat has no knob; its IVF-HNSW refuses ef under k x refine_factor
    lance = indexes.create("lancedb", dim=8, metric="ip", index_type="ivf_hnsw_sq")
    assert knob_of(lance, {"refine_factor": 2}, 10) == Knob("ef", 20, 1000)
    assert knob("lancedb", index_type="ivf_pq") == Knob("nprobes", 1, 4096)
    assert knob("lancedb") is None


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.mark.slow  # one small hnswlib build, a dozen points (~5 s)
def test_default_sweep_brackets_095_within_the_bound_and_reads_it_interpolated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "8000", "--dim", "64", "--queries", "100"]
    # a sparse graph, so recall climbs over a range of ef instead of starting at 1
    argv += ["--index", "hnsw", "--build", "M=4", "--build", "ef_construction=16"]
    assert main([*argv, "--out", str(out)]) == 0
    recs = _records(out)
    assert {r["grid"] for r in recs} == {"refined"} and {r["grid_knob"] for r in recs} == {"ef"}
    assert all(len(r["recall_per_query"]) == 100 for r in recs)  # judged on every query
    by_ef = {r["query"]["ef"]: r["recall"] for r in recs}
    assert min(by_ef.values()) < 0.95 <= max(by_ef.values())
    low, high = _bracket(by_ef, 0.95)
    assert high - low <= BRACKET
    points = [Point(r["recall"], r["p50_us"], r["p99_us"]) for r in recs]
    read = at_recall(points, 0.95)
    assert read.how in ("interpolated", "measured")
    assert read.below is not None and read.above is not None
    assert read.below.recall <= 0.95 <= read.above.recall  # between two points, not beyond
    stdout = capsys.readouterr().out
    assert "at recall 0.95" in stdout
    # the table's rows in the order of ef, the refined values among the doublings
    rows = [ln for ln in stdout.splitlines() if "│ hnsw" in ln]
    shown = [int(ln.split("ef=")[-1].split()[0]) for ln in rows]
    assert shown == sorted(by_ef) and len(shown) == len(recs)


@pytest.mark.slow  # one small hnswlib build
def test_a_given_knob_grid_is_measured_as_given(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "3000", "--dim", "32", "--queries", "20"]
    assert main([*argv, "--index", "hnsw", "--param", "ef=16,64", "--out", str(out)]) == 0
    recs = _records(out)
    assert [r["query"]["ef"] for r in recs] == [16, 64]
    assert all(r.get("grid") is None for r in recs)


@pytest.mark.slow  # three small engines built once each (~10 s)
def test_one_sweep_interleaves_lancedb_and_chroma_with_the_others_on_one_build_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LanceDB and Chroma swept in the others' command: a shared ``ef`` grid from k made
    LanceDB refuse ``ef`` under k x refine_factor (exit 2), so they had commands of their own;
    on the default grid each engine's ``ef`` starts where it may, on one build, round by round."""
    built: dict[str, int] = {}
    for name in ("hnsw", "lancedb", "chroma"):
        cls = type(indexes.create(name, dim=32))
        real = cls.build

        def counted(self: Any, data: Any, _real: Any = real, _name: str = name) -> None:
            if len(data) == 3000:  # not the memory reading's throw-away build on 2000 rows
                built[_name] = built.get(_name, 0) + 1
            _real(self, data)

        monkeypatch.setattr(cls, "build", counted)
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "3000", "--dim", "32", "--queries", "20"]
    argv += ["--index", "hnsw,lancedb,chroma", "--build", "index_type=ivf_hnsw_sq"]
    argv += ["--param", "nprobes=10", "--param", "refine_factor=2", "--out", str(out)]
    assert main(argv) == 0
    recs = _records(out)
    assert built == {"hnsw": 1, "lancedb": 1, "chroma": 1}
    assert [r["index"] for r in recs[:3]] == ["hnsw", "lancedb", "chroma"]  # round one
    first = {r["index"]: r for r in reversed(recs)}  # each engine's first point
    assert first["lancedb"]["query"] == {"nprobes": 10, "refine_factor": 2, "ef": 20}
    assert first["hnsw"]["query"] == {"ef": 10} and first["chroma"]["query"] == {"ef": 10}
    assert {r["grid_knob"] for r in recs} == {"ef"}


def _saturating(ef: int) -> float:
    """Recall that rises steeply, then flattens (as pydocs' hnswlib did: 0.99 passed between
    ef 20 and 40, both within 0.02 of it): 1 - 0.2 * 0.88^ef."""
    return 1.0 - 0.2 * 0.88**ef


def test_two_points_close_in_recall_but_far_apart_in_the_knob_are_split() -> None:
    measured = _walk(_saturating, Knob("ef", 10, 1000))
    for target in TARGETS:
        values = sorted(measured)
        hi = next(v for v in values if measured[v] >= target)
        lo = values[values.index(hi) - 1]
        assert measured[hi] - measured[lo] <= BRACKET
        assert hi <= grid.SPREAD * lo or hi - lo <= 1  # not a doubling apart any more


def test_the_split_brings_the_interpolated_latency_at_099_close_to_the_truth() -> None:
    """Latency linear in ef (as a graph walk's roughly is): the line between the doubling
    grid's points around 0.99 overstates it; the refined grid's points read it closely."""
    truth = math.log(0.01 / 0.2) / math.log(0.88)  # the ef where the curve crosses 0.99

    def read(measured: dict[int, float]) -> float:
        return at_recall(
            [Point(r, float(ef), float(ef)) for ef, r in measured.items()], 0.99
        ).p50_us

    coarse = {v: _saturating(v) for v in (10, 20, 40)}
    assert coarse[40] - coarse[20] <= BRACKET < coarse[20] - coarse[10]  # 0.99: no split before
    refined = _walk(_saturating, Knob("ef", 10, 1000))
    assert abs(read(coarse) - truth) / truth > 0.15  # the straight line across a doubling
    assert abs(read(refined) - truth) / truth < 0.05

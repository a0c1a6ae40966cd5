"""Intervals, repetitions and ``ragbench diff``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbench import intervals
from ragbench.cli import main
from ragbench.results.records import read_records

SYN = ["--dataset", "synthetic", "--n", "2000", "--dim", "16", "--codec", "msgpack"]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_nearest_rank_points_match_numpy() -> None:
    rng = np.random.default_rng(4)
    for n in (1, 2, 3, 10, 101):
        x = rng.random(n)
        for stat in ("p50", "p90", "p95", "p99"):
            assert intervals.point(x, stat) == np.percentile(
                x, float(stat[1:]), method="inverted_cdf"
            )
    assert intervals.point([1.0, 2.0, 6.0], "mean") == 3.0


def test_interval_covers_the_true_median_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(1)
    true_median = np.exp(5.0)  # lognormal(5, 0.4)
    hits = 0
    for trial in range(100):
        x = rng.lognormal(5.0, 0.4, 200)
        iv = intervals.bootstrap(x, "p50", resamples=400, seed=trial)
        assert iv.low <= iv.value <= iv.high
        hits += iv.low <= true_median <= iv.high
    assert 85 <= hits <= 100


def test_repetitions_widen_the_interval_when_they_disagree() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(5.0, 0.2, 600)
    groups = np.repeat(np.arange(3), 200)
    shifted = base * np.repeat([0.9, 1.0, 1.1], 200)  # each repetition ran at its own speed
    flat = intervals.bootstrap(shifted, "p50")
    nested = intervals.bootstrap(shifted, "p50", groups=groups)
    assert (nested.high - nested.low) > 1.5 * (flat.high - flat.low)


def test_ratio_interval_excludes_one_for_a_real_difference_only() -> None:
    rng = np.random.default_rng(3)
    a = rng.lognormal(5.0, 0.3, 300)
    same = rng.lognormal(5.0, 0.3, 300)
    slower = rng.lognormal(5.0, 0.3, 300) * 1.3
    iv_same = intervals.ratio(a, same, "p50")
    assert iv_same.low < 1.0 < iv_same.high
    iv_slow = intervals.ratio(a, slower, "p50")
    assert iv_slow.low > 1.0 and iv_slow.value == pytest.approx(1.3, rel=0.15)


def test_runs_ratio_weighs_every_run_the_same_and_is_seeded() -> None:
    rng = np.random.default_rng(5)
    fast, slow = rng.lognormal(5.0, 0.1, 400), rng.lognormal(5.0, 0.1, 30) * 1.5
    # ten times the samples of one run: the same weight (its p50 is unchanged by tiling)
    assert intervals.runs_point([np.tile(fast, 10), slow], "p50") == intervals.runs_point(
        [fast, slow], "p50"
    )
    assert intervals.runs_point([fast, slow], "p50") == pytest.approx(
        (np.median(fast) + np.median(slow)) / 2, rel=0.01
    )
    other = [fast * 1.2, slow * 1.2]
    iv = intervals.runs_ratio([np.tile(fast, 10), slow], other, "p50")
    assert iv.value == pytest.approx(1.2, rel=0.01) and iv.low <= 1.2 <= iv.high
    assert intervals.runs_ratio([np.tile(fast, 10), slow], other, "p50") == iv  # seeded
    # runs that disagree widen the interval: the drift between runs is in it
    assert iv.high - iv.low > 3 * (intervals.ratio(fast, fast * 1.2).high - 1.2)
    # one run per side: the plain bootstrap of requests
    assert intervals.runs_ratio([fast], [slow], "p90") == intervals.ratio(fast, slow, "p90")


def test_repeat_keeps_every_repetition_and_their_intervals(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "flat",
        "--queries",
        "30",
        "--repeat",
        "3",
        "--out",
        str(out),
    )
    assert code == 0, err
    (rec,) = read_records(out)
    assert rec["repeats"] == 3 and rec["requests"] == 90
    assert sorted(set(rec["repetition"])) == [0, 1, 2] and rec["repetition"].count(1) == 30
    lo, hi = rec["total"]["p50_us_ci"]
    assert lo <= rec["total"]["p50_us"] <= hi
    assert "3 repetitions" in stdout and "±" in stdout


def _runs(capsys, path: Path, index: str, times: int, n: str = "2000") -> None:
    for _ in range(times):
        code, _, err = cli(
            capsys,
            "compare",
            "--dataset",
            "synthetic",
            "--n",
            n,
            "--dim",
            "16",
            "--codec",
            "msgpack",
            "--index",
            index,
            "--queries",
            "60",
            "--set",
            'run.label="retriever"',
            "--out",
            str(path),
        )
        assert code == 0, err


def test_diff_of_two_runs_of_one_configuration_finds_no_difference(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # A and B alternate run by run: the machine's drift over the test (a neighbour starting,
    # CPU frequency) reaches both sides alike; three A runs, then three B, once read 1.107
    for _ in range(6):
        _runs(capsys, a, "flat", 1)
        _runs(capsys, b, "flat", 1)
    code, stdout, err = cli(capsys, "diff", str(a), str(b))
    assert code in (0, 1), err  # a 2 µs stage may still drift past 5 % between runs
    total = next(line for line in stdout.splitlines() if " total " in line)
    assert "no detectable difference" in total
    # the ratio itself moves with the host's load (0.86 read once at a load of 9 on 2 cores):
    # only that it sits inside its own interval is asserted; the same runs read twice are exact
    ratio = float(total.split("│")[5])
    low, high = (float(x) for x in total.split("│")[6].strip(" []").split("–"))
    assert low <= ratio <= high
    shutil.copy(a, b)
    code, stdout, err = cli(capsys, "diff", str(a), str(b))
    assert code == 0, err
    total = next(line for line in stdout.splitlines() if " total " in line)
    assert float(total.split("│")[5]) == 1.0 and "no detectable difference" in total


def test_diff_finds_the_expected_direction_and_fails_on_a_regression(
    tmp_path: Path, capsys
) -> None:
    flat, hnsw = tmp_path / "flat.jsonl", tmp_path / "hnsw.jsonl"
    _runs(capsys, flat, "flat", 1, n="50k")
    _runs(capsys, hnsw, "hnsw", 1, n="50k")
    code, stdout, _ = cli(capsys, "diff", str(flat), str(hnsw))  # A flat, B hnsw: faster
    assert code in (0, 1)  # the total is faster; a 2 µs stage may drift past 5 % on its own
    assert "faster" in next(line for line in stdout.splitlines() if " total " in line)
    code, stdout, _ = cli(capsys, "diff", str(hnsw), str(flat))  # the other way: a regression
    assert code == 1
    total = next(line for line in stdout.splitlines() if " total " in line)
    assert "slower" in total
    retrieve = next(line for line in stdout.splitlines() if " retrieve " in line)
    assert float(retrieve.split("│")[5]) > 1.3  # exact search over 50k vs a graph walk


def test_diff_refuses_other_environments_unless_allowed(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _runs(capsys, a, "flat", 1)
    (rec,) = read_records(a)
    rec["env"]["cpu"] = "Some Other CPU"
    rec["env"]["libraries"]["numpy"] = "0.0.1"
    b.write_text(json.dumps(rec) + "\n")
    code, _, err = cli(capsys, "diff", str(a), str(b))
    assert code == 2 and "allow-env-mismatch" in err and "Some Other CPU" in err
    code, stdout, _ = cli(capsys, "diff", str(a), str(b), "--allow-env-mismatch")
    assert code == 0 and "environments differ" in stdout and "numpy" in stdout
    code, _, err = cli(capsys, "diff", str(a), str(b), "--threshold", "lots")
    assert code == 2 and "threshold" in err


def _bench_file(path: Path, data: list[float] | None, median: float) -> None:
    stats = {"median": median, "mean": median, "min": median, "max": median}
    if data is not None:
        stats["data"] = data
    doc = {
        "machine_info": {
            "cpu": {"brand_raw": "cpu"},
            "python_version": "3.11",
            "python_implementation": "CPython",
        },
        "benchmarks": [
            {
                "name": "test_x",
                "fullname": "bench/test_a.py::test_x",
                "stats": stats,
                "extra_info": {},
            }
        ],
    }
    path.write_text(json.dumps(doc))


def test_diff_reads_pytest_benchmark_json(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(0)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    fast = (rng.lognormal(0, 0.1, 200) * 1e-4).tolist()
    slow = (rng.lognormal(0, 0.1, 200) * 2e-4).tolist()
    _bench_file(a, fast, float(np.median(fast)))
    _bench_file(b, slow, float(np.median(slow)))
    code, stdout, _ = cli(capsys, "diff", str(a), str(b))
    assert code == 1 and "bench/test_a.py::test_x" in stdout and "slower" in stdout
    _bench_file(b, None, float(np.median(slow)))  # no raw data saved: a ratio, no interval
    code, stdout, _ = cli(capsys, "diff", str(a), str(b))
    assert code == 0 and "no interval" in stdout


def test_rb_bench_fixture_puts_stage_figures_in_extra_info(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_pipeline(rb_bench, benchmark):
            report = rb_bench({"dataset": {"name": "synthetic", "n": 500, "dim": 16, "n_queries": 10},
                               "retrieve": {"backend": "flat"}, "serialize": {"backend": "json"}},
                              requests=20, warmup=2)
            info = benchmark.extra_info["ragbench"]
            assert report.requests == 20
            assert set(info["p50_us"]) == set(report.stage_names)
            assert len(info["samples_ns"]["retrieve"]) == 20
        """
    )
    out = pytester.path / "bench.json"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--benchmark-json={out}")
    result.assert_outcomes(passed=1)
    doc = json.loads(out.read_text())
    assert "ragbench" in doc["benchmarks"][0]["extra_info"]


pytest_plugins = ["pytester"]


def test_sweep_and_load_repeat_keep_repetitions(tmp_path: Path, capsys) -> None:
    import ragbench as rb
    from ragbench.traffic import LoadOptions, load_points
    from ragbench.workers import ThreadWorkers

    out = tmp_path / "s.jsonl"
    code, stdout, err = cli(
        capsys,
        "sweep",
        "--n",
        "1000",
        "--dim",
        "16",
        "--index",
        "flat",
        "--queries",
        "20",
        "--repeat",
        "3",
        "--out",
        str(out),
    )
    assert code == 0, err
    (rec,) = read_records(out)
    assert rec["repeats"] == 3 and len(rec["latency_ns"]) == 60
    assert sorted(set(rec["repetition"])) == [0, 1, 2]
    assert rec["p50_us_ci"][0] <= rec["p50_us"] <= rec["p50_us_ci"][1]
    assert "3 passes" in stdout
    cfg = {
        "dataset": {"name": "synthetic", "n": 500, "dim": 16, "n_queries": 10},
        "retrieve": {"backend": "flat"},
        "serialize": {"backend": "json"},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        pipe.setup()
        pool = ThreadWorkers(pipe, 1)
        try:
            (load,) = load_points(
                [pipe], [pool], [100.0], options=LoadOptions(duration_s=0.2, repeat=2)
            )
        finally:
            pool.close()
    assert load["repeats"] == 2 and load["scheduled"] == 40
    lo, hi = load["response_p50_us_ci"]
    assert lo <= load["response_p50_us"] <= hi


# ------------------------------------------------- runs weigh the same; every run in a file


#: Each run's speed: the machine drifts between runs (a busier spell, CPU frequency).
DRIFT = (1.0, 1.2, 1.1)
#: The slowdown planted in side B, against which the reading is checked.
PLANTED = 1.30


def _bench_doc(rng: np.random.Generator, rounds: int, speed: float) -> dict[str, Any]:
    """A pytest-benchmark run (``--benchmark-save-data``): ``rounds`` raw timings in s, ~50 µs."""
    data = (rng.lognormal(0.0, 0.05, rounds) * 50e-6 * speed).tolist()
    stats = {"median": float(np.median(data)), "mean": float(np.mean(data)), "rounds": rounds}
    return {
        "machine_info": {
            "cpu": {"brand_raw": "cpu"},
            "python_version": "3.11",
            "python_implementation": "CPython",
        },
        "benchmarks": [
            {
                "name": "test_x",
                "fullname": "bench/test_a.py::test_x",
                "stats": {**stats, "data": data},
                # rb_bench's per-stage raw ns: its own count, not the rounds'
                "extra_info": {
                    "ragbench": {"samples_ns": {"retrieve": [d * 1e9 for d in data[:20]]}}
                },
            }
        ],
    }


def _run_rec(rng: np.random.Generator, requests: int, speed: float) -> dict[str, Any]:
    """A real run record (the shipped compare) with ``requests`` fresh samples per stage, x ``speed``."""
    rec = next(r for r in read_records(SHIPPED) if r["kind"] == "run")
    rec["samples_ns"] = {
        stage: np.rint(rng.lognormal(0.0, 0.05, requests) * np.median(v) * speed)
        .astype(int)
        .tolist()
        for stage, v in rec["samples_ns"].items()
    }
    rec["requests"] = requests
    return rec


def _write_side(path: Path, docs: list[dict[str, Any]], layout: str) -> None:
    if layout == "json-lines":  # one compact document per line, as --out appends records
        path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    else:  # concatenated as pytest-benchmark writes them: `cat run.json >> side.json`
        path.write_text("".join(json.dumps(d, indent=4) for d in docs))


SHIPPED = Path(__file__).resolve().parents[2] / "docs/findings/data/compare-pydocs.jsonl"


@pytest.mark.parametrize(
    ("kind", "layout"),
    [
        ("pytest-benchmark", "json-lines"),
        ("pytest-benchmark", "concatenated"),
        ("ragbench", "json-lines"),
    ],
)
def test_diff_weighs_each_run_the_same_whatever_its_size(
    tmp_path: Path, capsys, kind: str, layout: str
) -> None:
    """A planted 1.30x slowdown, with the big run on A's fast spell and on B's slow one.

    Pooling the raw samples let the 16 864-round run outvote the 28-round ones:
    it read 1.56 (and first-run-only reading, 1.56 too); each run weighing the same reads 1.30.
    """
    rng = np.random.default_rng(26)
    big = 16_864 if kind == "pytest-benchmark" else 2_000
    sizes = {"a": (big, 28, 28), "b": (28, big, 28)}
    make = _bench_doc if kind == "pytest-benchmark" else _run_rec
    for side, factor in (("a", 1.0), ("b", PLANTED)):
        runs = [make(rng, n, d * factor) for n, d in zip(sizes[side], DRIFT, strict=True)]
        _write_side(tmp_path / f"{side}.json", runs, layout)
    out = tmp_path / "d.jsonl"
    code, stdout, err = cli(
        capsys, "diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out)
    )
    assert code in (0, 1), err
    saved = read_records(out)
    total = next(r for r in saved if r["part"] in ("total", "latency"))
    assert (total["a_runs"], total["b_runs"]) == (3, 3)
    if kind == "pytest-benchmark":  # the stages pooled run by run too
        assert [r["part"] for r in saved] == ["latency", "retrieve"]
    assert total["ratio"] == pytest.approx(PLANTED, rel=0.03)
    assert total["ratio_low"] <= PLANTED <= total["ratio_high"]
    assert "single run" not in stdout
    assert "every run weighs the same" in stdout


def test_a_pytest_benchmark_file_of_several_runs_is_read_run_by_run(
    pytester: pytest.Pytester, capsys
) -> None:
    """Three real pytest-benchmark runs per file, as JSON lines or concatenated: three runs each."""
    pytester.makepyfile(
        """
        import json

        def test_encode(benchmark):
            benchmark(json.dumps, {"n": list(range(50))})
        """
    )
    docs = []
    for i in range(3):
        path = pytester.path / f"run{i}.json"
        result = pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={path}",
            "--benchmark-save-data",
            "--benchmark-max-time=0.02",
        )
        result.assert_outcomes(passed=1)
        docs.append(path.read_text())  # indented, as pytest-benchmark writes it
    lines, joined = pytester.path / "lines.jsonl", pytester.path / "joined.json"
    lines.write_text("".join(json.dumps(json.loads(d)) + "\n" for d in docs))
    joined.write_text("".join(docs))
    capsys.readouterr()
    for a, b in ((lines, joined), (joined, lines)):
        out = pytester.path / "d.jsonl"
        out.unlink(missing_ok=True)
        code, stdout, err = cli(capsys, "diff", str(a), str(b), "--out", str(out))
        assert code in (0, 1), err
        (rec,) = read_records(out)
        assert (rec["a_runs"], rec["b_runs"]) == (3, 3)
        assert "single run" not in stdout
        # the same runs on both sides: the same value
        assert rec["a"] == rec["b"] and rec["ratio"] == 1.0
    code, stdout, err = cli(capsys, "report", str(joined))
    assert code == 0, err
    assert [f"{joined} run {i}" in stdout for i in (1, 2, 3)] == [True] * 3


@pytest.mark.parametrize(
    ("tail", "needle"),
    [
        ('{"benchmarks": [', "run 3 is not valid JSON"),
        ('{"results": []}', "run 3 is a JSON document without a benchmarks list"),
    ],
)
def test_a_malformed_run_in_a_pytest_benchmark_file_is_one_line_naming_it(
    tmp_path: Path, capsys, tail: str, needle: str
) -> None:
    rng = np.random.default_rng(1)
    good = [_bench_doc(rng, 50, 1.0) for _ in range(2)]
    path = tmp_path / "a.json"
    path.write_text("".join(json.dumps(d, indent=2) + "\n" for d in good) + tail + "\n")
    start = len(path.read_text().splitlines())  # the torn run starts on the last line
    ok = tmp_path / "ok.json"
    _write_side(ok, good, "json-lines")
    for argv in (["diff", str(path), str(ok)], ["report", str(path)]):
        code, out, err = cli(capsys, *argv)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f"{path}:{start}: {needle}" in err and "pytest-benchmark" in err


def _table_and_reading(stdout: str) -> tuple[dict[tuple[str, str], str], list[str]]:
    """{(configuration, part): verdict} from the table, and the reading's lines after it."""
    verdicts = {}
    for line in stdout.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            verdicts[cells[0], cells[1]] = cells[6]
    reading = [line for line in stdout.splitlines() if line.startswith("flat/json: ")]
    return verdicts, reading


def _check_one_rule(verdicts: dict[tuple[str, str], str], line: str) -> None:
    """The reading says what the table's verdicts say, in the one rule's words."""
    words = {"slower": "× slower than A", "faster": "× faster than A"}
    total, _, largest = line.removeprefix("flat/json: ").partition("; the largest sure change is ")
    said = verdicts["flat/json", "total"]
    assert (words.get(said) or "no detectable difference") in total, (said, line)
    sure = [p for (_, p), v in verdicts.items() if p != "total" and v in words]
    named = largest.split(":")[0]
    assert (named in sure) if sure else not largest, (sure, line)


def _sides(tmp_path: Path, scale: dict[str, float]) -> tuple[str, str]:
    """A: one run; B: one run with each stage of ``scale`` that much slower (fresh noise each)."""
    rng = np.random.default_rng(7)
    a, b = _run_rec(rng, 2_000, 1.0), _run_rec(rng, 2_000, 1.0)
    for stage, factor in scale.items():
        b["samples_ns"][stage] = [round(x * factor) for x in b["samples_ns"][stage]]
    (tmp_path / "a.jsonl").write_text(json.dumps(a) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps(b) + "\n")
    return str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")


def test_a_change_inside_the_threshold_is_not_called_sure_anywhere(tmp_path: Path, capsys) -> None:
    """deserialize 3 % slower: an interval that excludes 1 but not the 5 % threshold band.

    The table said "no detectable difference (within threshold)" while the reading
    called it "the largest sure change"; one rule now says no detectable difference.
    """
    a, b = _sides(tmp_path, {"deserialize": 1.03})
    out = tmp_path / "d.jsonl"
    code, stdout, err = cli(capsys, "diff", a, b, "--out", str(out))
    assert code == 0, err
    row = next(r for r in read_records(out) if r["part"] == "deserialize")
    assert 1.0 < row["ratio_low"] < 1.05  # the case: outside the noise, inside the threshold
    verdicts, (line,) = _table_and_reading(stdout)
    assert verdicts["flat/json", "deserialize"] == "no detectable difference"
    assert "sure change" not in line
    assert line.startswith("flat/json: no detectable difference (B / A ")
    _check_one_rule(verdicts, line)
    code, report, err = cli(capsys, "report", str(out))  # the saved diff reads the same
    assert code == 0 and line in report.splitlines(), err


def test_the_largest_sure_change_is_the_stage_that_moved_the_most_time(
    tmp_path: Path, capsys
) -> None:
    """retrieve 1.5x (~230 µs more) and the stub generate stage 3x (~5 µs) on a busy machine.

    Ranked by ratio, the stub stage was named the largest sure change.
    """
    a, b = _sides(tmp_path, {"retrieve": 1.5, "generate": 3.0})
    code, stdout, err = cli(capsys, "diff", a, b)
    assert code == 1, err
    verdicts, (line,) = _table_and_reading(stdout)
    assert verdicts["flat/json", "generate"] == verdicts["flat/json", "retrieve"] == "slower"
    assert "; the largest sure change is retrieve: B 1.5" in line
    _check_one_rule(verdicts, line)


# ------------------------------------------------- paired runs: base and head alternated

#: The machine's speed at each pair of runs (a neighbour's test suite coming and going):
#: both runs of a pair ran at it, one right after the other.
PAIR_DRIFT = (1.0, 1.35, 0.9, 1.3, 1.05, 1.4)


def test_t_quantiles_are_students() -> None:
    # two-sided 95 % critical values of Student's t (any statistics table)
    for df, t in ((1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (30, 2.042)):
        assert intervals.t_quantile(0.975, df) == pytest.approx(t, abs=1e-3)
    with pytest.raises(ValueError, match="t quantile"):
        intervals.t_quantile(0.975, 0)


def test_paired_ratio_is_the_geometric_mean_with_a_t_interval() -> None:
    rng = np.random.default_rng(9)
    ratios = np.array([1.18, 1.22, 1.2, 1.25])
    pairs = []
    for r in ratios:
        x = rng.lognormal(5.0, 0.05, 301)
        pairs.append(([x], [x * r]))  # the same samples scaled: each pair's p50 ratio is r
    iv = intervals.paired_ratio(pairs, "p50")
    logs = np.log(ratios)
    half = 3.182 * logs.std(ddof=1) / 2  # t(0.975, 3 df), sqrt(4) pairs
    assert iv.value == pytest.approx(np.exp(logs.mean()))
    expected = np.exp([logs.mean() - half, logs.mean() + half])
    assert (iv.low, iv.high) == pytest.approx(expected, rel=1e-4)
    one = intervals.paired_ratio(pairs[:1], "p50")  # one pair: no spread known, no interval
    assert one.value == pytest.approx(1.18) and one.low != one.low


def _alternated(tmp_path: Path, factor: float, layout: str) -> tuple[str, str]:
    """Base and head run alternately at each speed of PAIR_DRIFT; head ``factor`` times slower.

    ``records``: one record per run (an --out append per process); ``repetitions``: one
    record per side whose repetitions ran alternately with the other side's.
    """
    rng = np.random.default_rng(26)
    sides: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    for drift in PAIR_DRIFT:
        for side, f in (("a", 1.0), ("b", factor)):
            sides[side].append(_run_rec(rng, 300, drift * f))
    for side, recs in sides.items():
        if layout == "repetitions":  # one record: the runs as its repetitions 0..5
            one = recs[0]
            one["samples_ns"] = {
                s: [x for r in recs for x in r["samples_ns"][s]] for s in one["samples_ns"]
            }
            one["repetition"] = [i for i, r in enumerate(recs) for _ in range(r["requests"])]
            recs = [one]
        _write_side(tmp_path / f"{side}.jsonl", recs, "json-lines")
    return str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")


@pytest.mark.parametrize("layout", ["records", "repetitions"])
def test_paired_diff_catches_a_slowdown_the_drift_between_pairs_hides(
    tmp_path: Path, capsys, layout: str
) -> None:
    """Head 1.2x slower, measured alternately while the machine's speed moved by up to 40 %.

    Unpaired, the drift between runs is in each side's spread and the interval of B / A
    reaches below the 5 % threshold: no verdict. Paired, each pair's runs saw one speed and
    its ratio is the slowdown alone.
    """
    a, b = _alternated(tmp_path, 1.2, layout)
    code, stdout, err = cli(capsys, "diff", a, b)
    assert code == 0, err  # unpaired: the drift hides the slowdown
    assert "no detectable difference" in next(ln for ln in stdout.splitlines() if " total " in ln)
    out = tmp_path / "d.jsonl"
    code, stdout, err = cli(capsys, "diff", a, b, "--paired", "--out", str(out))
    assert code == 1, err
    saved = read_records(out)
    assert {r["verdict"] for r in saved} == {"slower"}  # every stage, and the total
    for r in saved:
        assert r["pairs"] == len(PAIR_DRIFT)
        assert r["ratio_low"] < 1.2 < r["ratio_high"] and r["ratio"] == pytest.approx(1.2, rel=0.02)
    assert f"geometric mean of the ratios of {len(PAIR_DRIFT)} pairs of runs" in stdout
    assert "single run" not in stdout
    code, report, err = cli(capsys, "report", str(out))  # the saved diff says it was paired
    assert code == 0 and f"; paired: {len(PAIR_DRIFT)} pairs" in report, err


@pytest.mark.parametrize("layout", ["records", "repetitions"])
def test_paired_diff_of_unchanged_code_finds_no_difference_through_the_drift(
    tmp_path: Path, capsys, layout: str
) -> None:
    a, b = _alternated(tmp_path, 1.0, layout)
    out = tmp_path / "d.jsonl"
    code, stdout, err = cli(capsys, "diff", a, b, "--paired", "--out", str(out))
    assert code == 0, err
    saved = read_records(out)
    assert {r["verdict"] for r in saved} == {"no detectable difference"}
    # the drift cancelled: every ratio's interval is narrow around 1, not 0.7..1.4
    assert all(0.97 < r["ratio_low"] <= r["ratio_high"] < 1.03 for r in saved)


def test_paired_diff_refuses_sides_it_cannot_pair(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(3)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write_side(a, [_run_rec(rng, 50, 1.0) for _ in range(3)], "json-lines")
    _write_side(b, [_run_rec(rng, 50, 1.0) for _ in range(2)], "json-lines")
    code, stdout, err = cli(capsys, "diff", str(a), str(b), "--paired")
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "--paired: flat/json" in line and "3 records in A and 2 records in B" in line


def test_paired_diff_notes_sides_that_did_not_alternate(tmp_path: Path, capsys) -> None:
    """Every A record written before every B record: the pairs shared no time."""
    rng = np.random.default_rng(4)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    recs = [_run_rec(rng, 50, 1.0) for _ in range(4)]
    for i, r in enumerate(recs):
        r["time"] = f"2026-12-02T08:0{i}:00Z"
    _write_side(a, recs[:2], "json-lines")  # A's two runs, then B's two
    _write_side(b, recs[2:], "json-lines")
    code, stdout, err = cli(capsys, "diff", str(a), str(b), "--paired")
    assert code in (0, 1), err
    assert "the pairs were not made at the same time" in stdout
    _write_side(a, recs[::2], "json-lines")  # alternated: A, B, A, B
    _write_side(b, recs[1::2], "json-lines")
    code, stdout, err = cli(capsys, "diff", str(a), str(b), "--paired")
    assert "not made at the same time" not in stdout

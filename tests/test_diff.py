"""Intervals, repetitions and ``ragbench diff``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbench import intervals
from ragbench.cli import main
from ragbench.records import read_records

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
    ratio = float(total.split("│")[5])
    assert 0.9 < ratio < 1.1


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

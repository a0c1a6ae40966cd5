from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.traffic import arrivals


def test_uniform_arrivals_are_evenly_spaced() -> None:
    s = arrivals(100.0, 5, kind="uniform")
    np.testing.assert_array_equal(np.diff(s), np.full(4, 10_000_000))


def test_poisson_arrivals_average_the_rate() -> None:
    s = arrivals(1000.0, 20_000, kind="poisson", seed=1)
    mean_gap = np.diff(s).mean()
    assert mean_gap == pytest.approx(1e6, rel=0.05)
    assert (np.diff(s) >= 0).all()


def test_gamma_arrivals_keep_the_rate_and_burstiness_sets_the_spread() -> None:
    bursty = np.diff(arrivals(1000.0, 20_000, kind="gamma", burstiness=0.25, seed=2))
    regular = np.diff(arrivals(1000.0, 20_000, kind="gamma", burstiness=4.0, seed=2))
    for gaps in (bursty, regular):
        assert gaps.mean() == pytest.approx(1e6, rel=0.05)
    # coefficient of variation of gamma gaps is 1/sqrt(shape): 2.0 and 0.5
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)
    assert regular.std() / regular.mean() == pytest.approx(0.5, rel=0.1)


def test_bad_rates_and_kinds() -> None:
    with pytest.raises(ConfigError):
        arrivals(0, 3)
    with pytest.raises(ConfigError):
        arrivals(float("inf"), 3)
    with pytest.raises(ConfigError):
        arrivals(10, 3, kind="bursty")
    with pytest.raises(ConfigError):
        arrivals(10, 3, kind="gamma", burstiness=0)


def test_load_cli_writes_one_record_per_rate(tmp_path: Path, capsys) -> None:
    out = tmp_path / "load.jsonl"
    code = main(
        [
            "load",
            "--dataset",
            "synthetic",
            "--set",
            "dataset.n=1000",
            "--set",
            "dataset.dim=16",
            "--set",
            'retrieve.backend="flat"',
            "--set",
            'serialize.backend="json"',
            "--qps",
            "100,400",
            "--duration",
            "0.3",
            "--warmup",
            "3",
            "--worker-kind",
            "thread",
            "--workers",
            "2",
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["offered_qps"] for r in recs] == [100.0, 400.0]
    for r in recs:
        assert r["schema"] == "ragbench.load/1" and r["completed"] > 0
        assert r["completed"] + r["timed_out"] + r["rejected"] + r["failed"] == r["scheduled"]
        assert r["worker_kind"] == "thread" and r["workers"] == 2
    assert "offered QPS" in captured.out and "per-stage p50" in captured.out


def _load_record(label: str, rate: float, p50: float, p99: float) -> dict:
    return {
        "schema": "ragbench.load/1",
        "kind": "load",
        "label": label,
        "arrivals": "poisson",
        "mode": "open",
        "workers": 2,
        "worker_kind": "thread",
        "duration_s": 1.0,
        "offered_qps": rate,
        "concurrency": None,
        "achieved_qps": rate,
        "scheduled": 10,
        "completed": 10,
        "timed_out": 0,
        "rejected": 0,
        "failed": 0,
        "response_p50_us": p50,
        "response_p90_us": p99,
        "response_p99_us": p99,
        "response_all_p99_us": p99,
        "service_p50_us": p50,
        "service_p99_us": p99,
        "dispatch_delay_p99_us": 50.0,
        "idle_dispatch_delay_p99_us": 50.0,
        "generator_lagged": False,
        "recall_at_k": 1.0,
        "stages": ["retrieve", "rerank"],
        "stage_p50_us": {"retrieve": p50 / 2, "rerank": p50 / 2},
        "stage_share": {"retrieve": 0.5, "rerank": 0.5},
        "simulated": [],
    }


def test_load_records_plot_one_p50_and_one_p99_line_per_configuration(
    tmp_path: Path, capsys
) -> None:
    from ragbench.results.plots import figure
    from ragbench.results.records import append_record

    recs = [
        _load_record(label, rate, p50, p50 * 3)
        for label, base in (("hnsw", 100.0), ("lsh", 400.0))
        for rate, p50 in ((100.0, base), (200.0, base * 2), (400.0, base * 8))
    ]
    fig = figure(recs)
    ax, shares = fig.axes
    assert len(shares.patches) == len(recs) * 2  # one bar per stage per (configuration, rate)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"hnsw p50", "hnsw p99", "lsh p50", "lsh p99"}
    np.testing.assert_allclose(lines["lsh p99"].get_ydata(), [1.2, 2.4, 9.6])  # ms
    np.testing.assert_allclose(lines["hnsw p50"].get_xdata(), [100.0, 200.0, 400.0])
    assert ax.get_yscale() == "log"
    out, png = tmp_path / "load.jsonl", tmp_path / "load.png"
    for rec in recs:
        append_record(out, rec)
    code = main(["report", str(out), "--plot", str(png)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "hnsw" in captured.out and "lsh" in captured.out

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.traffic import arrivals, run_open_loop


def test_uniform_arrivals_are_evenly_spaced() -> None:
    s = arrivals(100.0, 5, kind="uniform")
    np.testing.assert_array_equal(np.diff(s), np.full(4, 10_000_000))


def test_poisson_arrivals_average_the_rate() -> None:
    s = arrivals(1000.0, 20_000, kind="poisson", seed=1)
    mean_gap = np.diff(s).mean()
    assert mean_gap == pytest.approx(1e6, rel=0.05)
    assert (np.diff(s) >= 0).all()


def test_bad_rates_and_kinds() -> None:
    with pytest.raises(ConfigError):
        arrivals(0, 3)
    with pytest.raises(ConfigError):
        arrivals(10, 3, kind="bursty")


def test_open_loop_response_includes_service_and_serves_in_order() -> None:
    seen: list[int] = []
    response, service, served = run_open_loop(seen.append, arrivals(5000.0, 50, kind="uniform"))
    assert served == 50 and seen == list(range(50))
    assert (response >= service).all()


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
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["offered_qps"] for r in recs] == [100.0, 400.0]
    for r in recs:
        assert r["schema"] == "ragbench.load/1" and r["requests"] > 0
        # pointwise response >= service, so every percentile is too
        assert r["response_p50_us"] >= r["service_p50_us"]
        assert r["response_p99_us"] >= r["service_p99_us"]
    assert "offered QPS" in captured.out

from __future__ import annotations

import numpy as np
import pytest

from ragbench.errors import ConfigError, InputError
from ragbench.timing import StageTimer, Stats, run_stages


def test_run_stages_stamps_are_monotonic_and_cover_every_stage() -> None:
    seen: list[str] = []
    stages = [lambda ctx, n=n: seen.append(n) for n in "abc"]
    stamps = [0] * 4
    run_stages(stages, None, stamps)
    assert seen == ["a", "b", "c"]
    assert all(b >= a for a, b in zip(stamps, stamps[1:], strict=False))
    assert stamps[0] > 0


def test_stats_nearest_rank_percentiles_are_observed_values() -> None:
    samples = np.arange(1, 101, dtype=np.int64) * 1000  # 1..100 µs
    s = Stats.from_samples(samples)
    assert s.count == 100
    assert s.p50_ns == 50_000
    assert s.p90_ns == 90_000
    assert s.p99_ns == 99_000
    assert s.max_ns == 100_000
    assert s.mean_ns == pytest.approx(50_500)
    assert s.as_dict("us")["p99_us"] == pytest.approx(99.0)


def test_stats_of_nothing_is_nan_not_zero() -> None:
    s = Stats.from_samples([])
    assert s.count == 0 and s.p50_ns != s.p50_ns


def test_stage_timer_records_per_stage_and_total() -> None:
    timer = StageTimer(["a", "b"], block=2)
    for _ in range(5):  # grows past the first block
        timer.start()
        timer.mark()
        timer.mark()
    assert len(timer) == 5
    rows = timer.samples()
    assert rows.shape == (5, 2) and (rows >= 0).all()
    stats = timer.stats()
    assert set(stats) == {"a", "b", "total"}
    assert stats["total"].count == 5
    np.testing.assert_array_equal(timer.samples("a"), rows[:, 0])


def test_stage_timer_misuse_is_a_clear_error() -> None:
    with pytest.raises(ConfigError):
        StageTimer([])
    with pytest.raises(ConfigError):
        StageTimer(["a", "a"])
    timer = StageTimer(["a"])
    with pytest.raises(InputError):
        timer.mark()
    with pytest.raises(InputError, match="unknown stage"):
        timer.samples("zzz")
    with pytest.raises(InputError):
        timer.add([1, 2, 3])

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from ragbench.errors import ConfigError, InputError
from ragbench.timing import SetupTimes, StageTimer, Stats, run_stages

MS = 1_000_000


def sleeper(ms: float):
    def stage(ctx: object) -> None:
        time.sleep(ms / 1000)

    return stage


def test_run_stages_writes_each_stages_own_duration_between_its_stamps() -> None:
    # Not monotone, so a stamp written one place early or late puts a
    # shorter stage's time under a longer one's lower bound.
    sleeps_ms = [4.0, 0.0, 2.0, 6.0, 0.0, 3.0]
    seen: list[float] = []

    def stage(ms: float):
        def call(ctx: list[float]) -> None:
            ctx.append(ms)
            time.sleep(ms / 1000)

        return call

    stamps = [0] * (len(sleeps_ms) + 1)
    run_stages([stage(ms) for ms in sleeps_ms], seen, stamps)
    assert seen == sleeps_ms  # every stage, in order, on the context given
    durations = np.diff(stamps)
    assert (durations >= 0).all()
    for j, ms in enumerate(sleeps_ms):
        assert durations[j] >= ms * MS, (j, durations.tolist())  # sleep never returns early


def nearest_rank(values: list[float], p: float) -> float:
    """The textbook definition: the ceil(p/100 * n)-th smallest value."""
    return sorted(values)[max(1, math.ceil(p / 100 * len(values))) - 1]


@pytest.mark.parametrize(
    ("samples", "p50", "p90", "p95", "p99"),
    [
        ([5, 1, 3], 3, 5, 5, 5),  # odd size: the middle one; p99 is the max
        ([1, 2, 3, 4], 2, 4, 4, 4),  # even size: the lower middle, never an average (2.5)
        ([2, 2, 9, 9], 2, 9, 9, 9),  # interpolating would say 5.5, a latency never seen
        ([7, 7, 1, 7, 2], 7, 7, 7, 7),  # ties: rank 3 of [1, 2, 7, 7, 7]
        ([40], 40, 40, 40, 40),
        (list(range(10, 101, 10)), 50, 90, 100, 100),  # p95 of 10: rank ceil(9.5) = 10
    ],
)
def test_stats_nearest_rank_on_small_samples(
    samples: list[int], p50: int, p90: int, p95: int, p99: int
) -> None:
    s = Stats.from_samples(np.array(samples, dtype=np.int64))
    assert (s.p50_ns, s.p90_ns, s.p95_ns, s.p99_ns) == (p50, p90, p95, p99)
    assert s.count == len(samples)
    assert (s.min_ns, s.max_ns) == (min(samples), max(samples))
    assert s.mean_ns == pytest.approx(sum(samples) / len(samples))


def test_stats_nearest_rank_matches_the_definition_on_random_samples() -> None:
    rng = np.random.default_rng(7)
    for n in (2, 3, 7, 20, 101):
        values = rng.integers(0, 6, n).tolist()  # small range: many ties
        s = Stats.from_samples(values)
        for p, got in ((50, s.p50_ns), (90, s.p90_ns), (95, s.p95_ns), (99, s.p99_ns)):
            assert got == nearest_rank(values, p), (n, p, values)


def test_stats_as_dict_scales_units() -> None:
    s = Stats.from_samples([1000, 3000, 2000])
    assert s.as_dict("us")["p50_us"] == pytest.approx(2.0)
    assert s.as_dict("ms")["max_ms"] == pytest.approx(0.003)
    assert s.as_dict("ns")["mean_ns"] == pytest.approx(2000)


def test_stats_of_nothing_is_nan_not_zero() -> None:
    s = Stats.from_samples([])
    assert s.count == 0 and s.p50_ns != s.p50_ns


def test_setup_times_adds_durations_per_step_and_returns_the_value() -> None:
    times = SetupTimes()
    assert times.time("build", sleeper(3.0), None) is None

    def load(a: int, b: int = 0) -> int:
        time.sleep(0.002)
        return a + b

    assert times.time("load", load, 40, b=2) == 42
    first = times.ns["build"]
    assert first >= 3 * MS
    times.time("build", sleeper(2.0), None)
    assert times.ns["build"] >= first + 2 * MS  # added to, not replaced
    times.add("build", 5)
    assert list(times.ns) == ["build", "load"]  # first-use order
    assert times.ns["load"] >= 2 * MS


def test_setup_times_records_a_call_that_raises() -> None:
    times = SetupTimes()

    def fails() -> None:
        time.sleep(0.003)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        times.time("index_build", fails)
    assert times.ns["index_build"] >= 3 * MS


def test_stage_timer_records_per_stage_and_total() -> None:
    timer = StageTimer(["a", "b"], block=2)
    for _ in range(5):  # grows past the first block
        timer.start()
        time.sleep(0.002)
        timer.mark()
        timer.mark()
    assert len(timer) == 5
    rows = timer.samples()
    assert rows.shape == (5, 2)
    assert (rows[:, 0] >= 2 * MS).all()  # the sleep is in stage a, not b
    assert (rows[:, 1] >= 0).all()
    stats = timer.stats()
    assert set(stats) == {"a", "b", "total"}
    assert stats["total"].count == 5
    np.testing.assert_array_equal(timer.samples("a"), rows[:, 0])
    np.testing.assert_array_equal(timer.samples("b"), rows[:, 1])


def test_stage_timer_add_stores_stamp_differences() -> None:
    timer = StageTimer(["a", "b", "c"])
    timer.add([100, 130, 130, 190])
    np.testing.assert_array_equal(timer.samples(), [[30, 0, 60]])
    assert timer.stats()["total"].max_ns == 90


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

"""Whether a load level was sustained or at capacity (issue 26): judged by what the schedule
actually offered and by queueing evidence, never by achieved / nominal rate alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench.cli import main
from ragbench.generators import FirstToken
from ragbench.results import reading
from ragbench.results.records import read_records
from ragbench.traffic import COMPLETED, LoadOptions, Traffic, arrivals, load_points, summarize
from ragbench.workers import ThreadWorkers

SMALL = {"name": "synthetic", "n": 1000, "dim": 16, "n_queries": 40, "seed": 3}
SEEDS = range(40)
RATE, COUNT = 5.0, 25  # the issue's lowest level: 5 QPS for 5 s, a Poisson schedule


def config(**tables: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "dataset": dict(SMALL),
        "run": {"queries": 40, "warmup": 3, "k": 10, "k_candidates": 50},
        "retrieve": {"backend": "flat"},
        "serialize": {"backend": "json"},
    }
    return {**cfg, **tables}


@pytest.fixture(scope="module")
def pipe() -> Iterator[rb.Pipeline]:
    with rb.Pipeline.from_config(config()) as p:
        p.setup()
        yield p


def one_worker(schedule_ns: np.ndarray, service_ns: int, lag_ns: int = 50_000) -> Traffic:
    """What one FIFO worker serving each request in ``service_ns`` does with a schedule.

    A worker that is idle starts an arrival ``lag_ns`` late (the dispatch of a real pool).
    """
    n = schedule_ns.size
    start, finish = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    free = 0
    for i, due in enumerate(schedule_ns):
        start[i] = max(int(due) + lag_ns, free)
        finish[i] = free = start[i] + service_ns
    return Traffic(
        start_ns=0,
        end_ns=int(finish[-1]),
        scheduled_ns=schedule_ns.astype(np.int64),
        dispatch_ns=start,
        finish_ns=finish,
        outcome=np.full(n, COMPLETED, dtype=np.int64),
        idle=start == schedule_ns + lag_ns,
        records=[None] * n,
    )


def level_record(run: Traffic, pipe: rb.Pipeline, rate: float) -> dict[str, Any]:
    fields = summarize(run, pipe, timeout_s=10.0, offered_qps=rate, duration_s=COUNT / rate)
    return {"kind": "load", "label": "one", "mode": "open", "offered_qps": rate, **fields}


def capacity_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("at capacity")]


def test_a_poisson_schedule_at_one_percent_utilisation_is_never_at_capacity(
    pipe: rb.Pipeline,
) -> None:
    # 2 ms of service every 200 ms on average: the worker is busy 1 % of the time
    service_ns = int(0.01 / RATE * 1e9)
    spans = []
    for seed in SEEDS:
        schedule = arrivals(RATE, COUNT, seed=seed)
        spans.append(schedule[-1] / 1e9)
        rec = level_record(one_worker(schedule, service_ns), pipe, RATE)
        lines = reading.load_reading([rec])
        assert capacity_lines(lines) == [], (seed, lines)
        assert "highest offered rate sustained: one 5 QPS" in lines, (seed, lines)
        # what the schedule offered: its arrivals over its span, not the nominal rate
        assert rec["offered_actual_qps"] == pytest.approx(COUNT / spans[-1], rel=1e-6)
    # the seeds' schedules do end well after (and before) the level's 5 s
    assert max(spans) > 1.1 * COUNT / RATE and min(spans) < 0.9 * COUNT / RATE


def test_a_service_slower_than_the_offered_rate_is_at_capacity(pipe: rb.Pipeline) -> None:
    # 400 ms of service every 200 ms on average: twice what one worker serves
    service_ns = int(2.0 / RATE * 1e9)
    for seed in SEEDS:
        rec = level_record(one_worker(arrivals(RATE, COUNT, seed=seed), service_ns), pipe, RATE)
        assert rec["completed"] == COUNT  # nothing lost: only the backlog says so
        lines = reading.load_reading([rec])
        assert "highest offered rate sustained: one none of the levels" in lines, (seed, lines)
        (full,) = capacity_lines(lines)
        assert "one @ 5: a backlog: the last arrival waited" in full, (seed, lines)


NAP_S = 0.004


class Nap:
    """A first token after a 4 ms sleep: a service one worker serves ~200 times a second."""

    name = "test-capacity-nap"
    simulated = True

    def __init__(self, **params: Any) -> None:
        pass

    def start(self) -> int:
        return 0

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        time.sleep(NAP_S)
        return FirstToken("x", 0)

    def close(self) -> None:
        pass


def test_a_real_overloaded_worker_reads_at_capacity_from_its_backlog() -> None:
    rb.generators.register(Nap.name, Nap)
    try:
        with rb.Pipeline.from_config(config(generate={"backend": Nap.name})) as p:
            p.setup()
            pool = ThreadWorkers(p, 1)
            try:
                # 600 offered per second for 0.5 s to a worker serving at most 250:
                # a queue of 1024 and a 10 s timeout lose nothing, the queue just grows
                options = LoadOptions(duration_s=0.5, timeout_s=10.0, queue_size=1024)
                recs = load_points([p], [pool], [600.0], options=options)
            finally:
                pool.close()
    finally:
        rb.generators.registry.unregister(Nap.name)
    (rec,) = recs
    assert rec["completed"] == rec["scheduled"] == 300
    lines = reading.load_reading(recs)
    assert f"highest offered rate sustained: {p.label} none of the levels" in lines, lines
    (full,) = capacity_lines(lines)
    assert f"{p.label} @ 600: a backlog: the last arrival waited" in full, lines


ISSUE = ["load", "--dataset", "pydocs", "--embed", "hashing", "--index", "hnsw"]
ISSUE += ["--qps", "5,20", "--workers", "1"]


def assert_sustained(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    """The issue's command: both levels read sustained, none at capacity."""
    out = tmp_path / "load.jsonl"
    code = main([*ISSUE, *extra, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    recs = read_records(out)
    assert [r["offered_qps"] for r in recs] == [5.0, 20.0]
    lines = captured.out.splitlines()
    assert capacity_lines(lines) == [], lines
    assert f"highest offered rate sustained: {recs[0]['label']} 20 QPS" in lines, lines
    for r in recs:  # every request served: an idle service
        assert r["completed"] == r["scheduled"] and r["offered_actual_qps"] > 0


def test_the_issue_command_reads_both_levels_sustained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_sustained(tmp_path, capsys, "--worker-kind", "thread")


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["process", "asyncio"])
def test_process_and_asyncio_workers_read_sustained_too(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 s levels: their Poisson schedules (seed 0) end at 2.8 s and 2.3 s
    assert_sustained(tmp_path, capsys, "--worker-kind", kind, "--duration", "2")

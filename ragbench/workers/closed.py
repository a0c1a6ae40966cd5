"""The closed loop, in a worker: each worker runs its share of the clients itself."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, NamedTuple

import numpy as np

from ..pipeline import Pipeline, RequestRecord
from .board import COMPLETED, FAILED, TIMED_OUT, serve_timed

__all__ = ["ClosedResult", "ClosedRun", "closed_result", "run_closed_worker", "split_clients"]


class ClosedRun(NamedTuple):
    """One worker's share of a closed-loop level: its clients, the clock, its request ids."""

    clients: int
    start_ns: int  # every client sends its first request then
    end_ns: int  # no client sends after this; requests already sent are finished
    timeout_ns: int
    first_request: int  # this worker's k-th request is first_request + k * stride
    stride: int


def run_closed_worker(
    run: ClosedRun, pipe: Pipeline, *, stopped: Callable[[], bool]
) -> tuple[list[tuple[int, int, int, int]], list[RequestRecord | None], list[str]]:
    """``run.clients`` clients on one worker, each sending again when its last request ended.

    The worker serves them in the order they sent; one that waited longer
    than the timeout is timed out unserved (its client sends again). Returns
    per request (scheduled, start or -1, finish or -1, outcome), the records
    of the completed ones (None for the rest) and the errors.
    """
    waiting: deque[int] = deque([run.start_ns] * run.clients)
    rows: list[tuple[int, int, int, int]] = []
    records: list[RequestRecord | None] = []
    errors: list[str] = []
    while waiting and not stopped():
        sent = waiting.popleft()
        now = perf_counter_ns()
        if now - sent > run.timeout_ns:
            rows.append((sent, -1, -1, TIMED_OUT))
            records.append(None)
            if now < run.end_ns:
                waiting.append(now)
            continue
        t0, t1, rec, err = serve_timed(pipe, run.first_request + len(rows) * run.stride)
        if err is not None:
            outcome = FAILED
            errors.append(err)
        else:
            outcome = TIMED_OUT if t1 - sent > run.timeout_ns else COMPLETED
        rows.append((sent, t0, t1, outcome))
        records.append(rec if outcome == COMPLETED else None)
        if t1 < run.end_ns:
            waiting.append(t1)
    return rows, records, errors


class ClosedResult(NamedTuple):
    """A closed-loop level over every worker: per request arrays (int64 ns, outcome codes)."""

    scheduled: np.ndarray
    dispatch: np.ndarray
    finish: np.ndarray
    outcome: np.ndarray
    records: list[RequestRecord | None]
    errors: list[str]
    faults: list[dict[str, Any]]


def closed_result(
    parts: list[tuple[list[tuple[int, int, int, int]], list[Any], list[str]]],
    faults: list[dict[str, Any]],
) -> ClosedResult:
    rows = [row for p in parts for row in p[0]]
    cols = np.asarray(rows, dtype=np.int64).reshape(len(rows), 4)
    return ClosedResult(
        cols[:, 0].copy(),
        cols[:, 1].copy(),
        cols[:, 2].copy(),
        cols[:, 3].copy(),
        records=[r for p in parts for r in p[1]],
        errors=[e for p in parts for e in p[2]],
        faults=faults,
    )


def split_clients(clients: int, workers: int) -> list[int]:
    """``clients`` shared out over ``workers`` as evenly as possible (the first ones get one more)."""
    return [clients // workers + (w < clients % workers) for w in range(workers)]


#: A level's workers answer by its last arrival (or end) + timeout + this, or are stopped.

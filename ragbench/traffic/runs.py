"""One measured run of offered load (:class:`Traffic`): open loop, closed loop, several generators merged."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..pipeline import RequestRecord
from ..validate import positive_int, positive_number
from ..workers import COMPLETED, FAILED, PENDING, TIMED_OUT
from ..workers.board import OpenRun
from .schedule import LEAD_NS

__all__ = ["Traffic", "closed_loop", "merge_concurrent", "open_loop", "warm"]


def warm(pool: Any, per_worker: int) -> None:
    """Send ``per_worker`` requests through each worker of ``pool`` (connections made, caches warm); results dropped."""
    if per_worker <= 0:
        return
    pending = 0
    for w in range(pool.size):
        for i in range(per_worker):
            pool.dispatch(w, -1, w * per_worker + i)
            pending += 1
    while pending:
        pending -= len(pool.poll(60.0))


@dataclass
class Traffic:
    """What one run of offered load did, request by request (``ns`` are ``perf_counter_ns``).

    ``dispatch_ns`` is when a worker started a request (-1 if none did);
    ``idle`` marks requests a worker was already waiting for when they arrived.
    """

    start_ns: int
    end_ns: int
    scheduled_ns: np.ndarray
    dispatch_ns: np.ndarray
    finish_ns: np.ndarray
    outcome: np.ndarray
    idle: np.ndarray
    records: list[RequestRecord | None]
    errors: list[str] = field(default_factory=list)
    #: CPU time of the thread that offered the load (its own work, not the workers')
    generator_cpu_ns: int = 0
    #: time the workers spent taking and admitting requests (open loop)
    admission_ns: int = 0
    #: workers that died or hung: ``{"worker", "pid", "what": "died"|"stuck", "detail"}``
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: event-loop lag samples (ns) of asyncio workers over the run, else None
    loop_lag_ns: np.ndarray | None = None


def open_loop(
    pool: Any,
    schedule_ns: np.ndarray,
    *,
    timeout_s: float = 10.0,
    queue_size: int = 1024,
    first_request: int = 0,
) -> Traffic:
    """Offer requests at ``schedule_ns`` offsets (see :func:`arrivals`) to ``pool``; wait for all to end.

    Each idle worker takes the next request in arrival order and waits for
    its arrival itself (see :mod:`ragbench.workers`).
    """
    start = perf_counter_ns() + LEAD_NS
    due = start + np.asarray(schedule_ns, dtype=np.int64)
    run = OpenRun(
        int(timeout_s * 1e9), positive_int("load", "queue_size", queue_size, lo=0), first_request
    )
    cpu0 = time.thread_time_ns()
    board, records, errors = pool.run_open(due, run)
    return Traffic(
        start_ns=start,
        end_ns=perf_counter_ns(),
        scheduled_ns=board.due.copy(),
        dispatch_ns=board.start.copy(),
        finish_ns=board.finish.copy(),
        outcome=board.outcome.astype(np.int64),
        idle=board.idle.astype(bool),
        records=[
            r if o == COMPLETED else None for r, o in zip(records, board.outcome, strict=True)
        ],
        errors=errors,
        generator_cpu_ns=time.thread_time_ns() - cpu0,
        admission_ns=int(getattr(board, "admission_ns", 0)),
        faults=list(getattr(board, "faults", [])),
        loop_lag_ns=getattr(pool, "loop_lag_ns", None),  # asyncio workers: this run's
    )


class _Clients:
    """Closed-loop bookkeeping: hands requests to idle workers, queues the rest, expires the queue."""

    def __init__(self, pool: Any, timeout_ns: int, first_request: int) -> None:
        self.pool, self.timeout_ns = pool, timeout_ns
        self.idle = list(range(pool.size))
        self.waiting: deque[int] = deque()
        self.in_flight = 0
        self.next_request = first_request
        self.scheduled: list[int] = []
        self.dispatch: list[int] = []
        self.finish: list[int] = []
        self.outcome: list[int] = []
        self.records: list[RequestRecord | None] = []
        self.errors: list[str] = []

    def send(self, now: int) -> None:
        """A client sends a request now."""
        slot = len(self.scheduled)
        self.scheduled.append(now)
        self.dispatch.append(-1)
        self.finish.append(-1)
        self.outcome.append(PENDING)
        self.records.append(None)
        if self.idle:
            self._start(self.idle.pop(), slot)
        else:
            self.waiting.append(slot)

    def _start(self, worker: int, slot: int) -> None:
        self.pool.dispatch(worker, slot, self.next_request)
        self.next_request += 1
        self.in_flight += 1

    def expire(self, now: int) -> int:
        """Time out requests that waited too long; return how many (their clients send again)."""
        gone = 0
        while self.waiting and self.scheduled[self.waiting[0]] + self.timeout_ns <= now:
            self.outcome[self.waiting.popleft()] = TIMED_OUT
            gone += 1
        return gone

    def collect(self, timeout_s: float) -> int:
        """Record finished requests; return how many (their clients send again)."""
        results = self.pool.poll(timeout_s)
        for res in results:
            s = res.slot
            self.dispatch[s], self.finish[s] = res.dispatch_ns, res.finish_ns
            if res.error is not None:
                self.outcome[s] = FAILED
                self.errors.append(res.error)
            elif res.finish_ns - self.scheduled[s] > self.timeout_ns:
                self.outcome[s] = TIMED_OUT
            else:
                self.outcome[s] = COMPLETED
                self.records[s] = res.record
            self.in_flight -= 1
            self.idle.append(res.worker)
        while self.idle and self.waiting:
            self._start(self.idle.pop(), self.waiting.popleft())
        return len(results)


def closed_loop(
    pool: Any,
    concurrency: int,
    duration_s: float,
    *,
    timeout_s: float = 10.0,
    first_request: int = 0,
) -> Traffic:
    """``concurrency`` clients, each sending its next request when its last one ended, for ``duration_s``.

    A pool with ``serve_closed`` (threads, processes) runs each worker's
    share of the clients inside the worker, records sent once at the end, so
    this process does no work per request; a worker's clients wait for that
    worker only. A pool with ``run_closed`` (asyncio) runs the whole level
    itself; other pools are driven from here, request by request.
    """
    concurrency = positive_int("closed loop", "concurrency", concurrency)
    duration_ns = int(positive_number("closed loop", "duration_s", duration_s) * 1e9)
    timeout_ns = int(timeout_s * 1e9)
    if not hasattr(pool, "serve_closed"):
        run_closed = getattr(pool, "run_closed", None)
        if run_closed is not None:  # the clients live in the workers (asyncio: per event loop)
            return run_closed(  # type: ignore[no-any-return]
                concurrency, duration_s, timeout_s=timeout_s, first_request=first_request
            )
        return _closed_from_here(pool, concurrency, duration_ns, timeout_ns, first_request)
    cpu0 = time.thread_time_ns()
    start = perf_counter_ns()
    res = pool.serve_closed(concurrency, duration_ns, timeout_ns, first_request)
    return Traffic(
        start_ns=start,
        end_ns=perf_counter_ns(),
        scheduled_ns=res.scheduled,
        dispatch_ns=res.dispatch,
        finish_ns=res.finish,
        outcome=res.outcome,
        idle=np.zeros(res.outcome.size, dtype=bool),
        records=res.records,
        errors=res.errors,
        generator_cpu_ns=time.thread_time_ns() - cpu0,
        faults=list(res.faults),
    )


def _closed_from_here(
    pool: Any, concurrency: int, duration_ns: int, timeout_ns: int, first_request: int
) -> Traffic:
    """The closed loop driven from this process (``dispatch`` / ``poll``), for pools without either."""
    cpu0 = time.thread_time_ns()
    start = perf_counter_ns()
    end = start + duration_ns
    c = _Clients(pool, timeout_ns, first_request)
    for _ in range(concurrency):
        c.send(start)
    while True:
        now = perf_counter_ns()
        again = c.expire(now)
        if now >= end and not (c.in_flight or c.waiting):
            break
        again += c.collect((end - now) / 1e9 if now < end else 0.05)
        now = perf_counter_ns()
        for _ in range(again if now < end else 0):
            c.send(now)
    n = len(c.scheduled)
    return Traffic(
        start_ns=start,
        end_ns=perf_counter_ns(),
        scheduled_ns=np.asarray(c.scheduled, dtype=np.int64),
        dispatch_ns=np.asarray(c.dispatch, dtype=np.int64),
        finish_ns=np.asarray(c.finish, dtype=np.int64),
        outcome=np.asarray(c.outcome, dtype=np.int64),
        idle=np.zeros(n, dtype=bool),
        records=c.records,
        errors=c.errors,
        generator_cpu_ns=time.thread_time_ns() - cpu0,
    )


def merge_concurrent(runs: Sequence[Traffic]) -> Traffic:
    """Runs offered at the same time by several load generators (each on its own clock) as one run.

    ``ragbench load --executor ray`` has each Ray actor offer its share of a
    rate; their runs are merged here before :func:`summarize`. No two clocks
    are compared: each run's times are taken relative to its own start, so
    every request is timed on the node that sent it, the merged window is the
    longest of the runs' windows, and counts and requests simply add up.
    """
    if not runs:
        raise ConfigError("merge_concurrent needs at least one run")

    def since_start(times: np.ndarray, start: int) -> np.ndarray:
        return np.where(times >= 0, times - start, times)  # -1: never started / finished

    return Traffic(
        start_ns=0,
        end_ns=max(r.end_ns - r.start_ns for r in runs),
        scheduled_ns=np.concatenate([r.scheduled_ns - r.start_ns for r in runs]),
        dispatch_ns=np.concatenate([since_start(r.dispatch_ns, r.start_ns) for r in runs]),
        finish_ns=np.concatenate([since_start(r.finish_ns, r.start_ns) for r in runs]),
        outcome=np.concatenate([r.outcome for r in runs]),
        idle=np.concatenate([r.idle for r in runs]),
        records=[rec for r in runs for rec in r.records],
        errors=[e for r in runs for e in r.errors],
        generator_cpu_ns=sum(r.generator_cpu_ns for r in runs),
        admission_ns=sum(r.admission_ns for r in runs),
        faults=[f for r in runs for f in r.faults],
    )

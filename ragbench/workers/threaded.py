"""``n`` threads serving requests on one set-up pipeline (:class:`ThreadWorkers`).

The stages that release the GIL -- faiss, hnswlib, numba -- really overlap;
each thread pins its own library threads.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from time import perf_counter_ns
from typing import Any

import numpy as np

from .. import threads
from ..pipeline import Pipeline, RequestRecord
from ..validate import positive_int
from .board import (
    GRACE_NS,
    STOP_GRACE_NS,
    Board,
    OpenRun,
    Result,
    run_open_worker,
    serve_timed,
)
from .closed import ClosedResult, ClosedRun, closed_result, run_closed_worker, split_clients

__all__ = ["ThreadWorkers"]


class ThreadWorkers:
    """``n`` threads serving requests on one set-up pipeline (each pins its own library threads)."""

    kind = "thread"

    def __init__(self, pipeline: Pipeline, n: int) -> None:
        self.size = positive_int("thread workers", "n", n)
        self.pipeline = pipeline
        self._results: queue.SimpleQueue[Result] = queue.SimpleQueue()
        self._inboxes: list[queue.SimpleQueue[Any]] = []
        self._threads = []
        self._stop = threading.Event()  # every level in progress ends at its next request
        self._board: Board | None = None
        for w in range(self.size):
            inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
            t = threading.Thread(
                target=self._loop, args=(w, inbox), daemon=True, name=f"ragbench-worker-{w}"
            )
            self._inboxes.append(inbox)
            self._threads.append(t)
            t.start()

    def _loop(self, w: int, inbox: queue.SimpleQueue[Any]) -> None:
        threads.pin_thread(self.pipeline.request_threads)
        while (job := inbox.get()) is not None:
            if callable(job):
                job()
                continue
            slot, i = job
            self._results.put(Result(w, slot, *serve_timed(self.pipeline, i)))

    def dispatch(self, worker: int, slot: int, request: int) -> None:
        self._inboxes[worker].put((slot, request))

    def poll(self, timeout_s: float) -> list[Result]:
        """Results that finished, waiting up to ``timeout_s`` for the first."""
        out = []
        try:
            out.append(self._results.get(timeout=max(timeout_s, 0.0)))
        except queue.Empty:
            return out
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self._results.get_nowait())
        return out

    def _run_parts(
        self, part: Callable[[int], None], deadline_ns: int, stop: Callable[[], None]
    ) -> list[dict[str, Any]]:
        """``part(w)`` on every worker thread; wait for all, stopping them at ``deadline_ns``.

        Returns a fault per thread still running :data:`STOP_GRACE_NS` after
        the stop (a thread cannot be killed: it is left, a daemon). A
        KeyboardInterrupt while waiting stops them and propagates.
        """
        done = [threading.Event() for _ in range(self.size)]
        raised: list[BaseException] = []

        def job(w: int) -> Callable[[], None]:
            def run() -> None:
                try:
                    part(w)
                except BaseException as exc:  # re-raised in the caller's thread
                    raised.append(exc)
                finally:
                    done[w].set()

            return run

        for w, inbox in enumerate(self._inboxes):
            inbox.put(job(w))
        try:
            late = _wait_events(done, deadline_ns)
            if late:
                stop()
                late = _wait_events(
                    [done[w] if w in late else None for w in range(self.size)],
                    perf_counter_ns() + STOP_GRACE_NS,
                )
        except BaseException:
            stop()
            raise
        if raised:
            raise raised[0]
        return [
            {
                "worker": w,
                "pid": os.getpid(),
                "what": "stuck",
                "detail": "did not finish by the level's end + timeout + grace; left running",
            }
            for w in late
        ]

    def run_open(self, due_ns: np.ndarray, run: OpenRun) -> tuple[Board, list[Any], list[str]]:
        """Serve an open-loop schedule (absolute ``due_ns``); (board, records by request, errors)."""
        n = len(due_ns)
        board = Board(bytearray(Board.size(n)), n, threading.Lock())
        board.reset(due_ns)
        records: list[Any] = [None] * n
        errors: list[str] = []

        def keep(j: int, rec: RequestRecord | None, err: str | None) -> None:
            records[j] = rec
            if err is not None:
                errors.append(err)

        def part(w: int) -> None:
            run_open_worker(board, run, self.pipeline, keep, yield_gil=True)

        self._stop.clear()
        self._board = board
        last = int(due_ns[-1]) if n else perf_counter_ns()
        try:
            board.faults = self._run_parts(part, last + run.timeout_ns + GRACE_NS, board.stop)
        finally:
            self._board = None
        board.settle()
        return board, records, errors

    def serve_closed(
        self, concurrency: int, duration_ns: int, timeout_ns: int, first_request: int
    ) -> ClosedResult:
        """``concurrency`` closed-loop clients shared out over the threads, for ``duration_ns``."""
        shares = split_clients(concurrency, self.size)
        start = perf_counter_ns()
        end = start + duration_ns
        parts: list[Any] = [([], [], [])] * self.size

        def part(w: int) -> None:
            run = ClosedRun(shares[w], start, end, timeout_ns, first_request + w, self.size)
            parts[w] = run_closed_worker(run, self.pipeline, stopped=self._stop.is_set)

        self._stop.clear()
        faults = self._run_parts(part, end + timeout_ns + GRACE_NS, self._stop.set)
        return closed_result(parts, faults)

    def close(self, *, now: bool = False) -> None:
        """Stop any level in progress and end the threads (all given at most a second)."""
        self._stop.set()
        if self._board is not None:
            self._board.stop()
        for inbox in self._inboxes:
            inbox.put(None)
        end = time.monotonic() + 1.0
        for t in self._threads:
            t.join(timeout=max(0.0, end - time.monotonic()))


def _wait_events(events: Sequence[threading.Event | None], deadline_ns: int) -> list[int]:
    """Wait for every event until ``deadline_ns``; the indices of those not set."""
    for ev in events:
        if ev is not None:
            ev.wait(max(0.0, (deadline_ns - perf_counter_ns()) / 1e9))
    return [w for w, ev in enumerate(events) if ev is not None and not ev.is_set()]

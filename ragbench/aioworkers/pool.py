"""The parent's side: :class:`AsyncWorkers`, ``n`` asyncio worker processes serving one config."""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.connection
from collections.abc import Mapping
from multiprocessing import shared_memory
from time import perf_counter_ns
from typing import Any

import numpy as np

from .. import threads
from ..config import load_config
from ..errors import ConfigError
from ..pipeline import RequestRecord
from ..traffic import Traffic
from ..validate import positive_int
from ..workers import COMPLETED, Board, OpenRun, unpack_record
from ..workers.spawn import ask_to_stop, board_copy, recv_from, spawn, wait_ready
from .loop import Settings, check_offload
from .runs import aio_worker

__all__ = ["AsyncWorkers"]


class AsyncWorkers:
    """``n`` asyncio worker processes, each serving up to ``concurrency`` requests on one loop.

    ``offload``: where CPU stages run (:data:`OFFLOADS`); ``offload_workers``:
    processes per worker for ``offload="process"`` (default: usable cores /
    ``n``, at least 1). ``register``: backends registered in code here that the
    workers must know too, as ``(registry, name, "module:attr")``. ``pin``:
    each worker on a core of its own when there are enough (only with
    ``offload="none"``: offloaded work needs the other cores). Serves
    :meth:`run_open` (the shared board) and :meth:`run_closed`.
    """

    kind = "asyncio"

    def __init__(
        self,
        config: Mapping[str, Any],
        n: int,
        *,
        concurrency: int = 16,
        offload: str = "none",
        offload_workers: int | None = None,
        warmup: int = 20,
        startup_timeout: float = 600.0,
        pin: bool = True,
        register: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.size = positive_int("asyncio workers", "n", n)
        self.concurrency = positive_int("asyncio workers", "concurrency", concurrency)
        self.offload = check_offload(offload)
        config = load_config(config)  # checked and normalized before any process starts
        if config["run"]["cpu_time"]:
            raise ConfigError(
                "asyncio workers do not measure per-stage CPU time (one thread interleaves "
                "many requests); drop --cpu-time or use --worker-kind thread|process"
            )
        cores = threads.usable_cores()
        pool = offload_workers or max(1, len(cores) // self.size)
        self.settings = Settings(
            self.concurrency,
            self.offload,
            positive_int("asyncio workers", "offload_workers", pool),
            positive_int("asyncio workers", "warmup", warmup, lo=0),
            tuple(register),
        )
        self.pinned = bool(pin and offload == "none" and self.size <= len(cores))
        self.loop_lag_ns = np.zeros(0, dtype=np.int64)
        self.async_requests: dict[str, int] = {}
        self.info: dict[str, Any] = {}
        self._start(config, cores, startup_timeout)

    def _start(self, config: Mapping[str, Any], cores: list[int], timeout: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._lock = ctx.Lock()
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        atexit.register(self.close)
        spawn(
            ctx,
            self.size,
            aio_worker,
            lambda w, child: (
                dict(config),
                child,
                self._lock,
                self.settings,
                cores[w] if self.pinned else None,
            ),
            name="ragbench-aio-worker",
            conns=self._conns,
            procs=self._procs,
        )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float) -> None:
        replies = wait_ready(self._conns, self._recv, timeout, "asyncio worker")
        if replies:
            self.info = replies[-1][2]

    def _recv(self, w: int) -> Any:
        return recv_from(self._conns, self._procs, w, "asyncio worker")

    def describe(self) -> dict[str, Any]:
        """What load records keep about this pool: offload, tasks per loop, async clients."""
        return {
            "offload": self.offload,
            "tasks_per_worker": self.concurrency,
            "offload_workers": self.settings.offload_workers if self.offload == "process" else None,
            **self.info,
        }

    def _collect(self) -> list[tuple[Any, ...]]:
        """Every worker's reply to the job just sent; the lag and async counts kept."""
        replies: list[tuple[Any, ...]] = [()] * self.size
        waiting = set(range(self.size))
        owner = {id(c): w for w, c in enumerate(self._conns)}
        while waiting:
            ready: list[Any] = multiprocessing.connection.wait([self._conns[w] for w in waiting])
            for conn in ready:
                w = owner[id(conn)]
                replies[w] = self._recv(w)
                waiting.discard(w)
        self.loop_lag_ns = np.concatenate([np.frombuffer(r[2], dtype=np.int64) for r in replies])
        totals: dict[str, int] = {}
        for r in replies:
            for k, v in r[3].items():
                totals[k] = totals.get(k, 0) + v
        self.async_requests = totals
        return replies

    def run_open(self, due_ns: np.ndarray, run: OpenRun) -> tuple[Board, list[Any], list[str]]:
        """Serve an open-loop schedule (absolute ``due_ns``) on every loop; (board, records, errors)."""
        n = len(due_ns)
        shm = shared_memory.SharedMemory(create=True, size=Board.size(n))
        try:
            board = Board(shm.buf, n, self._lock)
            board.reset(due_ns)
            for conn in self._conns:
                conn.send(("open", shm.name, n, tuple(run)))
            try:
                replies = self._collect()
            finally:
                del board  # no view may outlive the shared block
            private = board_copy(shm, n)
        finally:
            shm.close()
            shm.unlink()
        records: list[Any] = [None] * n
        errors: list[str] = []
        for reply in replies:
            for j, packed, err in reply[1]:
                records[j] = unpack_record(packed)
                if err is not None:
                    errors.append(err)
        return Board(private, n, None), records, errors

    def run_closed(
        self, concurrency: int, duration_s: float, *, timeout_s: float, first_request: int = 0
    ) -> Traffic:
        """``concurrency`` clients on EACH loop for ``duration_s``, each sending its next request
        when its last one ended; every request ends completed, timed out or failed."""
        clients = positive_int("closed loop", "concurrency", concurrency)
        start = perf_counter_ns()
        end = start + int(duration_s * 1e9)
        for w, conn in enumerate(self._conns):
            conn.send(("closed", clients, end, int(timeout_s * 1e9), first_request + w, self.size))
        replies = self._collect()
        times = np.concatenate(
            [np.frombuffer(r[4], dtype=np.int64).reshape(-1, 4) for r in replies]
        )
        records: list[RequestRecord | None] = []
        errors: list[str] = []
        for r in replies:
            for _, packed, err in r[1]:
                records.append(unpack_record(packed))
                if err is not None:
                    errors.append(err)
        outcome = times[:, 3]
        return Traffic(
            start_ns=start,
            end_ns=perf_counter_ns(),
            scheduled_ns=times[:, 0].copy(),
            dispatch_ns=times[:, 1].copy(),
            finish_ns=times[:, 2].copy(),
            outcome=outcome.copy(),
            idle=np.zeros(len(times), dtype=bool),
            records=[
                rec if o == COMPLETED else None for rec, o in zip(records, outcome, strict=True)
            ],
            errors=errors,
            loop_lag_ns=self.loop_lag_ns,
        )

    def close(self) -> None:
        """Stop every worker (and its pools); idempotent."""
        atexit.unregister(self.close)
        ask_to_stop(self._conns)
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []

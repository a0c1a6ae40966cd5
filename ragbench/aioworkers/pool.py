"""The parent's side: :class:`AsyncWorkers`, ``n`` asyncio worker processes serving one config."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import signal
import time
from collections.abc import Mapping
from multiprocessing import shared_memory
from time import perf_counter_ns
from typing import Any

import numpy as np

from .. import threads
from ..errors import ConfigError
from ..pipeline import RequestRecord
from ..settings import ConfigSource, parse_config
from ..traffic import Traffic
from ..validate import positive_int
from ..workers import COMPLETED, FAILED, Board, WorkerFault
from ..workers.board import GRACE_NS, OpenRun
from ..workers.processes import unpack_record
from ..workers.spawn import (
    ask_to_stop,
    board_copy,
    quiet_resource_tracker,
    recv_from,
    spawn,
    wait_ready,
)
from ..workers.watch import WatchedWorkers, kill_with_children, parent_for_children
from .loop import Settings, check_offload
from .runs import aio_worker

__all__ = ["AsyncWorkers"]


class AsyncWorkers(WatchedWorkers):
    """``n`` asyncio worker processes, each serving up to ``concurrency`` requests on one loop.

    ``offload``: where CPU stages run (:data:`OFFLOADS`); ``offload_workers``:
    processes per worker for ``offload="process"`` (default: usable cores /
    ``n``, at least 1). ``register``: backends registered in code here that the
    workers must know too, as ``(registry, name, "module:attr")``. ``pin``:
    each worker on a core of its own when there are enough (only with
    ``offload="none"``: offloaded work needs the other cores). Serves
    :meth:`run_open` (the shared board) and :meth:`run_closed`.
    ``startup_timeout``: seconds the workers have to be ready, or the one
    not ready (or dead) is named in a :class:`~ragbench.workers.WorkerFault`
    and every worker is killed. Faults during a level: see the package
    docstring.
    """

    kind = "asyncio"

    def __init__(
        self,
        config: ConfigSource,
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
        typed = parse_config(config)  # checked before any process starts
        if typed.run.cpu_time:
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
        # a worker process reads the config as a plain dict (a typed Config is not picklable)
        self._start(typed.to_dict(), cores, startup_timeout)

    def _start(self, config: Mapping[str, Any], cores: list[int], timeout: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        quiet_resource_tracker()
        self._lock = ctx.Lock()
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        self.dead: set[int] = set()
        atexit.register(self.close)
        # SIGINT blocked while starting: each child is born with it blocked (it then ignores
        # it, and so do its pool processes), and a Ctrl-C meanwhile reaches this process
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
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
                    parent_for_children(),
                ),
                name="ragbench-aio-worker",
                conns=self._conns,
                procs=self._procs,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.close(now=True)
            raise

    def _wait_ready(self, timeout: float) -> None:
        replies = wait_ready(self._conns, self._procs, timeout, "asyncio worker")
        if replies:
            self.info = replies[-1][2]

    def _recv(self, w: int) -> Any:
        return recv_from(self._conns, self._procs, w, "asyncio worker")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def describe(self) -> dict[str, Any]:
        """What load records keep about this pool: offload, tasks per loop, async clients."""
        return {
            "offload": self.offload,
            "tasks_per_worker": self.concurrency,
            "offload_workers": self.settings.offload_workers if self.offload == "process" else None,
            **self.info,
        }

    def _kept(self, replies: dict[int, tuple[Any, ...]]) -> list[dict[str, Any]]:
        """The lag and async counts of the replies kept; the faults the workers reported.

        Each reply is ``(kept, lag bytes, async counts, ..., faults)``. A worker
        reporting a fault of its own (its offload pool broke) is killed: it
        can serve no more.
        """
        got = [replies[w] for w in sorted(replies)]
        lags = [np.frombuffer(r[1], dtype=np.int64) for r in got]
        self.loop_lag_ns = np.concatenate(lags) if lags else np.zeros(0, dtype=np.int64)
        totals: dict[str, int] = {}
        for r in got:
            for k, v in r[2].items():
                totals[k] = totals.get(k, 0) + v
        self.async_requests = totals
        faults = []
        for w in sorted(replies):
            for fault in replies[w][-1]:
                faults.append({"worker": w, **fault})
            if replies[w][-1]:
                self._kill(w)
                with contextlib.suppress(OSError):
                    self._conns[w].close()
        return faults

    def run_open(self, due_ns: np.ndarray, run: OpenRun) -> tuple[Board, list[Any], list[str]]:
        """Serve an open-loop schedule (absolute ``due_ns``) on every loop; (board, records, errors).

        The board's ``faults`` name any worker that died or hung (killed), or
        whose offload pool broke; what they held is failed.
        """
        n = len(due_ns)
        live = self.live()
        if not live:
            raise WorkerFault("every asyncio worker has died")
        shm = shared_memory.SharedMemory(create=True, size=Board.size(n))
        try:
            return self._open_on(shm, due_ns, run, live)
        except BaseException:
            self._kill_all()
            raise
        finally:
            with contextlib.suppress(BufferError):  # a view kept by a traceback
                shm.close()
            shm.unlink()

    def _open_on(
        self, shm: Any, due_ns: np.ndarray, run: OpenRun, live: list[int]
    ) -> tuple[Board, list[Any], list[str]]:
        n = len(due_ns)
        board = Board(shm.buf, n, self._lock)
        board.reset(due_ns)
        for w in live:
            self._conns[w].send(("open", shm.name, n, tuple(run), w))
        last = int(due_ns[-1]) if n else perf_counter_ns()
        replies, faults = self._collect(live, last + run.timeout_ns + GRACE_NS, board)
        faults += self._kept(replies)
        records: list[Any] = [None] * n
        errors: list[str] = []
        for reply in replies.values():
            for j, packed, err in reply[0]:
                records[j] = unpack_record(packed)
                if err is not None:
                    errors.append(err)
        private = board_copy(shm, n)  # the shared block goes away
        del board  # no view may outlive the shared block
        out = Board(private, n, None)
        out.faults = faults
        out.settle()
        return out, records, errors

    def run_closed(
        self, concurrency: int, duration_s: float, *, timeout_s: float, first_request: int = 0
    ) -> Traffic:
        """``concurrency`` clients on EACH loop for ``duration_s``, each sending its next request
        when its last one ended; every request ends completed, timed out or failed (a dead
        worker's clients: one failed request each)."""
        clients = positive_int("closed loop", "concurrency", concurrency)
        live = self.live()
        if not live:
            raise WorkerFault("every asyncio worker has died")
        start = perf_counter_ns()
        end = start + int(duration_s * 1e9)
        timeout_ns = int(timeout_s * 1e9)
        try:
            for k, w in enumerate(live):
                job = ("closed", clients, end, timeout_ns, first_request + k, len(live))
                self._conns[w].send(job)
            replies, faults = self._collect(live, end + timeout_ns + GRACE_NS, None)
        except BaseException:
            self._kill_all()
            raise
        faults += self._kept(replies)
        times: list[np.ndarray] = []
        records: list[RequestRecord | None] = []
        errors: list[str] = []
        for w in live:
            if w not in replies:  # its clients' requests went with it
                times.append(np.array([[start, -1, -1, FAILED]] * clients, dtype=np.int64))
                records += [None] * clients
                continue
            times.append(np.frombuffer(replies[w][3], dtype=np.int64).reshape(-1, 4))
            for _, packed, err in replies[w][0]:
                records.append(unpack_record(packed))
                if err is not None:
                    errors.append(err)
        return _closed_traffic(start, np.concatenate(times), records, errors, faults, self)

    def close(self, *, now: bool = False) -> None:
        """Stop every worker and its pools (``now``: kill them); idempotent, at most ~10 s.

        A worker killed takes its offload processes with it (they die with
        their parent: :func:`~ragbench.workers.watch.die_with_parent`).
        """
        atexit.unregister(self.close)
        if not now:
            ask_to_stop([self._conns[w] for w in self.live()])
            end = time.monotonic() + 10.0
            for w in self.live():
                self._procs[w].join(max(0.0, end - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                kill_with_children(proc)  # an offload process stopped while importing too
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()
        self._conns, self._procs = [], []


def _closed_traffic(
    start: int,
    times: np.ndarray,
    records: list[RequestRecord | None],
    errors: list[str],
    faults: list[dict[str, Any]],
    pool: AsyncWorkers,
) -> Traffic:
    outcome = times[:, 3]
    return Traffic(
        start_ns=start,
        end_ns=perf_counter_ns(),
        scheduled_ns=times[:, 0].copy(),
        dispatch_ns=times[:, 1].copy(),
        finish_ns=times[:, 2].copy(),
        outcome=outcome.copy(),
        idle=np.zeros(len(times), dtype=bool),
        records=[rec if o == COMPLETED else None for rec, o in zip(records, outcome, strict=True)],
        errors=errors,
        faults=faults,
        loop_lag_ns=pool.loop_lag_ns,
    )

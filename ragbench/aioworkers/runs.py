"""Runs on an asyncio worker's loop: open- and closed-loop jobs, the heartbeat, the worker's entry point."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from array import array
from collections.abc import Mapping
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import shared_memory
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..pipeline import Pipeline
from ..workers import COMPLETED, FAILED, PENDING, TIMED_OUT, Board, admit
from ..workers.board import OpenRun
from ..workers.processes import pack_record
from ..workers.watch import die_with_parent
from .loop import LoopServer, Settings, register_backends

__all__ = ["HEARTBEAT_S", "Heartbeat", "SPIN_NS", "aio_worker"]


#: The heartbeat's sleep; how late it wakes is the loop's lag.
HEARTBEAT_S = 0.001
_HEARTBEAT_NS = int(HEARTBEAT_S * 1e9)

#: A task waiting for an arrival sleeps until this long before it, then yields
#: to the loop until it is due: the loop's selector rounds a timeout up to the
#: next millisecond, so sleeping alone wakes up to 1 ms late.
SPIN_NS = 1_200_000


class Heartbeat:
    """Sleeps :data:`HEARTBEAT_S` over and over on the loop; keeps how late each wake-up was (ns)."""

    def __init__(self) -> None:
        self.lag = array("q")
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        lag, clock = self.lag, perf_counter_ns
        while True:
            t = clock()
            await asyncio.sleep(HEARTBEAT_S)
            lag.append(clock() - t - _HEARTBEAT_NS)

    def start(self) -> None:
        self.lag = array("q")
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def stop(self) -> bytes:
        """Stop beating; the lag samples as int64 bytes."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.lag.tobytes()


async def _until(t_ns: int) -> None:
    """Sleep on the loop until ``t_ns``, yielding to it for the last :data:`SPIN_NS`."""
    left = t_ns - perf_counter_ns()
    if left > SPIN_NS:
        await asyncio.sleep((left - SPIN_NS) / 1e9)
    while perf_counter_ns() < t_ns:
        await asyncio.sleep(0)


async def _open_task(
    server: LoopServer, board: Board, run: OpenRun, kept: list[tuple[int, Any, str | None]]
) -> None:
    """One task's part of an open-loop run: take, wait or admit, serve, record.

    It stops taking when the parent stopped the board (the level's deadline)
    or the offload pool broke (what is left goes to the other workers).
    """
    while not (board.stopped or server.broken) and (j := board.take()) >= 0:
        arrived = int(board.due[j])
        now = perf_counter_ns()
        if now < arrived:
            board.idle[j] = 1
            await _until(arrived)
        elif admit(board, j, run, now) != PENDING:
            continue
        board.left[j] = perf_counter_ns()
        t0, t1, rec, err = await server.serve_timed(run.first_request + j)
        board.start[j], board.finish[j] = t0, t1
        if err is not None:
            board.outcome[j] = FAILED
        else:
            board.outcome[j] = TIMED_OUT if t1 - arrived > run.timeout_ns else COMPLETED
        kept.append((j, pack_record(rec), err))


async def _open_run(server: LoopServer, lock: Any, job: tuple[Any, ...]) -> tuple[Any, ...]:
    _, shm_name, n, run, worker = job
    shm = shared_memory.SharedMemory(name=shm_name)
    kept: list[tuple[int, Any, str | None]] = []
    beat = Heartbeat()
    try:
        board = Board(shm.buf, n, lock)
        board.tag = worker + 1
        beat.start()
        params = OpenRun(*run)
        tasks = [
            _open_task(server, board, params, kept) for _ in range(server.settings.concurrency)
        ]
        await asyncio.gather(*tasks)
        del board
    finally:
        lag = await beat.stop()
        shm.close()
    return ("done", kept, lag, server.async_requests(), server.faults())


async def _closed_run(server: LoopServer, job: tuple[Any, ...]) -> tuple[Any, ...]:
    """``clients`` clients on this loop until ``end_ns``; every request's times and outcome."""
    _, clients, end_ns, timeout_ns, first, stride = job
    rows: list[tuple[int, int, int, int]] = []
    kept: list[tuple[int, Any, str | None]] = []
    count = [0]

    async def client() -> None:
        while not server.broken and (sent := perf_counter_ns()) < end_ns:
            i = first + stride * count[0]
            count[0] += 1
            t0, t1, rec, err = await server.serve_timed(i)
            if err is not None:
                outcome = FAILED
            else:
                outcome = TIMED_OUT if t1 - sent > timeout_ns else COMPLETED
            kept.append((len(rows), pack_record(rec), err))
            rows.append((sent, t0, t1, outcome))

    beat = Heartbeat()
    beat.start()
    try:
        await asyncio.gather(*(client() for _ in range(clients)))
    finally:
        lag = await beat.stop()
    times = np.asarray(rows, dtype=np.int64).reshape(-1, 4).tobytes()
    return ("done", kept, lag, server.async_requests(), times, server.faults())


async def _serve_jobs(conn: Any, lock: Any, server: LoopServer) -> None:
    while True:
        try:
            job = await asyncio.to_thread(conn.recv)
        except (EOFError, OSError):  # the parent went away
            return
        if job is None:
            return
        if job[0] == "open":
            reply = await _open_run(server, lock, job)
        else:
            reply = await _closed_run(server, job)
        if not _send(conn, reply):
            return


def _send(conn: Any, message: Any) -> bool:
    """Send ``message`` to the parent; False (quietly) if it is gone (killed, interrupted)."""
    try:
        conn.send(message)
    except OSError:  # BrokenPipeError and kin: nobody is listening any more
        return False
    return True


async def _worker_main(
    pipe: Pipeline, conn: Any, lock: Any, settings: Settings, config: Mapping[str, Any]
) -> None:
    server: LoopServer | None = None
    try:
        server = LoopServer(pipe, settings, config)
        await server.start()
    except BaseException as exc:  # the parent turns this into an error of its own
        # a pool process that died (killed) is a fault of the run, not of its configuration
        kind = "fault" if isinstance(exc, BrokenProcessPool) else "error"
        _send(conn, (kind, f"{type(exc).__name__}: {exc}"))
        if server is not None:
            await server.close()
        return
    try:
        if _send(conn, ("ready", os.getpid(), server.describe())):
            await _serve_jobs(conn, lock, server)
    finally:
        await server.close()


def aio_worker(
    config: Mapping[str, Any],
    conn: Any,
    lock: Any,
    settings: Settings,
    core: int | None = None,
    parent: int | None = None,
) -> None:
    """Entry point of an asyncio worker process (spawned): set up, start the loop, serve runs.

    It dies with ``parent`` (the pid that started it, :func:`die_with_parent`),
    its offload processes with it; Ctrl-C is the parent's to act on.
    """
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        register_backends(settings.register)
        pipe = Pipeline(config)
        pipe.setup()
        if core is not None:
            os.sched_setaffinity(0, {core})
    except BaseException as exc:
        _send(conn, ("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        asyncio.run(_worker_main(pipe, conn, lock, settings, config))
    finally:
        pipe.close()

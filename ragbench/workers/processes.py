"""``n`` processes each with its own pipeline built from the same config (:class:`ProcessWorkers`).

Like the worker processes of a Python service; give the config a
``[retrieve] index_file`` so the index is built once and loaded by every
worker. Records travel back as plain values (:func:`pack_record`), once per
level; a worker that dies or hangs is killed and named in the level's result.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Mapping
from multiprocessing import shared_memory
from time import perf_counter_ns
from typing import Any

import numpy as np

from .. import threads
from ..pipeline import Pipeline, RequestRecord
from ..pipeline.samples import far_fields
from ..settings import ConfigSource, load_config
from ..transports import FarSide
from ..validate import positive_int
from .board import (
    FAILED,
    GRACE_NS,
    Board,
    OpenRun,
    Result,
    WorkerFault,
    run_open_worker,
    serve_timed,
)
from .closed import ClosedResult, ClosedRun, closed_result, run_closed_worker, split_clients
from .spawn import (
    WORKER_ENV,
    ask_to_stop,
    board_copy,
    quiet_resource_tracker,
    recv_from,
    spawn,
    wait_ready,
)
from .watch import WatchedWorkers, die_with_parent, parent_for_children

__all__ = ["ProcessWorkers", "WORKER_ENV", "pack_record", "process_worker", "unpack_record"]


def _pack(rec: RequestRecord | None) -> tuple[Any, ...] | None:
    if rec is None:
        return None
    far = far_fields(rec.far) if rec.far is not None else None
    ids = np.asarray(rec.hit_ids, dtype=np.int64).tobytes()
    return (
        rec.stamps,
        rec.cpu_stamps,
        far,
        ids,
        rec.payload_bytes,
        rec.prompt_tokens,
        rec.query_row,
        rec.retrieve_parts,
        None if rec.exact_ids is None else np.asarray(rec.exact_ids, dtype=np.int64).tobytes(),
    )


def _unpack(packed: tuple[Any, ...] | None) -> RequestRecord | None:
    if packed is None:
        return None
    stamps, cpu, far, ids, payload, tokens, row, parts, exact = packed
    # the prompt itself stays in the worker: the report needs only the numbers
    far_side = FarSide("", tokens, *far) if far is not None else None
    hits = np.frombuffer(ids, dtype=np.int64)
    split = tuple(parts) if parts is not None else None
    exact_ids = None if exact is None else np.frombuffer(exact, dtype=np.int64)
    return RequestRecord(
        stamps, cpu, far_side, hits, payload, tokens, row, retrieve_parts=split, exact_ids=exact_ids
    )


#: A record as plain values for a pipe to another process, and back (the prompt stays behind).
pack_record, unpack_record = _pack, _unpack


def _open_in_process(conn: Any, pipe: Pipeline, lock: Any, job: tuple[Any, ...]) -> None:
    _, shm_name, n, run, worker = job
    shm = shared_memory.SharedMemory(name=shm_name)
    kept: list[tuple[int, RequestRecord | None, str | None]] = []
    try:
        board = Board(shm.buf, n, lock)
        board.tag = worker + 1
        # held here, packed and sent once at the end: the parent does no work per request,
        # and the worker none between requests
        run_open_worker(board, OpenRun(*run), pipe, lambda *k: kept.append(k), yield_gil=False)
        del board
    finally:
        shm.close()
    conn.send(("done", [(j, _pack(rec), err) for j, rec, err in kept]))


def _closed_in_process(conn: Any, pipe: Pipeline, job: tuple[Any, ...]) -> None:
    rows, records, errors = run_closed_worker(ClosedRun(*job[1]), pipe, stopped=lambda: False)
    conn.send(("done", rows, [_pack(r) for r in records], errors))


def process_worker(
    config: Mapping[str, Any],
    conn: Any,
    lock: Any,
    warmup: int,
    core: int | None = None,
    parent: int | None = None,
) -> None:
    """Entry point of a worker process (``multiprocessing``, spawn): set up, warm, serve its pipe.

    ``core``: the one CPU this worker then runs on (set-up may use every core).
    Ctrl-C is the parent's: a worker ignores SIGINT and is stopped by it.
    ``parent``: the pid of the process that started it; the worker dies with
    it (:func:`~ragbench.workers.watch.die_with_parent`).
    """
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        pipe = Pipeline(config)
        pipe.setup()
        if core is not None:
            os.sched_setaffinity(0, {core})
        pipe.warm(warmup)
    except BaseException as exc:  # the parent turns this into an error of its own
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    threads.pin_thread(pipe.request_threads)
    try:
        while True:
            try:
                job = conn.recv()
            except EOFError:  # the parent went away
                break
            if job is None:
                break
            if job[0] == "open":
                _open_in_process(conn, pipe, lock, job)
            elif job[0] == "closed":
                _closed_in_process(conn, pipe, job)
            else:
                slot, i = job
                t0, t1, rec, err = serve_timed(pipe, i)
                conn.send((slot, t0, t1, _pack(rec), err))
    finally:
        pipe.close()


class ProcessWorkers(WatchedWorkers):
    """``n`` worker processes, each with its own pipeline built from ``config`` (see the module docstring).

    A worker that dies or hangs during a level is a fault: it is killed, its
    requests count as failed, the level's result names it (``faults``) and
    the pool goes on with the others. An exception while a level runs
    (Ctrl-C) kills every worker at once.
    """

    kind = "process"

    def __init__(
        self,
        config: ConfigSource,
        n: int,
        *,
        warmup: int = 20,
        startup_timeout: float = 600.0,
        pin: bool = True,
    ) -> None:
        self.size = positive_int("process workers", "n", n)
        # a worker process reads the config as a plain dict (a typed Config is not picklable)
        plain = dict(config) if isinstance(config, Mapping) else load_config(config)
        cores = threads.usable_cores()
        # one core each when there are enough: a worker sleeping until its next arrival then
        # wakes on time instead of behind a sibling spinning on the same core (measured: p99
        # dispatch delay at 200 QPS 386 -> 74 µs with two workers on 2 cores)
        self.pinned = bool(pin and self.size <= len(cores))
        ctx = multiprocessing.get_context("spawn")
        quiet_resource_tracker()
        self._lock = ctx.Lock()
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        self.dead: set[int] = set()
        # SIGINT blocked while starting: each child is born with it blocked (it then ignores
        # it), and a Ctrl-C meanwhile reaches this process when it is unblocked
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            spawn(
                ctx,
                self.size,
                process_worker,
                lambda w, child: (
                    plain,
                    child,
                    self._lock,
                    warmup,
                    cores[w] if self.pinned else None,
                    parent_for_children(),
                ),
                name="ragbench-worker",
                conns=self._conns,
                procs=self._procs,
                daemon=True,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            self._wait_ready(startup_timeout)
        except BaseException:
            self.close(now=True)
            raise

    def _wait_ready(self, timeout: float) -> None:
        wait_ready(self._conns, self._procs, timeout, "worker process")

    def _recv(self, w: int) -> Any:
        return recv_from(self._conns, self._procs, w, "worker process")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def dispatch(self, worker: int, slot: int, request: int) -> None:
        self._conns[worker].send((slot, request))

    def poll(self, timeout_s: float) -> list[Result]:
        out = []
        owner = {id(self._conns[w]): w for w in self.live()}
        ready: list[Any] = multiprocessing.connection.wait(
            [self._conns[w] for w in self.live()], timeout=max(timeout_s, 0.0)
        )
        for conn in ready:
            w = owner[id(conn)]
            while conn.poll():
                slot, t0, t1, packed, err = self._recv(w)
                out.append(Result(w, slot, t0, t1, _unpack(packed), err))
        return out

    def run_open(self, due_ns: np.ndarray, run: OpenRun) -> tuple[Board, list[Any], list[str]]:
        """Serve an open-loop schedule (absolute ``due_ns``) on every worker; (board, records, errors).

        The board's ``faults`` name any worker that died or hung (killed); what it held is failed.
        """
        n = len(due_ns)
        if not self.live():
            raise WorkerFault("every worker process has died")
        shm = shared_memory.SharedMemory(create=True, size=Board.size(n))
        try:
            return self._open_on(shm, due_ns, run)
        except BaseException:
            self._kill_all()
            raise
        finally:
            with contextlib.suppress(BufferError):  # a view kept by a traceback
                shm.close()
            shm.unlink()

    def _open_on(
        self, shm: Any, due_ns: np.ndarray, run: OpenRun
    ) -> tuple[Board, list[Any], list[str]]:
        n = len(due_ns)
        board = Board(shm.buf, n, self._lock)
        board.reset(due_ns)
        live = self.live()
        for w in live:
            self._conns[w].send(("open", shm.name, n, tuple(run), w))
        last = int(due_ns[-1]) if n else perf_counter_ns()
        replies, faults = self._collect(live, last + run.timeout_ns + GRACE_NS, board)
        records: list[Any] = [None] * n
        errors: list[str] = []
        for (kept,) in replies.values():
            for j, packed, err in kept:
                records[j] = _unpack(packed)
                if err is not None:
                    errors.append(err)
        private = board_copy(shm, n)  # the shared block goes away
        del board  # no view may outlive the shared block
        out = Board(private, n, None)
        out.faults = faults
        out.settle()
        return out, records, errors

    def serve_closed(
        self, concurrency: int, duration_ns: int, timeout_ns: int, first_request: int
    ) -> ClosedResult:
        """``concurrency`` closed-loop clients shared out over the live workers, each run inside its worker."""
        live = self.live()
        if not live:
            raise WorkerFault("every worker process has died")
        shares = split_clients(concurrency, len(live))
        start = perf_counter_ns()
        end = start + duration_ns
        try:
            for k, w in enumerate(live):
                run = ClosedRun(shares[k], start, end, timeout_ns, first_request + k, len(live))
                self._conns[w].send(("closed", tuple(run)))
            replies, faults = self._collect(live, end + timeout_ns + GRACE_NS, None)
        except BaseException:
            self._kill_all()
            raise
        parts: list[Any] = []
        for k, w in enumerate(live):
            if w in replies:
                rows, packed, errors = replies[w]
                parts.append((rows, [_unpack(p) for p in packed], errors))
            else:  # its clients' requests went with it: one failed request each
                parts.append(([(start, -1, -1, FAILED)] * shares[k], [None] * shares[k], []))
        return closed_result(parts, faults)

    def close(self, *, now: bool = False) -> None:
        """Ask every worker to end (``now``: kill them) and reap them; at most ~5 s."""
        if not now:
            ask_to_stop([self._conns[w] for w in self.live()])
            end = time.monotonic() + 5.0
            for w in self.live():
                self._procs[w].join(max(0.0, end - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()
        self._conns, self._procs = [], []

"""Worker pools that serve a pipeline's requests concurrently: threads or processes.

:class:`ThreadWorkers`: ``n`` threads sharing one set-up pipeline (the stages
that release the GIL -- faiss, hnswlib, numba -- really overlap); each pins
its own library threads. :class:`ProcessWorkers`: ``n`` processes each with
its own pipeline built from the same config, like the worker processes of a
Python service; give the config a ``[retrieve] index_file`` so the index is
built once and loaded by every worker.

Both serve two ways:

- handed requests one by one (``dispatch`` / ``poll``): the closed loop and
  warm-up use this;
- an open-loop schedule on a shared :class:`Board` (``run_open``): each idle
  worker takes the next request in arrival order and, when it is not due
  yet, waits for its arrival itself -- no dispatcher thread between arrival
  and service, so the dispatch delay with idle workers is the wake-up
  precision of one worker (it sleeps, then spins the last
  :data:`SPIN_NS`). A request taken after its arrival waited in the queue:
  it is rejected if the queue was full when it arrived, timed out if it
  waited longer than the timeout.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing import shared_memory
from time import perf_counter_ns
from typing import Any, NamedTuple

import numpy as np

from . import threads
from .errors import ConfigError, RagbenchError, TransportError
from .pipeline import Pipeline, RequestRecord, far_fields
from .transports import FarSide
from .validate import positive_int

__all__ = [
    "COMPLETED",
    "FAILED",
    "PENDING",
    "REJECTED",
    "SPIN_NS",
    "TIMED_OUT",
    "WORKER_ENV",
    "Board",
    "OpenRun",
    "ProcessWorkers",
    "Result",
    "ThreadWorkers",
    "admit",
    "pack_record",
    "process_worker",
    "unpack_record",
]

PENDING, COMPLETED, TIMED_OUT, REJECTED, FAILED = 0, 1, 2, 3, 4

#: A worker waiting for a request's arrival sleeps until this long before it,
#: then spins: the OS wakes a sleeper 80 µs late at p50 and up to ~0.6 ms late
#: at p99 on a busy 2-core machine (measured), so sleeping alone misses.
SPIN_NS = 700_000

NEVER = np.iinfo(np.int64).max


class Result(NamedTuple):
    """One request a worker served when handed it (closed loop, warm-up)."""

    worker: int
    slot: int
    dispatch_ns: int  # when the worker started it
    finish_ns: int
    record: RequestRecord | None
    error: str | None


def serve_timed(pipe: Pipeline, i: int) -> tuple[int, int, RequestRecord | None, str | None]:
    """(start ns, finish ns, record or None, error or None) of request ``i``."""
    t0 = perf_counter_ns()
    try:
        rec, err = pipe.serve(i), None
    except RagbenchError as exc:  # the request failed; the worker goes on
        rec, err = None, f"{type(exc).__name__}: {exc}"
    t1 = perf_counter_ns()
    if rec is not None and rec.inter_token_ns:
        # the response is the first token; the worker stayed busy decoding the next ones
        t1 = rec.stamps[-1]
    return t0, t1, rec, err


def wait_until(t_ns: int, *, yield_gil: bool) -> None:
    """Sleep until :data:`SPIN_NS` before ``t_ns``, then spin to it (yielding the GIL if asked)."""
    while True:
        left = t_ns - perf_counter_ns()
        if left <= SPIN_NS:
            break
        time.sleep((left - SPIN_NS) / 1e9)
    if yield_gil:
        while perf_counter_ns() < t_ns:
            time.sleep(0)
    else:
        while perf_counter_ns() < t_ns:
            pass


# ---------------------------------------------------------------- the open-loop board


class Board:
    """One open-loop run's shared state: arrival times and, per request, what happened.

    Lives in one buffer (a bytearray for threads, shared memory for
    processes): a take counter, then int64 ``due``, ``left`` (when it left
    the queue), ``start``, ``finish``, then int8 ``outcome`` and ``idle``
    (a worker was waiting for it when it arrived).
    """

    def __init__(self, buf: Any, n: int, lock: Any) -> None:
        self.n = n
        self.lock = lock
        self.counter = np.ndarray((1,), np.int64, buf, 0)
        off = 8
        arrays = []
        for _ in range(4):
            arrays.append(np.ndarray((n,), np.int64, buf, off))
            off += 8 * n
        self.due, self.left, self.start, self.finish = arrays
        self.outcome = np.ndarray((n,), np.int8, buf, off)
        self.idle = np.ndarray((n,), np.int8, buf, off + n)

    @staticmethod
    def size(n: int) -> int:
        return 8 + 4 * 8 * n + 2 * n

    def reset(self, due_ns: np.ndarray) -> None:
        self.counter[0] = 0
        self.due[:] = due_ns
        self.left[:] = NEVER
        self.start[:] = -1
        self.finish[:] = -1
        self.outcome[:] = PENDING
        self.idle[:] = 0

    def take(self) -> int:
        """The next request in arrival order, or -1 when every one is taken."""
        with self.lock:
            j = int(self.counter[0])
            self.counter[0] = j + 1
        return j if j < self.n else -1

    def queue_full(self, j: int, queue_size: int, timeout_ns: int) -> bool:
        """Whether ``queue_size`` earlier requests were still waiting when ``j`` arrived."""
        if queue_size == 0:
            return True
        arrived = self.due[j]
        lo = int(np.searchsorted(self.due[:j], arrived - timeout_ns))  # older ones had timed out
        waiting, hi = 0, j
        while hi > lo and waiting < queue_size:
            chunk = max(lo, hi - 2 * queue_size)
            left = self.left[chunk:hi]
            waiting += int(np.count_nonzero(left > arrived))
            # requests leave the queue in arrival order: one that was served (not turned
            # away) before j arrived means every earlier one had left too
            if np.any((left <= arrived) & (self.outcome[chunk:hi] != REJECTED)):
                break
            hi = chunk
        return waiting >= queue_size


class OpenRun(NamedTuple):
    """The parameters every worker of one open-loop run reads."""

    timeout_ns: int
    queue_size: int
    first_request: int


def admit(board: Board, j: int, run: OpenRun, now_ns: int) -> int:
    """Whether request ``j``, taken at ``now_ns`` after its arrival, is still to be served.

    :data:`PENDING` when it is; else :data:`REJECTED` (the queue was full when
    it arrived) or :data:`TIMED_OUT` (it waited longer than the timeout), with
    its ``left`` and ``outcome`` written on the board.
    """
    arrived = int(board.due[j])
    if board.queue_full(j, run.queue_size, run.timeout_ns):
        board.left[j] = arrived  # turned away at the door, when it arrived
        board.outcome[j] = REJECTED
        return REJECTED
    if now_ns - arrived > run.timeout_ns:
        board.left[j] = arrived + run.timeout_ns
        board.outcome[j] = TIMED_OUT
        return TIMED_OUT
    return PENDING


def run_open_worker(
    board: Board,
    run: OpenRun,
    pipe: Pipeline,
    keep: Callable[[int, RequestRecord | None, str | None], None],
    *,
    yield_gil: bool,
) -> None:
    """One worker's part of an open-loop run: take, wait or check the queue, serve, record."""
    while (j := board.take()) >= 0:
        arrived = int(board.due[j])
        now = perf_counter_ns()
        if now < arrived:
            board.idle[j] = 1
            wait_until(arrived, yield_gil=yield_gil)
        elif admit(board, j, run, now) != PENDING:
            continue
        board.left[j] = perf_counter_ns()
        t0, t1, rec, err = serve_timed(pipe, run.first_request + j)
        board.start[j], board.finish[j] = t0, t1
        if err is not None:
            board.outcome[j] = FAILED
        else:
            board.outcome[j] = TIMED_OUT if t1 - arrived > run.timeout_ns else COMPLETED
        keep(j, rec, err)


# ---------------------------------------------------------------- threads


class ThreadWorkers:
    """``n`` threads serving requests on one set-up pipeline (each pins its own library threads)."""

    kind = "thread"

    def __init__(self, pipeline: Pipeline, n: int) -> None:
        self.size = positive_int("thread workers", "n", n)
        self.pipeline = pipeline
        self._results: queue.SimpleQueue[Result] = queue.SimpleQueue()
        self._inboxes: list[queue.SimpleQueue[Any]] = []
        self._threads = []
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

    def run_open(self, due_ns: np.ndarray, run: OpenRun) -> tuple[Board, list[Any], list[str]]:
        """Serve an open-loop schedule (absolute ``due_ns``); (board, records by request, errors)."""
        n = len(due_ns)
        board = Board(bytearray(Board.size(n)), n, threading.Lock())
        board.reset(due_ns)
        records: list[Any] = [None] * n
        errors: list[str] = []
        done = threading.Barrier(self.size + 1)

        def keep(j: int, rec: RequestRecord | None, err: str | None) -> None:
            records[j] = rec
            if err is not None:
                errors.append(err)

        def part() -> None:
            try:
                run_open_worker(board, run, self.pipeline, keep, yield_gil=True)
            finally:
                done.wait()

        for inbox in self._inboxes:
            inbox.put(part)
        done.wait()
        return board, records, errors

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for t in self._threads:
            t.join(timeout=60)


# ---------------------------------------------------------------- processes


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
    )


def _unpack(packed: tuple[Any, ...] | None) -> RequestRecord | None:
    if packed is None:
        return None
    stamps, cpu, far, ids, payload, tokens, row = packed
    # the prompt itself stays in the worker: the report needs only the numbers
    far_side = FarSide("", tokens, *far) if far is not None else None
    hits = np.frombuffer(ids, dtype=np.int64)
    return RequestRecord(stamps, cpu, far_side, hits, payload, tokens, row)


#: A record as plain values for a pipe to another process, and back (the prompt stays behind).
pack_record, unpack_record = _pack, _unpack


def _open_in_process(conn: Any, pipe: Pipeline, lock: Any, job: tuple[Any, ...]) -> None:
    _, shm_name, n, run = job
    shm = shared_memory.SharedMemory(name=shm_name)
    kept: list[tuple[int, Any, str | None]] = []
    try:
        board = Board(shm.buf, n, lock)

        def keep(j: int, rec: RequestRecord | None, err: str | None) -> None:
            # held here and sent once at the end: the parent does no work per request
            kept.append((j, _pack(rec), err))

        run_open_worker(board, OpenRun(*run), pipe, keep, yield_gil=False)
        del board
    finally:
        shm.close()
    conn.send(("done", kept))


def process_worker(
    config: Mapping[str, Any], conn: Any, lock: Any, warmup: int, core: int | None = None
) -> None:
    """Entry point of a worker process (``multiprocessing``, spawn): set up, warm, serve its pipe.

    ``core``: the one CPU this worker then runs on (set-up may use every core).
    """
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
                continue
            slot, i = job
            t0, t1, rec, err = serve_timed(pipe, i)
            conn.send((slot, t0, t1, _pack(rec), err))
    finally:
        pipe.close()


#: Library pools a worker process keeps to one thread: each worker is one
#: request at a time on one core, and an idle pool's spinning would steal
#: the core another worker needs.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class ProcessWorkers:
    """``n`` worker processes, each with its own pipeline built from ``config`` (see the module docstring)."""

    kind = "process"

    def __init__(
        self,
        config: Mapping[str, Any],
        n: int,
        *,
        warmup: int = 20,
        startup_timeout: float = 600.0,
        pin: bool = True,
    ) -> None:
        self.size = positive_int("process workers", "n", n)
        cores = threads.usable_cores()
        # one core each when there are enough: a worker sleeping until its next arrival then
        # wakes on time instead of behind a sibling spinning on the same core (measured: p99
        # dispatch delay at 200 QPS 386 -> 74 µs with two workers on 2 cores)
        self.pinned = bool(pin and self.size <= len(cores))
        ctx = multiprocessing.get_context("spawn")
        self._lock = ctx.Lock()
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        saved = {k: os.environ.get(k) for k in WORKER_ENV}
        os.environ.update(WORKER_ENV)  # read by each child at its start, before numpy loads
        try:
            for w in range(self.size):
                parent, child = ctx.Pipe(duplex=True)
                core = cores[w] if self.pinned else None
                proc = ctx.Process(
                    target=process_worker,
                    args=(dict(config), child, self._lock, warmup, core),
                    daemon=True,
                    name=f"ragbench-worker-{w}",
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._owner = {id(c): w for w, c in enumerate(self._conns)}
        try:
            self._wait_ready(startup_timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float) -> None:
        for w, conn in enumerate(self._conns):
            if not conn.poll(timeout):
                raise TransportError(f"worker process {w} was not ready after {timeout:.0f} s")
            word, detail = self._recv(w)
            if word != "ready":
                raise ConfigError(f"worker process {w} failed to set up: {detail}")

    def _recv(self, w: int) -> Any:
        try:
            return self._conns[w].recv()
        except EOFError:
            code = self._procs[w].exitcode
            raise TransportError(f"worker process {w} died (exit code {code})") from None

    def dispatch(self, worker: int, slot: int, request: int) -> None:
        self._conns[worker].send((slot, request))

    def poll(self, timeout_s: float) -> list[Result]:
        out = []
        ready: list[Any] = multiprocessing.connection.wait(self._conns, timeout=max(timeout_s, 0.0))
        for conn in ready:
            w = self._owner[id(conn)]
            while conn.poll():
                slot, t0, t1, packed, err = self._recv(w)
                out.append(Result(w, slot, t0, t1, _unpack(packed), err))
        return out

    def run_open(self, due_ns: np.ndarray, run: OpenRun) -> tuple[Board, list[Any], list[str]]:
        """Serve an open-loop schedule (absolute ``due_ns``) on every worker; (board, records, errors)."""
        n = len(due_ns)
        shm = shared_memory.SharedMemory(create=True, size=Board.size(n))
        try:
            board = Board(shm.buf, n, self._lock)
            board.reset(due_ns)
            for conn in self._conns:
                conn.send(("open", shm.name, n, tuple(run)))
            try:
                records, errors = self._collect_open(n)
            finally:
                del board  # no view may outlive the shared block
            # a private copy: the shared block goes away
            private = bytearray(Board.size(n))
            private[:] = memoryview(shm.buf)[: Board.size(n)]  # type: ignore[arg-type]
            return Board(private, n, None), records, errors
        finally:
            shm.close()
            shm.unlink()

    def _collect_open(self, n: int) -> tuple[list[Any], list[str]]:
        records: list[Any] = [None] * n
        errors: list[str] = []
        running = set(range(self.size))
        while running:
            ready: list[Any] = multiprocessing.connection.wait([self._conns[w] for w in running])
            for conn in ready:
                w = self._owner[id(conn)]
                while w in running and conn.poll():
                    _, kept = self._recv(w)
                    running.discard(w)
                    for j, packed, err in kept:
                        records[j] = _unpack(packed)
                        if err is not None:
                            errors.append(err)
        return records, errors

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []

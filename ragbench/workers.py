"""Worker pools that serve a pipeline's requests concurrently: threads or processes.

:class:`ThreadWorkers`: ``n`` threads sharing one set-up pipeline (the stages
that release the GIL -- faiss, hnswlib, numba -- really overlap); each pins
its own library threads. :class:`ProcessWorkers`: ``n`` processes each with
its own pipeline built from the same config, like the worker processes of a
Python service; give the config a ``[retrieve] index_file`` so the index is
built once and loaded by every worker.

Both serve three ways, none with the parent in the path of a request:

- handed requests one by one (``dispatch`` / ``poll``): warm-up uses this;
- an open-loop schedule on a shared :class:`Board` (``run_open``): each idle
  worker takes the next request in arrival order and, when it is not due
  yet, waits for its arrival itself -- no dispatcher thread between arrival
  and service, so the dispatch delay with idle workers is the wake-up
  precision of one worker (it sleeps, then spins the last
  :data:`SPIN_NS`). A worker that frees up decides in one step every
  request that arrived meanwhile (rejected if the queue was full when it
  arrived, timed out if it waited longer than the timeout) and takes the
  oldest one left (see :class:`Board`);
- a closed loop (``serve_closed``): each worker runs its share of the
  clients itself (:func:`run_closed_worker`).

Records are sent once, at the end of a level. The parent blocks on the
workers meanwhile, with a watchdog: a worker that dies, or has not finished
by the level's end + timeout + :data:`GRACE_NS`, is a fault -- killed, its
requests failed, named in the level's result.
"""

from __future__ import annotations

import bisect
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
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
    "GRACE_NS",
    "PENDING",
    "REJECTED",
    "SPIN_NS",
    "STOP_GRACE_NS",
    "TIMED_OUT",
    "WORKER_ENV",
    "Board",
    "ClosedResult",
    "ClosedRun",
    "OpenRun",
    "ProcessWorkers",
    "Result",
    "ThreadWorkers",
    "WorkerFault",
    "admit",
    "pack_record",
    "process_worker",
    "run_closed_worker",
    "run_open_worker",
    "split_clients",
    "unpack_record",
]

PENDING, COMPLETED, TIMED_OUT, REJECTED, FAILED = 0, 1, 2, 3, 4

#: A worker waiting for a request's arrival sleeps until this long before it,
#: then spins: the OS wakes a sleeper 80 µs late at p50 and up to ~0.6 ms late
#: at p99 on a busy 2-core machine (measured), so sleeping alone misses.
SPIN_NS = 700_000

NEVER = np.iinfo(np.int64).max
#: A waiting worker looks at the stop flag at least this often.
_STOP_POLL_S = 0.02


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


def wait_until(t_ns: int, *, yield_gil: bool, stopped: Callable[[], bool] = lambda: False) -> bool:
    """Sleep until :data:`SPIN_NS` before ``t_ns``, then spin to it (yielding the GIL if asked).

    Looks at ``stopped`` at least every :data:`_STOP_POLL_S` while it
    sleeps; False if that ended the wait.
    """
    while True:
        left = t_ns - perf_counter_ns()
        if left <= SPIN_NS:
            break
        if stopped():
            return False
        time.sleep(min((left - SPIN_NS) / 1e9, _STOP_POLL_S))
    if yield_gil:
        while perf_counter_ns() < t_ns:
            time.sleep(0)
    else:
        while perf_counter_ns() < t_ns:
            pass
    return True


# ---------------------------------------------------------------- the open-loop board

# int64 slots of a board's header: requests taken (the take counter), requests
# classified (rejected or queued), the worker holding the lock (its tag), the stop
# flag, and the ns every worker spent taking and admitting
_TAKEN, _SEEN, _HOLDER, _STOP, _ADMISSION = range(5)
_HEADER = 8
#: Arrivals decided one by one (plain Python) up to this many at a time; more, with numpy.
_SCALAR_BATCH = 6
_REJECTED_BYTE = bytes([REJECTED])


class Board:
    """One open-loop run's shared state: arrival times and, per request, what happened.

    Lives in one buffer (a bytearray for threads, shared memory for
    processes): an int64 header (``counter``: requests taken; requests
    classified; the tag of the worker holding the lock; a stop flag; the ns
    workers spent taking), then int64 arrays of ``n`` -- ``due`` (scheduled
    arrival), ``left`` (when it left the queue), ``start``, ``finish`` --
    int64 ``accepted`` of ``n + 1`` (how many of the first ``i`` requests
    were not rejected), then int8 ``outcome`` and ``idle`` (a worker was
    waiting for it when it arrived).

    **How a worker takes and admits.** Call :meth:`take_next` with the
    run's :class:`OpenRun`: it returns the request to serve next, or -1 when
    the run is over (every request taken) or stopped. On the way, under the
    lock and in one step, it decides every request that arrived since the
    last take: *rejected* if ``queue_size`` earlier ones were still waiting
    when it arrived (``left = due``), and every queued one that has waited
    longer than ``timeout_ns`` is *timed out* (``left = due + timeout``);
    the returned request's ``left`` is the take time. Requests leave the
    queue in arrival order, so the queue at an arrival is the accepted
    requests after the last one taken and not yet timed out: its length
    comes from ``accepted`` and the monotone take counter, with no scan of
    the backlog. If the returned request is not due yet (the queue was
    empty), the worker marks ``idle[j] = 1``, waits for ``due[j]`` itself
    (:func:`wait_until`, watching :attr:`stopped`) and sets ``left[j]``.
    It then serves it and writes ``start``, ``finish`` and ``outcome``
    (``COMPLETED``, ``TIMED_OUT`` if it finished after its timeout, or
    ``FAILED``), as :func:`run_open_worker` does.

    A worker that takes one request at a time with :meth:`take` (arrival
    order, nothing decided) must call :func:`admit` on each one it takes
    that is already due: it returns ``PENDING`` (serve it) or the outcome it
    wrote. That costs a lock and a call per arrival; :meth:`take_next` one
    per request served. Whatever is still ``PENDING`` when the run ends was
    taken by a worker that died or was stopped: the pool marks it ``FAILED``.
    """

    def __init__(self, buf: Any, n: int, lock: Any) -> None:
        self.n = n
        self.lock = lock
        #: written to the header while this board object holds the lock (a worker's index + 1)
        self.tag = 0
        self.header = np.ndarray((_HEADER,), np.int64, buf, 0)
        self.counter = self.header[_TAKEN : _TAKEN + 1]
        off = 8 * _HEADER
        arrays = []
        for _ in range(4):
            arrays.append(np.ndarray((n,), np.int64, buf, off))
            off += 8 * n
        self.due, self.left, self.start, self.finish = arrays
        self.accepted = np.ndarray((n + 1,), np.int64, buf, off)
        off += 8 * (n + 1)
        self.outcome = np.ndarray((n,), np.int8, buf, off)
        self.idle = np.ndarray((n,), np.int8, buf, off + n)
        # the same memory as plain memoryviews: taking a request reads and writes a few
        # numbers, which costs ~30 ns each this way against ~100 ns (more, cache-cold) through
        # numpy; bisect searches them in C
        mv = memoryview(buf).cast("B")
        self._h = mv[: 8 * _HEADER].cast("q")
        base = 8 * _HEADER
        self._d = mv[base : base + 8 * n].cast("q")
        self._l = mv[base + 8 * n : base + 16 * n].cast("q")
        self._a = mv[base + 32 * n : base + 32 * n + 8 * (n + 1)].cast("q")
        self._o = mv[off : off + n]
        #: what went wrong with the workers during the run (filled by the pool)
        self.faults: list[dict[str, Any]] = []

    @staticmethod
    def size(n: int) -> int:
        return 8 * _HEADER + 4 * 8 * n + 8 * (n + 1) + 2 * n

    def reset(self, due_ns: np.ndarray) -> None:
        self.header[:] = 0
        self.due[:] = due_ns
        self.left[:] = NEVER
        self.start[:] = -1
        self.finish[:] = -1
        self.accepted[:] = 0
        self.outcome[:] = PENDING
        self.idle[:] = 0
        self.faults = []

    @property
    def stopped(self) -> bool:
        return bool(self._h[_STOP])

    def stop(self) -> None:
        """Make every worker's next take return -1 (and its wait for an arrival end)."""
        self._h[_STOP] = 1

    @property
    def holder(self) -> int:
        """The tag of the worker inside :meth:`take_next` now (0: none)."""
        return int(self._h[_HOLDER])

    def clear_holder(self) -> None:
        self._h[_HOLDER] = 0

    @property
    def admission_ns(self) -> int:
        """The time every worker spent in :meth:`take_next` (waiting for the lock included)."""
        return int(self._h[_ADMISSION])

    def take(self) -> int:
        """The next request in arrival order, or -1 when every one is taken (then :func:`admit` it)."""
        with self.lock:
            j = self._h[_TAKEN]
            self._h[_TAKEN] = j + 1
        return j if j < self.n else -1

    def take_next(self, run: OpenRun) -> int:
        """The next request to serve (see the class docstring), or -1: the run is over or stopped."""
        t0 = perf_counter_ns()
        with self.lock:
            h = self._h
            h[_HOLDER] = self.tag
            try:
                j = -1 if h[_STOP] else self._next(perf_counter_ns(), run)
            finally:
                h[_ADMISSION] += perf_counter_ns() - t0
                h[_HOLDER] = 0
        return j

    def _next(self, now: int, run: OpenRun) -> int:
        s = self._classify_until(now, run)
        h, acc, due = self._h, self._a, self._d
        c = h[_TAKEN]
        if c < s:  # a queue: drop the timed-out head, take the oldest accepted one left
            if due[c] < now - run.timeout_ns:
                lo = bisect.bisect_left(due, now - run.timeout_ns, c, s)
                self._expire(c, lo, run.timeout_ns)
                c = lo
            if acc[s] > acc[c]:
                j = c
                if acc[c + 1] == acc[c]:  # c was rejected: the first accepted one after it
                    j = bisect.bisect_left(acc, acc[c] + 1, c, s + 1) - 1
                h[_TAKEN] = j + 1
                self._l[j] = now
                return j
        if s >= self.n:
            h[_TAKEN] = self.n
            return -1
        # nobody waiting: the next arrival, which this worker waits for
        h[_TAKEN] = h[_SEEN] = s + 1
        acc[s + 1] = acc[s] + 1
        return s

    def _classify_until(self, now: int, run: OpenRun, taken: int | None = None) -> int:
        """Decide every request arrived by ``now`` not yet decided; the first undecided one.

        ``taken``: the first request still in the queue (default: the take counter).
        """
        h, due, acc, n = self._h, self._d, self._a, self.n
        s = h[_SEEN]
        if s >= n or due[s] > now:
            return s
        c = h[_TAKEN] if taken is None else taken
        if c > s:  # taken one by one with take(): admit() decides those
            c = min(c, n)
            self.accepted[s + 1 : c + 1] = acc[s]
            s = c
        hi = bisect.bisect_right(due, now, s, n)
        timeout = run.timeout_ns
        while s < hi:
            # a chunk no longer than the timeout: none of its own arrivals times out within it
            e = hi
            if due[hi - 1] > due[s] + timeout:
                e = bisect.bisect_right(due, due[s] + timeout, s, hi)
            queued = acc[s] - acc[c]  # at most, during the chunk
            if c == s or queued + e - s <= run.queue_size or due[c] >= due[e - 1] - timeout:
                # room for all, or none queued before the chunk times out during it: fixed room
                self._decide_fixed(s, e, run.queue_size - queued)
            elif e - s <= _SCALAR_BATCH:
                self._decide_few(s, e, c, run)
            else:
                self._decide_many(s, e, c, run)
            s = e
        h[_SEEN] = max(s, h[_SEEN])
        return h[_SEEN]

    def _decide_fixed(self, s: int, e: int, room: int) -> None:
        """Arrivals ``[s, e)`` with ``room`` places left in the queue: the first ones fill it."""
        acc = self._a
        base = acc[s]
        k = s + min(max(room, 0), e - s)  # [s, k) queued, [k, e) rejected
        if k > s:
            acc[s + 1 : k + 1] = array("q", range(base + 1, base + 1 + k - s))
        if k < e:
            acc[k + 1 : e + 1] = array("q", (base + k - s,)) * (e - k)
            self._o[k:e] = _REJECTED_BYTE * (e - k)
            self._l[k:e] = self._d[k:e]

    def _decide_many(self, s: int, e: int, c: int, run: OpenRun) -> None:
        """Arrivals ``[s, e)``, all after the last take: queued or rejected, vectorised.

        With ``cap[k]`` the room left in the queue at arrival ``k`` by the
        requests queued before ``s`` (non-decreasing: they only leave), the
        accepted count ``a`` obeys ``a[k+1] = min(a[k] + 1, cap[k])``, so
        ``a[k+1] = k + 1 + min(0, min_{i<=k}(cap[i] - i - 1))``.
        """
        due, acc = self.due, self.accepted
        arrived = due[s:e]
        since = due.searchsorted(arrived - run.timeout_ns)  # older ones have timed out
        np.maximum(since, c, out=since)  # and those before the take counter have left
        room = run.queue_size - (acc[s] - acc[since])
        np.maximum(room, 0, out=room)
        k1 = np.arange(1, e - s + 1)
        room -= k1
        np.minimum.accumulate(room, out=room)
        np.minimum(room, 0, out=room)
        room += k1
        acc[s + 1 : e + 1] = room + acc[s]
        turned = s + np.flatnonzero(np.diff(room, prepend=0) == 0)
        self.outcome[turned] = REJECTED
        self.left[turned] = due[turned]

    def _decide_few(self, s: int, e: int, c: int, run: OpenRun) -> None:
        """As :meth:`_decide_many`, one arrival at a time (cheaper for a handful)."""
        due, acc = self._d, self._a
        a = acc[s]
        for j in range(s, e):
            arrived = due[j]
            since = bisect.bisect_left(due, arrived - run.timeout_ns, c, j + 1)
            if a - acc[since] < run.queue_size:
                a += 1
            else:
                self.outcome[j] = REJECTED
                self.left[j] = arrived
            acc[j + 1] = a

    def _expire(self, c: int, lo: int, timeout_ns: int) -> None:
        """Queued requests in ``[c, lo)`` waited longer than the timeout."""
        gone = c + np.flatnonzero(self.outcome[c:lo] == PENDING)
        self.outcome[gone] = TIMED_OUT
        self.left[gone] = self.due[gone] + timeout_ns

    def settle(self) -> None:
        """After the run: what is still pending was held by a worker that died or was stopped."""
        self.outcome[self.outcome == PENDING] = FAILED


def admit(board: Board, j: int, run: OpenRun, now_ns: int) -> int:
    """Decide request ``j``, taken with :meth:`Board.take` and due by ``now_ns``.

    ``PENDING``: serve it (its ``left`` is ``now_ns``); else ``REJECTED``
    (the queue was full when it arrived) or ``TIMED_OUT`` (it waited longer
    than the timeout), with ``left`` and ``outcome`` written.
    """
    with board.lock:
        board._classify_until(now_ns, run, taken=j)  # j leaves the queue now, not before
        if board.outcome[j] == REJECTED:
            return REJECTED
        arrived = int(board.due[j])
        if now_ns - arrived > run.timeout_ns:
            board.left[j] = arrived + run.timeout_ns
            board.outcome[j] = TIMED_OUT
            return TIMED_OUT
        board.left[j] = now_ns
        return PENDING


class OpenRun(NamedTuple):
    """The parameters every worker of one open-loop run reads."""

    timeout_ns: int
    queue_size: int
    first_request: int


def run_open_worker(
    board: Board,
    run: OpenRun,
    pipe: Pipeline,
    keep: Callable[[int, RequestRecord | None, str | None], None],
    *,
    yield_gil: bool,
) -> None:
    """One worker's part of an open-loop run: take (deciding what it passed over), wait, serve, record."""
    while (j := board.take_next(run)) >= 0:
        arrived = int(board.due[j])
        if perf_counter_ns() < arrived:
            board.idle[j] = 1
            if not wait_until(arrived, yield_gil=yield_gil, stopped=lambda: board.stopped):
                return
            board.left[j] = perf_counter_ns()
        t0, t1, rec, err = serve_timed(pipe, run.first_request + j)
        board.start[j], board.finish[j] = t0, t1
        if err is not None:
            board.outcome[j] = FAILED
        else:
            board.outcome[j] = TIMED_OUT if t1 - arrived > run.timeout_ns else COMPLETED
        keep(j, rec, err)


# ---------------------------------------------------------------- the closed loop, in a worker


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


def _closed_result(
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
GRACE_NS = 500_000_000
#: Stopped workers answer within this, or are faults (killed, for processes).
STOP_GRACE_NS = 500_000_000


class WorkerFault(RagbenchError, RuntimeError):
    """A worker died or hung during a load level; the level's record says which."""


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
        return _closed_result(parts, faults)

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
    config: Mapping[str, Any], conn: Any, lock: Any, warmup: int, core: int | None = None
) -> None:
    """Entry point of a worker process (``multiprocessing``, spawn): set up, warm, serve its pipe.

    ``core``: the one CPU this worker then runs on (set-up may use every core).
    Ctrl-C is the parent's: a worker ignores SIGINT and is stopped by it.
    """
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


#: Library pools a worker process keeps to one thread: each worker is one
#: request at a time on one core, and an idle pool's spinning would steal
#: the core another worker needs.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _proc_state(pid: int | None) -> str:
    """The kernel's one-letter state of a process ('T': stopped), '' if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class ProcessWorkers:
    """``n`` worker processes, each with its own pipeline built from ``config`` (see the module docstring).

    A worker that dies or hangs during a level is a fault: it is killed, its
    requests count as failed, the level's result names it (``faults``) and
    the pool goes on with the others. An exception while a level runs
    (Ctrl-C) kills every worker at once.
    """

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
        self.dead: set[int] = set()
        saved = {k: os.environ.get(k) for k in WORKER_ENV}
        os.environ.update(WORKER_ENV)  # read by each child at its start, before numpy loads
        # SIGINT blocked while starting: each child is born with it blocked (it then ignores
        # it), and a Ctrl-C meanwhile reaches this process when it is unblocked
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
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
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            self._wait_ready(startup_timeout)
        except BaseException:
            self.close(now=True)
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

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def live(self) -> list[int]:
        """The workers still serving (not dead or killed)."""
        return [w for w in range(len(self._procs)) if w not in self.dead]

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
        # a private copy: the shared block goes away
        private = bytearray(Board.size(n))
        private[:] = memoryview(shm.buf)[: Board.size(n)]
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
        return _closed_result(parts, faults)

    def _collect(
        self, live: list[int], deadline_ns: int, board: Board | None
    ) -> tuple[dict[int, tuple[Any, ...]], list[dict[str, Any]]]:
        """Each of ``live``'s reply to the job just sent, watching for faults.

        A worker whose process ends first is a fault ("died"). At
        ``deadline_ns`` the board (if any) is stopped and a worker the kernel
        has stopped (SIGSTOP) is killed at once; one still silent
        :data:`STOP_GRACE_NS` later is killed too ("stuck"). The parent
        blocks on the pipes and process sentinels meanwhile: no polling.
        """
        replies: dict[int, tuple[Any, ...]] = {}
        faults: list[dict[str, Any]] = []
        waiting = set(live)
        stopped_at: int | None = None
        while waiting:
            now = perf_counter_ns()
            limit = deadline_ns if stopped_at is None else stopped_at + STOP_GRACE_NS
            if now >= limit:
                if stopped_at is not None:
                    faults += [self._fault(w, "stuck", board) for w in sorted(waiting)]
                    break
                stopped_at = now
                if board is not None:
                    board.stop()
                for w in sorted(waiting):
                    if _proc_state(self._procs[w].pid) in ("T", "t"):
                        faults.append(self._fault(w, "stuck", board))
                        waiting.discard(w)
                continue
            objs: dict[Any, int] = {self._conns[w]: w for w in waiting}
            objs.update({self._procs[w].sentinel: w for w in waiting})
            ready = multiprocessing.connection.wait(list(objs), timeout=(limit - now) / 1e9)
            for w in sorted({objs[o] for o in ready}):
                with contextlib.suppress(EOFError, OSError):
                    if self._conns[w].poll():
                        replies[w] = tuple(self._conns[w].recv()[1:])
                        waiting.discard(w)
                        continue
                faults.append(self._fault(w, "died", board))
                waiting.discard(w)
        return replies, faults

    def _fault(self, w: int, what: str, board: Board | None) -> dict[str, Any]:
        """Kill worker ``w`` if alive, free the board's lock if it held it; what to record."""
        proc = self._procs[w]
        state = _proc_state(proc.pid)
        if proc.is_alive():
            proc.kill()
        proc.join(2.0)
        if board is not None and board.holder == w + 1:  # it died inside take_next
            board.clear_holder()
            with contextlib.suppress(ValueError):
                self._lock.release()
        self.dead.add(w)
        with contextlib.suppress(OSError):
            self._conns[w].close()
        if what == "died":
            detail = f"died ({_exit_text(proc.exitcode)})"
        else:
            how = "stopped (SIGSTOP)" if state in ("T", "t") else "still busy"
            detail = f"{how} at the level's end + timeout + grace: killed"
        return {"worker": w, "pid": proc.pid, "what": what, "detail": detail}

    def _kill_all(self) -> None:
        for w in self.live():
            proc = self._procs[w]
            proc.kill()
            proc.join(1.0)
            self.dead.add(w)

    def close(self, *, now: bool = False) -> None:
        """Ask every worker to end (``now``: kill them) and reap them; at most ~5 s."""
        if not now:
            for w in self.live():
                with contextlib.suppress(OSError, ValueError):
                    self._conns[w].send(None)
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

"""The open-loop board and what every worker shares: outcome codes, the wait, one timed request.

A :class:`Board` is one open-loop run's shared state (a bytearray for
threads, shared memory for processes): each idle worker takes the next
request in arrival order, waits for its arrival itself (:func:`wait_until`:
sleep, then spin the last :data:`SPIN_NS`) and decides every request that
arrived meanwhile (:func:`admit`).
"""

from __future__ import annotations

import bisect
import time
from array import array
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, NamedTuple

import numpy as np

from ..errors import RagbenchError, WorkerFault
from ..pipeline import Pipeline, RequestRecord

__all__ = [
    "Board",
    "COMPLETED",
    "FAILED",
    "GRACE_NS",
    "NEVER",
    "OpenRun",
    "PENDING",
    "REJECTED",
    "Result",
    "SPIN_NS",
    "STOP_GRACE_NS",
    "TIMED_OUT",
    "WorkerFault",
    "admit",
    "run_open_worker",
    "serve_timed",
    "wait_until",
]


PENDING, COMPLETED, TIMED_OUT, REJECTED, FAILED = 0, 1, 2, 3, 4

#: A worker waiting for a request's arrival sleeps until this long before it,
#: then spins: the OS wakes a sleeper 80 µs late at p50 and up to ~0.6 ms late
#: at p99 on a busy 2-core machine (measured), so sleeping alone misses.
SPIN_NS = 700_000

NEVER = np.iinfo(np.int64).max
#: A waiting worker looks at the stop flag at least this often.
_STOP_POLL_S = 0.02

#: A level's workers answer by its last arrival (or end) + timeout + this, or are stopped.
GRACE_NS = 500_000_000
#: Stopped workers answer within this, or are faults (killed, for processes).
STOP_GRACE_NS = 500_000_000


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
            h = self._h
            h[_HOLDER] = self.tag  # a worker killed holding the lock is known by it
            j = h[_TAKEN]
            h[_TAKEN] = j + 1
            h[_HOLDER] = 0
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
        board._h[_HOLDER] = board.tag
        try:
            return _admit_locked(board, j, run, now_ns)
        finally:
            board._h[_HOLDER] = 0


def _admit_locked(board: Board, j: int, run: OpenRun, now_ns: int) -> int:
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

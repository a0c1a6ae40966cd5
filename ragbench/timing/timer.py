"""The per-request, per-stage timer of a service: :class:`StageTimer` and its :class:`Request` handles.

Each thread stores whole rows of int64 stage times in a buffer of its own;
readers merge the buffers (see :class:`StageTimer`). A timer keeps a window
of the most recent requests (``window``, default :data:`WINDOW`), so its
memory and the cost of reading it do not grow with the requests served.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..errors import ConfigError, InputError
from .stages import Stats

__all__ = ["WINDOW", "Hook", "Request", "StageTimer", "check_stage_name"]

#: Requests a :class:`StageTimer` keeps by default (the most recent ones).
WINDOW = 10_000
#: A stage name: an HTTP token (RFC 9110, section 5.6.2), so that it can be a
#: ``Server-Timing`` metric name as it is.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

#: Leading values of a stored row: the request's start stamp.
_HEAD = 1
#: A stage the request never marked, in a stored row (a stage time is never negative).
_SKIPPED = -1
#: The stage index of a handle that is not open: every mark is a KeyError, so
#: the open check costs nothing on the hot path.
_CLOSED: dict[str, int] = {}

Hook = Callable[[list[str], Sequence[int], "dict[str, Any] | None"], None]


def check_stage_name(name: object) -> str:
    """``name`` if it is a stage name (an RFC 9110 token), else :class:`ConfigError` naming it.

    A token is one or more of the letters, digits and ``!#$%&'*+-.^_`|~``:
    what a ``Server-Timing`` metric name may be. Anything else (a space,
    ``,``, ``;``, a quote, a control character, a non-ASCII letter) would
    break the header or forge a value in it.
    """
    if not isinstance(name, str) or _TOKEN.fullmatch(name) is None:
        raise ConfigError(
            f"StageTimer stage name {name!r} is not an HTTP token (RFC 9110): use one or more "
            "ASCII letters, digits or !#$%&'*+-.^_`|~ (no spaces, commas, semicolons, quotes, "
            "control or non-ASCII characters), as Server-Timing metric names must be"
        )
    return name


class _Buffer:
    """One thread's stored rows: ``count`` whole rows of int64 values in ``data``.

    Only its own thread writes it, a whole row at a time (one ``fromlist``),
    and trims it in place (one ``del``) once it holds ``limit`` rows, back
    to the newest ``keep``; each is one C call under the GIL, so a reader
    that copies ``data`` (one slice) sees whole rows only, however many.
    ``trimmed`` counts the rows trimmed away.
    """

    __slots__ = ("data", "count", "failed", "limit", "keep", "trimmed")

    def __init__(self, keep: int, limit: int) -> None:
        self.data = array("q")
        self.count = 0
        self.failed = 0
        self.keep = keep
        self.limit = limit
        self.trimmed = 0

    def trim(self, width: int) -> None:
        """Drop the oldest rows, keeping the newest ``keep`` (amortized: once per ``limit - keep`` rows)."""
        drop = self.count - self.keep
        if drop > 0:
            del self.data[: drop * width]
            self.count -= drop
            self.trimmed += drop


class Request:
    """One request's stage times: the handle :meth:`StageTimer.request` gives.

    Use it as ``with timer.request() as r:`` or ``async with timer.request() as r:``
    and call ``r.mark("embed")`` when a stage ends. While it is open it is the
    timer's current request in this context (a ``contextvars`` variable), so
    code deep in the call stack, in a thread that copied the context
    (``asyncio.to_thread``, Starlette's ``run_in_threadpool``) or in a task
    started inside it, can call ``timer.mark("embed")`` instead.

    A stage time is the time from the previous mark (or the start, taken on
    entering the ``with``) to this one. Stages are marked by name, in any
    order; a stage marked twice adds up (each mark adds the time since the
    previous one); a stage never marked is *skipped*: it has no sample in
    :meth:`StageTimer.stats`, 0 in :meth:`StageTimer.samples` and ``False``
    in :meth:`StageTimer.ran` (its time, if any, is in the next stage marked).
    Time after the last mark is in no stage.

    A handle made with ``timer.request(queue="queue")`` (what
    :class:`~ragbench.middleware.TimingMiddleware` does when the timer has a
    ``queue`` stage) times the wait before the handler: the handler's first
    use of the handle -- :meth:`StageTimer.current`, ``annotate`` or
    :meth:`begin` -- marks ``queue`` (from the start to that moment) if
    nothing was marked before it, so the first stage the handler marks times
    its own work only, not the wait for a thread-pool thread. A handler that
    marks a stage before any such use leaves ``queue`` unmarked (the wait is
    in that stage, as without ``queue=``).

    On leaving the ``with`` the request is stored (then handed to the timer's
    ``on_request`` hook). A request whose ``with`` body raised is not stored,
    only counted (:attr:`StageTimer.failed`), so partial requests never mix
    into the statistics; one that marked nothing is not stored either.

    A ``threading.Thread`` started by hand does not copy the context (before
    Python 3.14): pass it the handle, or start it with
    ``contextvars.copy_context().run``. The stages of one request run one
    after another (the handle takes no lock): marks from two threads of the
    same request at once add their times, but which one's time counts from
    the other's mark is a race.
    """

    __slots__ = ("_timer", "_index", "_row", "_last", "_token", "_queue", "attributes")

    # Made only by StageTimer.request(), which sets every slot itself, so no
    # __init__ frame runs per request: an __init__ cost more than the run-to-run
    # noise against the timer-handle target (docs/reference/performance-targets.md).
    # _timer; _index, the timer's stage index
    # while the ``with`` is open, else _CLOSED; _row, None until entered;
    # attributes, what annotate() added (None: nothing) for the hook; _queue,
    # the row column of the stage begin() ends (0: none, or already done).
    _timer: StageTimer
    _index: dict[str, int]
    _row: list[int] | None
    _last: int
    _token: Token[Request | None]
    _queue: int
    attributes: dict[str, Any] | None

    def __enter__(self) -> Request:
        if self._row is not None:
            raise InputError("a timer.request() handle is used for one request: make a new one")
        timer = self._timer
        self._row = row = timer._blank.copy()
        self._token = timer._current.set(self)
        self._index = timer._index
        row[0] = self._last = perf_counter_ns()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: object, tb: object) -> None:
        self._index = _CLOSED
        timer = self._timer
        timer._current.reset(self._token)
        row: list[int] = self._row  # type: ignore[assignment]  # set by __enter__
        if kind is not None:
            timer._buffer().failed += 1
        elif self._last != row[0] or row.count(_SKIPPED) < len(row) - _HEAD:
            # StageTimer._store, inlined: this is the per-request hot path
            try:
                buf = timer._local.buf
            except AttributeError:
                buf = timer._buffer()
            buf.data.fromlist(row)
            buf.count += 1
            if buf.count >= buf.limit:  # once per `window` requests: back to the newest `window`
                buf.trim(timer._width)
            hook = timer._on_request
            if hook is not None:
                names, stamps = self.stamps()
                hook(names, stamps, self.attributes)

    async def __aenter__(self) -> Request:
        return self.__enter__()

    async def __aexit__(self, kind: type[BaseException] | None, value: object, tb: object) -> None:
        self.__exit__(kind, value, tb)

    def mark(self, stage: str) -> None:
        """End ``stage`` now: add the time since the previous mark (or the start) to it."""
        t = perf_counter_ns()
        try:
            j = self._index[stage]
        except KeyError:
            raise InputError(self._misuse(stage)) from None
        row: list[int] = self._row  # type: ignore[assignment]
        v = row[j]
        row[j] = t - self._last if v < 0 else v + t - self._last
        self._last = t

    def begin(self) -> None:
        """The handler starts now: mark the pending ``queue`` stage, if any, up to now.

        Only with ``timer.request(queue=...)``, only while the handle is open,
        only once, and only if no stage was marked yet (a mark before it means
        the handler already started: its time holds the wait). ``current()``
        and ``annotate()`` call it, so a handler that first fetches its handle
        needs no call of its own.
        """
        j = self._queue
        if j and self._index is not _CLOSED:
            self._queue = 0
            row: list[int] = self._row  # type: ignore[assignment]
            if self._last == row[0] and row[j] < 0:
                t = perf_counter_ns()
                row[j] = t - self._last
                self._last = t

    def _misuse(self, stage: str) -> str:
        if self._index is _CLOSED:
            return f"mark({stage!r}) outside its `with timer.request()` block"
        return self._timer._unknown(stage)

    def annotate(self, attributes: Mapping[str, Any]) -> None:
        """Add attributes of this request for the ``on_request``/``otel`` hook (payload size, ...).

        Like :meth:`begin`, it ends a pending ``queue`` stage first.
        """
        if self._queue:
            self.begin()
        if self.attributes is None:
            self.attributes = dict(attributes)
        else:
            self.attributes.update(attributes)

    @property
    def start_ns(self) -> int:
        """The ``perf_counter_ns`` stamp taken on entering the ``with`` (0 before)."""
        return self._row[0] if self._row is not None else 0

    def durations(self) -> dict[str, int]:
        """Nanoseconds of each stage marked so far, in stage order (skipped stages left out)."""
        row = self._row
        if row is None:
            return {}
        return {
            name: row[j + _HEAD] for j, name in enumerate(self._timer._names) if row[j + _HEAD] >= 0
        }

    def stamps(self) -> tuple[list[str], list[int]]:
        """The stages marked so far, in stage order, and ``len(names) + 1`` stamps for them.

        The stamps start at the request's start and lay the stages back to
        back (stamp ``j + 1`` = stamp ``j`` + stage ``j``'s time): the marks'
        own stamps when the stages were marked once each, in order; exact
        durations otherwise. The form ``on_request`` hooks take.
        """
        row = self._row
        if row is None:
            return [], []
        t = row[0]
        names, stamps = [], [t]
        for j, name in enumerate(self._timer._names):
            v = row[j + _HEAD]
            if v >= 0:
                t += v
                names.append(name)
                stamps.append(t)
        return names, stamps


class StageTimer:
    """Per-request, per-stage nanosecond samples for a fixed list of stage names.

    For a service, open one handle per request; it is safe in threads and
    asyncio tasks and marks stages by name (see :class:`Request` for what a
    skipped, repeated or failed stage does)::

        timer = StageTimer(["embed", "retrieve", "rerank", "generate"])
        async with timer.request() as r:          # or: with timer.request() as r
            ...; r.mark("embed")                  # or, anywhere below: timer.mark("embed")

    Read :meth:`stats`, :meth:`samples` whenever you like, from any thread,
    while requests are stored: each thread stores rows in its own buffer
    (registered once, under a lock) and readers merge them, in the order
    the requests started, seeing whole rows only. Nothing is averaged.

    ``window`` bounds what is kept: the readers see the ``window`` (default
    :data:`WINDOW`, 10 000) most recent requests -- of the rows each thread
    stored last, those that started last -- so a long-running service's
    memory stays flat and a :meth:`stats` call costs the same after a
    billion requests as after ``window``. A thread's buffer holds up to
    ``2 * window`` rows of ``8 * (1 + stages)`` bytes and is trimmed back
    to its newest ``window`` when full (one move of ``window`` rows, once
    per ``window`` requests). :attr:`stored` counts every request stored,
    ``len(timer)`` those in the window. ``window=None`` keeps every request
    (memory grows by a row per request).

    Stage names must be HTTP tokens (RFC 9110: ASCII letters, digits and
    ``!#$%&'*+-.^_`|~``), since :class:`~ragbench.middleware.TimingMiddleware`
    sends them as ``Server-Timing`` metric names; anything else is a
    :class:`ConfigError` naming it (:func:`check_stage_name`).

    The older :meth:`start` / :meth:`mark` pair (marks in stage order, no
    name) is for a single-threaded loop: two requests overlapping on it --
    another :meth:`start` before the last mark, or a mark from a different
    thread or task than the one that started -- raise :class:`InputError`
    instead of storing a mixed-up row (the request in progress is dropped).
    A :meth:`start` in the same thread or task as the unfinished request
    begins a new one (the unfinished one is dropped: a stage raised).

    >>> timer = StageTimer(["retrieve", "rerank"])
    >>> timer.start(); ...; timer.mark(); ...; timer.mark()

    Each stored request can also be handed on, after its last stamp (so it
    adds nothing to any stage time): ``on_request(names, stamps, attributes)``
    is called once per request, in the thread that stored it (on leaving a
    handle's ``with``, the last :meth:`mark`, or :meth:`add`), with the
    names of the stages it ran, ``len(names) + 1`` ``perf_counter_ns``
    stamps (:meth:`Request.stamps`; with :meth:`start`/:meth:`mark` a list
    the timer reuses: copy it to keep it) and what ``annotate`` added to
    this request (or ``None``). ``otel=`` takes a
    :class:`ragbench.otel.TraceExporter` and exports every request as an
    OpenTelemetry trace whose stage spans start and end at these stamps::

        timer = StageTimer(["embed", "retrieve", "generate"], otel=TraceExporter())

    The hook runs in the request's thread; wrap it in :class:`Background`
    (``on_request=Background(exporter.on_request)``) to run it on a thread
    of its own instead. Without a hook, a request costs one ``None`` check
    more when it is stored. ``block`` is accepted for compatibility (the
    buffers grow as needed).
    """

    __slots__ = (
        "_names",
        "_index",
        "_blank",
        "_width",
        "_current",
        "_local",
        "_buffers",
        "_lock",
        "_on_request",
        "_attributes",
        "_stamps",
        "_row",
        "_next",
        "_owner",
        "_owner_var",
        "_window",
    )

    def __init__(
        self,
        names: Sequence[str],
        *,
        block: int = 1024,
        on_request: Hook | None = None,
        otel: Any = None,
        window: int | None = WINDOW,
    ) -> None:
        if isinstance(names, str):
            raise ConfigError(f"StageTimer needs a list of stage names, not one string {names!r}")
        names = [check_stage_name(name) for name in names]
        if not names or len(set(names)) != len(names):
            raise ConfigError("StageTimer needs a non-empty list of distinct stage names")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ConfigError(
                f"StageTimer window must be a whole number of requests >= 1 (or None: keep "
                f"every request), got {window!r}"
            )
        self._window = window
        if on_request is not None and otel is not None:
            raise ConfigError("StageTimer takes on_request or otel, not both")
        if otel is not None:
            on_request = otel.on_request
        if on_request is not None and not callable(on_request):
            raise ConfigError(f"StageTimer on_request must be callable, got {on_request!r}")
        self._names = names
        self._index = {name: j + _HEAD for j, name in enumerate(names)}
        self._blank = [0] + [_SKIPPED] * len(names)
        self._width = len(self._blank)
        self._current: ContextVar[Request | None] = ContextVar(f"ragbench_request_{id(self)}")
        self._local = threading.local()
        self._buffers: list[_Buffer] = []
        self._lock = threading.Lock()
        self._on_request = on_request
        self._attributes: dict[str, Any] | None = None
        # the start()/mark() request in progress
        self._stamps = [0] * (len(names) + 1)
        self._row = self._blank.copy()
        self._next = 0
        self._owner: object = None
        self._owner_var: ContextVar[object] = ContextVar(f"ragbench_start_{id(self)}")

    @property
    def names(self) -> list[str]:
        return list(self._names)

    @property
    def window(self) -> int | None:
        """How many of the most recent requests the readers see (``None``: every one)."""
        return self._window

    # ------------------------------------------------------------ per-request handles

    def request(self, queue: str | None = None) -> Request:
        """A handle for one request: ``with timer.request() as r:`` (or ``async with``).

        ``queue``: one of the stage names; the handler's first use of the
        handle marks it (the wait before the handler, see :class:`Request`).
        """
        r = Request()
        r._timer = self
        r._index = _CLOSED
        r._row = None
        r.attributes = None
        r._queue = 0 if queue is None else self._column(queue) + _HEAD
        return r

    def current(self) -> Request | None:
        """The request open in this context (thread, task, or a copy of either), or ``None``.

        Ends the handle's pending ``queue`` stage (:meth:`Request.begin`).
        """
        handle = self._current.get(None)
        if handle is not None and handle._queue:
            handle.begin()
        return handle

    # ------------------------------------------------------------ start() / mark()

    def start(self) -> None:
        """Begin a request (single-threaded use; see the class docstring)."""
        if self._next and self._owner_var.get(None) is not self._owner:
            self._next = 0
            raise InputError(
                "StageTimer.start() while another request's start() has no last mark yet: "
                "requests overlap (threads or asyncio tasks); give each request its own "
                "handle with `with timer.request() as r: ... r.mark(stage)`"
            )
        owner = self._owner = object()
        self._owner_var.set(owner)
        self._stamps[0] = self._row[0] = perf_counter_ns()
        self._next = 1

    def mark(self, stage: str | None = None) -> None:
        """End a stage: ``mark("embed")`` in the current :meth:`request`; ``mark()`` after :meth:`start`.

        ``mark()`` ends the next stage of the request :meth:`start` began, in
        stage order; its last mark stores the request.
        """
        if stage is not None:
            handle = self._current.get(None)
            if handle is None:
                raise InputError(
                    f"StageTimer.mark({stage!r}) with no request open here: "
                    "call it inside `with timer.request():`"
                )
            handle.mark(stage)
            return
        t = perf_counter_ns()
        n = self._next
        if n == 0:
            raise InputError(f"StageTimer.mark() called before start(){self._overlap_hint()}")
        if self._owner_var.get(None) is not self._owner:
            self._next = 0
            raise InputError(
                "StageTimer.mark() from a different thread or task than the start() of the "
                "request in progress: requests overlap; give each request its own handle with "
                "`with timer.request() as r: ... r.mark(stage)`"
            )
        stamps = self._stamps
        stamps[n] = t
        self._row[n] = t - stamps[n - 1]  # stage n - 1, after the start column
        if n < len(self._names):
            self._next = n + 1
            return
        self._next = 0
        self._store(self._row, None)

    def abandon(self) -> None:
        """Drop the request :meth:`start` began (a stage raised); the next :meth:`start` is fresh."""
        self._next = 0

    def _overlap_hint(self) -> str:
        if self._current.get(None) is not None:
            return ": inside `with timer.request() as r`, mark stages by name: r.mark(stage)"
        return " (or another thread's start() overlapped this request's)"

    # ------------------------------------------------------------ storage

    def add(self, stamps: Sequence[int]) -> None:
        """Store one request from its ``len(names) + 1`` non-decreasing stamps (any thread)."""
        n = len(self._names)
        if len(stamps) != n + 1:
            raise InputError(f"expected {n + 1} stamps for {n} stages, got {len(stamps)}")
        row = [int(stamps[0])]
        row += [int(b) - int(a) for a, b in zip(stamps, stamps[1:], strict=False)]
        if min(row[_HEAD:]) < 0:
            raise InputError(f"stamps must not decrease, got {list(stamps)}")
        self._store(row, None, stamps)

    def _store(self, row: list[int], handle: Request | None, stamps: Sequence[int] = ()) -> None:
        try:
            buf = self._local.buf
        except AttributeError:
            buf = self._buffer()
        buf.data.fromlist(row)
        buf.count += 1
        if buf.count >= buf.limit:
            buf.trim(self._width)
        hook = self._on_request
        if hook is not None:
            if handle is not None:
                names, stamps = handle.stamps()
                hook(names, stamps, handle.attributes)
            else:
                attributes, self._attributes = self._attributes, None
                hook(self._names, stamps or self._stamps, attributes)

    def _buffer(self) -> _Buffer:
        """This thread's buffer, registered on its first use."""
        try:
            buf: _Buffer = self._local.buf
        except AttributeError:
            window = self._window
            keep = window if window is not None else 1 << 62
            buf = self._local.buf = _Buffer(keep, 2 * keep)
            with self._lock:
                self._buffers.append(buf)
        return buf

    def annotate(self, attributes: Mapping[str, Any]) -> None:
        """Attributes of the current request for the ``on_request``/``otel`` hook (payload size, ...).

        Inside a :meth:`request` they go on its handle (:meth:`Request.annotate`).
        Otherwise they go with the next request stored by :meth:`mark` or
        :meth:`add`, then are forgotten; without a hook they are dropped.
        """
        handle = self._current.get(None)
        if handle is not None:
            handle.annotate(attributes)
            return
        if self._on_request is None:
            return
        if self._attributes is None:
            self._attributes = dict(attributes)
        else:
            self._attributes.update(attributes)

    # ------------------------------------------------------------ reading

    def _rows(self) -> np.ndarray:
        """The window's rows, int64 ``(requests, 1 + stages)``, by start stamp; -1: skipped.

        At most ``window`` rows: the latest starts among the rows the threads
        keep. Ties (``add`` with equal first stamps) keep each thread's own order.
        """
        with self._lock:
            buffers = list(self._buffers)
        width = self._width
        parts = []
        for buf in buffers:
            data = buf.data[:]  # one copy: whole rows only (see _Buffer), however many
            count = len(data) // width
            parts.append(np.frombuffer(data, dtype=np.int64, count=count * width))
        if not parts:
            return np.zeros((0, width), dtype=np.int64)
        rows = np.concatenate(parts).reshape(-1, width)
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        window = self._window
        return rows if window is None or len(rows) <= window else rows[-window:]

    def _unknown(self, name: str) -> str:
        return f"unknown stage {name!r}; stages: {', '.join(self._names)}"

    def _column(self, name: str) -> int:
        try:
            return self._names.index(name)
        except ValueError:
            raise InputError(self._unknown(name)) from None

    def samples(self, name: str | None = None) -> np.ndarray:
        """Raw samples: int64 ``(requests, stages)``, or ``(requests,)`` for one stage.

        Rows in the order the requests started; a stage a request skipped is 0
        (:meth:`ran` tells them apart from a stage that took 0 ns).
        """
        times: np.ndarray = np.maximum(self._rows()[:, _HEAD:], 0)
        return times if name is None else times[:, self._column(name)].copy()

    def ran(self, name: str | None = None) -> np.ndarray:
        """bool ``(requests, stages)`` (or ``(requests,)``): which stages each request marked."""
        ran = self._rows()[:, _HEAD:] >= 0
        return ran if name is None else ran[:, self._column(name)].copy()

    def starts(self) -> np.ndarray:
        """int64 ``(requests,)``: each stored request's start stamp (``perf_counter_ns``)."""
        return self._rows()[:, 0].copy()

    def stats(self) -> dict[str, Stats]:
        """Per-stage statistics (over the requests that ran the stage) plus ``"total"``."""
        times = self._rows()[:, _HEAD:]
        out = {
            name: Stats.from_samples(times[times[:, j] >= 0, j])
            for j, name in enumerate(self._names)
        }
        out["total"] = Stats.from_samples(np.maximum(times, 0).sum(axis=1))
        return out

    @property
    def failed(self) -> int:
        """Requests whose ``with timer.request()`` body raised (not stored)."""
        with self._lock:
            buffers = list(self._buffers)
        return sum(buf.failed for buf in buffers)

    @property
    def stored(self) -> int:
        """Requests stored since the timer was made, including those no longer in the window."""
        with self._lock:
            buffers = list(self._buffers)
        return sum(buf.count + buf.trimmed for buf in buffers)

    def __len__(self) -> int:
        """Requests in the window: the rows :meth:`samples` returns (at most ``window``)."""
        with self._lock:
            buffers = list(self._buffers)
        kept = sum(buf.count for buf in buffers)
        return kept if self._window is None else min(kept, self._window)

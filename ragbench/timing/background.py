"""Running ``on_request`` hooks on a thread of their own: :class:`Background`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from queue import SimpleQueue
from typing import Any

from ..errors import ConfigError
from .timer import Hook

__all__ = ["Background"]

log = logging.getLogger("ragbench.timing")


class Background:
    """Runs ``on_request`` hooks on a thread of its own, off the requests' critical path.

    ``Background(exporter.on_request, histogram.on_request)`` is itself a
    hook: called in a request's thread it copies the stamps and puts the
    request on a queue (a ``SimpleQueue.put``, under a microsecond), and one
    daemon thread hands each to every sink in turn. That thread looks at the
    queue every ``interval_s`` (default 0.05 s) and drains it; a put never
    wakes it, so a request never pays for a thread switch (waking it per
    request cost ~5 µs of GIL hand-over each time, measured). When
    ``max_queued`` requests are waiting (the sinks cannot keep up), further
    ones are dropped and counted in :attr:`dropped` rather than grow memory
    or block a request. A sink that raises is logged once and counted in
    :attr:`errors`; the others still run. :meth:`flush` waits until
    everything queued so far is handed on; :meth:`close` (at shutdown) does
    that and stops the thread.

    The sinks' work still takes CPU (and the GIL) in this process, only not
    between a request's stamps nor before its response.
    """

    def __init__(
        self,
        *sinks: Hook,
        max_queued: int = 10_000,
        interval_s: float = 0.05,
        name: str = "ragbench-export",
    ) -> None:
        if not sinks or not all(callable(s) for s in sinks):
            raise ConfigError(f"Background needs one or more callables, got {sinks!r}")
        if max_queued < 1:
            raise ConfigError(f"Background max_queued must be >= 1, got {max_queued}")
        if not interval_s > 0:
            raise ConfigError(f"Background interval_s must be > 0, got {interval_s}")
        self._sinks = sinks
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.max_queued = max_queued
        self.interval_s = interval_s
        #: requests dropped because the queue was full (or the thread closed)
        self.dropped = 0
        #: sink calls that raised
        self.errors = 0
        #: requests handed to every sink
        self.done = 0
        self._closed = False
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    def __call__(
        self, names: list[str], stamps: Sequence[int], attributes: dict[str, Any] | None
    ) -> None:
        queue = self._queue
        if self._closed or queue.qsize() >= self.max_queued:
            with self._lock:
                self.dropped += 1
            return
        queue.put((names, tuple(stamps), attributes))

    def _drain(self) -> None:
        queue, wake = self._queue, self._wake
        while True:
            wake.wait(self.interval_s)
            wake.clear()
            while not queue.empty():
                item = queue.get()
                if item is None:
                    return
                if isinstance(item, threading.Event):
                    item.set()
                else:
                    self._hand_on(item)

    def _hand_on(self, item: tuple[list[str], tuple[int, ...], dict[str, Any] | None]) -> None:
        for sink in self._sinks:
            try:
                sink(*item)
            except Exception:
                if not self.errors:
                    log.exception("ragbench.timing.Background: a sink raised (logged once)")
                self.errors += 1
        self.done += 1

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every request queued before this call went to the sinks; False on timeout."""
        if not self._thread.is_alive():
            return self._queue.empty()
        done = threading.Event()
        self._queue.put(done)
        self._wake.set()
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Hand on what is queued, then stop the thread (later requests are dropped)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._wake.set()
        self._thread.join(timeout_s)

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Progress of long set-up work: the stages report, the face renders.

Embedding a corpus, building a large index and computing exact neighbours can
take minutes. The code doing that work reports how far it got through
:func:`task`; what (if anything) is drawn is up to the :class:`Reporter` a
face installed with :func:`installed` — the command line installs one that
draws a bar on a terminal. The default reporter does nothing, so library
users and pipes see no output::

    from ragbench import progress

    with progress.task("embedding corpus", total=len(texts), unit="passages") as advance:
        for chunk in chunks:
            ...
            advance(len(chunk))

Reporting costs one call per chunk of work, never one per item.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["NullReporter", "Reporter", "current", "installed", "task"]


class Reporter(Protocol):
    """What a face implements to show progress.

    ``start`` opens a task of ``total`` units (``unit`` names them, e.g.
    ``"passages"``) and returns a handle; ``advance`` adds ``n`` done units to
    it; ``finish`` closes it (always called, also when the work failed).
    """

    def start(self, description: str, total: int, unit: str) -> int: ...

    def advance(self, handle: int, n: int) -> None: ...

    def finish(self, handle: int) -> None: ...


class NullReporter:
    """The default: shows nothing."""

    def start(self, description: str, total: int, unit: str) -> int:
        return 0

    def advance(self, handle: int, n: int) -> None:
        pass

    def finish(self, handle: int) -> None:
        pass


_NULL = NullReporter()
_lock = threading.Lock()
_reporter: Reporter = _NULL


def current() -> Reporter:
    """The reporter in use (a :class:`NullReporter` unless a face installed one)."""
    return _reporter


@contextmanager
def installed(reporter: Reporter) -> Iterator[Reporter]:
    """Use ``reporter`` for every :func:`task` inside the block (process-wide); restore after."""
    global _reporter
    with _lock:
        before, _reporter = _reporter, reporter
    try:
        yield reporter
    finally:
        with _lock:
            _reporter = before


def _noop(n: int) -> None:
    pass


@contextmanager
def task(description: str, total: int, *, unit: str = "items") -> Iterator[Callable[[int], None]]:
    """Report one piece of work of ``total`` units; yields ``advance(n)``.

    With the default reporter ``advance`` is a no-op function, so reporting
    costs nothing measurable when nobody watches.
    """
    reporter = _reporter
    if reporter is _NULL:
        yield _noop
        return
    handle = reporter.start(description, max(int(total), 0), unit)

    def advance(n: int) -> None:
        reporter.advance(handle, n)

    try:
        yield advance
    finally:
        reporter.finish(handle)

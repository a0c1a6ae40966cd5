"""Progress of a command on stderr: the face's :class:`ragbench.progress.Reporter`.

:func:`on_stderr` installs, for the length of a command, a
:class:`RichReporter` when stderr is a terminal, else a :class:`PlainReporter`
(CI, pipes, files): no bar and no escape code, but one plain line per running
step every ``$RAGBENCH_PROGRESS_INTERVAL_S`` seconds (default 10), e.g.
``ragbench: embedding corpus (minilm) 1 024/3 274 passages (31 %), 12 s``, so
a long set-up is never silent; steps shorter than the interval print nothing.
All bars of a command share one live display, so a step
reporting inside another (embedding inside "setting up") draws a second line
instead of failing; the display starts with the first bar and is erased when
the last one finishes, so tables printed on stdout between bars are never
interleaved with a bar.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from .. import progress as hook
from ..errors import ConfigError

__all__ = ["INTERVAL_ENV", "PlainReporter", "RichReporter", "interval_s", "on_stderr"]

#: Seconds between two plain progress lines of a step (stderr not a terminal).
INTERVAL_ENV = "RAGBENCH_PROGRESS_INTERVAL_S"
_DEFAULT_INTERVAL_S = 10.0


def _rate_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Units done per second, e.g. ``31/s`` (the units are named beside the count)."""

        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            if speed is None:
                return Text("–/s", style="progress.data.speed")
            digits = 0 if speed >= 10 else 1
            return Text(f"{speed:,.{digits}f}/s", style="progress.data.speed")

    return RateColumn()


class RichReporter:
    """Draws every reported task as a rich bar on stderr: done/total units, rate and ETA."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console if console is not None else Console(stderr=True)
        self._lock = threading.Lock()
        self._bar: Any = None
        self._open = 0

    def _display(self) -> Any:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        return Progress(
            "[progress.description]{task.description}",
            BarColumn(bar_width=None),  # the bar gives way on a narrow terminal, not the figures
            TextColumn("{task.completed}/{task.total} {task.fields[unit]}"),
            _rate_column(),
            "eta",
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
            # stdout stays the command's own (tables, records); log lines on stderr print
            # above the bars instead of through them
            redirect_stdout=False,
            redirect_stderr=True,
        )

    def start(self, description: str, total: int, unit: str) -> int:
        from rich import markup

        with self._lock:
            if self._bar is None:
                self._bar = self._display()
                self._bar.start()
            self._open += 1
            # the description (a dataset name, a label) is plain text, not rich markup
            text = markup.escape(description)
            return int(self._bar.add_task(text, total=total, unit=unit))

    def advance(self, handle: int, n: int) -> None:
        bar = self._bar
        if bar is not None:
            bar.advance(handle, n)

    def finish(self, handle: int) -> None:
        with self._lock:
            bar = self._bar
            if bar is None:
                return
            bar.remove_task(handle)
            self._open -= 1
            if self._open <= 0:
                bar.stop()
                self._bar, self._open = None, 0


def interval_s() -> float:
    """``$RAGBENCH_PROGRESS_INTERVAL_S`` (a number > 0), else 10 seconds."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return _DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{INTERVAL_ENV} must be a number of seconds > 0, got {raw!r}")
    return value


def _count(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(seconds)
    return f"{s} s" if s < 120 else f"{s // 60} min {s % 60:02d} s"


@dataclass
class _Step:
    description: str
    total: int
    unit: str
    started: float
    done: int = 0
    due: float = 0.0  # when its next line is due (monotonic seconds)
    printed: bool = False

    def line(self, now: float, end: str = "") -> str:
        done = f"{_count(self.done)}/{_count(self.total)}" if self.total else _count(self.done)
        pct = f" ({100 * self.done // self.total} %)" if self.total else ""
        return (
            f"ragbench: {self.description} {done} {self.unit}{pct}, "
            f"{_duration(now - self.started)}{end}"
        )


class PlainReporter:
    """One plain line per running step every ``interval`` seconds on ``stream``.

    A background thread (running only while a step is open) writes the lines,
    so a step that advances rarely, or never until it ends, is still reported;
    a step that printed a line prints a last one, ``..., done``, when it ends.
    ``advance`` only adds to a counter under a lock.
    """

    def __init__(self, stream: TextIO | None = None, interval: float | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval_s() if interval is None else interval
        self._cond = threading.Condition()
        self._steps: dict[int, _Step] = {}
        self._next = 0
        self._thread: threading.Thread | None = None

    def start(self, description: str, total: int, unit: str) -> int:
        now = time.monotonic()
        with self._cond:
            handle, self._next = self._next, self._next + 1
            self._steps[handle] = _Step(description, total, unit, now, due=now + self.interval)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="ragbench-progress", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
            return handle

    def advance(self, handle: int, n: int) -> None:
        with self._cond:
            step = self._steps.get(handle)
            if step is not None:
                step.done += n

    def finish(self, handle: int) -> None:
        with self._cond:
            step = self._steps.pop(handle, None)
            if step is not None and step.printed:
                self._write(step.line(time.monotonic(), ", done"))
            self._cond.notify_all()

    def close(self) -> None:
        """Forget every open step and wait for the writing thread to end."""
        with self._cond:
            self._steps.clear()
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join()

    def _write(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe must not stop the work it reports on

    def _loop(self) -> None:
        with self._cond:
            while self._steps:
                now = time.monotonic()
                for step in list(self._steps.values()):
                    if now >= step.due:
                        self._write(step.line(now))
                        step.printed, step.due = True, now + self.interval
                wake = min(step.due for step in self._steps.values())
                self._cond.wait(timeout=max(wake - time.monotonic(), 0.001))
            self._thread = None


@contextmanager
def on_stderr() -> Iterator[None]:
    """Install a :class:`RichReporter` on a terminal, else a :class:`PlainReporter`, for the block."""
    if sys.stderr.isatty():
        with hook.installed(RichReporter()):
            yield
        return
    plain = PlainReporter()
    try:
        with hook.installed(plain):
            yield
    finally:
        plain.close()

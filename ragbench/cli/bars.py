"""Progress bars on the terminal: the face's :class:`ragbench.progress.Reporter`.

:func:`on_terminal` installs a :class:`RichReporter` for the length of a
command when stderr is a terminal, and nothing otherwise (CI, pipes, files
see no bar output). All bars of a command share one live display, so a step
reporting inside another (embedding inside "setting up") draws a second line
instead of failing; the display starts with the first bar and is erased when
the last one finishes, so tables printed on stdout between bars are never
interleaved with a bar.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import progress as hook

__all__ = ["RichReporter", "on_terminal"]


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


@contextmanager
def on_terminal() -> Iterator[None]:
    """Install a :class:`RichReporter` while the block runs if stderr is a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    with hook.installed(RichReporter()):
        yield

"""The ``ragbench`` command line: parse options, call a driver, render its records.

Every command has ``--help``. Bad input prints one line and exits 2 (never a
traceback); a run stopped by a failing server exits 1 after writing what it
finished; Ctrl-C exits 130 and keeps every record already written.

Commands live in the modules of this package and are registered here
statically: a command module that fails to import fails ``ragbench`` loudly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import click

from ..errors import RagbenchError
from .bars import on_stderr
from .frontier import frontier
from .pipelines import compare, run
from .results import datasets, diff, report
from .schema import schema
from .stream import stream
from .stub import stub_llm
from .sweeps import scale, sweep
from .traffic import load

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ragbench")
def cli() -> None:
    """Measure where the time goes between a question and the first token of a RAG service."""


for command in (
    datasets,
    run,
    compare,
    frontier,
    sweep,
    scale,
    load,
    stream,
    report,
    diff,
    schema,
    stub_llm,
):
    cli.add_command(command)


#: Seconds the command has to wind down after Ctrl-C before the process exits regardless.
INTERRUPT_GRACE_S = 1.5
INTERRUPTED = "ragbench: interrupted; records already written are kept"


class _Interrupts:
    """Ctrl-C ends the command within :data:`INTERRUPT_GRACE_S`, whatever it is doing.

    The first SIGINT raises KeyboardInterrupt as usual, so the command stops
    the way Python stops (``finally`` blocks close child processes and pools)
    and prints what it finished. It also arms a timer that, if the process is
    still there when it fires (a C or numba call that does not return to
    Python, a pool waiting for a busy thread, interpreter shutdown joining
    one), prints the one line and exits 130 at once; a second SIGINT does so
    immediately. The timer is armed from a thread woken by the signal's
    wakeup fd, so it starts even while the main thread is inside C code.
    Every record was flushed when it was appended; child servers exit when
    this process's end closes their stdin. ``keep_armed``: the timer outlives
    :meth:`__exit__` (the console command, whose shutdown can hang too; never
    when ``main`` is called inside another program).
    """

    def __init__(self, keep_armed: bool) -> None:
        self.keep_armed = keep_armed
        self.previous: Any = None
        self.old_fd = -1
        self.pipe: tuple[int, int] | None = None
        self.timer: threading.Timer | None = None
        self.count = 0
        self.reported = False
        self.lock = threading.Lock()

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            self.old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # pragma: no cover - not the main interpreter
            os.close(r)
            os.close(w)
            return self
        self.pipe = (r, w)
        threading.Thread(target=self._watch, args=(r,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pipe is not None:
            signal.set_wakeup_fd(self.old_fd)
            os.close(self.pipe[1])  # the watcher reads EOF, closes its end and returns
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        if self.timer is not None and not self.keep_armed:
            self.timer.cancel()

    def _watch(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            while data := os.read(fd, 64):
                for _ in range(data.count(signal.SIGINT)):
                    self._arm()
        os.close(fd)

    def _arm(self) -> None:
        with self.lock:
            self.count += 1
            if self.count > 2:  # the wakeup fd and the handler each count a signal once
                self._hard_exit()
            if self.timer is None:
                self.timer = threading.Timer(INTERRUPT_GRACE_S, self._hard_exit)
                self.timer.daemon = True
                self.timer.start()

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self._arm()
        raise KeyboardInterrupt

    def report(self) -> None:
        """Print the one line (once)."""
        if not self.reported:
            self.reported = True
            click.echo(INTERRUPTED, err=True)

    def _hard_exit(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        if not self.reported:
            with contextlib.suppress(OSError):
                os.write(2, (INTERRUPTED + "\n").encode())
        os._exit(130)


_interrupts = _Interrupts(keep_armed=False)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one line and exit 2 on bad input; 1 when a run stopped early; 130 on Ctrl-C.

    Without ``argv`` (the console command), Ctrl-C ends the process within
    :data:`INTERRUPT_GRACE_S` even if shutting down hangs.
    """
    global _interrupts
    _interrupts = _Interrupts(keep_armed=argv is None)
    with _interrupts, _warnings_on_stderr():
        code = _main(list(argv) if argv is not None else sys.argv[1:])
    if _interrupts.count and _interrupts.keep_armed:
        _leave_now(code)
    return code


def _leave_now(code: int) -> None:
    """End an interrupted console command without the interpreter's finalization.

    The command has wound down (its ``finally`` blocks ran, records are on
    disk) and the exit handlers run here, while the grace timer can still
    fire; finalization after them cleared the modules of torch, grpc, ... for
    up to 3 s on a loaded machine, when no daemon thread (the timer) can run
    any more, so Ctrl-C during MiniLM embedding took 3.1 s with a 1.5 s grace.
    """
    import atexit

    atexit._run_exitfuncs()
    for out in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            out.flush()
    os._exit(code)


class _StderrHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"ragbench: warning: {record.getMessage()}", err=True)


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """Warnings of ragbench's loggers (a skipped torn line, a cache not written) as one stderr line each."""
    logger = logging.getLogger("ragbench")
    handler = _StderrHandler(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _main(args: list[str]) -> int:
    try:
        # the context is made and invoked here, not through cli.main, so Ctrl-C reaches this
        # function as KeyboardInterrupt (one line below) and an EOFError is not taken for it
        with on_stderr(), cli.make_context("ragbench", args) as ctx:
            cli.invoke(ctx)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        _interrupts.report()
        return 130
    except EOFError as exc:
        click.echo(f"ragbench: error: a file or stream ended early (EOFError: {exc})", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"ragbench: error: {one_line(exc.format_message())}", err=True)
        return 2
    except RagbenchError as exc:
        click.echo(f"ragbench: error: {one_line(str(exc))}", err=True)
        return 2
    except KeyboardInterrupt:
        _interrupts.report()
        return 130
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else 1
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():
            click.echo(f"ragbench: error: a connection closed (BrokenPipeError: {exc})", err=True)
            return 1
        # the reader of the output went away (`ragbench report F | head`): stop quietly, as a
        # command killed by SIGPIPE would (128 + 13), and send what is still buffered nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    return 0


def _stdout_reader_gone() -> bool:
    """True when standard output is a pipe whose reading end is closed (poll reports POLLERR)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def one_line(text: str) -> str:
    """Collapse whitespace so an error message is one line."""
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

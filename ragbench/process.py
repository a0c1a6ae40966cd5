"""Servers in child processes that never outlive their parent.

Both sides of the protocol live here. The parent starts a child with
:class:`ChildProcess`: stdin and stdout piped, stderr into a temporary file
(so a chatty child can never block on a full pipe), an optional first stdin
line of JSON configuration, and the child's first stdout line taken as its
"ready" line. The child calls :func:`watch_stdin` and winds down when its
stdin reaches EOF -- which happens when the parent closes it in
:meth:`ChildProcess.stop` and also when the parent dies, so a child never
outlives it. Subprocess + JSON rather than :mod:`multiprocessing`, because
multiprocessing ships its arguments as pickles and ragbench never loads a
pickle.

Used by the ``http``/``grpc`` transports (their far side) and by the
``stub`` generator (the stub LLM server).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import IO, Any

from .errors import RagbenchError

__all__ = ["ChildProcess", "child_env", "watch_stdin"]


def child_env() -> dict[str, str]:
    """The parent's environment with ``PYTHONPATH`` set so a child imports what the parent can.

    The directory holding the ragbench package comes first, so the child runs
    the same checkout as the parent, followed by the parent's ``sys.path``
    (where test-local factories live).
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [root] + [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
    seen: dict[str, None] = dict.fromkeys(paths)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(seen)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _stop_process(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Close the child's stdin (its signal to exit), then escalate to SIGTERM, SIGKILL."""
    if proc.stdin is not None and not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5.0)
    if proc.stdout is not None:
        proc.stdout.close()


class ChildProcess:
    """A server in a child process, alive until :meth:`stop`, garbage collection or exit.

    ``argv`` is run with stdin, stdout piped and stderr into a temporary file.
    ``config`` (if any) is written as the first stdin line, as JSON; stdin
    then stays open, and the child is expected to exit at its EOF (see
    :func:`watch_stdin`). The first stdout line is the ready line
    (:meth:`wait_ready`). ``what`` names the owner in messages, and
    ``error`` is the :class:`~ragbench.errors.RagbenchError` subclass
    :meth:`wait_ready` raises (e.g. ``TransportError``, ``GeneratorError``).
    """

    def __init__(
        self,
        argv: Sequence[str],
        what: str,
        config: dict[str, Any] | None = None,
        *,
        error: type[RagbenchError],
    ) -> None:
        self.what = what
        self.error = error
        # Lives as long as the child; closed in stop().
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=child_env(),
            # Its own session: Ctrl-C in a terminal reaches only the parent,
            # which then stops the child in order.
            start_new_session=True,
        )
        self._finalizer = weakref.finalize(self, _stop_process, self.proc, 3.0)
        if config is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps(config).encode() + b"\n")
                self.proc.stdin.flush()
            except OSError:
                pass  # the child already died: wait_ready reports its stderr

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, limit: int = 2000) -> str:
        """The last ``limit`` bytes the child wrote to stderr, decoded and stripped."""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit))
            return self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def wait_ready(self, timeout: float) -> str:
        """Return the child's first stdout line; raise ``error`` if it fails or is slow."""
        stdout = self.proc.stdout
        if stdout is None:  # pragma: no cover - always piped
            raise self.error(f"{self.what}: child has no stdout")
        fd = stdout.fileno()
        deadline = time.monotonic() + timeout
        data = b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in data:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.stop(grace=0.0)
                    raise self.error(
                        f"{self.what}: server did not report ready within {timeout:g} s"
                        + self._tail_note()
                    )
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise self._exited_early()
                data += chunk
        return data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()

    def _exited_early(self) -> RagbenchError:
        try:
            code: int | str = self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.stop(grace=0.0)
            code = "unknown (it closed its stdout)"
        return self.error(
            f"{self.what}: server process exited with code {code} before it was ready"
            + self._tail_note()
        )

    def _tail_note(self) -> str:
        tail = self.stderr_tail()
        return f"; its stderr ends with:\n{tail}" if tail else ""

    def death_note(self, wait: float = 0.5) -> str:
        """A phrase for error messages: whether and how the child died."""
        try:
            code = self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return "the server process is still running"
        return f"the server process (pid {self.proc.pid}) exited with code {code}" + (
            self._tail_note() if code not in (0, -signal.SIGKILL, -signal.SIGTERM) else ""
        )

    def stop(self, grace: float = 3.0) -> None:
        """Stop the child (idempotent) and wait for it to be gone."""
        if self._finalizer.detach() is not None:
            _stop_process(self.proc, grace)
        with contextlib.suppress(OSError):
            self._stderr.close()


def watch_stdin(on_eof: Callable[[], None], *, exit_after: float | None = 5.0) -> None:
    """In a child: call ``on_eof`` when the parent closes our stdin or dies.

    Runs in a daemon thread. With ``exit_after`` seconds, the process then
    exits (``os._exit(0)``) if it has not wound down by itself in that time,
    so a server that does not stop cleanly cannot linger; ``None`` only
    calls ``on_eof``.
    """

    def run() -> None:
        try:
            while sys.stdin.buffer.read(65536):
                pass
        except (OSError, ValueError):
            pass
        on_eof()
        if exit_after is not None:
            time.sleep(exit_after)
            os._exit(0)

    threading.Thread(target=run, name="ragbench-parent-watch", daemon=True).start()

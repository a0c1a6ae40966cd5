"""Starting, greeting and reading the spawned worker processes of a pool.

Shared by :class:`ragbench.workers.ProcessWorkers` and
:class:`ragbench.aioworkers.AsyncWorkers`: both start ``n`` processes
(``multiprocessing`` spawn context) each with a duplex pipe to the parent,
with :data:`WORKER_ENV` in the environment while they start; wait for each
one's ``("ready", ...)`` (or ``("error", message)``) reply; read replies
turning a closed pipe into a :class:`~ragbench.errors.TransportError` naming
the worker and its exit code; and copy an open-loop run's shared board out
before its shared block goes away. ``label`` names a worker in messages
(``"worker process"``: ``worker process 1 died (exit code -9)``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigError, TransportError
from .board import Board

__all__ = [
    "WORKER_ENV",
    "ask_to_stop",
    "board_copy",
    "recv_from",
    "spawn",
    "wait_ready",
    "worker_env",
]

#: Library pools a worker process keeps to one thread: each worker is one
#: request at a time on one core, and an idle pool's spinning would steal
#: the core another worker needs.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def worker_env() -> Iterator[None]:
    """:data:`WORKER_ENV` set in this process's environment for the block, then restored.

    A spawned child reads it at its start, before numpy loads.
    """
    saved = {k: os.environ.get(k) for k in WORKER_ENV}
    os.environ.update(WORKER_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def spawn(
    ctx: Any,
    n: int,
    target: Callable[..., None],
    args: Callable[[int, Any], tuple[Any, ...]],
    *,
    name: str,
    conns: list[Any],
    procs: list[Any],
    daemon: bool | None = None,
) -> None:
    """Start ``n`` processes ``target(*args(w, child_end))`` named ``f"{name}-{w}"``.

    Each gets a duplex pipe; the parent's ends and the processes are
    appended to ``conns`` and ``procs`` as each one starts (so a failure
    part-way leaves the started ones there to stop). ``daemon`` ``None``:
    the context's default (not daemonic from the main process).
    """
    with worker_env():
        for w in range(n):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=target, args=args(w, child), daemon=daemon, name=f"{name}-{w}"
            )
            proc.start()
            child.close()
            conns.append(parent)
            procs.append(proc)


def recv_from(conns: list[Any], procs: list[Any], w: int, label: str) -> Any:
    """Worker ``w``'s next message; :class:`TransportError` if its pipe closed (it died)."""
    try:
        return conns[w].recv()
    except EOFError:
        code = procs[w].exitcode
        raise TransportError(f"{label} {w} died (exit code {code})") from None


def wait_ready(
    conns: list[Any], recv: Callable[[int], Any], timeout: float, label: str
) -> list[Any]:
    """Each worker's ``("ready", ...)`` reply, in order, each waited for up to ``timeout`` s.

    :class:`TransportError` for a worker silent that long, :class:`ConfigError`
    with its message for one whose set-up failed (``("error", message)``).
    """
    replies = []
    for w, conn in enumerate(conns):
        if not conn.poll(timeout):
            raise TransportError(f"{label} {w} was not ready after {timeout:.0f} s")
        reply = recv(w)
        if reply[0] != "ready":
            raise ConfigError(f"{label} {w} failed to set up: {reply[1]}")
        replies.append(reply)
    return replies


def ask_to_stop(conns: list[Any]) -> None:
    """Send each worker the stop message (``None``); a pipe already closed is skipped."""
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            conn.send(None)


def board_copy(shm: Any, n: int) -> bytearray:
    """A private copy of the ``n``-request :class:`Board` in shared block ``shm``."""
    private = bytearray(Board.size(n))
    private[:] = memoryview(shm.buf)[: Board.size(n)]
    return private

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
import multiprocessing.connection
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigError, TransportError
from .board import Board, WorkerFault
from .watch import exit_text, proc_state, stopped_children

__all__ = [
    "WORKER_ENV",
    "ask_to_stop",
    "board_copy",
    "quiet_resource_tracker",
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


#: How the resource tracker's own warnings are silenced (a ``-W`` option it is started with).
_QUIET_TRACKER = "ignore:resource_tracker:UserWarning"


def quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (if it is not yet running) without its warnings.

    A worker killed mid-run (a fault the run reports itself, naming the
    worker) leaves the semaphores of its own pools to the tracker, which
    removes them at the end and warns about "leaked semaphore objects" on
    stderr: true, handled, and noise beside the one line that says what
    happened. The tracker takes ``-W`` options from ``sys.warnoptions`` when
    it starts: the option is there for that moment only, so the workers
    spawned later do not inherit it.
    """
    from multiprocessing import resource_tracker

    saved = list(sys.warnoptions)
    sys.warnoptions.append(_QUIET_TRACKER)
    try:
        resource_tracker.ensure_running()
    finally:
        sys.warnoptions[:] = saved


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


def wait_ready(conns: list[Any], procs: list[Any], timeout: float, label: str) -> list[Any]:
    """Each worker's ``("ready", ...)`` reply, in order, all within ``timeout`` s of this call.

    :class:`ConfigError` with its message for a worker whose set-up failed
    (``("error", message)``: the configuration's fault, exit 2).
    :class:`WorkerFault` for one that died meanwhile (killed, crashed) or is
    still silent at the deadline (stopped with SIGSTOP, or slow: the caller
    kills it): the message names it, its pid and why. The parent blocks on
    the pipes and the processes' sentinels: a death is seen at once.
    """
    end = time.monotonic() + timeout
    replies: dict[int, Any] = {}
    waiting = set(range(len(conns)))
    stopped = _Stopped(label)
    while waiting:
        left = end - time.monotonic()
        if left <= 0:
            w = min(waiting)
            how = "stopped (SIGSTOP)" if proc_state(procs[w].pid) in ("T", "t") else "silent"
            raise WorkerFault(
                f"{label} {w} (pid {procs[w].pid}) was not ready within the start-up "
                f"deadline of {timeout:g} s ({how}): killed (--startup-timeout sets it)"
            )
        stopped.check(procs, waiting)
        objs: dict[Any, int] = {conns[w]: w for w in waiting}
        objs.update({procs[w].sentinel: w for w in waiting})
        ready = multiprocessing.connection.wait(list(objs), min(left, _STOP_POLL_S))
        for w in sorted({objs[o] for o in ready}):
            reply = _message(conns[w])
            if reply is None:  # its pipe closed: it died
                procs[w].join(1.0)
                raise WorkerFault(
                    f"{label} {w} (pid {procs[w].pid}) died during start-up "
                    f"({exit_text(procs[w].exitcode)})"
                )
            if reply[0] == "fault":  # a process it started died: exit 1, not the input's fault
                raise WorkerFault(f"{label} {w} (pid {procs[w].pid}) failed to start: {reply[1]}")
            if reply[0] != "ready":
                raise ConfigError(f"{label} {w} failed to set up: {reply[1]}")
            replies[w] = reply
            waiting.discard(w)
    return [replies[w] for w in range(len(conns))]


#: Seconds a worker (or a process it started: an asyncio worker's offload pool) may stay
#: stopped (SIGSTOP) during start-up before the start is failed; the deadline is 600 s.
STOPPED_LIMIT_S = 5.0
_STOP_POLL_S = 1.0


class _Stopped:
    """Workers found stopped while starting, and since when (``time.monotonic`` s)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.since: dict[int, float] = {}

    def check(self, procs: list[Any], waiting: set[int]) -> None:
        """:class:`WorkerFault` for a waiting worker stopped, or holding a stopped child,
        for :data:`STOPPED_LIMIT_S`: nothing it waits for can go on (a start-up that hung
        until the 600 s deadline)."""
        now = time.monotonic()
        for w in sorted(waiting):
            pid = procs[w].pid
            held = stopped_children(pid)
            if proc_state(pid) not in ("T", "t") and not held:
                self.since.pop(w, None)
                continue
            if now - self.since.setdefault(w, now) >= STOPPED_LIMIT_S:
                whom = "it" if not held else f"its process {held[0]}"
                raise WorkerFault(
                    f"{self.label} {w} (pid {pid}) cannot finish start-up: {whom} has been "
                    f"stopped (SIGSTOP) for {STOPPED_LIMIT_S:g} s: killed"
                )


def _message(conn: Any) -> Any:
    """The next message on ``conn`` if one is there; ``None`` if the pipe closed (or nothing yet:
    only a process's sentinel was ready, so it ended)."""
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None


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

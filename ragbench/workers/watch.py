"""Watching spawned worker processes: faults named, stuck ones killed, none left behind.

Shared by :class:`ragbench.workers.ProcessWorkers` and
:class:`ragbench.aioworkers.AsyncWorkers`. :class:`WatchedWorkers` collects
each live worker's reply to a level's job with a watchdog (a worker that
dies is a fault at once; one silent at the deadline is stopped, then
killed), and kills them all when a level is interrupted.
:func:`die_with_parent` makes a child process end with the one that started
it, even when that one is killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing.connection
import os
import signal
import sys
import threading
from time import perf_counter_ns
from typing import Any

from .board import STOP_GRACE_NS, Board

__all__ = [
    "WatchedWorkers",
    "children",
    "die_with_parent",
    "exit_text",
    "kill_with_children",
    "parent_for_children",
    "proc_state",
    "stopped_children",
]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None) -> None:
    """Have the kernel SIGKILL this process when ``parent`` (the thread that started it) ends.

    Linux's ``PR_SET_PDEATHSIG``: it fires even when the parent was killed
    with SIGKILL and even if this process is stopped (SIGSTOP), so no
    worker, pool process or the servers they own (whose pipes then close)
    outlives ragbench. If the parent is already gone, exits now. Elsewhere:
    nothing (the pipe to the parent still ends a worker between levels).
    ``None``: nothing either (see :func:`parent_for_children`).
    """
    if parent is None or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # it died before the call above: the kernel will not tell us
        os._exit(1)


def parent_for_children() -> int | None:
    """This process's pid for :func:`die_with_parent` in the children it starts now, or ``None``.

    The kernel's signal fires when the *thread* that started a child ends,
    so only children started from the main thread (which lives as long as
    the process) are tied to it.
    """
    return os.getpid() if threading.current_thread() is threading.main_thread() else None


def proc_state(pid: int | None) -> str:
    """The kernel's one-letter state of a process ('T': stopped), '' if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def stopped_children(pid: int | None) -> list[int]:
    """Children of ``pid`` the kernel has stopped (SIGSTOP), from /proc."""
    return children(pid, stopped=True)


def children(pid: int | None, *, stopped: bool = False) -> list[int]:
    """Children of ``pid`` (only the stopped ones with ``stopped``), from /proc."""
    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and (not stopped or fields[0] in (b"T", b"t")):
                out.append(int(name))
    return sorted(out)


def kill_with_children(proc: Any, wait: float = 2.0) -> None:
    """SIGKILL ``proc`` (a ``multiprocessing`` process), then the children it had.

    Its children die with it (:func:`die_with_parent`) once they have tied
    themselves to it; one stopped (SIGSTOP) before it could -- while still
    importing -- stayed stopped for good, a child of init.
    """
    kids = children(proc.pid)
    proc.kill()
    proc.join(wait)
    for pid in kids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def exit_text(code: int | None) -> str:
    """How a process ended, from its exit code (``killed by SIGKILL``, ``exit code 1``)."""
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class WatchedWorkers:
    """The parent's side of ``n`` spawned workers, each with a pipe (``_conns``) and a process (``_procs``).

    ``dead``: workers killed or gone; ``_lock``: the open-loop board's lock
    (freed if a worker died holding it).
    """

    _conns: list[Any]
    _procs: list[Any]
    _lock: Any
    dead: set[int]

    def live(self) -> list[int]:
        """The workers still serving (not dead or killed)."""
        return [w for w in range(len(self._procs)) if w not in self.dead]

    def _collect(
        self, live: list[int], deadline_ns: int, board: Board | None
    ) -> tuple[dict[int, tuple[Any, ...]], list[dict[str, Any]]]:
        """Each of ``live``'s reply (less its first item) to the job just sent, watching for faults.

        A worker whose process ends first is a fault ("died"). At
        ``deadline_ns`` the board (if any) is stopped and a worker the kernel
        has stopped (SIGSTOP) is killed at once; one still silent
        :data:`STOP_GRACE_NS` later is killed too ("stuck"). The parent
        blocks on the pipes and process sentinels meanwhile: no polling.
        """
        replies: dict[int, tuple[Any, ...]] = {}
        faults: list[dict[str, Any]] = []
        waiting = set(live)
        stopped_at: int | None = None
        while waiting:
            now = perf_counter_ns()
            limit = deadline_ns if stopped_at is None else stopped_at + STOP_GRACE_NS
            if now >= limit:
                if stopped_at is not None:
                    faults += [self._fault(w, "stuck", board) for w in sorted(waiting)]
                    break
                stopped_at = now
                if board is not None:
                    board.stop()
                for w in sorted(waiting):
                    if proc_state(self._procs[w].pid) in ("T", "t"):
                        faults.append(self._fault(w, "stuck", board))
                        waiting.discard(w)
                continue
            objs: dict[Any, int] = {self._conns[w]: w for w in waiting}
            objs.update({self._procs[w].sentinel: w for w in waiting})
            ready = multiprocessing.connection.wait(list(objs), timeout=(limit - now) / 1e9)
            for w in sorted({objs[o] for o in ready}):
                with contextlib.suppress(EOFError, OSError):
                    if self._conns[w].poll():
                        replies[w] = tuple(self._conns[w].recv()[1:])
                        waiting.discard(w)
                        continue
                faults.append(self._fault(w, "died", board))
                waiting.discard(w)
        return replies, faults

    def _fault(self, w: int, what: str, board: Board | None) -> dict[str, Any]:
        """Kill worker ``w`` if alive, free the board's lock if it held it; what to record."""
        proc = self._procs[w]
        state = proc_state(proc.pid)
        held = stopped_children(proc.pid) if what == "stuck" else []
        self._kill(w)
        if board is not None and board.holder == w + 1:  # it died inside take_next
            board.clear_holder()
            with contextlib.suppress(ValueError):
                self._lock.release()
        with contextlib.suppress(OSError):
            self._conns[w].close()
        if what == "died":
            detail = f"died ({exit_text(proc.exitcode)})"
        else:
            how = "stopped (SIGSTOP)" if state in ("T", "t") else "still busy"
            if held:  # e.g. an asyncio worker waiting on its stopped offload process
                how += f" (its process {', '.join(map(str, held))} stopped (SIGSTOP))"
            detail = f"{how} at the level's end + timeout + grace: killed"
        return {"worker": w, "pid": proc.pid, "what": what, "detail": detail}

    def _kill(self, w: int) -> None:
        """SIGKILL worker ``w`` (a stopped one too) and reap it; it is dead from now on."""
        proc = self._procs[w]
        if proc.is_alive():
            kill_with_children(proc)
        proc.join(2.0)
        self.dead.add(w)

    def _kill_all(self) -> None:
        for w in self.live():
            self._kill(w)

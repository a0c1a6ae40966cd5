"""Start the timed phase of several processes together: announce in a folder, wait for the rest.

Two ``ragbench compare`` processes launched "at the same time" do not start timing at the same
time: each first loads its data and builds its indexes, and the one that finishes first times
part of its requests alone, which on a quiet machine makes it faster than its partner. With
:func:`start_together` each process, once set up, announces itself in a shared folder (a file
named by its pid, created whole by a rename) and waits until ``processes`` have announced;
then all of them begin their warm-up and timed requests.

Files of processes that have ended are removed by the next process to announce, so one folder
serves pairs run one after another; a process that stops while waiting (timeout, Ctrl-C)
removes its own file. The folder must be on this machine (pids are this machine's).
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import ConfigError, StartTimeoutError

__all__ = ["DEFAULT_TIMEOUT_S", "announced", "start_together"]

DEFAULT_TIMEOUT_S = 600.0
_POLL_S = 0.01


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def announced(folder: Path) -> list[int]:
    """The pids announced in ``folder`` (files named by a pid; anything else is ignored)."""
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _announce(folder: Path) -> Path:
    """Remove the files of ended processes, then create this process's file atomically."""
    for pid in announced(folder):
        if pid != os.getpid() and not _alive(pid):
            (folder / str(pid)).unlink(missing_ok=True)
    mine = folder / str(os.getpid())
    draft = folder / f".{os.getpid()}.draft"
    draft.write_text(_now() + "\n", encoding="utf-8")
    os.replace(draft, mine)
    return mine


def start_together(
    folder: str | Path, processes: int, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Any]:
    """Announce this process in ``folder`` (created if missing), return once ``processes`` have.

    Returns what a record keeps: the folder, the number of processes, when this one
    announced itself and when it started (UTC, ISO 8601), and the seconds it waited.
    Raises :class:`~ragbench.errors.StartTimeoutError` naming how many arrived when
    ``timeout_s`` passes first; the process's own file is then removed (also on Ctrl-C).
    :class:`~ragbench.errors.ConfigError`: ``processes`` under 1, or a folder this process
    cannot announce itself in.
    """
    if processes < 1:
        raise ConfigError(f"start together: processes must be >= 1, got {processes}")
    where = Path(folder)
    began, at = time.monotonic(), _now()  # before the announcement others may see
    try:
        where.mkdir(parents=True, exist_ok=True)
        mine = _announce(where)
    except OSError as exc:
        raise ConfigError(
            f"cannot announce this process in {where} to start together: {exc.strerror or exc}"
        ) from None
    released = False
    try:
        while True:
            arrived = len(announced(where))
            if arrived >= processes:
                released = True
                break
            if time.monotonic() - began >= timeout_s:
                raise StartTimeoutError(
                    f"waited {timeout_s:g} s in {where} for {processes} processes to start "
                    f"together; {arrived} arrived (this one included)"
                )
            time.sleep(_POLL_S)
    finally:
        if not released:
            mine.unlink(missing_ok=True)
    return {
        "dir": str(where),
        "processes": processes,
        "arrived": arrived,
        "announced": at,
        "started": _now(),
        "waited_s": round(time.monotonic() - began, 6),
    }

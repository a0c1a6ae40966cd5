"""The watchdog of ragbench's own PostgreSQL server: run as a script, standard library only.

``python _watchdog.py`` reads one JSON line from stdin -- ``initdb`` (the
``initdb`` command line, run first; ``null`` skips it), ``argv`` (the
``postgres`` command line), ``data`` (its data folder), ``log``,
``remove`` (a folder to delete once the server is gone), ``uid``/``gid``
(run both as that user; ``null`` keeps ours) -- runs ``initdb``, starts the
server, and prints one line: ``ready <pid> <initdb seconds>`` once
``postmaster.pid`` says so, or ``failed <what> <code> <JSON string: the
output's tail>``. It then waits for its stdin to reach EOF: when ragbench
closes it, and also when ragbench dies (killed, Ctrl-C, a crash) -- at any
point, ``initdb`` included, so a ragbench killed while ``initdb`` runs
leaves no folder behind either. It then stops the server (SIGCONT, in case
it or its children were stopped; SIGQUIT: PostgreSQL's immediate shutdown,
since the data is thrown away; SIGKILL to it, its children -- each in a session
of its own -- and its process group if it lingers), removes a
System V shared-memory segment a killed ``initdb``/server left (keyed by the
data folder's inode, as PostgreSQL keys it), and deletes the folder, so no
``postgres`` process, folder or segment outlives ragbench.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from typing import Any


def _ready(data: str) -> bool:
    """``postmaster.pid``'s status line (the 8th) says the server accepts connections."""
    try:
        with open(os.path.join(data, "postmaster.pid"), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, sig)


def _stats() -> list[tuple[int, str, int, int]]:
    """``(pid, state, ppid, pgrp)`` of every process, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            found.append((int(entry), fields[0], int(fields[1]), int(fields[2])))
    return found


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid``: PostgreSQL's children each call setsid()."""
    return [p for p, _, ppid, _ in _stats() if ppid == pid]


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    """Wake it (SIGCONT to it and its children), immediate shutdown, then SIGKILL to all."""
    if proc is None:
        return
    if proc.poll() is None:
        _kill([proc.pid, *_children(proc.pid)], signal.SIGCONT)  # stopped ones cannot exit
        _signal_group(proc, signal.SIGCONT)
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGQUIT)  # the folder is deleted next: no checkpoint
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=3.0)
    if proc.poll() is None:
        _kill(_children(proc.pid), signal.SIGKILL)  # still its children: no pid reused
    _signal_group(proc, signal.SIGKILL)  # initdb's children share its group
    proc.wait()


def _wait_group(pgid: int, limit: float = 2.0) -> None:
    """Wait (up to ``limit`` s) until every process of group ``pgid`` has exited (zombies have)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not any(pgrp == pgid and state != "Z" for _, state, _, pgrp in _stats()):
            return
        time.sleep(0.005)


def _stdin_closed(timeout: float) -> bool:
    """Wait up to ``timeout`` s for stdin; True at EOF (ragbench closed it or died)."""
    fd = sys.stdin.fileno()
    readable, _, _ = select.select([fd], [], [], timeout)
    return bool(readable) and not os.read(fd, 4096)


def _spawn(argv: list[str], log: str, cfg: dict[str, Any]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=cfg.get("remove") or None,
            user=cfg.get("uid"),
            group=cfg.get("gid"),
            extra_groups=[] if cfg.get("uid") is not None else None,
            start_new_session=True,  # its own group: SIGKILL reaches its children too
        )


def _tail(path: str, limit: int = 1500) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read()[-limit:].decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _remove_segments(inode: int | None, uid: int) -> None:
    """Remove unattached System V segments of ``uid`` keyed at the data folder's inode.

    PostgreSQL keys its segment with the data folder's inode (the next key
    when that one is taken); a server or ``initdb`` killed before it detached
    leaves it. Only unattached segments of the server's user are removed.
    """
    if inode is None:
        return
    try:
        with open("/proc/sysvipc/shm", encoding="ascii") as fh:
            rows = [line.split() for line in fh.readlines()[1:]]
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for row in rows:
        key, shmid, nattch, owner = int(row[0]), int(row[1]), int(row[6]), int(row[7])
        if inode <= key < inode + 10 and nattch == 0 and owner == uid:
            libc.shmctl(shmid, 0, None)  # IPC_RMID


def _initdb(cfg: dict[str, Any]) -> bool:
    """Run ``initdb`` (watching stdin meanwhile); False when it failed or ragbench went away."""
    argv = cfg.get("initdb")
    if not argv:
        return True
    log = os.path.join(cfg["remove"], "initdb.log")
    proc = _spawn(argv, log, cfg)
    try:
        while proc.poll() is None:
            if _stdin_closed(0.02):
                return False
    finally:
        if proc.poll() is None:  # its folder is deleted next: nothing to shut down cleanly
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            _wait_group(proc.pid)  # its bootstrap postgres detaches its segment as it exits
    if proc.returncode != 0:
        _say(f"failed initdb {proc.returncode} {json.dumps(_tail(log))}")
        return False
    return True


def _serve(cfg: dict[str, Any], initdb_seconds: float) -> int:
    """Start ``postgres``, say ready, wait for stdin's EOF; stop it on the way out."""
    proc = _spawn(cfg["argv"], cfg["log"], cfg)
    code = 0
    try:
        deadline = time.monotonic() + float(cfg.get("timeout", 30.0))
        while not _ready(cfg["data"]):
            if proc.poll() is not None or time.monotonic() > deadline:
                _say(f"failed postgres {proc.poll()} {json.dumps(_tail(cfg['log']))}")
                return 1
            if _stdin_closed(0.005):
                return 1
        _say(f"ready {proc.pid} {initdb_seconds:.6f}")
        while not _stdin_closed(0.5):
            if proc.poll() is not None:
                code = 1  # the server died by itself; wait for ragbench to notice and close
    finally:
        _stop(proc)
    return code


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping is the parent's (or EOF's) decision
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still clean up on the way out
    cfg = json.loads(sys.stdin.buffer.readline() or b"{}")
    remove = cfg.get("remove")
    inode = None
    t0 = time.monotonic()
    try:
        with contextlib.suppress(OSError):
            if cfg.get("initdb"):
                os.mkdir(cfg["data"], 0o700)  # initdb fills an empty folder; its inode keys shm
                if cfg.get("uid") is not None:
                    os.chown(cfg["data"], cfg["uid"], cfg["gid"])
            inode = os.stat(cfg["data"]).st_ino
        if not _initdb(cfg):
            return 1
        return _serve(cfg, time.monotonic() - t0)
    finally:
        _remove_segments(inode, os.geteuid() if cfg.get("uid") is None else cfg["uid"])
        if remove:
            shutil.rmtree(remove, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Keeper of one PostgreSQL server: run as a script, standard library only.

``python _pg_keeper.py`` reads one JSON line from stdin -- ``argv`` (the
``postgres`` command line), ``data`` (its data folder), ``remove`` (a folder
to delete once the server is gone), ``uid``/``gid`` (run ``postgres`` as
that user; ``null`` keeps ours) -- starts the server, prints ``ready`` once
``postmaster.pid`` says so (or ``failed <code>``), then waits for its stdin to
reach EOF: when ragbench closes it, and also when ragbench dies (killed,
Ctrl-C, a crash). It then stops the server (SIGINT: PostgreSQL's fast
shutdown; SIGQUIT, then SIGKILL to the whole process group if it lingers)
and deletes the folder, so no ``postgres`` process outlives ragbench.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time


def _ready(data: str) -> bool:
    """``postmaster.pid``'s status line (the 8th) says the server accepts connections."""
    try:
        with open(os.path.join(data, "postmaster.pid"), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGQUIT, 3.0)):
        if proc.poll() is not None:
            break
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait)
        except (subprocess.TimeoutExpired, OSError):
            continue
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping is the parent's (or EOF's) decision
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still stop the server on the way out
    cfg = json.loads(sys.stdin.buffer.readline() or b"{}")
    with open(cfg["log"], "ab") as log:
        proc = subprocess.Popen(
            cfg["argv"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            user=cfg.get("uid"),
            group=cfg.get("gid"),
            extra_groups=[] if cfg.get("uid") is not None else None,
            start_new_session=True,  # its own group: SIGKILL reaches its children too
        )
    code = 0
    try:
        deadline = time.monotonic() + float(cfg.get("timeout", 30.0))
        while not _ready(cfg["data"]):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.stdout.write(f"failed {proc.poll()}\n")
                sys.stdout.flush()
                return 1
            time.sleep(0.005)
        sys.stdout.write(f"ready {proc.pid}\n")
        sys.stdout.flush()
        fd = sys.stdin.fileno()
        while True:
            readable, _, _ = select.select([fd], [], [], 0.5)
            if readable and not os.read(fd, 4096):
                break  # EOF: ragbench closed our stdin or died
            if proc.poll() is not None:
                code = 1  # the server died by itself; wait for ragbench to notice and close
    finally:
        _stop(proc)
        remove = cfg.get("remove")
        if remove:
            shutil.rmtree(remove, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

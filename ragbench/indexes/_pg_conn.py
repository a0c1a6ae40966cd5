"""The ``pgvector`` backend's connections: opening them, what is torn down, typed parameters.

:class:`PgState` holds what must be torn down (connections, ragbench's table
and extension on a ``dsn=`` server, ragbench's own server); it is held by the
index and by its finalizer, never the index itself. :class:`Conn` is one
thread's connection with the settings last sent on it. The ``*Param`` byte
strings are parameters already in PostgreSQL's binary format, dumped as they
are by the dumpers :func:`register_types` installs on a connection.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError, MissingDependencyError, RagbenchError
from ._pg_wire import ARRAY_OIDS

OWNER = "index 'pgvector'"


def psycopg_module() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingDependencyError("psycopg", "vectordb") from None
    return psycopg


# a URL's user and password: the user ends at the first ":", the password at the LAST "@"
# (an unencoded password may hold "@", ":", "/" or blanks; cutting too much beats leaking)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:).*@", re.DOTALL)
# a libpq keyword=value password (password, sslpassword): a single-quoted value with
# backslash escapes (up to the closing quote, or the end when there is none), or a bare
# value (up to the next unescaped blank)
_KEYWORD_PASSWORD = re.compile(
    r"(\b\w*password\s*=\s*)(?:'(?:[^'\\]|\\.)*(?:'|\\?$)|(?:\\.|[^\s\\])+\\?)",
    re.IGNORECASE | re.DOTALL,
)


def redact(dsn: str) -> str:
    """A DSN for messages: every password replaced by ``***``, whole.

    Covers a URL (``postgresql://user:p@ss w@host/db``: ``user:***@host/db``)
    and libpq keyword/value strings (``password='a b\\' c'``, bare
    ``password=x``, ``sslpassword=...``, and ``?password=`` in a URL's query).
    """
    dsn = _URL_PASSWORD.sub(r"\1***@", dsn)
    return _KEYWORD_PASSWORD.sub(r"\1***", dsn)


_PIECE = 4  # characters in a row of a password that a message may not show


def redact_message(text: str, dsn: str | None) -> str:
    """``text`` (a driver's error) with the DSN's passwords, and any 4 characters of one, as ``***``.

    libpq reads an unencoded ``@`` in a URL password as the end of it and
    names the rest as the host (``host 'ss@Secret@127.0.0.1'``), so a whole
    match is not enough: every run of 4 or more characters found in a
    password is masked.
    """
    text = redact(text)
    if not dsn:
        return text
    for secret in _passwords(dsn):
        text = _mask(text, secret)
    return text


def _passwords(dsn: str) -> list[str]:
    """The passwords a DSN holds: as written, and unescaped (libpq's quoted values)."""
    found = [m.group(0)[len(m.group(1)) : -1] for m in _URL_PASSWORD.finditer(dsn)]
    for m in _KEYWORD_PASSWORD.finditer(dsn):
        value = m.group(0)[len(m.group(1)) :]
        found.append(value)
        found.append(re.sub(r"\\(.)", r"\1", value.strip("'"), flags=re.DOTALL))
    return [f for f in found if len(f) >= _PIECE]


def _mask(text: str, secret: str) -> str:
    """``text`` with every run of at least :data:`_PIECE` characters found in ``secret`` as ``***``."""
    out, i = [], 0
    while i < len(text):
        n = _PIECE
        while i + n <= len(text) and text[i : i + n] in secret:
            n += 1
        if n > _PIECE:  # text[i : i + n - 1] is the longest run here found in the secret
            out.append("***")
            i += n - 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


#: Seconds past a limit before the client gives up on a silent server (PostgreSQL's own
#: statement_timeout answers first when the server still runs).
GRACE = 2.0
_WATCH_EVERY = 0.1  # seconds between the watchdog's looks


class Conn:
    """One thread's connection: its cursor, the settings last sent on it, its watch.

    ``since``: ``time.perf_counter_ns()`` when the statement in flight was
    sent (0: none); ``limit``: nanoseconds it may take before the watchdog
    (:class:`PgState`) shuts the socket; ``timed_out``: the limit, in
    seconds, once it did.
    """

    __slots__ = ("conn", "cur", "gucs", "last", "limit", "pid", "plan", "since", "timed_out")

    def __init__(self, conn: Any, limit_s: float) -> None:
        self.conn = conn
        self.cur = conn.cursor(binary=True)
        self.gucs: dict[str, str] = {}
        self.pid = os.getpid()
        self.last: tuple[Any, int] | None = None  # (compiled params, k) that plan is for
        self.plan: tuple[Any, ...] = ()
        self.since = 0
        self.limit = int(limit_s * 1e9)
        self.timed_out: float | None = None


def _shut(conn: Any) -> None:
    """Shut a connection's socket down from another thread: the call blocked on it fails."""
    with contextlib.suppress(Exception):
        fd = conn.pgconn.socket
        # a duplicate of libpq's descriptor: shutdown() acts on the socket, close() on ours only
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)


class PgState:
    """What must be torn down: connections, our table, our extension, our server."""

    def __init__(
        self, dsn: str | None, timeouts: tuple[float, float, float] = (10, 60, 3600)
    ) -> None:
        self.dsn = dsn
        #: seconds: connect_timeout, statement_timeout, build_timeout (see _pg_base)
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


def set_statement_timeout(conn: Any, seconds: float) -> None:
    """PostgreSQL's ``statement_timeout`` on ``conn`` (milliseconds, at least 1)."""
    conn.execute(f"SET statement_timeout = {max(1, round(seconds * 1000))}")  # a validated number


class VectorParam(bytes):
    """A query vector in pgvector's binary format (dumped as ``vector``)."""


class IdsParam(bytes):
    """Ids (or int64 attribute values) in PostgreSQL's binary ``int8[]`` format."""


class FloatsParam(bytes):
    """float64 attribute values in PostgreSQL's binary ``float8[]`` format."""


class TextsParam(bytes):
    """str attribute values in PostgreSQL's binary ``text[]`` format."""


_ARRAYS: dict[str, type[bytes]] = {"i": IdsParam, "f": FloatsParam, "U": TextsParam}


def array_param(kind: str, payload: bytes) -> bytes:
    """``payload`` (a binary array of dtype kind ``i``, ``f`` or ``U``) as its parameter type."""
    return _ARRAYS[kind](payload)


def register_types(c: Conn, vec_oid: int) -> None:
    """Binary dumpers for the ``*Param`` types (a cursor copies them at creation)."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    attrs = {"format": Format.BINARY, "dump": lambda self, obj: obj}
    vec = type("VectorDumper", (Dumper,), {**attrs, "oid": vec_oid})
    c.conn.adapters.register_dumper(VectorParam, vec)
    for kind, cls in _ARRAYS.items():
        dumper = type(f"{cls.__name__}Dumper", (Dumper,), {**attrs, "oid": ARRAY_OIDS[kind]})
        c.conn.adapters.register_dumper(cls, dumper)
    c.cur = c.conn.cursor(binary=True)


def int8(value: int) -> Any:
    from psycopg.types.numeric import Int8

    return Int8(value)


def float8(value: float) -> Any:
    from psycopg.types.numeric import Float8

    return Float8(value)

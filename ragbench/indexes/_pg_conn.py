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
import threading
from typing import Any

from ..errors import ConfigError, MissingDependencyError
from ._pg_wire import ARRAY_OIDS

__all__ = [
    "OWNER",
    "Conn",
    "FloatsParam",
    "IdsParam",
    "PgState",
    "TextsParam",
    "VectorParam",
    "array_param",
    "float8",
    "int8",
    "psycopg_module",
    "redact",
    "redact_message",
    "register_types",
]

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


class Conn:
    """One thread's connection: its cursor and the settings last sent on it."""

    __slots__ = ("conn", "cur", "gucs", "last", "pid", "plan")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.cur = conn.cursor(binary=True)
        self.gucs: dict[str, str] = {}
        self.pid = os.getpid()
        self.last: tuple[Any, int] | None = None  # (compiled params, k) that plan is for
        self.plan: tuple[Any, ...] = ()


class PgState:
    """What must be torn down: connections, our table, our extension, our server."""

    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn
        self.server: Any = None  # EmbeddedServer
        self.conns: list[Any] = []
        self.lock = threading.Lock()
        self.table: str | None = None  # a table of ours that exists now
        self.created_extension = False

    def connect(self) -> Any:
        psycopg = psycopg_module()
        try:
            if self.dsn is not None:
                conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
            else:
                conn = psycopg.connect(**self.server.conninfo(), autocommit=True)
        except psycopg.Error as exc:
            where = redact(self.dsn) if self.dsn is not None else "ragbench's own server"
            problem = redact_message(str(exc), self.dsn)
            raise ConfigError(f"{OWNER}: cannot connect to {where}: {problem}".strip()) from None
        # prepare only where execute(prepare=True) says so (None would disable that too)
        conn.prepare_threshold = 2**31 - 1
        conn.execute("SET jit = off")  # JIT compiling a 1 ms query costs more than it saves
        with self.lock:
            self.conns.append(conn)
        return conn

    def teardown(self) -> None:
        """Drop our table (and extension), close every connection, stop our server."""
        with self.lock:
            conns, self.conns = self.conns, []
        table, self.table = self.table, None
        if (table is not None or self.created_extension) and (
            self.server is None or self.server.alive
        ):
            self._drop(table)
        for conn in conns:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()
        server, self.server = self.server, None
        if server is not None:
            server.stop()

    def _drop(self, table: str | None) -> None:
        psycopg = psycopg_module()
        from psycopg import sql

        try:
            with self.connect() as conn:
                if table is not None:
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
                if self.created_extension:
                    with contextlib.suppress(psycopg.Error):  # RESTRICT: only if unused
                        conn.execute("DROP EXTENSION IF EXISTS vector")
        except (psycopg.Error, ConfigError):
            pass  # the server is gone: nothing of ours is left on it


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

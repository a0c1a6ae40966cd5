"""``pg-hybrid`` backend: pgvector's search and PostgreSQL full-text, fused in one SQL statement.

The database route of hybrid retrieval: the table of ``pg-fts`` (``body``,
its generated ``tsvector`` and GIN index) with an ``embedding vector(dim)``
column beside it (``dense_index``: ``flat``, an exact scan, or ``hnsw``,
pgvector's graph with ``ef``), on the same server (ragbench's own, or
``dsn=``). Each query is one statement: the ``candidates`` nearest rows by
the metric's pgvector operator, the ``candidates`` best rows by
``ts_rank_cd`` (``match`` as for ``pg-fts``), each numbered by rank, joined,
and scored by reciprocal rank fusion in the server, ``Σ 1 / (k_rrf + rank)``
(``k_rrf`` 60), best first, ties by id. What ``hybrid`` does in Python with
two indexes and a compiled kernel, here the server does.

Input: a :class:`~ragbench.indexes.hybrid_index.Pair` of vectors and texts
(``input_kind == "both"``), for ``build`` and ``search``. The query vector
is sent as pgvector's text form. Timed parts, as ``pgvector``: ``send``,
``server`` (the round trip: both searches and the fusion), ``decode``.
Filters: ``AND id = ANY(...)`` in both searches. Writes: ``add(Pair)`` and
``delete(ids)``. Scores: the fused RRF values (``index.metric`` ``rrf``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ...errors import ConfigError, IndexFileError, InputError
from ...validate import METRICS, as_matrix
from ...validate import positive_int as int_param
from .._arrays import F32
from ..hybrid_index import Pair, pair_of
from ._connection import Conn, int8
from .fts import MATCH_SQL, PgFtsIndex

__all__ = ["PgHybridIndex"]


#: metric -> (pgvector distance operator, HNSW operator class)
_OPS = {
    "ip": ("<#>", "vector_ip_ops"),
    "cosine": ("<=>", "vector_cosine_ops"),
    "l2": ("<->", "vector_l2_ops"),
}


def _vector_text(v: np.ndarray) -> str:
    return "[" + ",".join(map(repr, v.astype(np.float64).tolist())) + "]"


class PgHybridIndex(PgFtsIndex):
    """pgvector + PostgreSQL full-text fused by RRF in one statement; see the module docstring."""

    name: ClassVar[str] = "pg-hybrid"
    input_kind: ClassVar[Any] = "both"
    supported_metrics: ClassVar[tuple[str, ...]] = ("rrf",)
    payload_format: ClassVar[str] = "ragbench.hybrid-f32-rows+texts-json"
    build_defaults: ClassVar[dict[str, Any]] = {
        **PgFtsIndex.build_defaults,
        "dense_index": "flat",
        "ef": 40,
        "k_rrf": 60.0,
        "candidates": 0,
    }

    def __init__(
        self, dim: int | None = None, metric: str | None = "ip", **build_params: Any
    ) -> None:
        if dim is None:
            raise ConfigError("index 'pg-hybrid': pass dim=<vector width>, e.g. dim=384")
        super().__init__(dim, metric, **build_params)
        self.dim = int_param("index 'pg-hybrid'", "dim", dim)
        self._vectors: np.ndarray | None = None
        self._pending: np.ndarray | None = None  # the vectors of the rows being copied

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = "index 'pg-hybrid'"
        if params["dense_index"] not in ("flat", "hnsw"):
            raise ConfigError(f"{owner}: dense_index {params['dense_index']!r} is not flat or hnsw")
        params["ef"] = int_param(owner, "ef", params["ef"], hi=1000)
        params["candidates"] = int_param(owner, "candidates", params["candidates"], lo=0)
        from ...fusion import reciprocal_rank_fusion

        try:
            reciprocal_rank_fusion([], [], k_rrf=params["k_rrf"])
        except ConfigError as exc:
            raise ConfigError(f"{owner}: {exc}") from None
        params["k_rrf"] = float(params["k_rrf"])
        return super()._check_build_params(params)

    @property
    def _op(self) -> tuple[str, str]:
        return _OPS[self.rescore_metric or "ip"]

    # -- build and writes ---------------------------------------------------------------

    def _checked(self, data: Any, what: str) -> Pair:
        pair = pair_of(data, what, self.name)
        vectors = as_matrix(pair.vectors, name=f"{what} vectors", dim=self.dim)
        if vectors.shape[0] != len(pair.texts):
            raise InputError(
                f"index 'pg-hybrid': {vectors.shape[0]} {what} vectors but {len(pair.texts)} texts"
            )
        return Pair(vectors, pair.texts)

    def build(self, data: Any) -> None:
        """Build from a :class:`Pair` of ``n >= 1`` vectors ``(n, dim)`` and ``n`` texts."""
        pair = self._checked(data, "the corpus")
        self._pending = pair.vectors
        try:
            super().build(pair.texts)
        finally:
            self._pending = None
        self._vectors = pair.vectors

    def add(self, data: Any, ids: Any = None) -> np.ndarray:
        """Insert a :class:`Pair` of rows; returns their ids."""
        pair = self._checked(data, "added")
        self._pending = pair.vectors
        try:
            out = super().add(pair.texts, ids)
        finally:
            self._pending = None
        return out

    def _more_columns(self, conn: Any) -> str:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return f", embedding vector({int(self.dim or 0)}) NOT NULL"

    def _more_indexes(self, conn: Any) -> None:
        if self.build_params["dense_index"] == "hnsw":
            from psycopg import sql

            conn.execute(
                sql.SQL("CREATE INDEX ON {} USING hnsw (embedding {})").format(
                    sql.Identifier(self._table), sql.SQL(self._op[1])
                )
            )

    def _copy(self, conn: Any, texts: list[str], start: int) -> None:
        from psycopg import sql

        vectors = self._pending
        if vectors is None or len(vectors) != len(texts):
            raise InputError("index 'pg-hybrid': rows are copied with their vectors")
        stmt = sql.SQL("COPY {} (id, body, embedding) FROM STDIN").format(
            sql.Identifier(self._table)
        )
        with conn.cursor().copy(stmt) as copy:
            for i, text in enumerate(texts):
                copy.write_row((start + i, text.replace("\x00", " "), _vector_text(vectors[i])))

    # -- search ---------------------------------------------------------------------

    def search(self, queries: Any, k: int, **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best rows per query by RRF of the vector and full-text ranks.

        ``queries``: a :class:`Pair` of query vectors ``(nq, dim)`` and texts.
        Returns ``ids`` int64 ``(nq, k)`` and ``scores`` float32 (the fused RRF).
        """
        pair = self._checked(queries, "query")
        self._local.vectors = pair.vectors
        return super().search(pair.texts, k, **params)

    def _statement(self, conn: Any, filtered: bool) -> Any:
        text = self._sql.get(filtered)
        if text is None:
            from psycopg import sql

            p = self.build_params
            tsquery = sql.SQL(MATCH_SQL[p["match"]].replace("%s", "{q}")).format(
                cfg=sql.Literal(p["config"]) + sql.SQL("::regconfig"), q=sql.SQL("%s")
            )
            allow = sql.SQL(" AND id = ANY(%s)") if filtered else sql.SQL("")
            where = sql.SQL(" WHERE id = ANY(%s)") if filtered else sql.SQL("")
            text = (
                sql.SQL(
                    "WITH d AS (SELECT id, row_number() OVER (ORDER BY dist, id) AS r FROM "
                    "(SELECT id, embedding {op} %s::vector AS dist FROM {t}{where} "
                    "ORDER BY dist LIMIT %s) AS near), "
                    "l AS (SELECT id, row_number() OVER (ORDER BY s DESC, id) AS r FROM "
                    "(SELECT id, ts_rank_cd(tsv, q, {norm}) AS s FROM {t}, "
                    "(SELECT {tsquery} AS q) AS query WHERE tsv @@ q{allow} "
                    "ORDER BY s DESC, id LIMIT %s) AS words) "
                    "SELECT id, coalesce(1.0 / ({k} + d.r), 0) + coalesce(1.0 / ({k} + l.r), 0) "
                    "AS fused FROM d FULL OUTER JOIN l USING (id) ORDER BY fused DESC, id LIMIT %s"
                )
                .format(
                    op=sql.SQL(self._op[0]),
                    t=sql.Identifier(self._table),
                    where=where,
                    allow=allow,
                    norm=sql.Literal(p["normalization"]),
                    tsquery=tsquery,
                    k=sql.Literal(p["k_rrf"]),
                )
                .as_string(conn)
            )
            self._sql[filtered] = text
        return text

    def _settle(self, c: Conn) -> None:
        """``hnsw.ef_search`` when the vector side is an HNSW graph (SET only when it differs)."""
        p = self.build_params
        if p["dense_index"] == "hnsw":
            c.set_gucs({"hnsw.ef_search": str(p["ef"])})

    def _args_of(
        self, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> Callable[[int], list[Any]]:
        """``row -> parameters``: the vector, the allowed ids, the candidates per side, the
        text, the allowed ids again, the candidates, ``k``."""
        p = self.build_params
        side, limit = int8(min(self._n, max(k, p["candidates"] or k))), int8(k)
        vectors = self._local.vectors

        def args_of(row: int) -> list[Any]:
            allowed = [] if masks is None else [np.flatnonzero(masks[row]).tolist()]
            text = texts[row].replace("\x00", " ")
            return [_vector_text(vectors[row]), *allowed, side, text, *allowed, side, limit]

        return args_of

    # -- persistence: the rows ----------------------------------------------------------

    def _payload(self) -> bytes:
        texts = super()._payload()  # the checks (built, not written) and the texts
        if self._vectors is None:
            raise self._not_built()
        return np.ascontiguousarray(self._vectors, dtype="<f4").tobytes() + texts

    def _payload_extra(self) -> dict[str, Any]:
        n = 0 if self._vectors is None else int(self._vectors.shape[0])
        return {**super()._payload_extra(), "vector_bytes": 4 * n * int(self.dim or 0)}

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        extra = header.get("extra") if isinstance(header.get("extra"), dict) else {}
        cut, width = (extra or {}).get("vector_bytes"), 4 * int(self.dim or 0)
        if not isinstance(cut, int) or not width or cut % width or cut > len(payload):
            raise IndexFileError(
                f"{self.name}: header vector_bytes {cut!r} does not fit the payload"
            )
        rescore = (extra or {}).get("rescore_metric")
        if rescore is not None and rescore not in METRICS:
            raise IndexFileError(f"{self.name}: header rescore_metric {rescore!r} is unknown")
        self.rescore_metric = rescore
        try:
            texts = json.loads(bytes(payload[cut:]).decode())
        except (UnicodeDecodeError, ValueError) as exc:
            raise IndexFileError(f"{self.name}: payload texts are not JSON: {exc}") from None
        vectors = np.frombuffer(payload[:cut], dtype="<f4").reshape(-1, width // 4).astype(F32)
        try:
            self.build(Pair(vectors, texts))
        except InputError as exc:
            raise IndexFileError(f"{self.name}: the saved rows cannot be indexed: {exc}") from None

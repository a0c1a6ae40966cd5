"""SQL of the ``pgvector`` backend: the table, its indexes, the search statements, filters.

Every statement is composed with :mod:`psycopg.sql`: identifiers (the table,
attribute columns) are quoted by :class:`psycopg.sql.Identifier`, values are
never formatted into the text -- a filter's values are ``%b`` parameters
(binary ``int8[]``/``float8[]``/``text[]`` arrays for ``= ANY(...)``,
``int8``/``float8`` bounds for ``BETWEEN``), so one statement text serves
every filter of one *shape* (the columns and operators it tests), and a
prepared statement stays pinned per shape.

A search statement (``{where}`` empty, ``id = ANY(%b)`` or the attribute
terms ANDed)::

    SELECT id, embedding <#> %b AS d FROM t {where} ORDER BY d LIMIT %b

and with ``halfvec``/``bit`` storage the index's expression ranks
``rescore * k`` candidates first, re-scored on the float4 rows::

    SELECT id, embedding <#> %b AS d FROM (SELECT id, embedding FROM t {where}
    ORDER BY (embedding::halfvec(d)) <#> %b::halfvec(d) LIMIT %b) c ORDER BY d LIMIT %b
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..attribute_filters import Term
from . import _wire as wire
from ._connection import array_param, float8, int8

#: metric -> (distance operator, operator class suffix)
OPS = {"ip": ("<#>", "ip"), "cosine": ("<=>", "cosine"), "l2": ("<->", "l2")}
#: attribute dtype kind -> its column type
PG_TYPES = {"i": "bigint", "f": "double precision", "U": "text"}
#: the table's own columns and PostgreSQL's system column names (no attribute may take
#: these: CREATE TABLE fails on a system column's name; ``oid`` was one before PostgreSQL 12)
RESERVED = ("id", "embedding", "tableoid", "xmin", "cmin", "xmax", "cmax", "ctid", "oid")


#: A table: ``(schema, name)``, always schema-qualified (a bare ``pg_class`` would name the
#: catalog's, which ``pg_catalog`` puts first on every search path), or a bare name.
Table = tuple[str, str] | str


def _sql() -> Any:
    from psycopg import sql

    return sql


def table_ident(table: Table) -> Any:
    """The quoted, schema-qualified identifier of ``table``."""
    sql = _sql()
    return sql.Identifier(*table) if isinstance(table, tuple) else sql.Identifier(table)


def index_keys(storage: str, dim: int, op: str) -> tuple[str, str, str]:
    """(indexed expression, the query's expression with ``%b``, operator) for a storage."""
    if storage == "vector":
        return "embedding", "%b", op
    if storage == "halfvec":
        return f"(embedding::halfvec({dim}))", f"%b::halfvec({dim})", op
    return f"(binary_quantize(embedding)::bit({dim}))", f"binary_quantize(%b)::bit({dim})", "<~>"


def create_table_sql(table: Table, dim: int, kinds: Mapping[str, str]) -> Any:
    """``CREATE UNLOGGED TABLE`` with ``id``, ``embedding`` and typed attribute columns."""
    sql = _sql()
    cols = [
        sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(PG_TYPES[kind]))
        for name, kind in kinds.items()
    ]
    return sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(
        table_ident(table),
        sql.SQL(", ").join(
            [sql.SQL("id int8 PRIMARY KEY, embedding vector({})").format(sql.Literal(dim)), *cols]
        ),
    )


def copy_sql(table: Table, names: Sequence[str], direction: str = "FROM STDIN") -> Any:
    """Binary ``COPY`` of ``(id, embedding, *names)`` from or to the client."""
    sql = _sql()
    cols = [sql.Identifier(c) for c in ("id", "embedding", *names)]
    return sql.SQL("COPY {} ({}) {} (FORMAT BINARY)").format(
        table_ident(table), sql.SQL(", ").join(cols), sql.SQL(direction)
    )


def attribute_index_sql(table: Table, name: str) -> Any:
    """A btree index on one attribute column."""
    sql = _sql()
    return sql.SQL("CREATE INDEX ON {} USING btree ({})").format(
        table_ident(table), sql.Identifier(name)
    )


def vector_index_sql(table: Table, p: Mapping[str, Any], metric: str, dim: int) -> Any:
    """``CREATE INDEX ... USING hnsw|ivfflat`` for the build parameters ``p`` (None: flat)."""
    if p["index"] == "flat":
        return None
    sql = _sql()
    expr = index_keys(p["storage"], dim, OPS[metric][0])[0]
    suffix = "hamming" if p["storage"] == "bit" else OPS[metric][1]
    if p["index"] == "hnsw":
        params = f"m = {int(p['M'])}, ef_construction = {int(p['ef_construction'])}"
    else:
        params = f"lists = {int(p['lists'])}"
    return sql.SQL("CREATE INDEX ON {} USING {} ({} {}_{}_ops) WITH ({})").format(
        table_ident(table),
        sql.SQL(p["index"]),
        sql.SQL(expr),
        sql.SQL(p["storage"]),
        sql.SQL(suffix),
        sql.SQL(params),
    )


def where_sql(terms: tuple[Term, ...] | None) -> Any:
    """The ``WHERE`` clause of a filter shape: ``None`` → ``id = ANY(%b)``; ``()`` → nothing."""
    sql = _sql()
    if terms is None:
        return sql.SQL(" WHERE id = ANY(%b)")
    if not terms:
        return sql.SQL("")
    parts = []
    for t in terms:
        tmpl = "{} = ANY(%b)" if t.op == "in" else "{} BETWEEN %b AND %b"
        parts.append(sql.SQL(tmpl).format(sql.Identifier(t.column)))
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(parts)


def where_args(terms: tuple[Term, ...]) -> list[Any]:
    """The parameters of :func:`where_sql`'s clause, typed (binary arrays, int8/float8 bounds)."""
    args: list[Any] = []
    for t in terms:
        if t.op == "between":
            lo, hi = t.values
            args += [int8(lo), int8(hi)] if t.kind == "i" else [float8(lo), float8(hi)]
        elif t.kind == "i":
            args.append(array_param("i", wire.id_array(t.values)))
        elif t.kind == "f":
            args.append(array_param("f", wire.float_array(t.values)))
        else:
            args.append(array_param("U", wire.text_array(np.asarray(t.values))))
    return args


def search_sql(conn: Any, table: Table, op: str, keys: tuple[str, str, str], where: Any) -> str:
    """One search statement's text (see the module docstring); ``keys`` from :func:`index_keys`."""
    sql = _sql()
    col, param, qop = keys
    t = table_ident(table)
    if col == "embedding":  # vector storage: no re-scoring
        text = sql.SQL("SELECT id, embedding {op} %b AS d FROM {t}{w} ORDER BY d LIMIT %b")
    else:
        text = sql.SQL(
            "SELECT id, embedding {op} %b AS d FROM (SELECT id, embedding FROM {t}{w} "
            "ORDER BY {col} {qop} {param} LIMIT %b) c ORDER BY d LIMIT %b"
        )
    composed = text.format(
        op=sql.SQL(op), t=t, w=where, col=sql.SQL(col), qop=sql.SQL(qop), param=sql.SQL(param)
    )
    return str(composed.as_string(conn))

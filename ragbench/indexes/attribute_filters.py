"""Corpus attribute columns held by a database backend, and filters translated for it.

A backend that stores attributes beside the vectors (``pgvector``,
``lancedb``) takes them with ``set_attributes(columns)`` before ``build``
and can then be searched with ``where=spec``: the query's written-out filter
(``{"tenant": 3}``, ``{"year": [2010, 2015]}``, ``{"category": ["a", "b"]}``;
several keys must all hold; see :mod:`ragbench.attributes`). This module
turns a spec into :class:`Term` s with the same meaning as
:func:`ragbench.attributes.mask_of`: a key whose attribute is a ``range``
attribute (:func:`ragbench.attributes.attribute_kind`) and whose value is
two numbers is ``lo <= value <= hi``; any other value (one, or a list) is a
set of allowed values, read as ``mask_of`` reads them
(:func:`ragbench.attributes.filter_values`: a value of the wrong type raises,
a number the column cannot hold exactly -- ``2.5`` for int64 -- matches nothing).
NaN in a float column is stored as NULL, which no filter allows (as NaN
fails every comparison in numpy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..attributes import attribute_kind, filter_values, mask_of
from ..errors import ConfigError, DatasetError

__all__ = ["AttributeColumns", "Term", "WhereFilter", "spec_terms", "where_masks", "where_text"]

#: column dtype kind -> the name used in messages
_KINDS = {"i": "int64", "f": "float64", "U": "str"}
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class Term:
    """One key of a filter: ``column`` ``op`` ``values``.

    ``kind``: the column's dtype kind (``i`` int64, ``f`` float64, ``U`` str);
    ``op``: ``"in"`` (``values``: the allowed values, a 1-D array of the
    column's dtype, unique, sorted) or ``"between"`` (``values``: ``(lo,
    hi)``, ints for an int column -- the bounds rounded inwards -- floats
    for a float one).
    """

    column: str
    kind: str
    op: str
    values: Any


@dataclass(frozen=True, slots=True)
class WhereFilter:
    """A search's ``where=`` specs carried in its ``filter`` argument to the backend's dispatch.

    ``allow``: the caller's ``filter`` (the same rows as a mask, or ``None``);
    ``where``: one spec, or a list of them (one per query row).
    """

    allow: Any
    where: Any


class AttributeColumns:
    """Typed attribute columns over corpus rows: name -> int64, float64 or str ``(n,)``.

    Names must not be ``reserved`` (the backend's own columns) and must be
    1-63 characters without NUL or control characters (PostgreSQL's limit on
    identifiers). A str value must not hold a NUL character: PostgreSQL's
    ``text`` cannot store one, and LanceDB's SQL filter does not match it
    (a filter on ``"a\0b"`` found no row: recall 0.00 where ``flat`` had
    1.00), so it is refused here, naming the attribute and the row, before
    the table is set up. (numpy's str arrays drop trailing NULs themselves,
    on every backend alike.)
    """

    __slots__ = ("columns", "n")

    def __init__(self, owner: str, columns: Mapping[str, Any], reserved: tuple[str, ...]) -> None:
        out: dict[str, np.ndarray] = {}
        n: int | None = None
        for name, column in columns.items():
            if not isinstance(name, str) or not 0 < len(name.encode()) <= 63:
                raise ConfigError(f"{owner}: attribute name {name!r} is not 1-63 characters")
            if name.lower() in reserved or any(ord(ch) < 32 for ch in name):
                raise ConfigError(
                    f"{owner}: attribute name {name!r} is taken by the table's own columns "
                    f"({', '.join(reserved)}) or holds control characters"
                )
            arr = np.asarray(column)
            if arr.ndim != 1 or arr.dtype.kind not in "iufUb":
                raise ConfigError(
                    f"{owner}: attribute {name!r} must be a 1-D int64, float64 or str "
                    f"array, got {arr.dtype} {arr.shape}"
                )
            if arr.dtype.kind in "ub" or (arr.dtype.kind == "i" and arr.dtype != np.int64):
                arr = arr.astype(np.int64)
            elif arr.dtype.kind == "f" and arr.dtype != np.float64:
                arr = arr.astype(np.float64)
            if arr.dtype.kind == "U":
                _check_no_nul(owner, name, arr)
            if n is not None and arr.shape[0] != n:
                raise ConfigError(f"{owner}: attribute {name!r} has {arr.shape[0]} rows, not {n}")
            n = arr.shape[0]
            out[name] = arr
        self.columns = out
        self.n = n or 0

    def kinds(self) -> dict[str, str]:
        """name -> ``int64``, ``float64`` or ``str``, for records."""
        return {name: _KINDS[col.dtype.kind] for name, col in self.columns.items()}


def _check_no_nul(owner: str, name: str, column: np.ndarray) -> None:
    """ConfigError naming ``name`` and the first row whose str value holds a NUL."""
    rows = np.flatnonzero(_has_nul(column))
    if rows.size:
        row = int(rows[0])
        raise ConfigError(
            f"{owner}: attribute {name!r} holds a NUL character (row {row}: "
            f"{str(column[row])!r}); the database cannot store or filter on it: "
            "remove NUL characters from the attribute values"
        )


def _has_nul(values: np.ndarray) -> np.ndarray:
    """bool ``(n,)``: which str values hold a NUL before their end.

    numpy pads each value with NULs to the array's width (and ``np.char.find``
    reads ``"\\0"`` as an empty string), so the code points are compared.
    """
    if not values.size or values.dtype.itemsize == 0:
        return np.zeros(values.shape, dtype=bool)
    codes = np.ascontiguousarray(values).view(np.uint32).reshape(values.shape[0], -1)
    inside = np.arange(codes.shape[1]) < np.char.str_len(values)[:, None]
    return ((codes == 0) & inside).any(axis=1)  # type: ignore[no-any-return]


def spec_terms(attrs: AttributeColumns, spec: Mapping[str, Any]) -> tuple[Term, ...]:
    """The terms of one query's filter, sorted by column (``()`` for ``{}``: no filter).

    Raises ConfigError for an unknown attribute, DatasetError for a value
    the column cannot hold (as :func:`ragbench.attributes.mask_of`).
    """
    if not isinstance(spec, Mapping):
        raise DatasetError(f"a query filter must be an object, got {spec!r}")
    terms = []
    for name in sorted(spec, key=str):
        name_s = str(name)
        column = attrs.columns.get(name_s)
        if column is None:
            raise ConfigError(
                f"filter attribute {name_s!r} is not one of this index's attribute columns: "
                f"{', '.join(attrs.columns) or 'none'}"
            )
        terms.append(_term(name_s, column, spec[name], spec))
    return tuple(terms)


def _term(name: str, column: np.ndarray, want: Any, spec: Mapping[str, Any]) -> Term:
    kind = column.dtype.kind
    ranged = attribute_kind(name, column) == "range" and kind in "if"
    if isinstance(want, list) and len(want) == 2 and ranged:
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in want):
            raise DatasetError(f"filter {dict(spec)!r}: a range needs two numbers")
        lo, hi = want
        if math.isnan(lo) or math.isnan(hi):
            raise DatasetError(f"filter {dict(spec)!r}: a range bound is NaN")
        if kind == "i":  # v >= 2010.5 <=> v >= 2011 for integers
            lo_i = _clamp(math.ceil(lo) if math.isfinite(lo) else lo)
            hi_i = _clamp(math.floor(hi) if math.isfinite(hi) else hi)
            return Term(name, kind, "between", (lo_i, hi_i))
        return Term(name, kind, "between", (float(lo), float(hi)))
    # exactly the values mask_of allows: a wrong type raises, an inexact number
    # (2.5 for int64, NaN: NULL in the table) is left out and matches nothing
    values = filter_values(name, column, want, spec)
    if kind == "U" and values.size:
        # no stored value holds a NUL (refused at set-up): such a value matches
        # nothing, and PostgreSQL's text cannot even receive it
        values = values[~_has_nul(values)]
    return Term(name, kind, "in", np.unique(values))


def _clamp(v: float) -> int:
    if v == math.inf:
        return _INT64[1]
    if v == -math.inf:
        return _INT64[0]
    return int(min(max(v, _INT64[0]), _INT64[1]))


def _literal(kind: str, value: Any) -> str:
    """A SQL literal: an int, a float (``repr``, round-trips), or a string with ``'`` doubled."""
    if kind == "i":
        return str(int(value))
    if kind == "f":
        return repr(float(value))
    return "'" + str(value).replace("'", "''") + "'"


def where_text(terms: tuple[Term, ...]) -> str | None:
    """A SQL filter of the terms, ANDed, for LanceDB's ``where`` (``None`` for no terms).

    Columns in backticks; values as literals (:func:`_literal`): a string's
    ``'`` doubled; an int or float bound at infinity (or int64's extremes) left out.
    """
    parts = []
    for t in terms:
        col = f"`{t.column}`"
        if t.op == "in":
            values = ", ".join(_literal(t.kind, v) for v in t.values.tolist())
            parts.append(f"{col} IN ({values})" if values else "FALSE")
            continue
        lo, hi = t.values
        bounds = []
        if np.isfinite(lo) and abs(lo) < 2**63 - 1:
            bounds.append(f"{col} >= {_literal(t.kind, lo)}")
        if np.isfinite(hi) and abs(hi) < 2**63 - 1:
            bounds.append(f"{col} <= {_literal(t.kind, hi)}")
        parts.append(" AND ".join(bounds) if bounds else f"{col} IS NOT NULL")
    return " AND ".join(f"({p})" for p in parts) if parts else None


def where_masks(attrs: AttributeColumns, specs: list[Any], id_bound: int) -> np.ndarray:
    """bool ``(len(specs), id_bound)``: the ids each spec allows (``{}``: every id).

    Ids past the attribute rows (added later, with null attributes) are
    allowed only by ``{}``.
    """
    masks = np.zeros((len(specs), id_bound), dtype=bool)
    for i, spec in enumerate(specs):
        if spec:
            masks[i, : attrs.n] = mask_of(attrs.columns, spec)
        else:
            masks[i] = True
    return masks

"""The one entry point: :func:`render` dispatches on record kinds and on the format."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ConfigError, DatasetError
from ..records import records_of
from .diffs import diff_records_table
from .embedded import sweep_tables
from .frontier import frontier_table
from .load import load_table
from .markdown import flat_cell, flat_rows
from .points import scale_table
from .runs import compare_table
from .stream import stream_table

__all__ = [
    "FORMATS",
    "render",
    "render_checked",
]


FORMATS = ("table", "md", "csv", "json")


def _problem(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"lacks field {exc.args[0]!r}"
    return f"has a field of the wrong type or value ({type(exc).__name__}: {exc})"


def render_checked(
    records: Sequence[Mapping[str, Any]],
    where: Sequence[str],
    fmt: str = "table",
    *,
    stat: str = "p50",
) -> str:
    """:func:`render`, but a record missing a field or holding one of the wrong type is a
    :class:`DatasetError` naming it (``where[i]``: ``file:line`` of ``records[i]``) and the field.

    Records are rendered together first; only when that fails is each rendered
    alone to find the culprit, so the common case costs nothing extra.
    """
    try:
        return render(records, fmt, stat=stat)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        if isinstance(exc, ConfigError):
            raise
        first = exc
    for rec, place in zip(records, where, strict=True):
        try:
            render([rec], fmt, stat=stat)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise DatasetError(f"{place}: {rec.get('kind')} record {_problem(exc)}") from None
    raise DatasetError(f"the records cannot be shown together: {_problem(first)}") from None


def render(records: Sequence[Mapping[str, Any]], fmt: str = "table", *, stat: str = "p50") -> str:
    """Render records of any kinds: one table per kind (``table``), or rows as ``md``/``csv``/``json``."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "table":
        parts = []
        for kind, draw in (
            ("run", lambda rs: compare_table(rs, stat=stat)),
            ("sweep", sweep_tables),
            ("scale", scale_table),
            ("load", load_table),
            ("stream", stream_table),
            ("diff", diff_records_table),
            ("frontier", frontier_table),
        ):
            of_kind = records_of(records, kind)
            if of_kind:
                parts.append(draw(of_kind))
        return "\n".join(parts)
    rows = flat_rows(records)
    if fmt == "json":
        return json.dumps(rows, indent=2, default=str)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[flat_cell(row.get(c), exact=True) for c in columns] for row in rows])
        return buf.getvalue().rstrip("\n")
    head = "| " + " | ".join(columns) + " |"
    sep = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(flat_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join([head, sep, *body])

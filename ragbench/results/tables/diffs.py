"""Saved diffs (``ragbench diff A B --out F``): B / A per configuration and part, with verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..schema import DiffRecord, need, read_struct
from .cells import num, text_table

__all__ = [
    "diff_records_table",
]


def _us(ns: float | None) -> str:
    return "—" if ns is None or ns != ns else num(ns / 1e3)


def _interval(rec: DiffRecord) -> str:
    low, high = rec.ratio_low, rec.ratio_high
    if low is None or high is None or low != low or high != high:
        return "—"
    return f"[{low:.3f}–{high:.3f}]"


def diff_records_table(
    records: Sequence[Mapping[str, Any] | DiffRecord], *, width: int = 400
) -> str:
    """One table per saved diff (files, statistic, threshold): the rows ``ragbench diff`` printed."""
    diffs = [read_struct(r, DiffRecord) for r in records]
    groups: dict[tuple[Any, ...], list[DiffRecord]] = {}
    for d in diffs:
        groups.setdefault((d.a_file, d.b_file, d.stat, d.threshold, d.time), []).append(d)
    tables = []
    for (a_file, b_file, stat, threshold, when), rows in groups.items():
        title = (
            f"saved diff — {stat}, threshold {need(threshold, 'threshold'):.0%}: "
            f"A = {a_file}, B = {b_file}" + (f" ({when})" if when else "")
        )
        pairs = sorted({d.pairs for d in rows if d.pairs})
        if pairs:  # diff --paired: B / A from the pairs' ratios (a paired t interval)
            title += f"; paired: {'–'.join(map(str, dict.fromkeys(pairs[:1] + pairs[-1:])))} pairs"
        cols = [("configuration", "left"), ("part", "left")]
        cols += [(f"A {stat} µs", "right"), (f"B {stat} µs", "right"), ("B / A", "right")]
        cols += [("95 % interval", "right"), ("verdict", "left")]
        body = [
            [
                need(d.key, "key"),
                need(d.part, "part"),
                _us(d.a),
                _us(d.b),
                f"{need(d.ratio, 'ratio'):.3f}",
                _interval(d),
                need(d.verdict, "verdict"),
            ]
            for d in rows
        ]
        lines = [text_table(title, cols, body, width=width)]
        env = list(dict.fromkeys(e for d in rows for e in d.env_differences or []))
        if env:
            lines.append("environments differed: " + "; ".join(env))
        tables.append("\n".join(lines))
    return "\n".join(tables)

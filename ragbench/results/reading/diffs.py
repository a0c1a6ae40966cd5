"""The reading of a diff: the verdict in total and the largest sure change (rows or saved records)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ... import intervals
from ..diff import FASTER, SAME, SURE
from ..schema import DiffRecord, need, read_struct
from .common import SUGGESTED_REPEAT, Records

__all__ = [
    "diff_reading",
    "saved_diff_reading",
]


def diff_reading(rows: Iterable[Any]) -> list[str]:
    """The total's verdict per configuration, the largest sure stage change, and a noise warning.

    ``rows`` are :class:`ragbench.results.diff.DiffRow` (``key``, ``part``, ``a``, ``b``,
    ``ratio``, ``verdict``). The verdicts decide (:func:`ragbench.results.diff.verdict`,
    the one rule): a change is sure when its verdict is slower or faster, and
    only such a stage is named. The largest is the one that moved the most
    time (B - A), so a stage of a few ns doubling on a busy machine is not
    named over the stage that added milliseconds.
    """
    rows = list(rows)
    lines = []
    for key in dict.fromkeys(r.key for r in rows):
        mine = [r for r in rows if r.key == key]
        total = next((r for r in mine if r.part in ("total", "latency")), mine[0])
        lines.append(f"{key}: {_diff_text(total)}")
        sure = [r for r in mine if r is not total and _sure(r)]
        if sure:
            big = max(sure, key=_moved)
            lines[-1] += f"; the largest sure change is {big.part}: {_diff_text(big)}"
    if rows and not any(_sure(r) for r in rows):
        lines.append(
            "WARNING: no sure difference anywhere; if a change is expected, record each side "
            f"with --repeat {SUGGESTED_REPEAT} (or several runs into one file)"
        )
    return lines


def _sure(row: Any) -> bool:
    return str(row.verdict) in SURE


def _moved(row: Any) -> float:
    """The time a row's change moved (|B - A|, ns); NaN values rank last."""
    moved = abs(float(row.b) - float(row.a))
    return moved if moved == moved else -1.0


class _SavedRow:
    """A saved diff record in the shape :func:`diff_reading` reads (key, part, ratio, verdict)."""

    def __init__(self, rec: DiffRecord) -> None:
        nan = float("nan")
        self.key, self.part = need(rec.key, "key"), need(rec.part, "part")
        self.a = nan if rec.a is None else rec.a  # written as null when NaN
        self.b = nan if rec.b is None else rec.b
        low = nan if rec.ratio_low is None else rec.ratio_low
        high = nan if rec.ratio_high is None else rec.ratio_high
        self.ratio = intervals.Interval(need(rec.ratio, "ratio"), low, high)
        self.verdict = need(rec.verdict, "verdict")


def saved_diff_reading(records: Records) -> list[str]:
    """:func:`diff_reading` of saved ``diff`` records (``ragbench diff A B --out F``)."""
    return diff_reading([_SavedRow(read_struct(r, DiffRecord)) for r in records])


def _diff_text(row: Any) -> str:
    iv = row.ratio
    if iv.value != iv.value or iv.value <= 0:
        return "no ratio"
    if iv.low != iv.low:  # the verdict says why: "no interval (no raw samples)", ...
        why = str(row.verdict).removeprefix("no interval (").removesuffix(")")
        return f"B / A {iv.value:.2f} (no interval: {why})"
    if not _sure(row):
        return f"{SAME} (B / A {iv.value:.2f} [{iv.low:.2f}, {iv.high:.2f}])"
    if row.verdict == FASTER:
        return f"B {1 / iv.value:.2f}× faster than A [{1 / iv.high:.2f}, {1 / iv.low:.2f}]"
    return f"B {iv.value:.2f}× slower than A [{iv.low:.2f}, {iv.high:.2f}]"

"""The reading of load levels: the dominant stage, the highest level sustained, levels at capacity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..record_schema import LoadRecord, need, read_struct
from ..records import load_level
from .common import DOMINANT_SHARE, SUSTAINED, pct_text, span_text, us_text

__all__ = [
    "load_reading",
]


def _capacity(rec: LoadRecord) -> str:
    """Why a load level was at capacity ("" when it was not)."""
    why = []
    if rec.generator_ok is False:
        why.append(str(rec.generator_note or "the load generator said it fell behind"))
    offered = rec.offered_qps
    achieved = float(rec.achieved_qps or 0.0)
    if offered:
        if achieved < SUSTAINED * float(offered):
            why.append(f"achieved {achieved:,.0f} of {float(offered):,.0f} QPS offered")
        gap_us = 1e6 / float(offered)
        delay = rec.dispatch_delay_p99_us
        if delay is not None and float(delay) > gap_us:
            why.append(
                f"dispatch delay p99 {us_text(float(delay))} > the {us_text(gap_us)} between arrivals"
            )
    return "; ".join(why)


def load_reading(records: Sequence[Mapping[str, Any] | LoadRecord]) -> list[str]:
    """The dominant stage under load, each configuration's highest sustained level, levels at capacity."""
    if not records:
        return []
    levels = [read_struct(r, LoadRecord) for r in records]
    closed = levels[0].mode == "closed"
    lines = []
    cpu = all(r.cpu_share is not None for r in levels)
    low = [min((r for r in levels if r.label == lab), key=load_level) for lab in _labels(levels)]
    shares = [(r.cpu_share if cpu else r.stage_share) or {} for r in low]
    tops = {max(s, key=lambda k: s[k] or 0.0) for s in shares if s}
    if len(tops) == 1:
        top = tops.pop()
        vals = [float(s[top] or 0.0) for s in shares]
        verb = "is" if min(vals) >= DOMINANT_SHARE else "is the largest stage at"
        lines.append(
            f"{top} {verb} {span_text(vals, pct_text)} of each request's {'CPU' if cpu else 'wall'} time "
            f"at the lowest load level; the other stages share {span_text([1 - v for v in vals], pct_text)}"
        )
    best = []
    for lab in _labels(levels):
        pts = [r for r in levels if r.label == lab]
        if closed:
            top_pt = max(pts, key=lambda r: float(r.achieved_qps or 0.0))
            best.append(
                f"{lab} {float(need(top_pt.achieved_qps, 'achieved_qps')):,.0f} QPS at "
                f"{load_level(top_pt):g} clients"
            )
            continue
        ok = [r for r in pts if not _capacity(r)]
        best.append(
            f"{lab} {max(load_level(r) for r in ok):,g} QPS" if ok else f"{lab} none of the levels"
        )
    head = "highest throughput" if closed else "highest offered rate sustained"
    lines.append(f"{head}: " + ", ".join(best))
    if not closed:
        full = [f"{r.label} @ {load_level(r):,g}: {_capacity(r)}" for r in levels if _capacity(r)]
        if full:
            lines.append("at capacity (these rows measure a queue): " + " | ".join(full))
    return lines


def _labels(records: Sequence[LoadRecord]) -> list[str]:
    return list(dict.fromkeys(str(need(r.label, "label")) for r in records))

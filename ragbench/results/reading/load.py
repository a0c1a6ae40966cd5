"""The reading of load levels: the dominant stage, the highest level sustained, levels at capacity."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import load_level
from ..schema import LoadRecord, need, read_struct
from .common import DOMINANT_SHARE, SUSTAINED, pct_text, span_text, us_text
from .judged import judged_reading

__all__ = [
    "load_reading",
]


def _capacity(rec: LoadRecord) -> str:
    """Why a load level was at capacity ("" when it was not)."""
    why = []
    if rec.generator_ok is False:
        why.append(str(rec.generator_note or "the load generator said it fell behind"))
    if rec.offered_actual_qps is None:
        why += _nominal_capacity(rec)  # a record from before the schedule's span was kept
    else:
        why += _lost(rec) + _backlog(rec)
    return "; ".join(why)


def _lost(rec: LoadRecord) -> list[str]:
    """Requests the level did not serve: timed out, rejected at a full queue, failed."""
    counts = [(rec.timed_out, "timed out"), (rec.rejected, "rejected"), (rec.failed, "failed")]
    named = [f"{int(n):,} {what}" for n, what in counts if n]
    return [f"{', '.join(named)} of {int(rec.scheduled or 0):,} requests"] if named else []


def _backlog_allowed_s(span_s: float, arrivals: float) -> float:
    """The longest wait of a schedule's last arrival that is no evidence of a queue (s).

    The larger of ``1 - SUSTAINED`` of the schedule's span and ``span / √arrivals``:
    a wait that long holds √n arrivals at the rate offered, the spread of a
    Poisson count of n, which a sustained level's queue can reach by chance;
    an overloaded level's backlog grows with the whole span instead.
    """
    return max(1.0 - SUSTAINED, 1.0 / math.sqrt(max(arrivals, 1.0))) * span_s


def _backlog(rec: LoadRecord) -> list[str]:
    """Completions fell behind arrivals: the last arrival waited past :func:`_backlog_allowed_s`."""
    wait, span = rec.last_arrival_wait_s, rec.schedule_span_s
    if wait is None or span is None or wait != wait:
        return []
    runs = max(int(rec.repeats or 1), 1)
    per_run = float(rec.scheduled or 0) / runs
    allowed = _backlog_allowed_s(float(span) / runs, per_run)
    if float(wait) <= allowed:
        return []
    offered = float(need(rec.offered_actual_qps, "offered_actual_qps"))
    return [
        f"a backlog: the last arrival waited {_s_text(float(wait))} for a worker, over the "
        f"{_s_text(allowed)} chance explains for {per_run:,.0f} arrivals; achieved "
        f"{float(rec.achieved_qps or 0.0):,.1f} of the {offered:,.1f} QPS the schedule offered"
    ]


def _nominal_capacity(rec: LoadRecord) -> list[str]:
    """Older records (no ``offered_actual_qps``): achieved against the nominal rate, dispatch delay.

    A Poisson schedule can fail the first test on its own (its arrivals may
    end after the level's duration); records written since are judged by
    :func:`_lost` and :func:`_backlog` instead.
    """
    why = []
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
    return why


def _s_text(seconds: float) -> str:
    return f"{seconds:,.2f} s" if seconds >= 1 else f"{seconds * 1e3:,.1f} ms"


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
    lines += judged_reading([(str(r.label), r.judged) for r in low])  # at the lowest level
    if not closed:
        full = [f"{r.label} @ {load_level(r):,g}: {_capacity(r)}" for r in levels if _capacity(r)]
        if full:
            lines.append("at capacity (these rows measure a queue): " + " | ".join(full))
        lines += _offered_note(levels)
    return lines


def _offered_note(levels: Sequence[LoadRecord]) -> list[str]:
    """The rate each level's schedule actually offered, where it is off its nominal rate by
    more than ``1 - SUSTAINED`` (a Poisson schedule's arrivals end early or late)."""
    off: dict[float, float] = {}
    for r in levels:
        actual, nominal = r.offered_actual_qps, r.offered_qps
        if actual is None or actual != actual or not nominal:
            continue
        if abs(float(actual) / float(nominal) - 1.0) > 1.0 - SUSTAINED:
            off.setdefault(load_level(r), float(actual))
    if not off:
        return []
    rates = ", ".join(f"{a:,.3g} QPS at {lvl:,g}" for lvl, a in off.items())
    return [
        f"the schedules offered {rates} (arrivals over their span); achieved rates "
        "are read against these"
    ]


def _labels(records: Sequence[LoadRecord]) -> list[str]:
    return list(dict.fromkeys(str(need(r.label, "label")) for r in records))

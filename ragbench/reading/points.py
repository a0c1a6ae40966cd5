"""The reading of sweep and scale points: the indexes ranked at a recall all reach, or at the largest n."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..record_schema import IndexPoint, ScaleRecord, SweepRecord, need, read_struct
from .common import SUGGESTED_REPEAT, ranking, step_text, us_text, within_noise

__all__ = [
    "scale_reading",
    "sweep_reading",
]


def _latency(rec: IndexPoint) -> tuple[np.ndarray, np.ndarray | None]:
    reps = rec.repetition
    x = np.asarray(rec.latency_ns or [], dtype=np.float64)
    return x, (np.asarray(reps) if reps is not None and len(reps) == x.size else None)


def _point_name(rec: IndexPoint) -> str:
    params = [f"{k}={v}" for k, v in (rec.query or {}).items()]
    params += [f"rescore={rec.rescore}"] if rec.rescore else []
    return " ".join([str(need(rec.index, "index")), *params])


def _rank_points(best: Mapping[str, IndexPoint], what: str) -> list[str]:
    if len(best) < 2 or any(not p.latency_ns for p in best.values()):
        return []
    levels = {_point_name(p): _latency(p) for p in best.values()}
    steps = ranking(levels)
    lines = [f"{what}: " + ", ".join(step_text(*s) for s in steps) + " (p50 per query)"]
    if all(within_noise(iv) for _, _, iv in steps):
        lines.append(
            f"WARNING: the indexes' differences are within noise; run with --repeat {SUGGESTED_REPEAT}"
        )
    return lines


def sweep_reading(records: Sequence[Mapping[str, Any] | SweepRecord]) -> list[str]:
    """The indexes ranked at the best recall all of them reach; what sweep times."""
    if not records:
        return []
    by: dict[str, list[SweepRecord]] = {}
    for r in (read_struct(rec, SweepRecord) for rec in records):
        by.setdefault(str(need(r.index, "index")), []).append(r)
    reach = min(max(float(need(p.recall, "recall")) for p in pts) for pts in by.values())
    best = {
        name: min(
            (p for p in pts if float(need(p.recall, "recall")) >= reach),
            key=lambda p: need(p.p50_us, "p50_us"),
        )
        for name, pts in by.items()
    }
    lines = []
    if len(by) > 1:
        lines += _rank_points(
            best, f"fastest point per index at recall ≥ {reach:.3f} (the best all reach)"
        )
    else:
        ((name, p),) = best.items()
        lines.append(
            f"highest recall {reach:.4f} at {_point_name(p)}, p50 {us_text(float(need(p.p50_us, 'p50_us')))}"
        )
    lines.append(
        "these times are retrieval alone (one search call at a time, back to back, hot caches); "
        "in `compare` the index runs between the other stages of each request and reads slower"
    )
    return lines


def scale_reading(records: Sequence[Mapping[str, Any] | ScaleRecord]) -> list[str]:
    """The indexes ranked at the largest corpus size measured."""
    if not records:
        return []
    points = [read_struct(r, ScaleRecord) for r in records]
    n = max(int(need(r.n, "n")) for r in points)
    at = {str(need(r.index, "index")): r for r in points if int(need(r.n, "n")) == n}
    missed = sorted(name for name, r in at.items() if r.reached is False)
    lines = _rank_points(at, f"at n={n:,}")
    if missed:
        lines.append(
            f"WARNING: {', '.join(missed)} did not reach recall {points[0].target_recall} "
            f"at n={n:,}: its time is not at the same recall as the others'"
        )
    return lines

"""What every reading shares: thresholds, number phrases, rankings of choices with intervals."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ... import intervals

__all__ = [
    "DOMINANT_SHARE",
    "Records",
    "SUGGESTED_REPEAT",
    "SUSTAINED",
    "pct_text",
    "ranking",
    "span_text",
    "stat_name",
    "step_text",
    "us_text",
    "within_noise",
]


Records = Sequence[Mapping[str, Any]]


#: A stage with at least this share of the time before first token dominates it.
DOMINANT_SHARE = 0.5


#: A load level is sustained when at least this fraction of its offered rate completed.
SUSTAINED = 0.95


#: Repetitions suggested when a verdict is within noise.
SUGGESTED_REPEAT = 5


def pct_text(share: float) -> str:
    return f"{100 * share:.1f} %"


def span_text(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def us_text(value: float) -> str:
    if value != value:
        return "—"
    return f"{value:,.0f} µs" if abs(value) >= 100 else f"{value:.1f} µs"


def stat_name(stat: str) -> str:
    return stat if stat in intervals.STATS else "p50"


def ranking(
    levels: Mapping[str, tuple[np.ndarray, np.ndarray | None]], stat: str = "p50"
) -> list[tuple[str, str, intervals.Interval]]:
    """Choices sorted fastest first; each step ``(faster, slower, slower / faster with interval)``."""
    stat = stat_name(stat)
    order = sorted(levels, key=lambda k: intervals.point(levels[k][0], stat))
    steps = []
    for fast, slow in zip(order, order[1:], strict=False):
        (a, ga), (b, gb) = levels[fast], levels[slow]
        steps.append((fast, slow, intervals.ratio(a, b, stat, base_groups=ga, other_groups=gb)))
    return steps


def within_noise(iv: intervals.Interval) -> bool:
    return iv.low != iv.low or iv.low <= 1.0 <= iv.high


def step_text(fast: str, slow: str, iv: intervals.Interval) -> str:
    if iv.low != iv.low:
        return f"{fast} {iv.value:.2f}× faster than {slow} (no interval: no raw samples)"
    if within_noise(iv):
        return f"{fast} ≈ {slow} (within noise: {iv.value:.2f}× [{iv.low:.2f}, {iv.high:.2f}])"
    return f"{fast} {iv.value:.2f}× faster than {slow} [{iv.low:.2f}, {iv.high:.2f}]"

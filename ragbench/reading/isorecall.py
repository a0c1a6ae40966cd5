"""Latency at equal recall: each index's p50 / p99 interpolated on its measured frontier.

Two indexes measured at the points a grid happened to hit sit at different
recalls (0.943 and 0.978 "≈ 0.95"), and their plain p50 ratio mixes the
speed of the engine with the recall it bought. Read at a stated recall
instead: each index's frontier (its points no other point of it beats on both
recall and p50) is walked to the two points around the target and its p50
and p99 interpolated linearly between them. Nothing is extrapolated: a target
above the frontier's best recall is "not reached", and one below its
cheapest point's recall is only bounded by that point ("≤"), not given a
figure, so neither enters a ratio.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_TARGETS",
    "AtRecall",
    "Point",
    "at_recall",
    "frontier",
    "iso_recall_lines",
]

#: The recall targets read when records carry none (``--recall-target``'s default).
DEFAULT_TARGETS = (0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Point:
    """One measured point: mean recall@k, p50 and p99 of one query in µs (p99 NaN if unknown)."""

    recall: float
    p50_us: float
    p99_us: float = float("nan")


@dataclass(frozen=True)
class AtRecall:
    """An index read at one recall target.

    ``how``: ``"measured"`` (a frontier point sits at the target),
    ``"interpolated"`` (between ``below`` and ``above``), ``"not reached"``
    (the frontier's best recall is under the target: ``above`` is ``None``,
    ``below`` the best point) or ``"below the grid"`` (the cheapest point
    already exceeds the target: ``p50_us`` is an upper bound, ``above``).
    """

    target: float
    how: str
    p50_us: float
    p99_us: float
    below: Point | None
    above: Point | None

    @property
    def figure(self) -> bool:
        """Whether ``p50_us`` / ``p99_us`` are the index's latency at the target (comparable)."""
        return self.how in ("measured", "interpolated")


def frontier(points: Iterable[Point]) -> list[Point]:
    """The points no other beats on both axes, recall ascending (and so p50 ascending).

    A point stays when it is faster than every point of higher or equal
    recall; of points with equal recall only the fastest stays.
    """
    out: list[Point] = []
    best = float("inf")
    for p in sorted(points, key=lambda p: (-p.recall, p.p50_us)):
        if p.p50_us < best:
            out.append(p)
            best = p.p50_us
    return out[::-1]


def _lerp(a: float, b: float, t: float) -> float:
    return a + t * (b - a)


def at_recall(points: Iterable[Point], target: float) -> AtRecall:
    """The frontier of ``points`` read at recall ``target`` (see :class:`AtRecall`)."""
    front = frontier(points)
    if not front:
        raise ValueError("at_recall needs at least one point")
    above = next((p for p in front if p.recall >= target), None)
    if above is None:
        best = front[-1]
        return AtRecall(target, "not reached", float("nan"), float("nan"), best, None)
    i = front.index(above)
    if above.recall == target:
        return AtRecall(target, "measured", above.p50_us, above.p99_us, above, above)
    if i == 0:
        return AtRecall(target, "below the grid", above.p50_us, above.p99_us, None, above)
    below = front[i - 1]
    t = (target - below.recall) / (above.recall - below.recall)
    p50 = _lerp(below.p50_us, above.p50_us, t)
    p99 = _lerp(below.p99_us, above.p99_us, t)
    return AtRecall(target, "interpolated", p50, p99, below, above)


def _us(value: float) -> str:
    if value != value:
        return "—"
    return f"{value:,.0f} µs" if abs(value) >= 100 else f"{value:.1f} µs"


def _cell(name: str, at: AtRecall, ref: tuple[str, AtRecall] | None) -> str:
    if at.how == "not reached":
        assert at.below is not None
        return f"{name} not reached (best {at.below.recall:.3f})"
    if at.how == "below the grid":
        assert at.above is not None
        return (
            f"{name} ≤ {_us(at.p50_us)} (its cheapest point already has recall "
            f"{at.above.recall:.3f}: no figure at {at.target:g})"
        )
    text = f"{name} {_us(at.p50_us)} / {_us(at.p99_us)}"
    if ref is not None and ref[0] != name:
        text += f" ({at.p50_us / ref[1].p50_us:.2f}× {ref[0]})"
    return text


def iso_recall_lines(
    label: str, by_index: Mapping[str, Sequence[Point]], targets: Sequence[float]
) -> list[str]:
    """One line per target: each index's p50 / p99 at that recall, fastest first, with its ratio.

    The ratio is p50 over the fastest index's p50, both read at the same
    recall; indexes without a figure there (not reached, below the grid)
    follow, saying why, and take no ratio.
    """
    lines = []
    for target in sorted(set(targets)):
        reads = {name: at_recall(pts, target) for name, pts in by_index.items() if pts}
        order = sorted(reads, key=lambda n: (not reads[n].figure, reads[n].p50_us, n))
        ref = (order[0], reads[order[0]]) if order and reads[order[0]].figure else None
        if ref is not None and sum(r.figure for r in reads.values()) < 2:
            ref = None  # a ratio needs two indexes with a figure
        cells = [_cell(n, reads[n], ref) for n in order]
        lines.append(
            f"{label}: at recall {target:g}, p50 / p99 interpolated on each index's frontier: "
            + "; ".join(cells)
        )
    return lines

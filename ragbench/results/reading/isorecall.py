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

Every figure carries a 95 % bootstrap interval when the points keep their
per-query samples (sweep records do: ``latency_ns``, ``recall_per_query``):
the queries are resampled with replacement, and on each resample both
bracketing points' recalls and p50 / p99 are recomputed on the same queries,
the target's place between the two recalls found again (held inside the
bracket) and the latency interpolated there; the interval is the middle 95 %
of those reads. So it holds the latency's noise and the noise of where the
target falls. A ratio at equal recall is resampled the same way: the two
indexes were measured on the same queries, so each resample takes the same
queries for both (paired), and the ratio's interval is that of the per-resample
ratios.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ... import intervals

__all__ = [
    "DEFAULT_TARGETS",
    "AtRecall",
    "Point",
    "at_recall",
    "frontier",
    "iso_recall_lines",
    "ratio_interval",
]

#: The recall targets read when records carry none (``--recall-target``'s default).
DEFAULT_TARGETS = (0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Point:
    """One measured point: mean recall@k, p50 and p99 of one query in µs (p99 NaN if unknown).

    ``latency_us`` (one per timed query, µs) and ``recalls`` (one per query):
    the samples the intervals resample; ``None`` when the record has none.
    """

    recall: float
    p50_us: float
    p99_us: float = float("nan")
    latency_us: np.ndarray | None = field(default=None, compare=False, repr=False)
    recalls: np.ndarray | None = field(default=None, compare=False, repr=False)


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
    #: 95 % bootstrap intervals (µs) of ``p50_us`` / ``p99_us`` (``None``: no samples, no figure)
    p50_ci: tuple[float, float] | None = None
    p99_ci: tuple[float, float] | None = None
    #: the p50 read on each resample (paired across indexes: same seed, same queries)
    p50_draws: np.ndarray | None = field(default=None, compare=False, repr=False)

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
        read = AtRecall(target, "measured", above.p50_us, above.p99_us, above, above)
        return _with_intervals(read, above, above)
    if i == 0:
        return AtRecall(target, "below the grid", above.p50_us, above.p99_us, None, above)
    below = front[i - 1]
    t = (target - below.recall) / (above.recall - below.recall)
    p50 = _lerp(below.p50_us, above.p50_us, t)
    p99 = _lerp(below.p99_us, above.p99_us, t)
    return _with_intervals(AtRecall(target, "interpolated", p50, p99, below, above), below, above)


def _nearest_rank(rows: np.ndarray, q: float) -> np.ndarray:
    """Per row of ``rows`` (resamples × samples), its nearest-rank ``q`` percentile."""
    k = max(0, math.ceil(q / 100.0 * rows.shape[1]) - 1)
    out: np.ndarray = np.partition(rows, k, axis=1)[:, k]
    return out


def _draws(below: Point, above: Point, target: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(p50, p99) read at ``target`` on each of :data:`ragbench.intervals.RESAMPLES` resamples."""
    lb, la, rb, ra = below.latency_us, above.latency_us, below.recalls, above.recalls
    if lb is None or la is None or rb is None or ra is None:
        return None
    if not (len(lb) == len(la) and len(rb) == len(ra)) or not len(lb) or not len(rb):
        return None  # not the same queries: nothing to pair
    rng = np.random.default_rng(0)  # one seed for every index: the same queries, paired
    at = rng.integers(0, len(lb), size=(intervals.RESAMPLES, len(lb)))
    rec_at = at if len(rb) == len(lb) else rng.integers(0, len(rb), size=(at.shape[0], len(rb)))
    if below is above:
        t = np.zeros(at.shape[0])
    else:
        low, high = rb[rec_at].mean(axis=1), ra[rec_at].mean(axis=1)
        measured = (target - below.recall) / (above.recall - below.recall)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(high > low, np.clip((target - low) / (high - low), 0.0, 1.0), measured)
    xb, xa = lb[at], la[at]
    p50 = _lerp(_nearest_rank(xb, 50), _nearest_rank(xa, 50), t)  # type: ignore[arg-type]
    p99 = _lerp(_nearest_rank(xb, 99), _nearest_rank(xa, 99), t)  # type: ignore[arg-type]
    return np.asarray(p50), np.asarray(p99)


def _middle(draws: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - intervals.LEVEL) / 2.0 * 100.0
    low, high = np.percentile(draws, [tail, 100.0 - tail])
    return float(low), float(high)


def _with_intervals(read: AtRecall, below: Point, above: Point) -> AtRecall:
    """``read`` with its bootstrap intervals when both points carry their samples."""
    draws = _draws(below, above, read.target)
    if draws is None:
        return read
    p50, p99 = draws
    return AtRecall(
        read.target, read.how, read.p50_us, read.p99_us, read.below, read.above,
        _middle(p50), _middle(p99), p50,
    )  # fmt: skip


def ratio_interval(at: AtRecall, ref: AtRecall) -> tuple[float, float] | None:
    """95 % interval of ``at.p50_us / ref.p50_us`` from their paired resamples (``None``: none)."""
    a, b = at.p50_draws, ref.p50_draws
    if a is None or b is None or a.shape != b.shape:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return _middle(a / b)


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
    text = f"{name} {_us(at.p50_us)}{_ci(at.p50_ci)} / {_us(at.p99_us)}{_ci(at.p99_ci)}"
    if ref is not None and ref[0] != name:
        ratio = ratio_interval(at, ref[1])
        span = "" if ratio is None else f" [{ratio[0]:.2f}–{ratio[1]:.2f}]"
        text += f" ({at.p50_us / ref[1].p50_us:.2f}×{span} {ref[0]})"
    return text


def _ci(ci: tuple[float, float] | None) -> str:
    """`` [412–488]``: an interval in µs as the figures are written ("" without one)."""
    if ci is None:
        return ""
    return f" [{_us(ci[0]).removesuffix(' µs')}–{_us(ci[1]).removesuffix(' µs')}]"


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
        with_ci = any(r.p50_ci is not None for r in reads.values())
        lines.append(
            f"{label}: at recall {target:g}, p50 / p99 interpolated on each index's frontier"
            + (" [95 % bootstrap interval over the queries]" if with_ci else "")
            + ": "
            + "; ".join(cells)
        )
    return lines

"""Confidence intervals for latency statistics and their ratios: the bootstrap.

A percentile of a few hundred requests moves from run to run; a table that
prints ``186 µs`` without saying by how much invites reading noise as a
difference. Every statistic here comes with a percentile-bootstrap interval:

- over requests, when the samples come from one repetition;
- over repetitions and then requests within each (a two-level, hierarchical
  bootstrap), when they come from several (``--repeat N``): the variation
  between repetitions -- a warmer cache, a busier neighbour -- is part of
  the interval, not hidden in it;
- over runs that each weigh the same (:func:`runs_point`, :func:`runs_ratio`,
  what ``ragbench diff`` uses): a side's statistic is the mean of its runs'
  statistics, so a run of 16 864 rounds counts as much as one of 28, and the
  interval resamples runs, then samples within each chosen run;
- over pairs of runs made at the same time (:func:`paired_ratio`, ``ragbench diff
  --paired``): each pair's B / A, and a Student t interval of the mean of their
  logarithms, so a drift of the machine between pairs reaches both runs of a pair and
  cancels in its ratio.

Percentiles are nearest-rank, as everywhere in ragbench
(:class:`ragbench.timing.Stats`). The resampling is seeded, so a table
renders the same interval every time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .errors import ConfigError

__all__ = [
    "LEVEL",
    "RESAMPLES",
    "STATS",
    "Interval",
    "bootstrap",
    "describe",
    "distribution",
    "paired_ratio",
    "point",
    "ratio",
    "runs_point",
    "runs_ratio",
    "t_quantile",
]

#: Confidence level of every interval.
LEVEL = 0.95
#: Bootstrap resamples per interval.
RESAMPLES = 1000
#: Statistics an interval can be computed for.
STATS = ("mean", "p50", "p90", "p95", "p99")

_CHUNK = 2_000_000  # resampled values held at once


class Interval(NamedTuple):
    """A statistic and its confidence interval (same unit as the samples)."""

    value: float
    low: float
    high: float

    @property
    def half_width_pct(self) -> float:
        """Half the interval's width as a percentage of the value (NaN when undefined)."""
        if not self.value or self.value != self.value:
            return float("nan")
        return 100.0 * (self.high - self.low) / 2.0 / abs(self.value)


def _stat_rows(values: np.ndarray, stat: str) -> np.ndarray:
    """The statistic of each row of ``values`` (nearest-rank percentiles)."""
    if stat == "mean":
        out: np.ndarray = values.mean(axis=1)
        return out
    if stat not in STATS:
        raise ConfigError(f"unknown statistic {stat!r}; use one of {', '.join(STATS)}")
    # nearest rank: the smallest value with at least q % of the samples at or below it
    n = values.shape[1]
    k = max(0, math.ceil(float(stat[1:]) / 100.0 * n) - 1)
    part: np.ndarray = np.partition(values, k, axis=1)[:, k]
    return part


def _resample_indices(
    rng: np.random.Generator, groups: list[np.ndarray], n: int, rows: int
) -> np.ndarray:
    """(rows, n) indices: repetitions drawn with replacement, then requests within each."""
    if len(groups) == 1:
        return rng.integers(0, n, size=(rows, n))
    sizes = {len(g) for g in groups}
    if len(sizes) == 1:  # repetitions of one size (the usual case): all at once
        members = np.stack(groups)
        size = sizes.pop()
        picks = rng.integers(0, len(groups), size=(rows, len(groups), 1))
        within = rng.integers(0, size, size=(rows, len(groups), size))
        return members[picks, within].reshape(rows, -1)
    out = np.empty((rows, n), dtype=np.int64)
    picks = rng.integers(0, len(groups), size=(rows, len(groups)))
    for r in range(rows):
        chosen = [groups[g] for g in picks[r]]
        parts = [members[rng.integers(0, len(members), size=len(members))] for members in chosen]
        drawn = np.concatenate(parts)
        # repetitions of different sizes: keep n draws so every row has one length
        out[r] = drawn[:n] if drawn.size >= n else rng.choice(drawn, size=n)
    return out


def _groups(n: int, groups: np.ndarray | None) -> list[np.ndarray]:
    if groups is None:
        return [np.arange(n)]
    labels = np.asarray(groups)
    if labels.shape != (n,):
        raise ConfigError(f"groups: expected {n} labels, got shape {labels.shape}")
    return [np.flatnonzero(labels == g) for g in np.unique(labels)]


def distribution(
    samples: np.ndarray,
    stat: str,
    *,
    groups: np.ndarray | None = None,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> np.ndarray:
    """The bootstrap distribution (``resamples`` values) of ``stat`` of ``samples``."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    n = x.size
    if n == 0:
        return np.full(resamples, np.nan)
    rng = np.random.default_rng(seed)
    parts = _groups(n, groups)
    out = np.empty(resamples)
    step = max(1, _CHUNK // n)
    for lo in range(0, resamples, step):
        rows = min(step, resamples - lo)
        out[lo : lo + rows] = _stat_rows(x[_resample_indices(rng, parts, n, rows)], stat)
    return out


def _interval(value: float, dist: np.ndarray, level: float) -> Interval:
    if not np.isfinite(dist).any():
        return Interval(value, float("nan"), float("nan"))
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.nanpercentile(dist, [tail, 100.0 - tail])
    return Interval(value, float(low), float(high))


def point(samples: np.ndarray, stat: str) -> float:
    """``stat`` of ``samples`` (nearest-rank percentiles); NaN when there are none."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    return float(_stat_rows(x[None, :], stat)[0]) if x.size else float("nan")


def bootstrap(
    samples: np.ndarray,
    stat: str = "p50",
    *,
    groups: np.ndarray | None = None,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``stat`` of ``samples`` with its percentile-bootstrap interval.

    ``groups`` labels each sample's repetition; with more than one, the
    resampling draws repetitions first, then samples within each.
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    if x.size == 0:
        nan = float("nan")
        return Interval(nan, nan, nan)
    value = point(x, stat)
    dist = distribution(x, stat, groups=groups, resamples=resamples, seed=seed)
    return _interval(value, dist, level)


def ratio(
    base: np.ndarray,
    other: np.ndarray,
    stat: str = "p50",
    *,
    base_groups: np.ndarray | None = None,
    other_groups: np.ndarray | None = None,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``stat(other) / stat(base)`` with its interval (the two resampled independently)."""
    a, b = point(base, stat), point(other, stat)
    da = distribution(base, stat, groups=base_groups, resamples=resamples, seed=seed)
    db = distribution(other, stat, groups=other_groups, resamples=resamples, seed=seed + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _interval(b / a if a else float("nan"), db / da, level)


def runs_point(runs: Sequence[np.ndarray], stat: str) -> float:
    """The mean over ``runs`` (1-D arrays of samples, one per run) of each run's ``stat``.

    Every run weighs the same, whatever its number of samples; NaN without runs.
    """
    values = [point(r, stat) for r in runs if np.asarray(r).size]
    return float(np.mean(values)) if values else float("nan")


def runs_distribution(
    runs: Sequence[np.ndarray], stat: str, *, resamples: int = RESAMPLES, seed: int = 0
) -> np.ndarray:
    """The bootstrap distribution of :func:`runs_point`: runs drawn with replacement, then samples.

    Each run's own bootstrap distribution of ``stat`` is drawn once
    (``resamples`` values over its samples); a resample of the side picks as
    many runs as there are, with replacement, takes for each pick an
    independent value of that run's distribution (a fresh resample of its
    samples) and averages them. One run: its plain bootstrap distribution.
    """
    parts = [np.asarray(r, dtype=np.float64).ravel() for r in runs]
    parts = [r for r in parts if r.size]
    if len(parts) <= 1:
        return distribution(
            parts[0] if parts else np.empty(0), stat, resamples=resamples, seed=seed
        )
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**31, size=len(parts))
    # (runs, resamples): each run's statistic over its own resampled samples
    each = np.stack(
        [
            distribution(r, stat, resamples=resamples, seed=int(s))
            for r, s in zip(parts, seeds, strict=True)
        ]
    )
    picks = rng.integers(0, len(parts), size=(resamples, len(parts)))
    draws = rng.integers(0, resamples, size=(resamples, len(parts)))
    out: np.ndarray = each[picks, draws].mean(axis=1)
    return out


def runs_ratio(
    base: Sequence[np.ndarray],
    other: Sequence[np.ndarray],
    stat: str = "p50",
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``runs_point(other) / runs_point(base)`` with its interval (each side a list of runs).

    The sides are resampled independently by :func:`runs_distribution`;
    one run per side gives the same interval as :func:`ratio` without groups.
    """
    a, b = runs_point(base, stat), runs_point(other, stat)
    da = runs_distribution(base, stat, resamples=resamples, seed=seed)
    db = runs_distribution(other, stat, resamples=resamples, seed=seed + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _interval(b / a if a else float("nan"), db / da, level)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (``p`` > 0.5) of Student's t distribution with ``df`` degrees of freedom.

    Bisection on the distribution function, which is 1/2 plus the integral of the density
    from 0 (Simpson's rule on 4 001 points: far finer than the 4 digits an interval needs).
    """
    if not 0.5 < p < 1.0 or df < 1:
        raise ConfigError(f"t quantile: need 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        t = np.linspace(0.0, x, 4001)
        dens = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df))
        h = x / 4000
        simpson = h / 3 * (dens[0] + dens[-1] + 4 * dens[1:-1:2].sum() + 2 * dens[2:-1:2].sum())
        return 0.5 + float(simpson)

    low, high = 0.0, 1.0
    while cdf(high) < p:  # df = 1 at 97.5 %: 12.7
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def paired_ratio(
    pairs: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]],
    stat: str = "p50",
    *,
    level: float = LEVEL,
) -> Interval:
    """B / A from pairs of runs made at the same time, with a paired t interval.

    Each pair is (A's runs, B's runs) -- one run each, or a record's repetitions each
    (:func:`runs_point` of them); its ratio is ``r_i = stat(B_i) / stat(A_i)``. The value
    is the geometric mean of the ``r_i``; the interval is ``exp(mean ± t · sd / sqrt(n))``
    of their logarithms (Student t, ``n - 1`` degrees of freedom). A slowdown of the
    machine that reaches both runs of a pair cancels in ``r_i``; what is left -- noise
    within each run, differences between processes -- is the spread of the ``r_i``, and a
    t interval is honest about it with a handful of pairs, where a bootstrap over so few
    values would come out too narrow. Fewer than two pairs: NaN bounds.
    """
    sides = np.array([(runs_point(a, stat), runs_point(b, stat)) for a, b in pairs]).reshape(-1, 2)
    nan = float("nan")
    if sides.size == 0 or not (np.isfinite(sides).all() and (sides > 0).all()):
        return Interval(nan, nan, nan)  # a run without samples, or a zero time
    logs = np.log(sides[:, 1] / sides[:, 0])
    mean = float(logs.mean())
    if logs.size < 2:
        return Interval(math.exp(mean), nan, nan)
    half = t_quantile((1 + level) / 2, logs.size - 1) * float(logs.std(ddof=1)) / logs.size**0.5
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def describe(groups: np.ndarray | None) -> str:
    """What an interval was resampled over, for a table footer."""
    reps = 1 if groups is None else len(np.unique(groups))
    over = "requests" if reps <= 1 else f"{reps} repetitions, then requests within each"
    return f"{int(LEVEL * 100)} % bootstrap intervals ({RESAMPLES} resamples over {over})"

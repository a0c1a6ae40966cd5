"""Stamping a request's stages (:func:`run_stages`), summarizing samples (:class:`Stats`), set-up times.

Statistics are derived from the raw samples, never stored instead of them.
Percentiles use the nearest-rank method: every reported percentile is a
latency that was actually observed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns
from typing import Any

import numpy as np

__all__ = ["PERCENTILES", "SetupTimes", "Stats", "run_stages", "run_stages_cpu"]

PERCENTILES = (50, 90, 95, 99)


def run_stages(stages: Sequence[Callable[[Any], None]], ctx: Any, stamps: list[int]) -> None:
    """Call every stage on ``ctx``, writing ``len(stages) + 1`` stamps into ``stamps``.

    ``stamps[j + 1] - stamps[j]`` is the time of stage ``j`` in nanoseconds.
    ``stamps`` must have room for ``len(stages) + 1`` values; it is reused
    across requests so the loop allocates nothing.
    """
    clock = perf_counter_ns
    j = 0
    stamps[0] = clock()
    for stage in stages:
        stage(ctx)
        j += 1  # noqa: SIM113 - cheaper than enumerate's tuples on the hot path
        stamps[j] = clock()


def run_stages_cpu(
    stages: Sequence[Callable[[Any], None]], ctx: Any, stamps: list[int], cpu_stamps: list[int]
) -> None:
    """:func:`run_stages` that also stamps the calling thread's CPU time (``thread_time_ns``).

    ``cpu_stamps[j + 1] - cpu_stamps[j]`` is the CPU time stage ``j`` used in
    this thread: about its wall time for a CPU-bound stage (a sort, a codec),
    about 0 for one that waits (a socket, an LLM). A ``thread_time_ns`` call
    costs ~0.25 µs here, so this mode is off unless asked for.
    """
    clock = perf_counter_ns
    cpu = thread_time_ns
    j = 0
    cpu_stamps[0] = cpu()
    stamps[0] = clock()
    for stage in stages:
        stage(ctx)
        j += 1  # noqa: SIM113
        stamps[j] = clock()
        cpu_stamps[j] = cpu()


@dataclass(frozen=True, slots=True)
class Stats:
    """Summary of raw nanosecond samples (nearest-rank percentiles)."""

    count: int
    mean_ns: float
    p50_ns: float
    p90_ns: float
    p95_ns: float
    p99_ns: float
    max_ns: float
    min_ns: float

    @classmethod
    def from_samples(cls, samples_ns: Any) -> Stats:
        """Summarize a 1-D array of nanosecond samples."""
        arr = np.asarray(samples_ns, dtype=np.float64).ravel()
        if arr.size == 0:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan, nan, nan)
        pct = np.percentile(arr, PERCENTILES, method="inverted_cdf")
        return cls(
            count=int(arr.size),
            mean_ns=float(arr.mean()),
            p50_ns=float(pct[0]),
            p90_ns=float(pct[1]),
            p95_ns=float(pct[2]),
            p99_ns=float(pct[3]),
            max_ns=float(arr.max()),
            min_ns=float(arr.min()),
        )

    def as_dict(self, unit: str = "us") -> dict[str, float | int]:
        """The statistics in ``unit`` (``ns``, ``us`` or ``ms``)."""
        scale = {"ns": 1.0, "us": 1e-3, "ms": 1e-6}[unit]
        return {
            "count": self.count,
            f"mean_{unit}": self.mean_ns * scale,
            f"p50_{unit}": self.p50_ns * scale,
            f"p90_{unit}": self.p90_ns * scale,
            f"p95_{unit}": self.p95_ns * scale,
            f"p99_{unit}": self.p99_ns * scale,
            f"max_{unit}": self.max_ns * scale,
            f"min_{unit}": self.min_ns * scale,
        }


class SetupTimes:
    """Set-up steps (model load, index build, JIT compile, warm-up, ...) in nanoseconds.

    One way to time set-up everywhere: ``times.time("index_build", index.build, X)``
    runs the call and adds its ``perf_counter_ns`` duration to that step;
    ``add`` adds a duration measured elsewhere. Steps keep their first-use
    order. Never mixed into request latency.
    """

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns: dict[str, int] = {}

    def add(self, step: str, ns: int) -> None:
        self.ns[step] = self.ns.get(step, 0) + int(ns)

    def time(self, step: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)``, add its duration to ``step``, return its value."""
        t0 = perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self.add(step, perf_counter_ns() - t0)

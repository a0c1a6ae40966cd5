"""Nanosecond stage timing, usable on its own in a production request path.

The hot loop stamps ``time.perf_counter_ns()`` once between stages (n + 1
calls for n stages, no context managers, no dict writes) and stores the
stamps in a preallocated row; per-stage times are the differences, so they
add up to the request total exactly.

Statistics are derived from the raw samples, never stored instead of them.
Percentiles use the nearest-rank method: every reported percentile is a
latency that was actually observed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns
from typing import Any

import numpy as np

from .errors import ConfigError, InputError

__all__ = ["SetupTimes", "StageTimer", "Stats", "run_stages", "run_stages_cpu"]

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


class StageTimer:
    """Per-request, per-stage nanosecond samples for a fixed list of stage names.

    For a service: call :meth:`start` when a request arrives, :meth:`mark`
    after each stage (in order), and read :meth:`stats` or :meth:`samples`
    whenever you like. Storage grows in blocks; nothing is lost or averaged.

    >>> timer = StageTimer(["retrieve", "rerank"])
    >>> timer.start(); ...; timer.mark(); ...; timer.mark()

    Each stored request can also be handed on, after its last stamp (so it
    adds nothing to any stage time): ``on_request(names, stamps, attributes)``
    is called once per request, from the last :meth:`mark` (or :meth:`add`),
    with the stage names, the request's ``len(names) + 1`` ``perf_counter_ns``
    stamps (a list the timer reuses: copy it to keep it) and what
    :meth:`annotate` added to this request (or ``None``). ``otel=`` takes a
    :class:`ragbench.otel.TraceExporter` and exports every request as an
    OpenTelemetry trace whose stage spans start and end at these stamps::

        timer = StageTimer(["embed", "retrieve", "generate"], otel=TraceExporter())

    Without either, a request costs what it always did (plus one ``None``
    check when it is stored).
    """

    __slots__ = (
        "_names",
        "_rows",
        "_stamps",
        "_next",
        "_count",
        "_block",
        "_on_request",
        "_attributes",
    )

    def __init__(
        self,
        names: Sequence[str],
        *,
        block: int = 1024,
        on_request: Callable[[list[str], Sequence[int], dict[str, Any] | None], None] | None = None,
        otel: Any = None,
    ) -> None:
        names = list(names)
        if not names or len(set(names)) != len(names):
            raise ConfigError("StageTimer needs a non-empty list of distinct stage names")
        if on_request is not None and otel is not None:
            raise ConfigError("StageTimer takes on_request or otel, not both")
        if otel is not None:
            on_request = otel.on_request
        if on_request is not None and not callable(on_request):
            raise ConfigError(f"StageTimer on_request must be callable, got {on_request!r}")
        self._names = names
        self._block = block
        self._rows = np.zeros((block, len(names)), dtype=np.int64)
        self._stamps = [0] * (len(names) + 1)
        self._next = 0
        self._count = 0
        self._on_request = on_request
        self._attributes: dict[str, Any] | None = None

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def start(self) -> None:
        """Begin a request."""
        self._stamps[0] = perf_counter_ns()
        self._next = 1

    def mark(self) -> None:
        """End the next stage of the current request; the last mark stores the request."""
        n = self._next
        if n == 0:
            raise InputError("StageTimer.mark() called before start()")
        self._stamps[n] = perf_counter_ns()
        if n == len(self._names):
            self.add(self._stamps)
            self._next = 0
        else:
            self._next = n + 1

    def add(self, stamps: Sequence[int]) -> None:
        """Store one request from its ``len(names) + 1`` stamps."""
        if len(stamps) != len(self._names) + 1:
            raise InputError(
                f"expected {len(self._names) + 1} stamps for {len(self._names)} stages, got {len(stamps)}"
            )
        if self._count == self._rows.shape[0]:
            self._rows = np.concatenate(
                [self._rows, np.zeros((self._block, len(self._names)), dtype=np.int64)]
            )
        self._rows[self._count] = np.diff(np.asarray(stamps, dtype=np.int64))
        self._count += 1
        hook = self._on_request
        if hook is not None:
            attributes, self._attributes = self._attributes, None
            hook(self._names, stamps, attributes)

    def annotate(self, attributes: Mapping[str, Any]) -> None:
        """Attributes of the current request for the ``on_request``/``otel`` hook (payload size, ...).

        They go with the next request stored, then are forgotten; without a
        hook they are dropped.
        """
        if self._on_request is None:
            return
        if self._attributes is None:
            self._attributes = dict(attributes)
        else:
            self._attributes.update(attributes)

    def samples(self, name: str | None = None) -> np.ndarray:
        """Raw samples: int64 ``(requests, stages)``, or ``(requests,)`` for one stage."""
        rows = self._rows[: self._count]
        if name is None:
            return rows.copy()
        try:
            j = self._names.index(name)
        except ValueError:
            raise InputError(f"unknown stage {name!r}; stages: {', '.join(self._names)}") from None
        return rows[:, j].copy()

    def stats(self) -> dict[str, Stats]:
        """Per-stage statistics plus ``"total"``."""
        rows = self._rows[: self._count]
        out = {name: Stats.from_samples(rows[:, j]) for j, name in enumerate(self._names)}
        out["total"] = Stats.from_samples(rows.sum(axis=1))
        return out

    def __len__(self) -> int:
        return self._count

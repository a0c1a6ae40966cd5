"""Nanosecond stage timing, usable on its own in a production request path.

The hot loop stamps ``time.perf_counter_ns()`` once between stages (n + 1
calls for n stages, no context managers, no dict writes) and stores the
stamps in a preallocated row; per-stage times are the differences, so they
add up to the request total exactly.

Statistics are derived from the raw samples, never stored instead of them.
Percentiles use the nearest-rank method: every reported percentile is a
latency that was actually observed.

The package's parts: :mod:`~ragbench.timing.stages` (the stamping loop,
:class:`Stats`, :class:`SetupTimes`), :mod:`~ragbench.timing.timer`
(:class:`StageTimer` and its :class:`Request` handles),
:mod:`~ragbench.timing.background` (:class:`Background`) and
:mod:`~ragbench.timing.parts` (:class:`Parts`: one call of a backend split
into three named, timed parts, the shape every backend that splits its
call returns).
"""

from __future__ import annotations

from .background import Background
from .background import log as log
from .parts import Parts
from .stages import PERCENTILES, SetupTimes, Stats, run_stages, run_stages_cpu
from .timer import Hook, Request, StageTimer

__all__ = [
    "PERCENTILES",
    "Background",
    "Hook",
    "Parts",
    "Request",
    "SetupTimes",
    "StageTimer",
    "Stats",
    "run_stages",
    "run_stages_cpu",
]

"""Offered traffic (``ragbench load``): response time as the offered rate grows, open loop.

Requests arrive on a schedule fixed in advance (Poisson or evenly spaced at
the target rate) whether or not the previous one has finished. Response time
is measured from each request's *scheduled* arrival, so time spent waiting
behind a slow request counts (no coordinated omission); service time is the
request's own run time. One worker serves requests in arrival order, like a
single-threaded Python service process; the rate at which response time
takes off is that process's capacity.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import ConfigError
from .records import Collector, new_record
from .timing import Stats

__all__ = ["arrivals", "load_points", "run_open_loop"]


def arrivals(rate: float, count: int, *, kind: str = "poisson", seed: int = 0) -> np.ndarray:
    """Scheduled arrival offsets in ns for ``count`` requests at ``rate`` per second."""
    if rate <= 0:
        raise ConfigError(f"a rate must be > 0 requests per second, got {rate}")
    if kind == "poisson":
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    elif kind == "uniform":
        gaps = np.full(count, 1.0 / rate)
    else:
        raise ConfigError(f"arrivals must be 'poisson' or 'uniform', got {kind!r}")
    return (np.cumsum(gaps) * 1e9).astype(np.int64)


def run_open_loop(
    request: Callable[[int], None], schedule_ns: np.ndarray, *, max_seconds: float | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Serve requests on ``schedule_ns``; return (response ns, service ns, served count)."""
    clock = time.perf_counter_ns
    n = len(schedule_ns)
    response = np.empty(n, dtype=np.int64)
    service = np.empty(n, dtype=np.int64)
    start = clock()
    deadline = start + int(max_seconds * 1e9) if max_seconds else None
    served = 0
    for i in range(n):
        due = start + int(schedule_ns[i])
        now = clock()
        if now < due:
            time.sleep((due - now) / 1e9)
        t0 = clock()
        request(i)
        t1 = clock()
        response[i] = t1 - due if t1 > due else t1 - t0
        service[i] = t1 - t0
        served += 1
        if deadline is not None and t1 > deadline:
            break
    return response[:served], service[:served], served


def load_points(
    pipeline: Any,
    rates: Sequence[float],
    *,
    duration_s: float,
    kind: str = "poisson",
    seed: int = 0,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """One record per offered rate; the pipeline must be set up and warm."""
    emit = Collector(on_point, progress)
    counter = 0
    for rate in rates:
        count = max(1, int(round(rate * duration_s)))
        schedule = arrivals(rate, count, kind=kind, seed=seed)
        base = counter

        def req(i: int, base: int = base) -> None:
            pipeline.request(base + i)

        t0 = time.perf_counter_ns()
        response, service, served = run_open_loop(req, schedule, max_seconds=duration_s * 3 + 5)
        wall = (time.perf_counter_ns() - t0) / 1e9
        counter += served
        resp = Stats.from_samples(response)
        serv = Stats.from_samples(service)
        fields = {
            "label": pipeline.label,
            "arrivals": kind,
            "offered_qps": float(rate),
            "achieved_qps": served / wall if wall > 0 else float("nan"),
            "requests": int(served),
            "scheduled": int(count),
            "response_p50_us": resp.p50_ns / 1e3,
            "response_p90_us": resp.p90_ns / 1e3,
            "response_p99_us": resp.p99_ns / 1e3,
            "service_p50_us": serv.p50_ns / 1e3,
            "service_p99_us": serv.p99_ns / 1e3,
            "simulated": list(pipeline.simulated),
            "config": pipeline.config,
        }
        emit(new_record("load", fields))
    return emit.records

"""Offered traffic (``ragbench load``): how response time grows with the offered load.

Two ways to offer load:

- **open loop** (default): requests arrive on a schedule fixed in advance
  (Poisson, uniform, or gamma with a burstiness factor) whether or not
  earlier ones have finished, as users arriving at a service do. Response
  time counts from each request's *scheduled* arrival, so waiting behind
  slow requests counts (no coordinated omission).
- **closed loop**: ``concurrency`` clients each send their next request as
  soon as their last one finished; throughput follows from the service
  time. Every table, record and plot labels it closed-loop.

Requests are served by a pool of workers: threads sharing one set-up
pipeline (the stages that release the GIL -- faiss, hnswlib, numba -- really
overlap), or processes each with its own pipeline, like the worker processes
of a Python service (:class:`ThreadWorkers`, :class:`ProcessWorkers`), or
asyncio worker processes each serving many requests at once on one event
loop (:class:`ragbench.aioworkers.AsyncWorkers`: their closed loop runs in
the workers, ``concurrency`` clients per loop, and each run's event-loop lag
is summarised in the record). The
dispatcher hands a due request to an idle worker at once, or queues it in a
bounded queue; a request arriving to a full queue is **rejected**, one still
queued or unfinished ``timeout`` after its arrival is **timed out**, one the
service answered with an error (a dead far side, say) has **failed**; every
scheduled request ends as exactly one of completed, timed out, rejected or
failed.
Per request it keeps the scheduled, dispatch (a worker started it) and
finish times and the pipeline's per-stage stamps.

Each level also says whether the load generator itself kept up
(``generator_ok``, with ``generator_note`` saying why not): its own CPU
(the calling thread's, and the workers' time spent taking and admitting
requests), the dispatch delay of requests that found a worker idle against
the inter-arrival time, the level's wall time against ``duration + timeout
+ 1 s``, and any worker that died or hung (``dead_workers``,
``stuck_workers``: its requests count as failed). A level where it did not
measures the client, not the system.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import numpy as np

from . import intervals
from .errors import ConfigError
from .pipeline import Pipeline, RequestRecord
from .records import Collector, new_record
from .timing import Stats
from .validate import positive_int, positive_number
from .workers import COMPLETED, FAILED, PENDING, REJECTED, TIMED_OUT, OpenRun, WorkerFault

__all__ = [
    "ARRIVALS",
    "COMPLETED",
    "FAILED",
    "REJECTED",
    "TIMED_OUT",
    "LoadOptions",
    "Traffic",
    "arrivals",
    "closed_loop",
    "load_points",
    "merge_concurrent",
    "open_loop",
    "summarize",
    "warm",
]

ARRIVALS = ("poisson", "uniform", "gamma")

#: Lead time before the first scheduled arrival, so the first one is not late by construction.
LEAD_NS = 2_000_000


def arrivals(
    rate: float, count: int, *, kind: str = "poisson", burstiness: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Scheduled arrival offsets in ns for ``count`` requests at ``rate`` per second.

    ``poisson``: exponential gaps; ``uniform``: even gaps; ``gamma``: gamma
    gaps with shape ``burstiness`` and the same mean (1 is Poisson, below 1
    burstier, above 1 more regular), as vLLM's ``bench serve`` does.
    """
    rate = positive_number("arrivals", "rate", rate)
    if kind not in ARRIVALS:
        raise ConfigError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {kind!r}")
    rng = np.random.default_rng(seed)
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate, size=count)
    elif kind == "uniform":
        gaps = np.full(count, 1.0 / rate)
    else:
        shape = positive_number("arrivals", "burstiness", burstiness)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=count)
    return (np.cumsum(gaps) * 1e9).astype(np.int64)


@dataclass(frozen=True)
class LoadOptions:
    """How load is offered and judged (see the module docstring)."""

    duration_s: float = 5.0
    arrivals: str = "poisson"
    burstiness: float = 1.0
    timeout_s: float = 10.0
    queue_size: int = 1024
    seed: int = 0
    slo_ms: float | None = None
    #: repetitions of each level (taking turns with the other configurations)
    repeat: int = 1
    #: dispatch-delay p99 (µs) of requests that found a worker idle, above
    #: which a table warns that the load generator itself fell behind
    lag_warn_us: float = 1000.0

    def __post_init__(self) -> None:
        positive_number("load", "duration_s", self.duration_s)
        positive_number("load", "timeout_s", self.timeout_s)
        positive_int("load", "queue_size", self.queue_size, lo=0)
        positive_number("load", "burstiness", self.burstiness)
        positive_int("load", "repeat", self.repeat)
        if self.arrivals not in ARRIVALS:
            raise ConfigError(
                f"arrivals must be one of {', '.join(ARRIVALS)}, got {self.arrivals!r}"
            )
        if self.slo_ms is not None:
            positive_number("load", "slo_ms", self.slo_ms)


def warm(pool: Any, per_worker: int) -> None:
    """Send ``per_worker`` requests through each worker of ``pool`` (connections made, caches warm); results dropped."""
    if per_worker <= 0:
        return
    pending = 0
    for w in range(pool.size):
        for i in range(per_worker):
            pool.dispatch(w, -1, w * per_worker + i)
            pending += 1
    while pending:
        pending -= len(pool.poll(60.0))


# ---------------------------------------------------------------- one measured run


@dataclass
class Traffic:
    """What one run of offered load did, request by request (``ns`` are ``perf_counter_ns``).

    ``dispatch_ns`` is when a worker started a request (-1 if none did);
    ``idle`` marks requests a worker was already waiting for when they arrived.
    """

    start_ns: int
    end_ns: int
    scheduled_ns: np.ndarray
    dispatch_ns: np.ndarray
    finish_ns: np.ndarray
    outcome: np.ndarray
    idle: np.ndarray
    records: list[RequestRecord | None]
    errors: list[str] = field(default_factory=list)
    #: CPU time of the thread that offered the load (its own work, not the workers')
    generator_cpu_ns: int = 0
    #: time the workers spent taking and admitting requests (open loop)
    admission_ns: int = 0
    #: workers that died or hung: ``{"worker", "pid", "what": "died"|"stuck", "detail"}``
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: event-loop lag samples (ns) of asyncio workers over the run, else None
    loop_lag_ns: np.ndarray | None = None


def open_loop(
    pool: Any,
    schedule_ns: np.ndarray,
    *,
    timeout_s: float = 10.0,
    queue_size: int = 1024,
    first_request: int = 0,
) -> Traffic:
    """Offer requests at ``schedule_ns`` offsets (see :func:`arrivals`) to ``pool``; wait for all to end.

    Each idle worker takes the next request in arrival order and waits for
    its arrival itself (see :mod:`ragbench.workers`).
    """
    start = perf_counter_ns() + LEAD_NS
    due = start + np.asarray(schedule_ns, dtype=np.int64)
    run = OpenRun(
        int(timeout_s * 1e9), positive_int("load", "queue_size", queue_size, lo=0), first_request
    )
    cpu0 = time.thread_time_ns()
    board, records, errors = pool.run_open(due, run)
    return Traffic(
        start_ns=start,
        end_ns=perf_counter_ns(),
        scheduled_ns=board.due.copy(),
        dispatch_ns=board.start.copy(),
        finish_ns=board.finish.copy(),
        outcome=board.outcome.astype(np.int64),
        idle=board.idle.astype(bool),
        records=[
            r if o == COMPLETED else None for r, o in zip(records, board.outcome, strict=True)
        ],
        errors=errors,
        generator_cpu_ns=time.thread_time_ns() - cpu0,
        admission_ns=int(getattr(board, "admission_ns", 0)),
        faults=list(getattr(board, "faults", [])),
        loop_lag_ns=getattr(pool, "loop_lag_ns", None),  # asyncio workers: this run's
    )


class _Clients:
    """Closed-loop bookkeeping: hands requests to idle workers, queues the rest, expires the queue."""

    def __init__(self, pool: Any, timeout_ns: int, first_request: int) -> None:
        self.pool, self.timeout_ns = pool, timeout_ns
        self.idle = list(range(pool.size))
        self.waiting: deque[int] = deque()
        self.in_flight = 0
        self.next_request = first_request
        self.scheduled: list[int] = []
        self.dispatch: list[int] = []
        self.finish: list[int] = []
        self.outcome: list[int] = []
        self.records: list[RequestRecord | None] = []
        self.errors: list[str] = []

    def send(self, now: int) -> None:
        """A client sends a request now."""
        slot = len(self.scheduled)
        self.scheduled.append(now)
        self.dispatch.append(-1)
        self.finish.append(-1)
        self.outcome.append(PENDING)
        self.records.append(None)
        if self.idle:
            self._start(self.idle.pop(), slot)
        else:
            self.waiting.append(slot)

    def _start(self, worker: int, slot: int) -> None:
        self.pool.dispatch(worker, slot, self.next_request)
        self.next_request += 1
        self.in_flight += 1

    def expire(self, now: int) -> int:
        """Time out requests that waited too long; return how many (their clients send again)."""
        gone = 0
        while self.waiting and self.scheduled[self.waiting[0]] + self.timeout_ns <= now:
            self.outcome[self.waiting.popleft()] = TIMED_OUT
            gone += 1
        return gone

    def collect(self, timeout_s: float) -> int:
        """Record finished requests; return how many (their clients send again)."""
        results = self.pool.poll(timeout_s)
        for res in results:
            s = res.slot
            self.dispatch[s], self.finish[s] = res.dispatch_ns, res.finish_ns
            if res.error is not None:
                self.outcome[s] = FAILED
                self.errors.append(res.error)
            elif res.finish_ns - self.scheduled[s] > self.timeout_ns:
                self.outcome[s] = TIMED_OUT
            else:
                self.outcome[s] = COMPLETED
                self.records[s] = res.record
            self.in_flight -= 1
            self.idle.append(res.worker)
        while self.idle and self.waiting:
            self._start(self.idle.pop(), self.waiting.popleft())
        return len(results)


def closed_loop(
    pool: Any,
    concurrency: int,
    duration_s: float,
    *,
    timeout_s: float = 10.0,
    first_request: int = 0,
) -> Traffic:
    """``concurrency`` clients, each sending its next request when its last one ended, for ``duration_s``.

    A pool with ``serve_closed`` (threads, processes) runs each worker's
    share of the clients inside the worker, records sent once at the end, so
    this process does no work per request; a worker's clients wait for that
    worker only. A pool with ``run_closed`` (asyncio) runs the whole level
    itself; other pools are driven from here, request by request.
    """
    concurrency = positive_int("closed loop", "concurrency", concurrency)
    duration_ns = int(positive_number("closed loop", "duration_s", duration_s) * 1e9)
    timeout_ns = int(timeout_s * 1e9)
    if not hasattr(pool, "serve_closed"):
        run_closed = getattr(pool, "run_closed", None)
        if run_closed is not None:  # the clients live in the workers (asyncio: per event loop)
            return run_closed(  # type: ignore[no-any-return]
                concurrency, duration_s, timeout_s=timeout_s, first_request=first_request
            )
        return _closed_from_here(pool, concurrency, duration_ns, timeout_ns, first_request)
    cpu0 = time.thread_time_ns()
    start = perf_counter_ns()
    res = pool.serve_closed(concurrency, duration_ns, timeout_ns, first_request)
    return Traffic(
        start_ns=start,
        end_ns=perf_counter_ns(),
        scheduled_ns=res.scheduled,
        dispatch_ns=res.dispatch,
        finish_ns=res.finish,
        outcome=res.outcome,
        idle=np.zeros(res.outcome.size, dtype=bool),
        records=res.records,
        errors=res.errors,
        generator_cpu_ns=time.thread_time_ns() - cpu0,
        faults=list(res.faults),
    )


def _closed_from_here(
    pool: Any, concurrency: int, duration_ns: int, timeout_ns: int, first_request: int
) -> Traffic:
    """The closed loop driven from this process (``dispatch`` / ``poll``), for pools without either."""
    cpu0 = time.thread_time_ns()
    start = perf_counter_ns()
    end = start + duration_ns
    c = _Clients(pool, timeout_ns, first_request)
    for _ in range(concurrency):
        c.send(start)
    while True:
        now = perf_counter_ns()
        again = c.expire(now)
        if now >= end and not (c.in_flight or c.waiting):
            break
        again += c.collect((end - now) / 1e9 if now < end else 0.05)
        now = perf_counter_ns()
        for _ in range(again if now < end else 0):
            c.send(now)
    n = len(c.scheduled)
    return Traffic(
        start_ns=start,
        end_ns=perf_counter_ns(),
        scheduled_ns=np.asarray(c.scheduled, dtype=np.int64),
        dispatch_ns=np.asarray(c.dispatch, dtype=np.int64),
        finish_ns=np.asarray(c.finish, dtype=np.int64),
        outcome=np.asarray(c.outcome, dtype=np.int64),
        idle=np.zeros(n, dtype=bool),
        records=c.records,
        errors=c.errors,
        generator_cpu_ns=time.thread_time_ns() - cpu0,
    )


def merge_concurrent(runs: Sequence[Traffic]) -> Traffic:
    """Runs offered at the same time by several load generators (each on its own clock) as one run.

    ``ragbench load --executor ray`` has each Ray actor offer its share of a
    rate; their runs are merged here before :func:`summarize`. No two clocks
    are compared: each run's times are taken relative to its own start, so
    every request is timed on the node that sent it, the merged window is the
    longest of the runs' windows, and counts and requests simply add up.
    """
    if not runs:
        raise ConfigError("merge_concurrent needs at least one run")

    def since_start(times: np.ndarray, start: int) -> np.ndarray:
        return np.where(times >= 0, times - start, times)  # -1: never started / finished

    return Traffic(
        start_ns=0,
        end_ns=max(r.end_ns - r.start_ns for r in runs),
        scheduled_ns=np.concatenate([r.scheduled_ns - r.start_ns for r in runs]),
        dispatch_ns=np.concatenate([since_start(r.dispatch_ns, r.start_ns) for r in runs]),
        finish_ns=np.concatenate([since_start(r.finish_ns, r.start_ns) for r in runs]),
        outcome=np.concatenate([r.outcome for r in runs]),
        idle=np.concatenate([r.idle for r in runs]),
        records=[rec for r in runs for rec in r.records],
        errors=[e for r in runs for e in r.errors],
        generator_cpu_ns=sum(r.generator_cpu_ns for r in runs),
        admission_ns=sum(r.admission_ns for r in runs),
        faults=[f for r in runs for f in r.faults],
    )


# ---------------------------------------------------------------- one record per run


def _us(stats: Stats) -> dict[str, float]:
    return {
        "p50": stats.p50_ns / 1e3,
        "p90": stats.p90_ns / 1e3,
        "p99": stats.p99_ns / 1e3,
        "max": stats.max_ns / 1e3,
    }


def _window_ns(run: Traffic) -> int:
    """From the start to the last arrival or finish, whichever is later."""
    last = max(
        int(run.finish_ns.max()) if run.finish_ns.size else 0,
        int(run.scheduled_ns.max()) if run.scheduled_ns.size else 0,
    )
    return max(last - run.start_ns, 1)


def summarize(
    run: Traffic | Sequence[Traffic],
    pipeline: Pipeline,
    *,
    timeout_s: float,
    slo_ms: float | None = None,
    lag_warn_us: float = 1000.0,
    workers: int = 1,
    offered_qps: float | None = None,
    duration_s: float | None = None,
) -> dict[str, Any]:
    """The fields of a load record: counts, rates, percentiles, recall and per-stage times under load.

    Several runs are repetitions of one level: counts and rates add up over
    them, percentiles pool their requests, and the p50/p99 intervals resample
    repetitions, then requests within each. ``workers``, ``offered_qps`` and
    ``duration_s`` judge whether the load generator kept up (see the module
    docstring).
    """
    runs = [run] if isinstance(run, Traffic) else list(run)
    outcome, sched, disp, fin, idle_all = (
        np.concatenate([getattr(r, f) for r in runs])
        for f in ("outcome", "scheduled_ns", "dispatch_ns", "finish_ns", "idle")
    )
    reps = np.concatenate([np.full(r.outcome.size, j) for j, r in enumerate(runs)])
    ok = outcome == COMPLETED
    window_s = sum(_window_ns(r) for r in runs) / 1e9
    response = fin[ok] - sched[ok]
    timeout_ns = int(timeout_s * 1e9)
    # every request, a failed one counted as taking the whole timeout
    response_all = np.where(ok, fin - sched, timeout_ns)
    dispatched = disp >= 0
    delay = disp[dispatched] - sched[dispatched]
    idle = idle_all & dispatched
    lag = Stats.from_samples(disp[idle] - sched[idle])
    resp, resp_all = Stats.from_samples(response), Stats.from_samples(response_all)
    service = Stats.from_samples(fin[ok] - disp[ok])
    fields: dict[str, Any] = {
        "scheduled": int(outcome.size),
        "completed": int(ok.sum()),
        "timed_out": int((outcome == TIMED_OUT).sum()),
        "rejected": int((outcome == REJECTED).sum()),
        "failed": int((outcome == FAILED).sum()),
        "achieved_qps": float(ok.sum()) / window_s,
        "window_s": window_s,
        **{f"response_{k}_us": v for k, v in _us(resp).items()},
        **{f"response_all_{k}_us": v for k, v in _us(resp_all).items()},
        "service_p50_us": service.p50_ns / 1e3,
        "service_p99_us": service.p99_ns / 1e3,
        "dispatch_delay_p50_us": Stats.from_samples(delay).p50_ns / 1e3,
        "dispatch_delay_p99_us": Stats.from_samples(delay).p99_ns / 1e3,
        "idle_dispatch_delay_p99_us": lag.p99_ns / 1e3,
        "generator_lagged": bool(lag.count and lag.p99_ns / 1e3 > lag_warn_us),
        **_loop_lag_fields(runs),
        "errors": sorted({e for r in runs for e in r.errors})[:5],
        "repeats": len(runs),
    }
    lag_us = lag.p99_ns / 1e3 if lag.count else 0.0
    fields.update(
        _generator_fields(runs, lag_us, workers, offered_qps, duration_s, timeout_s, lag_warn_us)
    )
    groups = reps[ok] if len(runs) > 1 else None
    for stat in ("p50", "p99"):
        iv = intervals.bootstrap(response, stat, groups=groups)
        fields[f"response_{stat}_us_ci"] = [iv.low / 1e3, iv.high / 1e3]
    records = [rec for r in runs for rec in r.records if rec is not None]
    fields.update(_stage_fields(records, pipeline))
    if slo_ms is not None:
        fields["slo_ms"] = slo_ms
        fields["goodput_qps"] = float((response <= slo_ms * 1e6).sum()) / window_s
    return fields


#: The thread offering load may use this share of one core before a level is invalid.
GENERATOR_MAX_CORES = 0.25
#: Workers may spend this share of their time taking and admitting requests.
ADMISSION_MAX_SHARE = 0.1
#: A level's wall time may exceed duration + timeout by this much.
OVERRUN_S = 1.0


def _generator_fields(
    runs: Sequence[Traffic],
    lag_us: float,
    workers: int,
    offered_qps: float | None,
    duration_s: float | None,
    timeout_s: float,
    lag_warn_us: float,
) -> dict[str, Any]:
    """Whether the load generator kept up at this level: the figures and, if not, why."""
    wall_s = max(sum(r.end_ns - r.start_ns for r in runs) / 1e9, 1e-9)
    own_s = sum(r.generator_cpu_ns for r in runs) / 1e9
    admission_s = sum(r.admission_ns for r in runs) / 1e9
    faults = [f for r in runs for f in r.faults]
    notes = [f"worker {f['worker']} (pid {f['pid']}) {f['detail']}" for f in faults]
    if faults:
        notes[-1] += "; its requests count as failed"
    gap_us = 1e6 / offered_qps if offered_qps else 0.0
    if lag_us > max(lag_warn_us, gap_us):
        notes.append(
            f"dispatch delay p99 {lag_us:.0f} µs with a worker idle, over "
            f"{max(lag_warn_us, gap_us):.0f} µs (the larger of {lag_warn_us:.0f} µs and the "
            f"mean inter-arrival time)"
        )
    if own_s / wall_s > GENERATOR_MAX_CORES:
        notes.append(f"the load generator's thread used {own_s / wall_s:.2f} cores")
    share = admission_s / (wall_s * workers)
    if share > ADMISSION_MAX_SHARE:
        notes.append(f"the workers spent {share:.0%} of their time taking and admitting requests")
    if duration_s is not None:
        longest = max(r.end_ns - r.start_ns for r in runs) / 1e9
        if longest > duration_s + timeout_s + OVERRUN_S:
            notes.append(
                f"the level took {longest:.1f} s, over duration + timeout + {OVERRUN_S:.0f} s"
            )
    return {
        "generator_ok": not notes,
        "generator_note": "; ".join(notes) or None,
        "generator_cpu_cores": own_s / wall_s,
        "admission_share": share,
        "admission_us_per_request": admission_s * 1e6 / max(sum(r.outcome.size for r in runs), 1),
        "dead_workers": sorted({f["worker"] for f in faults if f["what"] == "died"}),
        "stuck_workers": sorted({f["worker"] for f in faults if f["what"] == "stuck"}),
    }


def _loop_lag_fields(runs: Sequence[Traffic]) -> dict[str, Any]:
    """Event-loop lag p50/p99/max µs of asyncio workers (nothing for other workers)."""
    lags = [r.loop_lag_ns for r in runs if r.loop_lag_ns is not None]
    if not lags:
        return {}
    lag = Stats.from_samples(np.concatenate(lags))
    return {
        "loop_lag_p50_us": lag.p50_ns / 1e3,
        "loop_lag_p99_us": lag.p99_ns / 1e3,
        "loop_lag_max_us": lag.max_ns / 1e3,
        "loop_lag_samples": lag.count,
    }


def _stage_fields(records: list[RequestRecord], pipeline: Pipeline) -> dict[str, Any]:
    wall, cpu = pipeline.stage_samples(records)
    recall = pipeline.recall(records)
    out: dict[str, Any] = {
        "recall_at_k": float(recall.mean()) if recall.size else float("nan"),
        # recall as a distribution: the worst tenth of the completed requests, and each one
        "recall_p10": float(np.percentile(recall, 10)) if recall.size else float("nan"),
        "recall_per_query": [round(float(v), 6) for v in recall],
        "k": pipeline.config["run"]["k"],
        "stages": list(pipeline.stage_names),
        "stage_p50_us": {
            n: Stats.from_samples(wall[:, j]).p50_ns / 1e3
            for j, n in enumerate(pipeline.stage_names)
        },
    }
    if "generate" in pipeline.stage_names and pipeline.config["generate"]["backend"] != "none":
        ttft = Stats.from_samples(wall[:, pipeline.stage_names.index("generate")])
        out["ttft_p50_us"], out["ttft_p99_us"] = ttft.p50_ns / 1e3, ttft.p99_ns / 1e3
    wall_sum = wall.sum(axis=0).astype(np.float64)
    out["stage_share"] = {
        n: float(v / wall_sum.sum()) if wall_sum.sum() else math.nan
        for n, v in zip(pipeline.stage_names, wall_sum, strict=True)
    }
    if cpu is not None:
        cpu_sum = cpu.sum(axis=0).astype(np.float64)
        whole = float(cpu_sum.sum())
        out["cpu_share"] = {
            n: float(v) / whole if whole else math.nan
            for n, v in zip(pipeline.stage_names, cpu_sum, strict=True)
        }
        out["cpu_per_request_us"] = whole / max(len(records), 1) / 1e3
    return out


# ---------------------------------------------------------------- curves


def _offer(
    pool: Any, pipeline: Pipeline, level: float, mode: str, options: LoadOptions, first: int
) -> Traffic:
    if mode == "closed":
        return closed_loop(
            pool, int(level), options.duration_s, timeout_s=options.timeout_s, first_request=first
        )
    count = max(1, int(round(level * options.duration_s)))
    schedule = arrivals(
        level, count, kind=options.arrivals, burstiness=options.burstiness, seed=options.seed
    )
    return open_loop(
        pool,
        schedule,
        timeout_s=options.timeout_s,
        queue_size=options.queue_size,
        first_request=first,
    )


def load_points(
    pipelines: Sequence[Pipeline],
    pools: Sequence[Any],
    levels: Sequence[float],
    *,
    mode: str = "open",
    options: LoadOptions | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """One record per (level, configuration): offered rates (open loop) or client counts (closed).

    ``pools[j]`` serves ``pipelines[j]`` (set up and warm). Configurations
    take turns at each level, so slow drift in the machine favours none.
    With ``[run] otel`` each level's completed requests are exported as
    OpenTelemetry traces (and flushed) before the next level starts.
    """
    if mode not in ("open", "closed"):
        raise ConfigError(f"mode must be 'open' or 'closed', got {mode!r}")
    opts = options or LoadOptions()
    emit = Collector(on_point, progress)
    first = 0
    for level in levels:
        runs: list[list[Traffic]] = [[] for _ in pipelines]
        for _ in range(opts.repeat):  # repetitions take turns too
            for j, (pipe, pool) in enumerate(zip(pipelines, pools, strict=True)):
                run = _offer(pool, pipe, level, mode, opts, first)
                first += int(run.outcome.size)
                runs[j].append(run)
        for j, (pipe, pool) in enumerate(zip(pipelines, pools, strict=True)):
            done = runs[j]
            # with [run] otel: the level's completed requests, now that none is being timed
            pipe.export_traces([r for t in done for r in t.records if r is not None])
            fields = {
                "label": pipe.label,
                "mode": mode,
                "worker_kind": pool.kind,
                "workers": pool.size,
                "pinned": bool(getattr(pool, "pinned", False)),
                "arrivals": opts.arrivals if mode == "open" else "closed-loop",
                "burstiness": opts.burstiness,
                "offered_qps": float(level) if mode == "open" else None,
                "concurrency": int(level) if mode == "closed" else None,
                "duration_s": opts.duration_s,
                "timeout_s": opts.timeout_s,
                "queue_size": opts.queue_size,
                **(pool.describe() if pool.kind == "asyncio" else {}),
                **_index_connections(pipe, pool.kind),
                **summarize(
                    done,
                    pipe,
                    timeout_s=opts.timeout_s,
                    slo_ms=opts.slo_ms,
                    lag_warn_us=opts.lag_warn_us,
                    workers=pool.size,
                    offered_qps=float(level) if mode == "open" else None,
                    duration_s=opts.duration_s,
                ),
                "simulated": list(pipe.simulated),
                "caveats": list(pipe.caveats),
                "config": pipe.config,
            }
            if pool.kind == "asyncio":
                # a request waiting for its loop is the service's own delay, not the client's
                fields["generator_lagged"] = False
            emit(new_record("load", fields))
        _stop_on_faults(runs)
    return emit.records


def _index_connections(pipe: Pipeline, kind: str) -> dict[str, Any]:
    """``index_connections``: a database index's open connections after a thread-pool level
    (one per worker thread that searched, and the set-up thread's); a process pool's workers
    each build their own index (one connection per process), not counted here."""
    if kind != "thread":
        return {}
    info = getattr(pipe.built.index, "info", None)
    count = info().get("connections") if callable(info) else None
    return {} if count is None else {"index_connections": int(count)}


def _stop_on_faults(runs: list[list[Traffic]]) -> None:
    """After a level's records are out: a worker that died or hung ends the whole run."""
    faults = [f for rs in runs for r in rs for f in r.faults]
    if faults:
        named = "; ".join(f"worker {f['worker']} (pid {f['pid']}) {f['detail']}" for f in faults)
        raise WorkerFault(f"load stopped after a worker fault: {named}")

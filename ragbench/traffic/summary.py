"""One load record's fields from one level's runs: counts, rates, percentiles, whether the generator kept up."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import intervals
from ..pipeline import Pipeline, RequestRecord
from ..pipeline.samples import with_retrieve_parts
from ..timing import Stats
from ..workers import COMPLETED, FAILED, REJECTED, TIMED_OUT
from .runs import Traffic

__all__ = ["ADMISSION_MAX_SHARE", "GENERATOR_MAX_CORES", "OVERRUN_S", "summarize"]


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
    open_loop: bool = True,
) -> dict[str, Any]:
    """The fields of a load record: counts, rates, percentiles, recall and per-stage times under load.

    Several runs are repetitions of one level: counts and rates add up over
    them, percentiles pool their requests, and the p50/p99 intervals resample
    repetitions, then requests within each. ``workers``, ``offered_qps`` and
    ``duration_s`` judge whether the load generator kept up (see the module
    docstring). Open-loop runs (``open_loop``) also say what their schedules
    actually offered and the queue they ended with (:func:`_schedule_fields`).
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
        **(_schedule_fields(runs, timeout_s) if open_loop else {}),
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


def _schedule_fields(runs: Sequence[Traffic], timeout_s: float) -> dict[str, Any]:
    """What the schedules actually offered, and the backlog they left at their last arrival.

    ``schedule_span_s``: from each run's start to its last arrival, summed
    over the runs; ``offered_actual_qps``: arrivals / that span (a Poisson
    schedule of ``rate × duration`` arrivals spans more or less than
    ``duration``, so this is the rate it offered, not the nominal one);
    ``last_arrival_wait_s``: how long each run's last arrival waited for a
    worker (the work queued ahead of it when the schedule ended), the
    largest over the runs -- one still waiting at its timeout counts the
    timeout, one rejected at a full queue NaN (it is counted as rejected).
    """
    span_ns = sum(max(int(r.scheduled_ns.max()) - r.start_ns, 1) for r in runs if r.outcome.size)
    arrived = sum(int(r.outcome.size) for r in runs)
    waits = [w for w in (_last_wait_s(r, timeout_s) for r in runs) if w == w]
    return {
        "schedule_span_s": span_ns / 1e9,
        "offered_actual_qps": arrived / (span_ns / 1e9) if span_ns else math.nan,
        "last_arrival_wait_s": max(waits) if waits else math.nan,
    }


def _last_wait_s(run: Traffic, timeout_s: float) -> float:
    """Seconds the run's last arrival waited for a worker (see :func:`_schedule_fields`)."""
    if not run.outcome.size:
        return math.nan
    last = int(np.argmax(run.scheduled_ns))
    if run.dispatch_ns[last] >= 0:
        return max(int(run.dispatch_ns[last] - run.scheduled_ns[last]), 0) / 1e9
    return timeout_s if run.outcome[last] == TIMED_OUT else math.nan


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
        "recall_zero": int(np.count_nonzero(recall == 0)),
        "recall_per_query": [round(float(v), 6) for v in recall],
        "k": pipeline.config.run.k,
        "stages": list(pipeline.stage_names),
        "stage_p50_us": {
            n: Stats.from_samples(wall[:, j]).p50_ns / 1e3
            for j, n in enumerate(pipeline.stage_names)
        },
    }
    answers = pipeline.judged(records)  # nDCG@10 ... against the qrels; None without them
    if answers is not None:
        out["judged"] = answers
    if "generate" in pipeline.stage_names and pipeline.config.generate.backend != "none":
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
    # an index's split of retrieve (pgvector: send/server/decode; bm25: tokenize/score/decode;
    # named by the index's info), as run records carry it
    split = with_retrieve_parts({"index": pipeline.info.get("index")}, records)
    if "retrieve_parts" in split:
        out["retrieve_parts"] = split["retrieve_parts"]
    return out

"""Load curves (:func:`load_points`): one record per (level, configuration), configurations taking turns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigError
from ..pipeline import Pipeline
from ..pipeline.capabilities import IndexInfo
from ..results.records import Collector, new_record
from ..workers import WorkerFault
from .runs import Traffic, closed_loop, open_loop
from .schedule import LoadOptions, arrivals
from .summary import summarize

__all__ = ["load_points"]


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
                    open_loop=mode == "open",
                ),
                "simulated": list(pipe.simulated),
                "caveats": list(pipe.caveats),
                "config": pipe.config.to_dict(),
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
    index = pipe.built.index
    count = index.info().get("connections") if isinstance(index, IndexInfo) else None
    return {} if count is None else {"index_connections": int(count)}


def _stop_on_faults(runs: list[list[Traffic]]) -> None:
    """After a level's records are out: a worker that died or hung ends the whole run."""
    faults = [f for rs in runs for r in rs for f in r.faults]
    if faults:
        named = "; ".join(f"worker {f['worker']} (pid {f['pid']}) {f['detail']}" for f in faults)
        raise WorkerFault(f"load stopped after a worker fault: {named}")

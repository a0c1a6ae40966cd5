"""``ragbench load``: response time as the offered load grows (see :mod:`ragbench.traffic`)."""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack
from typing import Any

import click

from .. import threads
from ..errors import ConfigError
from ..records import RecordWriter
from ..rendering import render
from .configs import backend_options, configurations
from .options import (
    Interrupted,
    echo,
    executor_from,
    executor_options,
    numbers,
    out_option,
    plot_option,
    progress,
    repeat_option,
)

__all__ = ["load"]

ARRIVALS = ("poisson", "uniform", "gamma")


def _levels(qps: str | None, concurrency: str | None) -> tuple[str, list[float]]:
    if (qps is None) == (concurrency is None):
        raise click.UsageError("give either --qps (open loop) or --concurrency (closed loop)")
    if qps is not None:
        return "open", numbers(qps, "--qps")
    levels = numbers(concurrency, "--concurrency")
    if any(c != int(c) for c in levels):
        raise click.BadParameter("client counts must be whole numbers", param_hint="--concurrency")
    return "closed", levels


def _pools(
    stack: ExitStack, pipelines: list[Any], kind: str, workers: int, warmup: int
) -> list[Any]:
    """One worker pool per configuration, warm, closed by ``stack``."""
    from ..traffic import warm
    from ..workers import ProcessWorkers, ThreadWorkers

    pools: list[Any] = []
    with progress(
        len(pipelines), f"starting {workers} {kind} workers per configuration"
    ) as advance:
        for pipe in pipelines:
            pool: Any
            if kind == "thread":
                pool = ThreadWorkers(pipe, workers)
                stack.push(_closer(pool))
                warm(pool, max(1, warmup // workers))
            else:
                pool = ProcessWorkers(pipe.config, workers, warmup=warmup)
                stack.push(_closer(pool))
            pools.append(pool)
            advance(1)
    return pools


def _closer(pool: Any) -> Any:
    """An exit callback closing ``pool``: at once (workers killed) when leaving on an exception."""

    def close(exc_type: Any, exc: Any, tb: Any) -> None:
        pool.close(now=exc_type is not None)

    return close


@click.command()
@backend_options
@click.option("--qps", help="Comma-separated offered rates, open loop (e.g. 50,100,200,400).")
@click.option("--concurrency", help="Comma-separated client counts, closed loop (e.g. 1,2,4,8).")
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True, max=86_400),
    default=5.0,
    show_default=True,
    help="Seconds per rate.",
)
@click.option(
    "--arrivals",
    type=click.Choice(ARRIVALS),
    default="poisson",
    show_default=True,
    help="Arrival process (open loop).",
)
@click.option(
    "--burstiness",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Gamma shape for --arrivals gamma (1 = Poisson, <1 burstier).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Workers serving requests. [default: one per core]",
)
@click.option(
    "--worker-kind",
    type=click.Choice(["process", "thread"]),
    default="process",
    show_default=True,
    help="Worker processes (each its own pipeline) or threads sharing one.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds after its arrival a request is given up.",
)
@click.option(
    "--queue",
    "queue_size",
    type=click.IntRange(min=0),
    default=1024,
    show_default=True,
    help="Requests that may wait for a worker; more are rejected.",
)
@click.option(
    "--slo-ms",
    type=click.FloatRange(min=0, min_open=True),
    help="p99 response-time objective: report the knee and goodput.",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Warm-up requests per worker.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the arrival schedule."
)
@repeat_option("Repetitions of each load level (taking turns); intervals resample them.")
@out_option("Append one JSON record per (rate, configuration) as it finishes.")
@plot_option("Write response time p50/p99 against offered load, and CPU share per stage, as PNG.")
@executor_options
@click.option(
    "--actors",
    type=click.IntRange(min=1),
    help="With --executor ray: load generators (Ray actors), each offering rate / actors with "
    "its own pipeline and --workers workers. [default: one per node]",
)
def load(**opts: Any) -> None:
    """Offer increasing load to each configuration and report response time, throughput and stages.

    A level where the load generator did not keep up is marked invalid. A worker that dies or
    hangs ends the run after that level's record: exit 1. Ctrl-C stops the workers: exit 130.

    With --executor ray, load generators run as Ray actors (open loop only), each offering
    its share of every rate; their requests are merged into one curve per configuration.
    """
    try:
        _load(opts)
    except KeyboardInterrupt:
        # past click, which would print a blank line first: one line, exit 130 (see main)
        raise Interrupted() from None


def _load(opts: dict[str, Any]) -> None:
    from ..pipeline import Pipeline, SharedParts
    from ..traffic import LoadOptions, load_points
    from ..workers import WorkerFault

    mode, levels = _levels(opts["qps"], opts["concurrency"])
    _check_executor(opts, mode)
    options = LoadOptions(
        duration_s=opts["duration"],
        arrivals=opts["arrivals"],
        burstiness=opts["burstiness"],
        timeout_s=opts["timeout"],
        queue_size=opts["queue_size"],
        seed=opts["seed"],
        slo_ms=opts["slo_ms"],
        repeat=opts["repeat"] or 1,
    )
    combos, _ = configurations(opts, {"warmup": opts["warmup"]})
    writer = RecordWriter(opts["out"])
    if opts["executor"] == "ray":
        _load_on_ray(opts, combos, levels, options, writer)
        _finish(writer, opts["plot"])
        return
    workers, kind = opts["workers"] or len(threads.usable_cores()), opts["worker_kind"]
    with ExitStack() as stack:
        index_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ragbench-index-"))
        pipelines = []
        for j, (cfg, label) in enumerate(combos):
            if kind == "process" and cfg["retrieve"]["index_file"] is None:
                # built once here, loaded by every worker process
                cfg["retrieve"]["index_file"] = os.path.join(index_dir, f"{j}.index")
            pipelines.append(Pipeline(cfg, label=label))  # every config checked before set-up
        for pipe in pipelines:
            stack.callback(pipe.close)
        shared = SharedParts()
        with progress(len(pipelines), "setting up") as advance:
            for pipe in pipelines:
                pipe.setup(shared=shared)
                advance(1)
        pools = _pools(stack, pipelines, kind, workers, opts["warmup"])
        with progress(len(levels) * len(pipelines), "load levels") as advance:
            try:
                load_points(
                    pipelines,
                    pools,
                    levels,
                    mode=mode,
                    options=options,
                    on_point=writer,
                    progress=advance,
                )
            except KeyboardInterrupt:
                if writer.records:
                    echo(render(writer.records))
                raise
            except WorkerFault as exc:
                # the level's record is kept and shown; the pool is short of a worker
                _finish(writer, opts["plot"])
                click.echo(f"ragbench: {exc}", err=True)
                raise SystemExit(1) from None
    _finish(writer, opts["plot"])


def _finish(writer: RecordWriter, plot: str | None) -> None:
    if not writer.records:
        raise ConfigError("no load level finished")
    echo(render(writer.records))
    if plot:
        from ..plots import plot_records

        plot_records(writer.records, plot)
        echo(f"wrote {plot}")


def _check_executor(opts: dict[str, Any], mode: str) -> None:
    if opts["executor"] == "ray":
        if mode != "open":
            raise click.UsageError("--executor ray offers open-loop load only (--qps)")
        return
    if opts["ray_address"] is not None or opts["actors"] is not None:
        raise click.UsageError("--ray-address and --actors need --executor ray")


def _load_on_ray(
    opts: dict[str, Any],
    combos: list[tuple[dict[str, Any], str | None]],
    levels: list[float],
    options: Any,
    writer: RecordWriter,
) -> None:
    """Load generators as Ray actors: each sets up its own pipelines and workers where it runs."""
    from ..executors import ray_load_points
    from ..pipeline import Pipeline

    for cfg, label in combos:
        Pipeline(cfg, label=label).close()  # every config checked before any actor starts
    with (
        executor_from("ray", opts["ray_address"]) as executor,
        progress(len(levels) * len(combos), "load levels (Ray actors)") as advance,
    ):
        try:
            ray_load_points(
                executor,
                combos,
                levels,
                actors=opts["actors"],
                workers=opts["workers"],
                worker_kind=opts["worker_kind"],
                warmup=opts["warmup"],
                options=options,
                on_point=writer,
                progress=advance,
            )
        except KeyboardInterrupt:
            if writer.records:
                echo(render(writer.records))
            raise

"""``ragbench load``: response time as the offered load grows (see :mod:`ragbench.traffic`)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from contextlib import ExitStack
from typing import Any

import click

from .. import threads
from ..errors import ConfigError
from ..results.reading import reading
from ..results.records import RecordWriter
from ..results.tables import render
from ..settings import Config
from .configs import backend_options, configurations
from .options import (
    check_outputs,
    echo,
    executor_from,
    executor_options,
    finish_outputs,
    numbers,
    out_option,
    plot_option,
    progress,
    repeat_option,
)

__all__ = ["load"]

ARRIVALS = ("poisson", "uniform", "gamma")


#: The folder of the indexes a load's worker processes read: ``ragbench-index-pid<pid>-<random>``.
_INDEX_FOLDER = re.compile(r"^ragbench-index-pid(\d+)-")


def _index_folder() -> tempfile.TemporaryDirectory[str]:
    """A temporary folder for the indexes worker processes load, named after this process.

    Those of a ``load`` that is gone (``kill -9`` runs no clean-up, and each left its
    folder, an index file per configuration, in TMPDIR) are removed first; a live one's
    are kept.
    """
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            m = _INDEX_FOLDER.match(entry.name)
            if m is None or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                os.kill(int(m.group(1)), 0)
            except ProcessLookupError:  # its load is gone
                shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:  # another user's live process
                pass
    return tempfile.TemporaryDirectory(prefix=f"ragbench-index-pid{os.getpid()}-")


def _levels(qps: str | None, concurrency: str | None) -> tuple[str, list[float]]:
    if (qps is None) == (concurrency is None):
        raise click.UsageError("give either --qps (open loop) or --concurrency (closed loop)")
    if qps is not None:
        return "open", numbers(qps, "--qps")
    levels = numbers(concurrency, "--concurrency")
    if any(c != int(c) for c in levels):
        raise click.BadParameter("client counts must be whole numbers", param_hint="--concurrency")
    return "closed", levels


def _asyncio_options(opts: dict[str, Any]) -> tuple[str, list[float], int | None, list[str]]:
    """(mode, levels, requests at once per event loop, offloads): asyncio options checked.

    With ``--worker-kind asyncio``, ``--qps`` may come with ONE ``--concurrency``
    (tasks per worker's loop, default :data:`DEFAULT_TASKS`); ``--concurrency``
    alone is the closed loop, each level that many clients on every worker's loop.
    """
    kind, offload = opts["worker_kind"], opts["offload"]
    if kind != "asyncio":
        if offload is not None:
            raise click.UsageError(f"--offload needs --worker-kind asyncio, not {kind}")
        return (*_levels(opts["qps"], opts["concurrency"]), None, [])
    if opts["executor"] == "ray":
        raise click.UsageError("--executor ray runs thread or process workers, not asyncio")
    offloads = _offloads(offload or "none")
    if opts["qps"] is None or opts["concurrency"] is None:
        mode, levels = _levels(opts["qps"], opts["concurrency"])
        return mode, levels, int(max(levels)) if mode == "closed" else DEFAULT_TASKS, offloads
    tasks = numbers(opts["concurrency"], "--concurrency")
    if len(tasks) != 1 or tasks[0] != int(tasks[0]) or tasks[0] < 1:
        raise click.BadParameter(
            "with --qps, one whole number: requests at once per asyncio worker",
            param_hint="--concurrency",
        )
    return "open", numbers(opts["qps"], "--qps"), int(tasks[0]), offloads


def _offloads(value: str) -> list[str]:
    from ..aioworkers import OFFLOADS

    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in names if v not in OFFLOADS]
    if bad or not names or len(set(names)) != len(names):
        raise click.BadParameter(
            f"{value!r}: give one or more of {', '.join(OFFLOADS)}, comma-separated, each once",
            param_hint="--offload",
        )
    return names


#: Requests at once per asyncio worker's event loop in the open loop, unless --concurrency says.
DEFAULT_TASKS = 16


def _pools(
    stack: ExitStack,
    pipelines: list[Any],
    kind: str,
    workers: int,
    warmup: int,
    aio: tuple[int | None, list[str]] = (None, []),
    startup_s: float = 600.0,
) -> list[Any]:
    """One worker pool per configuration, warm, closed by ``stack``.

    Worker processes have ``startup_s`` to set up and warm up, or the run
    fails (:class:`~ragbench.workers.WorkerFault` naming the worker).
    """
    from ..aioworkers import AsyncWorkers
    from ..traffic import warm
    from ..workers import ProcessWorkers, ThreadWorkers

    pools: list[Any] = []
    with progress(
        len(pipelines), f"starting {workers} {kind} workers per configuration"
    ) as advance:
        for j, pipe in enumerate(pipelines):
            pool: Any
            if kind == "thread":
                pool = ThreadWorkers(pipe, workers)
                stack.push(_closer(pool))
                warm(pool, max(1, warmup // workers))
            elif kind == "asyncio":
                tasks, offloads = aio
                pool = AsyncWorkers(
                    pipe.config,
                    workers,
                    concurrency=tasks or 1,
                    offload=offloads[j],
                    warmup=warmup,
                    startup_timeout=startup_s,
                )
                stack.push(_closer(pool))
            else:
                pool = ProcessWorkers(
                    pipe.config, workers, warmup=warmup, startup_timeout=startup_s
                )
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
@click.option(
    "--concurrency",
    help="Comma-separated client counts, closed loop (e.g. 1,2,4,8); with --worker-kind "
    "asyncio, clients per worker, or beside --qps one number: requests at once per worker "
    "(default 16).",
)
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
    type=click.Choice(["process", "thread", "asyncio"]),
    default="process",
    show_default=True,
    help="Worker processes (each its own pipeline), threads sharing one, or asyncio "
    "worker processes (each one event loop serving --concurrency requests at once).",
)
@click.option(
    "--offload",
    help="With --worker-kind asyncio: CPU stages inline on the event loop (none), in a "
    "thread pool (thread), or in a process pool, each process its own pipeline (process); "
    "several comma-separated: one pool each, taking turns at every level. [default: none]",
)
@click.option(
    "--startup-timeout",
    type=click.FloatRange(min=0, min_open=True, max=86_400),
    default=600.0,
    show_default=True,
    help="Seconds worker processes have to set up and warm up; one still not ready (or "
    "dead) is killed and the run fails with exit 1, naming it.",
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
    hangs (or an asyncio worker's offload pool that breaks) ends the run after that level's
    record: exit 1; so does one that dies or is not ready within --startup-timeout. Ctrl-C
    stops the workers: exit 130.

    With --executor ray, load generators run as Ray actors (open loop only), each offering
    its share of every rate; their requests are merged into one curve per configuration.
    """
    from ..pipeline import Pipeline, SharedParts
    from ..traffic import LoadOptions

    check_outputs(opts["out"], opts["plot"])
    mode, levels, tasks, offloads = _asyncio_options(opts)
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
        index_dir = stack.enter_context(_index_folder())
        pipelines, pipe_offloads = [], []
        for j, (cfg, label) in enumerate(combos):
            if kind == "asyncio" and cfg.run.cpu_time:
                raise click.UsageError("--cpu-time is not measured with --worker-kind asyncio")
            if kind in ("process", "asyncio") and cfg.retrieve.index_file is None:
                # built once here, loaded by every worker process
                cfg = cfg.replace("retrieve", index_file=os.path.join(index_dir, f"{j}.index"))
            for offload in offloads or [""]:
                pipe = Pipeline(cfg, label=label)  # every config checked before set-up
                if len(offloads) > 1:  # one pool per offload: each its own row
                    pipe.label += f" offload={offload}"
                pipelines.append(pipe)
                pipe_offloads.append(offload)
        for pipe in pipelines:
            stack.callback(pipe.close)
        shared = SharedParts()
        with progress(len(pipelines), "setting up") as advance:
            for pipe in pipelines:
                pipe.setup(shared=shared)
                advance(1)
        aio = (tasks, pipe_offloads)
        _measure(stack, pipelines, (kind, workers, aio), levels, mode, options, opts, writer)
    _finish(writer, opts["plot"])


def _measure(
    stack: ExitStack,
    pipelines: list[Any],
    pool_kind: tuple[str, int, tuple[int | None, list[str]]],
    levels: list[float],
    mode: str,
    options: Any,
    opts: dict[str, Any],
    writer: RecordWriter,
) -> None:
    """Start the pools and run the levels; a worker fault (at start-up too) is exit 1, one line."""
    from ..traffic import load_points
    from ..workers import WorkerFault

    kind, workers, aio = pool_kind
    try:
        pools = _pools(
            stack, pipelines, kind, workers, opts["warmup"], aio, opts["startup_timeout"]
        )
        with progress(len(levels) * len(pipelines), "load levels") as advance:
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
        # the level's record is kept and shown; the pool is short of a worker (at start-up:
        # no record, the one line); not bad input, so 1, not 2
        if writer.records:
            _finish(writer, opts["plot"])
        click.echo(f"ragbench: {exc}", err=True)
        raise SystemExit(1) from None


def _finish(writer: RecordWriter, plot: str | None) -> None:
    if not writer.records:
        raise ConfigError("no load level finished")
    echo(render(writer.records))
    echo("\n".join(reading(writer.records)))
    finish_outputs(writer, writer.records, plot)


def _check_executor(opts: dict[str, Any], mode: str) -> None:
    if opts["executor"] == "ray":
        if mode != "open":
            raise click.UsageError("--executor ray offers open-loop load only (--qps)")
        return
    if opts["ray_address"] is not None or opts["actors"] is not None:
        raise click.UsageError("--ray-address and --actors need --executor ray")


def _load_on_ray(
    opts: dict[str, Any],
    combos: list[tuple[Config, str | None]],
    levels: list[float],
    options: Any,
    writer: RecordWriter,
) -> None:
    """Load generators as Ray actors: each sets up its own pipelines and workers where it runs."""
    from ..pipeline import Pipeline
    from ..rayload import ray_load_points

    for cfg, label in combos:
        Pipeline(cfg, label=label).close()  # every config checked before any actor starts
    with (
        executor_from("ray", opts["ray_address"]) as executor,
        progress(len(levels) * len(combos), "load levels (Ray actors)") as advance,
    ):
        try:
            ray_load_points(
                executor,
                [(cfg.to_dict(), label) for cfg, label in combos],  # what an actor is sent
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

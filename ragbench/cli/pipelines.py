"""``ragbench run`` (one pipeline) and ``ragbench compare`` (the cartesian product, interleaved)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from ..codecs import SHAPES
from ..orders import DESIGNS
from ..results.reading import run_reading
from ..results.records import RecordWriter
from ..results.tables import compare_table, run_table
from ..results.tables.runs import STATS, fixed_line, setup_summary
from ..settings import Config, merge, parse_config, read_config
from .configs import backend_options, configurations, otel_option, re_embed_option
from .options import (
    check_outputs,
    config_option,
    dataset_option,
    echo,
    executor_from,
    executor_options,
    fast_build_option,
    finish_outputs,
    out_option,
    parse_start_together,
    plot_option,
    progress,
    queries_option,
    rebuilds_option,
    repeat_option,
    set_option,
    set_pairs,
    start_together_options,
    wait_to_start,
)

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["compare", "measure_combinations", "run"]


@click.command()
@config_option(
    required=True,
    help="Pipeline config: a TOML file, or the name of a shipped one "
    "(default, hashing, stub-llm, transformers).",
)
@out_option("Append the run's JSON record to this file.")
@queries_option(help="Measured requests (overrides [run] queries).")
@click.option(
    "--warmup", type=click.IntRange(min=0), help="Warm-up requests (overrides [run] warmup)."
)
@dataset_option(help="Dataset name or path (overrides [dataset]).")
@click.option(
    "--cpu-time",
    "cpu_time",
    is_flag=True,
    default=None,
    help="Also record each stage's thread CPU time (overrides [run] cpu_time).",
)
@repeat_option()
@otel_option()
@re_embed_option()
@click.option(
    "--payload-shape",
    "payload_shape",
    type=click.Choice(SHAPES),
    help="Payload shape the codec writes (overrides [serialize] shape; default row).",
)
@set_option()
@fast_build_option()
@start_together_options
@plot_option("Write a PNG chart of the run's stages.")
def run(
    config: str,
    out: str | None,
    queries: int | None,
    warmup: int | None,
    dataset: str | None,
    cpu_time: bool | None,
    repeat: int | None,
    otel: bool | None,
    re_embed: bool | None,
    payload_shape: str | None,
    overrides: Sequence[str],
    fast_build: bool | None,
    start_together: str | None,
    start_timeout: float,
    plot: str | None,
) -> None:
    """Run one pipeline: per-stage table and (with --out) a JSON record."""
    from .. import datasets
    from ..pipeline import Pipeline

    together = parse_start_together(start_together)
    check_outputs(out, plot)
    cfg = read_config(config)
    extra = set_pairs(overrides)
    if dataset is not None:
        cfg["dataset"] = datasets.spec_table(dataset)
    for key, value in (
        ("queries", queries),
        ("warmup", warmup),
        ("cpu_time", cpu_time),
        ("repeat", repeat),
        ("otel", otel),
    ):
        if value is not None:
            extra.setdefault("run", {})[key] = value
    if re_embed:
        extra.setdefault("embed", {})["re_embed"] = True
    if fast_build:
        extra.setdefault("retrieve", {})["fast_build"] = True
    if payload_shape is not None:
        extra.setdefault("serialize", {})["shape"] = payload_shape
    with Pipeline.from_config(parse_config(merge(cfg, extra))) as pipe:  # checked once, here
        pipe.setup()
        waited = wait_to_start(together, start_timeout)
        n, reps = pipe.config.run.queries, pipe.config.run.repeat
        with progress(n * reps, "requests") as advance:
            report = pipe.run(progress=advance)
    record = report.to_record()
    if waited is not None:
        record["start_together"] = waited
    echo(run_table(record))
    echo("\n".join(run_reading([record])))
    writer = RecordWriter(out)
    writer.write_all([record])
    finish_outputs(writer, [record], plot)
    if report.error:
        raise SystemExit(1)


def _run_side_by_side(
    pipelines: Sequence[Pipeline], opts: Any
) -> tuple[list[Any], dict[str, Any] | None]:
    """Set every pipeline up (sharing built parts), warm each, run them interleaved.

    Their reports, and what ``--start-together`` waited between the set-up and the warm-up.
    """
    from ..pipeline import SharedParts, interleave

    shared = SharedParts()
    for pipe in pipelines:  # every configuration's early refusals before any model load
        pipe.check(shared=shared)
    with progress(len(pipelines), "setting up") as advance:
        for pipe in pipelines:
            pipe.setup(shared=shared)
            advance(1)
    waited = wait_to_start(opts.get("together"), opts.get("start_timeout") or 0.0)
    run = pipelines[0].config.run
    n, reps = run.queries, run.repeat
    label = f"{len(pipelines)} runs × {n} requests × {reps} repetition(s), interleaved"
    with progress(n * reps, label) as advance:
        interleave(
            pipelines,
            n,
            warmup=run.warmup,
            repeat=reps,
            progress=advance,
            order=opts["order"],
            seed=opts["order_seed"],
        )
    return [p.report() for p in pipelines], waited


@click.command()
@backend_options
@queries_option(help="Measured requests per combination.")
@click.option("--warmup", type=click.IntRange(min=0), help="Warm-up requests per combination.")
@repeat_option()
@out_option("Append one JSON record per combination.")
@click.option(
    "--stat",
    type=click.Choice(STATS),
    default="p50",
    show_default=True,
    help="Statistic shown for each stage.",
)
@click.option(
    "--order",
    type=click.Choice(DESIGNS),
    default="balanced",
    show_default=True,
    help="Order of the interleaved turns: balanced (each configuration in each position "
    "equally often, a different query per configuration in a round) or same-query (a "
    "rotation, every configuration on the same query in turn).",
)
@click.option(
    "--order-seed",
    "order_seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the balanced order (recorded in each record).",
)
@plot_option("Write a PNG chart of the configurations' stages.")
@fast_build_option()
@rebuilds_option()
@executor_options
@start_together_options
def compare(**opts: Any) -> None:
    """Run the cartesian product of the given backends side by side, interleaved, in one process.

    The turns follow a balanced order (--order balanced): every configuration in every
    position equally often, each on a different query within a round, the seed recorded;
    the lines under the table read it (dominant stage, ranking with intervals, noise).

    With --executor ray each configuration runs as its own Ray task instead (set up, warmed
    and measured on its own, possibly at the same time as others): not interleaved.

    With --rebuilds N the whole comparison runs N times, build i with each index's
    seed + i, and each configuration's N runs are merged into one record.

    With --start-together DIR:N the configurations are set up, then the process waits in
    DIR until N processes (this one and the others launched with the same DIR:N) are set up
    too, and all of them begin warming up and timing together.
    """
    if opts["executor"] != "ray" and opts["ray_address"] is not None:
        raise click.UsageError("--ray-address needs --executor ray")
    if opts["start_together"] is not None and (opts["executor"] == "ray" or opts["rebuilds"] > 1):
        raise click.UsageError(
            "--start-together is for one side-by-side run: not with --executor ray "
            "or --rebuilds above 1"
        )
    opts["together"] = parse_start_together(opts["start_together"])
    check_outputs(opts["out"], opts["plot"])
    run_over = {key: opts[key] for key in ("queries", "warmup", "repeat")}
    combos, varying = configurations(opts, run_over)
    if opts["fast_build"]:
        combos = [(_fast_build(cfg), label) for cfg, label in combos]
    writer = RecordWriter(opts["out"])
    if opts["rebuilds"] == 1:
        records = measure_combinations(combos, opts, writer)
    else:
        records = _rebuilt(combos, opts, writer)
    echo(fixed_line(records, varying))
    echo(compare_table(records, stat=opts["stat"]))
    echo("\n".join(run_reading(records, stat=opts["stat"])))
    echo(setup_summary(records))
    finish_outputs(writer, records, opts["plot"])
    if any(r.get("error") for r in records):  # compare_table names each and its error
        raise SystemExit(1)


def measure_combinations(
    combos: Sequence[tuple[Config, str | None]], opts: Any, writer: RecordWriter
) -> list[dict[str, Any]]:
    """Every configuration run once (side by side, or as Ray tasks); its records, also in ``writer``."""
    from ..pipeline import Pipeline

    # every combination is created (and so checked) before anything is set up
    pipelines = [Pipeline(cfg, label=label) for cfg, label in combos]
    if opts["executor"] == "ray":
        labels = [p.label for p in pipelines]
        for p in pipelines:
            p.close()  # checked; each task makes its own
        return _run_as_tasks(combos, labels, opts, writer)
    try:
        reports, waited = _run_side_by_side(pipelines, opts)
    finally:
        for p in pipelines:
            p.close()
    records = [rec for r in reports for rec in r.to_records()]
    if waited is not None:
        records = [{**rec, "start_together": waited} for rec in records]
    writer.write_all(records)
    return records


def _rebuilt(
    combos: Sequence[tuple[Config, str | None]], opts: Any, writer: RecordWriter
) -> list[dict[str, Any]]:
    """Every configuration measured on ``--rebuilds`` builds, merged per configuration.

    Ctrl-C after some builds keeps them: their merged records are written (``rebuilds`` says
    how many, a caveat that the run was cut short) before the interrupt goes on.
    """
    from ..results.rebuilds import merge_runs

    n = opts["rebuilds"]
    runs = [measure_combinations(combos, opts, RecordWriter())]  # build 0: the one-build run's
    labels = [r["label"] for r in runs[0]]
    try:
        for i in range(1, n):
            click.echo(f"ragbench: compare: build {i} of {n} measured", err=True)
            again = [
                (_seeded(cfg, i), label) for (cfg, _), label in zip(combos, labels, strict=True)
            ]
            runs.append(measure_combinations(again, opts, RecordWriter()))
    except KeyboardInterrupt:
        cut = f"interrupted after {len(runs)} of {n} builds: recall's spread is over those"
        kept = [merge_runs(same) for same in zip(*runs, strict=True)]
        writer.write_all([{**r, "caveats": [*(r.get("caveats") or []), cut]} for r in kept])
        raise
    records = [merge_runs(same) for same in zip(*runs, strict=True)]
    writer.write_all(records)
    return records


def _seeded(cfg: Config, i: int) -> Config:
    """``cfg`` with build ``i``'s ``[retrieve.build]`` (seed + i, :func:`ragbench.results.rebuilds.seeded_build`)."""
    from ..results.rebuilds import seeded_build

    return cfg.replace("retrieve", build=seeded_build(cfg.retrieve.backend, cfg.retrieve.build, i))


def _fast_build(cfg: Config) -> Config:
    """``cfg`` with ``[retrieve] fast_build = true``."""
    return cfg.replace("retrieve", fast_build=True)


def _run_as_tasks(
    combos: Sequence[tuple[Config, str | None]],
    labels: list[str],
    opts: Any,
    writer: RecordWriter,
) -> list[dict[str, Any]]:
    """Each configuration as its own task on the executor; records appended as each finishes."""
    from ..executors import run_configurations

    with (
        executor_from(opts["executor"], opts["ray_address"]) as executor,
        progress(len(combos), "configurations, each its own Ray task") as advance,
    ):
        try:
            plain = [(cfg.to_dict(), label) for cfg, label in combos]
            run_configurations(plain, executor, on_record=writer, progress=advance)
        except KeyboardInterrupt:
            if writer.records:
                echo(compare_table(writer.records, stat=opts["stat"]))
            raise
    # in the order of the options, not of finishing
    order = {label: i for i, label in enumerate(labels)}
    return sorted(writer.records, key=lambda r: order.get(r["label"], len(order)))

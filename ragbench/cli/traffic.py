"""``ragbench load``: response time as the offered rate grows (see :mod:`ragbench.traffic`)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..config import load_config, merge
from ..records import RecordWriter
from ..rendering import render
from .options import (
    config_option,
    dataset_option,
    echo,
    numbers,
    out_option,
    plot_option,
    progress,
    set_option,
    set_pairs,
)

__all__ = ["load"]


@click.command()
@config_option(help="Pipeline config (TOML); default: the built-in defaults.")
@dataset_option(help="Dataset name or path (overrides [dataset]).")
@click.option("--qps", required=True, help="Comma-separated offered rates, e.g. 50,100,200,400.")
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True, max=86_400),
    default=5.0,
    show_default=True,
    help="Seconds per rate.",
)
@click.option(
    "--arrivals",
    type=click.Choice(["poisson", "uniform"]),
    default="poisson",
    show_default=True,
    help="Arrival process.",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Warm-up requests before the first rate.",
)
@set_option()
@out_option("Append one JSON record per rate.")
@plot_option("Write response time p50/p99 against offered QPS as PNG.")
def load(
    config: str | None,
    dataset: str | None,
    qps: str,
    duration: float,
    arrivals: str,
    warmup: int,
    overrides: Sequence[str],
    out: str | None,
    plot: str | None,
) -> None:
    """Offer increasing request rates (open loop) and report response time per rate."""
    from .. import datasets
    from ..pipeline import Pipeline
    from ..traffic import load_points

    rates = numbers(qps, "--qps")
    cfg = load_config(config) if config else load_config({})
    if dataset is not None:
        cfg["dataset"] = datasets.spec_table(dataset)
    writer = RecordWriter(out)
    with Pipeline.from_config(merge(cfg, set_pairs(overrides))) as pipe:
        pipe.setup()
        pipe.warm(warmup)
        with progress(len(rates), "rates") as advance:
            load_points(
                pipe, rates, duration_s=duration, kind=arrivals, on_point=writer, progress=advance
            )
    echo(render(writer.records))
    if plot:
        from ..plots import plot_records

        plot_records(writer.records, plot)
        echo(f"wrote {plot}")

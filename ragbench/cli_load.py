"""``ragbench load``: QPS vs response time, open loop (see :mod:`ragbench.load`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from .cli import _dataset_table, _echo, _progress, _set_overrides, _split, record_writer

__all__ = ["load"]


@click.command()
@click.option(
    "-c",
    "--config",
    "config",
    type=click.Path(dir_okay=False),
    help="Pipeline config (TOML); default: the built-in defaults.",
)
@click.option("--dataset", help="Dataset name or path (overrides [dataset]).")
@click.option("--qps", required=True, help="Comma-separated offered rates, e.g. 50,100,200,400.")
@click.option("--duration", type=float, default=5.0, show_default=True, help="Seconds per rate.")
@click.option(
    "--arrivals", type=click.Choice(["poisson", "uniform"]), default="poisson", show_default=True
)
@click.option(
    "--warmup",
    type=int,
    default=20,
    show_default=True,
    help="Warm-up requests before the first rate.",
)
@click.option(
    "--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help="Override a config value."
)
@click.option("--out", type=click.Path(dir_okay=False), help="Append one JSON record per rate.")
def load(
    config: str | None,
    dataset: str | None,
    qps: str,
    duration: float,
    arrivals: str,
    warmup: int,
    overrides: Sequence[str],
    out: str | None,
) -> None:
    """Offer increasing request rates (open loop) and report response time per rate."""
    from .config import load_config, merge
    from .errors import ConfigError
    from .load import load_points, load_table
    from .pipeline import Pipeline

    rates: list[float] = []
    for item in _split(qps, "--qps"):
        try:
            rates.append(float(item))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a rate", param_hint="--qps") from None
    if any(r <= 0 for r in rates):
        raise ConfigError("--qps rates must be > 0")
    if duration <= 0:
        raise ConfigError("--duration must be > 0")
    cfg: dict[str, Any] = load_config(config) if config else load_config({})
    if dataset is not None:
        cfg["dataset"] = _dataset_table(dataset)
    cfg = merge(cfg, _set_overrides(overrides))
    records: list[dict[str, Any]] = []
    write = record_writer(out, records)

    with Pipeline.from_config(cfg) as pipe:
        pipe.setup()
        pipe.warm(warmup)
        with _progress(len(rates), "rates") as advance:
            load_points(
                pipe, rates, duration_s=duration, kind=arrivals, on_point=write, progress=advance
            )
    _echo(load_table(records))

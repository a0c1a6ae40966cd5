"""``ragbench report`` (saved records as tables and plots) and ``ragbench datasets``."""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..errors import ConfigError
from ..records import read_records
from ..rendering import FORMATS, STATS, datasets_table, render
from .options import echo, plot_option

__all__ = ["datasets", "report"]


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--stat",
    type=click.Choice(STATS),
    default="p50",
    show_default=True,
    help="Statistic shown per stage for runs.",
)
@plot_option("Write a PNG chart of the records (runs, sweeps, scale, load).")
def report(files: Sequence[str], fmt: str, stat: str, plot: str | None) -> None:
    """Render saved JSON-lines results side by side."""
    records = [rec for f in files for rec in read_records(f)]
    if not records:
        raise ConfigError(f"no records in {', '.join(files)}")
    echo(render(records, fmt, stat=stat))
    if plot:
        from ..plots import plot_records

        plot_records(records, plot)
        echo(f"wrote {plot}")


@click.command()
def datasets() -> None:
    """List bundled and cached datasets."""
    from .. import datasets as ds_mod

    echo(datasets_table(ds_mod.describe(), ds_mod.names()))

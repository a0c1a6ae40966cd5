"""``ragbench report`` (saved records as tables and plots) and ``ragbench datasets``."""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..errors import ConfigError
from ..records import read_records
from ..rendering import FORMATS, STATS, datasets_table, render
from .options import echo, plot_option

__all__ = ["datasets", "diff", "report"]


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


def _threshold(text: str) -> float:
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 10:
        raise click.BadParameter(
            f"{text!r} is not a threshold like 5% or 0.05", param_hint="--threshold"
        )
    return value


@click.command()
@click.argument("a", type=click.Path(dir_okay=False))
@click.argument("b", type=click.Path(dir_okay=False))
@click.option(
    "--stat",
    type=click.Choice(STATS[:-1]),
    default="p50",
    show_default=True,
    help="Statistic compared.",
)
@click.option(
    "--threshold",
    default="5%",
    show_default=True,
    help="Slower by more than this (with the interval wholly beyond it) fails.",
)
@click.option(
    "--allow-env-mismatch",
    is_flag=True,
    help="Compare records from different machines or library versions.",
)
def diff(a: str, b: str, stat: str, threshold: str, allow_env_mismatch: bool) -> None:
    """Is B faster or slower than A? Per stage and in total, with intervals; exit 1 on a sure regression."""
    from .. import diff as diffing

    limit = _threshold(threshold)
    rows, env, only = diffing.diff(
        diffing.read_comparables(a),
        diffing.read_comparables(b),
        stat=stat,
        threshold=limit,
        allow_env_mismatch=allow_env_mismatch,
    )
    echo(diffing.diff_table(rows, env, only, stat=stat, threshold=limit))
    if any(r.verdict == diffing.SLOWER for r in rows):
        raise SystemExit(1)

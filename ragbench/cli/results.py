"""``ragbench report`` (saved records as tables and plots) and ``ragbench datasets``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from ..errors import ConfigError
from ..reading import diff_reading, reading
from ..records import read_records
from ..rendering import FORMATS, STATS, datasets_table, render, stats_table
from .options import echo, parse_count, plot_option, progress

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
    if fmt == "table":
        echo("\n".join(reading(records, stat=stat)))
    if plot:
        from ..plots import plot_records

        plot_records(records, plot)
        echo(f"wrote {plot}")


@click.command()
@click.option(
    "--stats",
    "stats",
    multiple=True,
    metavar="NAME",
    help="Print the statistics that drive ANN difficulty (intrinsic dimension, contrast, "
    "hubness, spectrum, ...) of a dataset: name or path; repeat to compare side by side.",
)
@click.option(
    "--embed",
    help="Embedder for datasets without vectors (minilm, hashing) or precomputed. "
    "[default: the dataset's own]",
)
@click.option("--n", "n", help="Corpus size for synthetic (e.g. 30k).")
@click.option("--dim", type=click.IntRange(min=2), help="Dimension for synthetic.")
@click.option("--seed", type=int, help="Seed for synthetic.")
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Corpus points used as queries for the per-point statistics.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output format of --stats.",
)
def datasets(
    stats: Sequence[str],
    embed: str | None,
    n: str | None,
    dim: int | None,
    seed: int | None,
    sample: int,
    fmt: str,
) -> None:
    """List bundled and cached datasets, or with --stats describe how hard one is to search."""
    from .. import datasets as ds_mod

    if not stats:
        if embed or n or dim or seed is not None:
            raise click.UsageError("--embed, --n, --dim and --seed go with --stats NAME")
        echo(datasets_table(ds_mod.describe(), ds_mod.names()))
        return
    from .. import datastats

    size = parse_count(n, "--n") if n else None
    if (size or dim or seed is not None) and "synthetic" not in stats:
        raise click.UsageError("--n, --dim and --seed describe synthetic: add --stats synthetic")
    found: list[dict[str, Any]] = []
    keys: dict[str, str] = {}
    for spec in stats:
        params = {"n": size, "dim": dim, "seed": seed} if spec == "synthetic" else {}
        ds = ds_mod.from_table(ds_mod.spec_table(spec, **params))
        emb = embed or ds.default_embedder
        X, Q = ds.corpus_vectors(emb), ds.query_vectors(emb)
        with progress(1, f"statistics of {ds.name}"):
            got = datastats.compute(X, queries=Q, metric=ds.metric, sample=sample, name=ds.name)
        found.append({**got.as_dict(), "embedder": emb})
        keys.update({key: what for key, _, what in got.rows()})
    if fmt == "json":
        echo(json.dumps(found, indent=1))
        return
    echo(stats_table(found, keys))


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
    echo("\n".join(diff_reading(rows)))
    if any(r.verdict == diffing.SLOWER for r in rows):
        raise SystemExit(1)

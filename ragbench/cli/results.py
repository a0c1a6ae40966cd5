"""``ragbench report`` (saved records as tables and plots) and ``ragbench datasets``."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

import click

from ..errors import ConfigError
from ..results.reading import diff_reading, reading
from ..results.records import RecordWriter, iter_records, read_benchmark_runs
from ..results.tables import FORMATS, benchmark_table, datasets_table, render_checked, stats_table
from ..results.tables.runs import STATS
from .options import (
    check_outputs,
    echo,
    finish_outputs,
    out_option,
    parse_count,
    plot_option,
    progress,
)

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
    """Render saved results side by side: ragbench JSON lines, or pytest-benchmark JSON files."""
    check_outputs(plot=plot)
    records: list[dict[str, Any]] = []
    where: list[str] = []
    tables = []
    for f in files:
        docs = read_benchmark_runs(f)
        if docs is not None:
            if fmt != "table":
                raise ConfigError(
                    f"{f} is a pytest-benchmark file: it renders as --format table only"
                )
            for i, doc in enumerate(docs, 1):  # one table per run the file holds
                tables.append(benchmark_table(doc, f if len(docs) == 1 else f"{f} run {i}"))
            continue
        for n, rec in iter_records(f):
            records.append(rec)
            where.append(f"{f}:{n}")
    if not records and not tables:
        raise ConfigError(f"no records in {', '.join(files)}")
    if records:
        tables.append(render_checked(records, where, fmt, stat=stat))
    echo("\n".join(tables))
    if records and fmt == "table":
        echo("\n".join(reading(records, stat=stat)))
    if plot and not records:
        raise ConfigError(
            "--plot draws ragbench records; these files hold only pytest-benchmark runs"
        )
    finish_outputs(records=records, plot=plot)


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
    help="Embedder for datasets without vectors (minilm, model2vec, hashing) or precomputed. "
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
        found.append({**got.as_dict(), "embedder": emb, **judged_stats(ds.judgments())})
        keys.update({key: what for key, _, what in got.rows()})
    if fmt == "json":
        echo(json.dumps(found, indent=1))
        return
    echo(stats_table(found, keys))


def judged_stats(judgments: Any) -> dict[str, str]:
    """``judged queries`` and ``judgments per query`` (min / median / max) of a dataset's qrels."""
    if judgments is None:
        return {"judged queries": "no judged answers", "judgments per query": "—"}
    counts = [c for c in judgments.counts() if c]
    relevant = int(judgments.judged_rows().size)
    judged = f"{len(counts)} of {len(judgments)} ({relevant} with a relevant passage)"
    if not counts:
        return {"judged queries": judged, "judgments per query": "—"}
    spread = f"{min(counts)} / {statistics.median(counts):g} / {max(counts)}"
    return {"judged queries": judged, "judgments per query": spread}


def _threshold(text: str) -> float:
    """``5%`` or ``0.05`` → 0.05; a bare number above 1 (``5``: 500 %?) is refused."""
    t = text.strip()
    percent = t.endswith("%")
    try:
        value = float(t[:-1]) / 100 if percent else float(t)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 10:
        raise click.BadParameter(
            f"{text!r} is not a threshold like 5% or 0.05", param_hint="--threshold"
        )
    if value > 1 and not percent:
        raise click.BadParameter(
            f"{text!r} would mean {value:.0%}; write {t}% for {t} percent (or {value / 100:g})",
            param_hint="--threshold",
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
@click.option(
    "--paired",
    is_flag=True,
    help="Base and head ran alternately on one host: pair the i-th run of each configuration "
    "in A with the i-th in B (records, or pytest-benchmark documents, in file order; when each "
    "side is one --repeat record, its repetitions in order) and compare the pairs' ratios "
    "(geometric mean, paired t interval), so the host's drift between pairs cancels. Both "
    "sides need the same number of runs, two or more.",
)
@out_option("Append one diff record per compared row (JSON lines; ragbench report renders them).")
def diff(
    a: str,
    b: str,
    stat: str,
    threshold: str,
    allow_env_mismatch: bool,
    paired: bool,
    out: str | None,
) -> None:
    """Is B faster or slower than A? Per stage and in total, with intervals; exit 1 on a sure regression."""
    from ..results import diff as diffing

    limit = _threshold(threshold)
    check_outputs(out=out)
    side_a, side_b = diffing.read_comparables(a), diffing.read_comparables(b)
    rows, env, only = diffing.diff(
        side_a,
        side_b,
        stat=stat,
        threshold=limit,
        allow_env_mismatch=allow_env_mismatch,
        paired=paired,
    )
    warning = diffing.single_run_warning(side_a, side_b)
    if paired:
        warning = diffing.pairing_note(side_a, side_b)
    notes = [warning] if warning else []
    echo(
        diffing.diff_table(rows, env, only, stat=stat, threshold=limit, notes=notes, paired=paired)
    )
    echo("\n".join(diff_reading(rows)))
    if out:
        writer = RecordWriter(out)
        sides, files = (side_a, side_b), (a, b)
        writer.write_all(diffing.diff_records(rows, env, sides, files, stat=stat, threshold=limit))
        finish_outputs(writer)
    if any(r.verdict == diffing.SLOWER for r in rows):
        raise SystemExit(1)

"""``ragbench stream``: recall, latency and freshness while the index takes inserts and deletes."""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..records import RecordWriter
from ..rendering import render
from .options import (
    dataset_option,
    echo,
    k_option,
    out_option,
    parse_count,
    parse_value,
    plot_option,
    queries_option,
)

__all__ = ["stream"]


def _pairs(values: Sequence[str], option: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in values:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint=option)
        out[name.strip()] = parse_value(value)
    return out


@click.command()
@dataset_option(default="synthetic")
@click.option("--n", "n", help="Corpus size for synthetic (e.g. 20k).")
@click.option("--dim", type=click.IntRange(min=2), help="Dimension for synthetic.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the data and the run."
)
@click.option(
    "--index",
    default="hnsw",
    show_default=True,
    help="Index: flat, hnsw, ivf, lsh (faiss-hnsw cannot delete).",
)
@click.option("--build", "builds", multiple=True, metavar="NAME=V", help="Build parameter.")
@click.option(
    "--param", "params", multiple=True, metavar="NAME=V", help="Query parameter, e.g. ef=64."
)
@k_option(default=10, help="Neighbours per query.")
@queries_option(default=100, help="Dataset queries (recall at each checkpoint uses all of them).")
@click.option("--initial", type=float, default=0.5, show_default=True, help="Fraction built first.")
@click.option("--insert-rate", type=float, default=200.0, show_default=True, help="Inserts/s.")
@click.option("--delete-rate", type=float, default=100.0, show_default=True, help="Deletes/s.")
@click.option("--qps", type=float, default=200.0, show_default=True, help="Queries/s, open loop.")
@click.option("--duration", type=float, default=10.0, show_default=True, help="Seconds.")
@click.option("--checkpoints", type=click.IntRange(min=1), default=5, show_default=True)
@click.option(
    "--fresh",
    type=float,
    default=0.3,
    show_default=True,
    help="Share of queries aimed at the newest inserted document (its vector plus noise).",
)
@click.option("--noise", type=float, default=0.05, show_default=True, help="Aimed query noise.")
@click.option("--search-threads", type=click.IntRange(min=1), default=2, show_default=True)
@click.option(
    "--runbook",
    type=click.Path(exists=True, dir_okay=False),
    help="TOML list of [[step]] insert/delete/search/checkpoint to replay instead of the clock.",
)
@out_option("Append one JSON record per checkpoint.")
@plot_option("Write recall and search p50 at each checkpoint as PNG.")
def stream(
    dataset: str,
    n: str | None,
    dim: int | None,
    seed: int,
    index: str,
    builds: Sequence[str],
    params: Sequence[str],
    k: int,
    queries: int,
    initial: float,
    insert_rate: float,
    delete_rate: float,
    qps: float,
    duration: float,
    checkpoints: int,
    fresh: float,
    noise: float,
    search_threads: int,
    runbook: str | None,
    out: str | None,
    plot: str | None,
) -> None:
    """Streaming inserts and deletes (big-ann style): recall, latency and freshness per checkpoint."""
    from .. import datasets, indexes
    from ..streaming import StreamOptions, read_runbook, run_stream

    indexes.registry.factory(index)
    options = StreamOptions(
        index=index,
        build=_pairs(builds, "--build"),
        search=_pairs(params, "--param"),
        k=k,
        initial=initial,
        insert_rate=insert_rate,
        delete_rate=delete_rate,
        qps=qps,
        duration=duration,
        checkpoints=checkpoints,
        fresh=fresh,
        noise=noise,
        search_threads=search_threads,
        seed=seed,
    )
    options.check()
    steps = read_runbook(runbook) if runbook else None
    size = parse_count(n, "--n") if n else None
    ds = datasets.from_table(datasets.spec_table(dataset, n=size, dim=dim, seed=seed))
    emb = ds.default_embedder
    X, Q = ds.corpus_vectors(emb), ds.query_vectors(emb)
    writer = RecordWriter(out)

    def show(rec: dict[str, object]) -> None:
        writer(rec)
        echo(f"checkpoint {rec['checkpoint']}: live {rec['live']}, recall {rec['recall']:.3f}")

    run_stream(X, Q[:queries], ds.metric, options, runbook=steps, on_record=show, dataset=ds.name)
    echo(render(writer.records))
    if plot:
        from ..plots import plot_records

        plot_records(writer.records, plot)
        echo(f"wrote {plot}")

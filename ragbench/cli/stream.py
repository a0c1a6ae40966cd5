"""``ragbench stream``: recall, latency and freshness while the index takes inserts and deletes."""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..results.records import RecordWriter
from ..results.tables import render
from ..stream_limits import LIMITS, MAX_SEARCHES, MAX_STEP_COUNT
from ..stream_limits import number_text as _num
from .options import (
    check_outputs,
    dataset_option,
    echo,
    finish_outputs,
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


def _most(name: str) -> str:
    """``"at most 100000"``: the help text's bound of option ``name``."""
    return f"at most {_num(LIMITS[name][1])}"


@click.command()
@dataset_option(default="synthetic")
@click.option("--n", "n", help="Corpus size for synthetic (e.g. 20k).")
@click.option("--dim", type=click.IntRange(min=2), help="Dimension for synthetic.")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the run (initial rows, deletes, aimed queries) and of synthetic data.",
)
@click.option(
    "--index",
    default="hnsw",
    show_default=True,
    help="Index that takes add(), e.g. flat, hnsw, ivf (deletes need one that declares "
    "delete: not faiss-hnsw).",
)
@click.option("--build", "builds", multiple=True, metavar="NAME=V", help="Build parameter.")
@click.option(
    "--param", "params", multiple=True, metavar="NAME=V", help="Query parameter, e.g. ef=64."
)
@click.option(
    "--k",
    "k",
    type=click.IntRange(min=1, max=int(LIMITS["k"][1])),
    default=10,
    show_default=True,
    help=f"Neighbours per query ({_most('k')}, and at most the corpus size).",
)
@queries_option(default=100, help="Dataset queries (recall at each checkpoint uses all of them).")
@click.option(
    "--initial", type=float, default=0.5, show_default=True, help="Fraction built first, in (0, 1]."
)
@click.option(
    "--insert-rate",
    type=float,
    default=200.0,
    show_default=True,
    help=f"Inserts/s, {_most('insert_rate')}.",
)
@click.option(
    "--delete-rate",
    type=float,
    default=100.0,
    show_default=True,
    help=f"Deletes/s, {_most('delete_rate')}.",
)
@click.option(
    "--qps",
    type=float,
    default=200.0,
    show_default=True,
    help=f"Queries/s, open loop, {_most('qps')} (0: none in a timed run, back to back in a runbook); "
    f"--qps x --duration at most {MAX_SEARCHES} searches.",
)
@click.option(
    "--duration",
    type=float,
    default=10.0,
    show_default=True,
    help=f"Seconds, {_most('duration')}.",
)
@click.option(
    "--checkpoints",
    type=click.IntRange(min=1, max=int(LIMITS["checkpoints"][1])),
    default=5,
    show_default=True,
    help=f"Records, evenly spaced over --duration ({_most('checkpoints')}).",
)
@click.option(
    "--fresh",
    type=float,
    default=0.3,
    show_default=True,
    help="Share of queries aimed at the newest inserted document (its vector plus noise), "
    "in [0, 1].",
)
@click.option(
    "--noise",
    type=float,
    default=0.05,
    show_default=True,
    help=f"Aimed query noise, times the vector's length, in [0, {_num(LIMITS['noise'][1])}].",
)
@click.option(
    "--search-threads",
    type=click.IntRange(min=1, max=int(LIMITS["search_threads"][1])),
    default=2,
    show_default=True,
    help=f"Searcher threads ({_most('search_threads')}).",
)
@click.option(
    "--runbook",
    type=click.Path(exists=True, dir_okay=False),
    help="TOML list of [[step]] insert/delete/search/checkpoint to replay instead of the clock "
    "(a regular file of at most 1 MiB; each count at most "
    f"{MAX_STEP_COUNT}, searches in all at most "
    f"{MAX_SEARCHES}; at least one checkpoint).",
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
    from ..live_writes import StreamOptions, read_runbook, run_stream

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
    options.check(timed=runbook is None)
    steps = read_runbook(runbook) if runbook else None
    check_outputs(out, plot)
    size = parse_count(n, "--n") if n else None
    # the seed orders the run; only the synthetic dataset is made from one too
    table = datasets.spec_table(dataset, n=size, dim=dim)
    if table.get("name") == "synthetic":
        table["seed"] = seed
    ds = datasets.from_table(table)
    emb = ds.default_embedder
    X, Q = ds.corpus_vectors(emb), ds.query_vectors(emb)
    writer = RecordWriter(out)

    def show(rec: dict[str, object]) -> None:
        writer(rec)
        echo(f"checkpoint {rec['checkpoint']}: live {rec['live']}, recall {rec['recall']:.3f}")

    run_stream(X, Q[:queries], ds.metric, options, runbook=steps, on_record=show, dataset=ds.name)
    echo(render(writer.records))
    finish_outputs(writer, writer.records, plot)

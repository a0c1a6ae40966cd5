"""``ragbench sweep`` and ``ragbench scale`` (see :mod:`ragbench.sweeps`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from .cli import _dataset_table, _echo, _parse_count, _parse_value, _progress, _split, record_writer

__all__ = ["scale", "sweep"]


def _grid(pairs: Sequence[str], option: str) -> dict[str, list[Any]]:
    """``ef=16,32`` (repeatable) → ``{"ef": [16, 32]}``."""
    out: dict[str, list[Any]] = {}
    for pair in pairs:
        name, sep, values = pair.partition("=")
        if not sep or not name or not values:
            raise click.BadParameter(f"expected NAME=V1,V2,..., got {pair!r}", param_hint=option)
        out[name.strip()] = [_parse_value(v) for v in _split(values, option)]
    return out


def _load(
    dataset: str, n: int | None, dim: int | None, n_queries: int | None, seed: int | None
) -> Any:
    from . import datasets

    table = _dataset_table(dataset, n, dim, n_queries, seed)
    if "path" in table:
        path = table.pop("path")
        return datasets.load(path, **table)
    return datasets.load(table.pop("name"), **table)


def _check_params(
    index_names: Sequence[str], dim: int, metric: str, build: dict[str, Any], query: dict[str, Any]
) -> None:
    from .errors import ConfigError
    from .sweeps import _factory_defaults

    b_all: set[str] = set()
    q_all: set[str] = {"rescore"}
    for name in index_names:
        b, q = _factory_defaults(name, dim, metric)
        b_all |= b
        q_all |= q
    for given, valid, what in ((build, b_all, "--build"), (query, q_all, "--param")):
        bad = sorted(set(given) - valid)
        if bad:
            raise ConfigError(
                f"{what} {bad[0]!r} applies to none of {', '.join(index_names)}; "
                f"valid: {', '.join(sorted(valid))}"
            )


@click.command()
@click.option("--dataset", default="synthetic", show_default=True, help="Dataset name or path.")
@click.option("--n", "n", help="Corpus size for synthetic (e.g. 100k).")
@click.option("--dim", type=int, help="Dimension for synthetic.")
@click.option("--seed", type=int, help="Seed for synthetic.")
@click.option("--embed", help="Embedder for text datasets (minilm, hashing).")
@click.option(
    "--index", "index", required=True, help="Comma-separated indexes, e.g. hnsw,faiss-hnsw,ivf,lsh."
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=V1,V2",
    help="Query parameter values, e.g. ef=16,32,64 or nprobe=1,4,16 or rescore=100,1000 (repeatable).",
)
@click.option(
    "--build",
    "builds",
    multiple=True,
    metavar="NAME=V1,V2",
    help="Build parameter values, e.g. M=16,32 or nlist=256 (repeatable).",
)
@click.option("--k", "k", type=int, default=10, show_default=True, help="Neighbours per query.")
@click.option(
    "--queries", type=int, default=200, show_default=True, help="Queries measured per point."
)
@click.option(
    "--threads", type=int, help="Threads for batch QPS (single-query latency always uses 1)."
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Append one JSON record per point as it finishes.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    help="Write recall (x) vs QPS (log y) per index as PNG.",
)
def sweep(
    dataset: str,
    n: str | None,
    dim: int | None,
    seed: int | None,
    embed: str | None,
    index: str,
    params: Sequence[str],
    builds: Sequence[str],
    k: int,
    queries: int,
    threads: int | None,
    out: str | None,
    plot: str | None,
) -> None:
    """Recall vs latency frontier: the cartesian product of build × query parameters per index."""
    from . import threads as th
    from .sweeps import SweepData, count_points, render_sweep_records, sweep_points

    if threads is not None:
        th.set_threads(threads)
    names = _split(index, "--index")
    from . import indexes

    for name in names:
        indexes.registry.factory(name)  # unknown names fail before any work
    query_grid, build_grid = _grid(params, "--param"), _grid(builds, "--build")
    ds = _load(dataset, _parse_count(n) if n else None, dim, None, seed)
    data = SweepData.from_dataset(ds, k=k, n_queries=queries, embedder=embed)
    dim_ = int(data.vectors.shape[1])
    _check_params(names, dim_, data.metric, build_grid, query_grid)
    total = count_points(names, dim_, data.metric, build_grid, query_grid)
    records: list[dict[str, Any]] = []
    write = record_writer(out, records)
    try:
        with _progress(total, "sweep points") as advance:
            sweep_points(
                data,
                names,
                k=k,
                build_grid=build_grid,
                query_grid=query_grid,
                on_point=write,
                progress=advance,
            )
    except KeyboardInterrupt:
        if records:
            _echo(render_sweep_records(records))
        raise
    _echo(render_sweep_records(records))
    if plot:
        from .sweeps import plot_sweep_records

        plot_sweep_records(records, plot)
        _echo(f"wrote {plot}")


@click.command()
@click.option(
    "--index", "index", required=True, help="Comma-separated indexes, e.g. hnsw,lsh,flat."
)
@click.option("--n", "ns", required=True, help="Comma-separated corpus sizes, e.g. 10k,100k,1M.")
@click.option("--dim", type=int, default=384, show_default=True, help="Vector dimension.")
@click.option("--k", "k", type=int, default=10, show_default=True, help="Neighbours per query.")
@click.option(
    "--recall",
    "target",
    type=float,
    default=0.9,
    show_default=True,
    help="Recall target the query parameter is tuned to reach.",
)
@click.option("--queries", type=int, default=200, show_default=True, help="Queries per point.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic data.")
@click.option(
    "--build",
    "builds",
    multiple=True,
    metavar="INDEX.NAME=VALUE",
    help="Build parameter for one index, e.g. hnsw.M=32 (repeatable).",
)
@click.option("--threads", type=int, help="Threads for builds and batch QPS.")
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Append one JSON record per (index, n)."
)
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a log-log plot of p50 vs n.")
def scale(
    index: str,
    ns: str,
    dim: int,
    k: int,
    target: float,
    queries: int,
    seed: int,
    builds: Sequence[str],
    threads: int | None,
    out: str | None,
    plot: str | None,
) -> None:
    """Cost as the corpus grows: build time, memory and p50 at a recall target, per n."""
    from . import datasets, indexes
    from . import threads as th
    from .errors import ConfigError
    from .sweeps import SweepData, render_sweep_records, scale_points

    if threads is not None:
        th.set_threads(threads)
    if not 0.0 < target <= 1.0:
        raise ConfigError(f"--recall must be in (0, 1], got {target}")
    names = _split(index, "--index")
    for name in names:
        indexes.registry.factory(name)
    sizes = []
    for item in _split(ns, "--n"):
        try:
            sizes.append(_parse_count(item))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a size like 10k", param_hint="--n") from None
    build: dict[str, dict[str, Any]] = {}
    for pair in builds:
        key, sep, value = pair.partition("=")
        idx, dot, pname = key.partition(".")
        if not sep or not dot:
            raise click.BadParameter(
                f"expected INDEX.NAME=VALUE, got {pair!r}", param_hint="--build"
            )
        build.setdefault(idx, {})[pname] = _parse_value(value)
    records: list[dict[str, Any]] = []
    write = record_writer(out, records)

    def make(n: int):  # type: ignore[no-untyped-def]
        return lambda: SweepData.from_dataset(
            datasets.load("synthetic", n=n, dim=dim, n_queries=queries, seed=seed), k=k
        )

    with _progress(len(sizes) * len(names), "scale points") as advance:
        scale_points(
            [(n, make(n)) for n in sizes],
            names,
            k=k,
            target=target,
            build=build,
            on_point=write,
            progress=advance,
        )
    _echo(render_sweep_records(records))
    if plot:
        from .sweeps import plot_sweep_records

        plot_sweep_records(records, plot)
        _echo(f"wrote {plot}")

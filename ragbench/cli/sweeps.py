"""``ragbench sweep`` (recall vs latency frontiers) and ``ragbench scale`` (cost as n grows)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import click

from ..errors import ConfigError
from ..results.reading import reading
from ..results.records import RecordWriter
from ..results.tables import render
from .configs import embed_runtime_option, re_embed_option
from .options import (
    check_outputs,
    counts,
    dataset_option,
    echo,
    executor_from,
    executor_options,
    fast_build_option,
    finish_outputs,
    grid,
    index_option,
    k_option,
    out_option,
    parse_count,
    parse_value,
    plot_option,
    progress,
    queries_option,
    rebuilds_option,
    repeat_option,
    set_option,
    set_pairs,
    split_list,
    threads_option,
)

__all__ = ["scale", "sweep"]


def _index_names(value: str) -> list[str]:
    """Comma-separated index names, each checked against the registry before any work."""
    from .. import indexes

    names = split_list(value, "--index")
    for name in names:
        indexes.registry.factory(name)
    return names


def _finish(writer: RecordWriter, plot: str | None) -> None:
    echo(render(writer.records))
    echo("\n".join(reading(writer.records)))
    finish_outputs(writer, writer.records, plot)


@click.command()
@dataset_option(default="synthetic")
@click.option("--n", "n", help="Corpus size for synthetic (e.g. 100k).")
@click.option("--dim", type=click.IntRange(min=1), help="Dimension for synthetic.")
@click.option("--seed", type=int, help="Seed for synthetic.")
@click.option(
    "--embed",
    help="Embedder for text datasets (minilm, model2vec, hashing), or a comma-separated list: "
    "every point once per embedder, each with its own vectors and exact neighbours.",
)
@embed_runtime_option("every point once per runtime, each with its own vectors")
@set_option(
    "An [embed] key for every embedder, e.g. --set embed.query_only=true (repeatable; the "
    "index's parameters are --build and --param)."
)
@re_embed_option()
@index_option(required=True, help="Comma-separated indexes, e.g. hnsw,faiss-hnsw,ivf,lsh.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="[INDEX.]NAME=V1,V2",
    help="Query parameter values, e.g. ef=16,32,64 or nprobe=1,4,16 or rescore=100,1000 "
    "(repeatable): NAME goes to every index that takes it (refused when none does); "
    "INDEX.NAME to that index alone, in place of NAME's values, e.g. --param ef=10,20,40 "
    "--param lancedb.ef=20,40,80 (refused when INDEX does not take NAME). An index's recall "
    "knob (ef, nprobe, nprobes) not given here is chosen per index on its build, dense near "
    "--recall-target (ragbench.sweeps.grid).",
)
@click.option(
    "--build",
    "builds",
    multiple=True,
    metavar="[INDEX.]NAME=V1,V2",
    help="Build parameter values, e.g. M=16,32 or nlist=256 or lancedb.index_type=ivf_hnsw_sq "
    "(repeatable; INDEX.NAME as in --param).",
)
@k_option(default=10, help="Neighbours per query.")
@queries_option(default=200, help="Queries measured per point.")
@repeat_option("Passes over the queries per point; intervals resample them.")
@threads_option("Threads for batch QPS (single-query latency always uses 1).")
@out_option("Append one JSON record per point as it finishes.")
@plot_option("Write recall (x) vs QPS (log y) per index as PNG (filtered: vs selectivity).")
@click.option(
    "--filter-selectivity",
    "filter_selectivity",
    metavar="S1,S2",
    help="Also measure every point with a filter per query at these selectivities, "
    "e.g. 0.5,0.05,0.005 (recall vs the exact filtered top k).",
)
@click.option(
    "--filter-strategy",
    "filter_strategy",
    default="auto",
    show_default=True,
    metavar="S1,S2",
    help="Filter strategies to measure: auto, pre, post, in-graph (those an index lacks are skipped).",
)
@click.option(
    "--filter-attribute", help="Attribute the filters select on (default: the dataset's first)."
)
@click.option(
    "--filter-correlated/--filter-random",
    default=False,
    show_default=True,
    help="Draw each query's filter from its own neighbourhood's values, or at random.",
)
@click.option(
    "--recall-target",
    default="0.9,0.95,0.99",
    show_default=True,
    metavar="R1,R2",
    help="Recall targets: the reading gives each index's p50 / p99 at each one, interpolated "
    "on its frontier, and their ratio at equal recall; the lowest is the one the cheapest "
    "point must reach and under which a filtered line has fallen off its cliff.",
)
@fast_build_option()
@rebuilds_option()
@executor_options
def sweep(
    dataset: str,
    n: str | None,
    dim: int | None,
    seed: int | None,
    embed: str | None,
    embed_runtime: str | None,
    overrides: Sequence[str],
    re_embed: bool | None,
    index: str,
    params: Sequence[str],
    builds: Sequence[str],
    k: int,
    queries: int,
    repeat: int | None,
    threads: int | None,
    out: str | None,
    plot: str | None,
    filter_selectivity: str | None,
    filter_strategy: str,
    filter_attribute: str | None,
    filter_correlated: bool,
    recall_target: str,
    fast_build: bool | None,
    rebuilds: int,
    executor: str,
    ray_address: str | None,
) -> None:
    """Recall vs latency frontier: the cartesian product of build × query parameters per index.

    Each (index, build parameters) is one unit of work: built once, measured at every
    query-parameter point. Several indexes are measured round by round (each one's n-th
    point seconds after the others'), each on its own grid: the default one, or values
    given per index (--param INDEX.NAME=...); with --executor ray each unit is a Ray task. With
    --filter-selectivity every point is also measured filtered, per strategy and
    selectivity, and each strategy's "filter cliff" is marked. With several embedders
    (--embed a,b, --embed-runtime a,b) the grid runs once per embedder on its own vectors.
    """
    from .. import datasets, indexes
    from .. import threads as th
    from ..sweeps import check_grid, count_points, sweep_points

    check_outputs(out, plot)
    choices = _embedder_choices(embed, embed_runtime, overrides)
    names = _index_names(index)
    targets = _recall_targets(recall_target)
    sels, strategies = _filter_axes(filter_selectivity, filter_strategy)
    query_grid, build_grid = grid(params, "--param"), grid(builds, "--build")
    # parameter names are checked before the data is loaded or embedded
    check_grid(names, dim or indexes.PROBE_DIM, "ip", build_grid, query_grid)
    if threads is not None:
        th.set_threads(threads)
    writer = RecordWriter(out)
    # the executor first: a missing extra or an unreachable cluster fails before any embedding
    with executor_from(executor, ray_address) as ex:
        size = parse_count(n, "--n") if n else None
        ds = datasets.from_table(datasets.spec_table(dataset, n=size, dim=dim, seed=seed))
        table = {"attribute": filter_attribute, "correlated": filter_correlated}
        options: dict[str, Any] = {"re_embed": bool(re_embed), "k": k}
        options.update(filter_table=table, n_queries=queries, filter_selectivities=sels)
        datas = _sweep_data(ds, choices, options)
        try:
            grids = (build_grid, query_grid)
            each: dict[str, Any] = {"selectivities": len(sels), "strategies": strategies}
            total = sum(count_points(names, d.dim, d.metric, *grids, **each) for d in datas)
            with progress(total, "sweep points") as advance:
                run: dict[str, Any] = {"repeat": repeat or 1, "rebuilds": rebuilds, "k": k}
                run.update(fast_build=bool(fast_build), build_grid=build_grid, executor=ex)
                run.update(query_grid=query_grid, on_point=writer, progress=advance)
                run.update(recall_target=targets[0], recall_targets=targets)
                for data in datas:  # one embedder's vectors after the other's
                    sweep_points(data, names, strategies=strategies, **run)
        except KeyboardInterrupt:
            if writer.records:
                echo(render(writer.records))
            raise
    _finish(writer, plot)


def _sweep_data(
    ds: Any, choices: list[tuple[str | None, dict[str, Any]]], options: dict[str, Any]
) -> list[Any]:
    """One :class:`~ragbench.sweeps.SweepData` per embedder choice, every embedder created
    (its name and keys checked) before any is loaded or embeds anything."""
    from .. import embedders
    from ..sweeps import SweepData

    for name, keys in choices:
        if (name or ds.default_embedder) != "precomputed":
            embedders.create(name or ds.default_embedder, **keys)
    return [
        SweepData.from_dataset(ds, embedder=name, embedder_params=keys, **options)
        for name, keys in choices
    ]


def _embedder_choices(
    embed: str | None, runtimes: str | None, overrides: Sequence[str]
) -> list[tuple[str | None, dict[str, Any]]]:
    """(embedder name, its parameters) per ``--embed`` item, minilm once per ``--embed-runtime``
    item; name ``None``: the dataset's default embedder. ``--set`` gives [embed] keys only."""
    sets = set_pairs(overrides)
    other = sorted(set(sets) - {"embed"})
    if other:
        raise ConfigError(
            f"sweep: --set takes [embed] keys only (embed.KEY=VALUE), got {other[0]}.…; "
            "the index's parameters are --build NAME=V1,V2 and --param NAME=V1,V2"
        )
    params = dict(sets.get("embed") or {})
    if "backend" in params:
        raise ConfigError("sweep: name the embedder with --embed, not --set embed.backend")
    names: list[str | None] = [*split_list(embed, "--embed")] or [None]
    per_runtime = split_list(runtimes, "--embed-runtime")
    takes = [name for name in names if name in (None, "minilm")]
    if per_runtime and not takes:
        raise ConfigError(
            f"--embed-runtime is minilm's; --embed names {', '.join(map(str, names))}"
        )
    out: list[tuple[str | None, dict[str, Any]]] = []
    for name in names:
        if per_runtime and name in takes:
            out += [(name, {**params, "runtime": rt}) for rt in per_runtime]
        else:
            out.append((name, dict(params)))
    return out


def _recall_targets(value: str) -> list[float]:
    """The --recall-target values, each in (0, 1], ascending without repeats."""
    out = set()
    for v in split_list(value, "--recall-target"):
        x = parse_value(v)
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 < x <= 1.0:
            raise ConfigError(f"--recall-target values must be in (0, 1], got {v!r}")
        out.add(float(x))
    return sorted(out)


def _filter_axes(selectivity: str | None, strategy: str) -> tuple[list[float], list[str]]:
    """The --filter-selectivity values and --filter-strategy names, checked."""
    from ..settings.sources import FILTER_STRATEGIES

    sels = [parse_value(v) for v in split_list(selectivity, "--filter-selectivity")]
    for v in sels:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ConfigError(f"--filter-selectivity values must be in (0, 1], got {v!r}")
    strategies = split_list(strategy, "--filter-strategy")
    for name in strategies:
        if name not in FILTER_STRATEGIES:
            raise ConfigError(f"--filter-strategy {name!r}: use {', '.join(FILTER_STRATEGIES)}")
    return [float(v) for v in sels], strategies


def _per_index_build(builds: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``hnsw.M=32`` (repeatable) → ``{"hnsw": {"M": 32}}``."""
    out: dict[str, dict[str, Any]] = {}
    for pair in builds:
        key, sep, value = pair.partition("=")
        idx, dot, pname = key.partition(".")
        if not sep or not dot or not idx or not pname:
            raise click.BadParameter(
                f"expected INDEX.NAME=VALUE, got {pair!r}", param_hint="--build"
            )
        out.setdefault(idx, {})[pname] = parse_value(value)
    return out


@click.command()
@index_option(required=True, help="Comma-separated indexes, e.g. hnsw,lsh,flat.")
@click.option("--n", "ns", required=True, help="Comma-separated corpus sizes, e.g. 10k,100k,1M.")
@click.option(
    "--dim", type=click.IntRange(min=1), default=384, show_default=True, help="Vector dimension."
)
@k_option(default=10, help="Neighbours per query.")
@click.option(
    "--recall",
    "target",
    type=float,
    default=0.9,
    show_default=True,
    help="Recall target the query parameter is tuned to reach.",
)
@queries_option(default=200, help="Queries per point.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic data.")
@click.option(
    "--build",
    "builds",
    multiple=True,
    metavar="INDEX.NAME=VALUE",
    help="Build parameter for one index, e.g. hnsw.M=32 (repeatable).",
)
@threads_option("Threads for builds and batch QPS.")
@out_option("Append one JSON record per (index, n).")
@plot_option("Write a log-log plot of p50 vs n.")
@fast_build_option()
@rebuilds_option()
@executor_options
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
    fast_build: bool | None,
    rebuilds: int,
    executor: str,
    ray_address: str | None,
) -> None:
    """Cost as the corpus grows: build time, memory and p50 at a recall target, per n.

    With --executor ray each (n, index) is a Ray task that makes its own synthetic corpus
    (deterministic: the same on every node).
    """
    from .. import threads as th
    from ..sweeps import check_grid, scale_points, synthetic_data

    if not 0.0 < target <= 1.0:
        raise ConfigError(f"--recall must be in (0, 1], got {target}")
    check_outputs(out, plot)
    names = _index_names(index)
    sizes = counts(ns, "--n")
    build = _per_index_build(builds)
    for name, params in build.items():
        if name not in names:
            raise ConfigError(f"--build {name}.…: {name!r} is not among --index {', '.join(names)}")
        check_grid([name], dim, "ip", params, {})
    if threads is not None:
        th.set_threads(threads)
    writer = RecordWriter(out)
    by_n = [
        (n, functools.partial(synthetic_data, n, dim=dim, n_queries=queries, seed=seed, k=k))
        for n in sizes
    ]
    with (
        executor_from(executor, ray_address) as ex,
        progress(len(sizes) * len(names), "scale points") as advance,
    ):
        scale_points(
            by_n,
            names,
            k=k,
            target=target,
            build=build,
            on_point=writer,
            progress=advance,
            executor=ex,
            rebuilds=rebuilds,
            fast_build=bool(fast_build),
        )
    _finish(writer, plot)

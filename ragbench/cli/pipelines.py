"""``ragbench run`` (one pipeline) and ``ragbench compare`` (the cartesian product, interleaved)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import click

from ..config import load_config, merge, normalize
from ..records import RecordWriter
from ..rendering import STATS, compare_table, fixed_line, setup_summary
from .options import (
    config_option,
    counts,
    dataset_option,
    echo,
    k_option,
    out_option,
    parse_count,
    progress,
    queries_option,
    set_option,
    set_pairs,
    split_list,
    threads_option,
)

__all__ = ["compare", "run"]


@click.command()
@config_option(required=True, help="Pipeline config (TOML), e.g. bench/configs/default.toml.")
@out_option("Append the run's JSON record to this file.")
@queries_option(help="Measured requests (overrides [run] queries).")
@click.option(
    "--warmup", type=click.IntRange(min=0), help="Warm-up requests (overrides [run] warmup)."
)
@dataset_option(help="Dataset name or path (overrides [dataset]).")
@set_option()
def run(
    config: str,
    out: str | None,
    queries: int | None,
    warmup: int | None,
    dataset: str | None,
    overrides: Sequence[str],
) -> None:
    """Run one pipeline: per-stage table and (with --out) a JSON record."""
    from .. import datasets
    from ..pipeline import Pipeline

    cfg = load_config(config)
    extra = set_pairs(overrides)
    if dataset is not None:
        cfg["dataset"] = datasets.spec_table(dataset)
    for key, value in (("queries", queries), ("warmup", warmup)):
        if value is not None:
            extra.setdefault("run", {})[key] = value
    with Pipeline.from_config(merge(cfg, extra)) as pipe:
        pipe.setup()
        pipe.warm(pipe.config["run"]["warmup"])
        n = pipe.config["run"]["queries"]
        with progress(n, "requests") as advance:
            report = pipe.run(queries=n, warmup=0, progress=advance)
    echo(report.table())
    if out is not None:
        RecordWriter(out).write_all(report.to_records())
    if report.error:
        raise SystemExit(1)


#: compare's axes: option → the config table whose backend it varies.
AXES = (
    ("--index", "retrieve"),
    ("--rerank", "rerank"),
    ("--codec", "serialize"),
    ("--transport", "transport"),
)


def _compare_base(
    config: str | None,
    dataset_table: dict[str, Any] | None,
    run_over: dict[str, Any],
    tables: dict[str, Any],
    overrides: Sequence[str],
) -> dict[str, Any]:
    """The config every combination starts from: file, then --set, then the named options."""
    base = load_config(config) if config else {}
    if dataset_table is not None:
        base["dataset"] = dataset_table
    extra = set_pairs(overrides)
    run_tables = {k: v for k, v in run_over.items() if v is not None}
    if run_tables:
        extra["run"] = {**extra.get("run", {}), **run_tables}
    for table, values in tables.items():
        given = {k: v for k, v in values.items() if v is not None}
        if given:
            extra[table] = {**extra.get(table, {}), **given}
    return normalize(merge(base, extra))


def _combinations(
    base: dict[str, Any], axes: list[tuple[str, list[Any]]], from_file: bool
) -> list[tuple[dict[str, Any], str | None]]:
    """(config, label) per combination; labels name only the axes that vary."""
    out = []
    for combo in itertools.product(*[values for _, values in axes]):
        cfg = merge(base, {})
        parts = []
        for (axis, values), value in zip(axes, combo, strict=True):
            if axis == "k_candidates":
                cfg["run"]["k_candidates"] = value
                parts += [f"kc={value}"] if len(values) > 1 else []
                continue
            # build/search params belong to one backend: keep them only for the base's own
            if axis == "retrieve" and value != cfg["retrieve"]["backend"] and not from_file:
                cfg["retrieve"]["build"], cfg["retrieve"]["search"] = {}, {}
            cfg[axis]["backend"] = value
            parts += [str(value)] if len(values) > 1 else []
        out.append((cfg, "/".join(parts) if parts else None))
    return out


def _run_side_by_side(pipelines: Sequence[Any]) -> list[Any]:
    """Set every pipeline up (sharing built parts), warm each, run them interleaved; their reports."""
    from ..pipeline import SharedParts, interleave

    shared = SharedParts()
    with progress(len(pipelines), "setting up") as advance:
        for pipe in pipelines:
            pipe.setup(shared=shared)
            advance(1)
    for pipe in pipelines:
        pipe.warm(pipe.config["run"]["warmup"])
    n = pipelines[0].config["run"]["queries"]
    with progress(n, f"{len(pipelines)} runs × {n} requests, interleaved") as advance:
        interleave(pipelines, n, progress=advance)
    return [p.report() for p in pipelines]


@click.command()
@config_option(help="Base pipeline config (TOML); the options below vary it.")
@dataset_option(help="Dataset name (pydocs, synthetic) or path. [default: pydocs]")
@click.option("--n", "n", help="Corpus size for synthetic (e.g. 10k).")
@click.option("--dim", type=click.IntRange(min=1), help="Dimension for synthetic.")
@click.option("--embed", help="Embedder backend (minilm, hashing, precomputed).")
@click.option("--index", "index", help="Comma-separated index backends, e.g. flat,hnsw,lsh.")
@click.option("--rerank", help="Comma-separated rerankers, e.g. numba,numpy,python,none.")
@click.option("--codec", help="Comma-separated codecs, e.g. json,orjson,protobuf.")
@click.option("--transport", help="Comma-separated transports, e.g. inproc,http,grpc.")
@click.option("--generate", help="Generator backend (none, stub, openai).")
@k_option()
@click.option(
    "--k-candidates", "k_candidates", help="Comma-separated candidate counts, e.g. 10,100,1000."
)
@click.option(
    "--with-embeddings/--without-embeddings",
    default=None,
    help="Carry chunk embeddings in the payload.",
)
@queries_option(help="Measured requests per combination.")
@click.option("--warmup", type=click.IntRange(min=0), help="Warm-up requests per combination.")
@threads_option("Threads each request's library calls may use (default 1; set-up uses every core).")
@set_option()
@out_option("Append one JSON record per combination.")
@click.option(
    "--stat",
    type=click.Choice(STATS),
    default="p50",
    show_default=True,
    help="Statistic shown for each stage.",
)
def compare(**opts: Any) -> None:
    """Run the cartesian product of the given backends side by side, interleaved, in one process."""
    from .. import datasets
    from ..pipeline import Pipeline

    table = None
    if any(opts[o] is not None for o in ("dataset", "n", "dim")):
        n = parse_count(opts["n"], "--n") if opts["n"] else None
        table = datasets.spec_table(opts["dataset"] or "synthetic", n=n, dim=opts["dim"])
    run_over = {key: opts[key] for key in ("queries", "warmup", "k", "threads")}
    tables = {
        "embed": {"backend": opts["embed"]},
        "generate": {"backend": opts["generate"]},
        "serialize": {"with_embeddings": opts["with_embeddings"]},
    }
    base = _compare_base(opts["config"], table, run_over, tables, opts["overrides"])
    axes: list[tuple[str, list[Any]]] = []
    for option, tname in AXES:
        items = split_list(opts[option.lstrip("-")], option)
        axes += [(tname, items)] if items else []
    kc = counts(opts["k_candidates"], "--k-candidates")
    axes += [("k_candidates", kc)] if kc else []
    # every combination is created (and so checked) before anything is set up
    pipelines = [
        Pipeline(cfg, label=label) for cfg, label in _combinations(base, axes, bool(opts["config"]))
    ]
    try:
        reports = _run_side_by_side(pipelines)
    finally:
        for p in pipelines:
            p.close()
    records = [rec for r in reports for rec in r.to_records()]
    if opts["out"]:
        RecordWriter(opts["out"]).write_all(records)
    echo(fixed_line(records, {axis for axis, values in axes if len(values) > 1}))
    echo(compare_table(records, stat=opts["stat"]))
    echo(setup_summary(records))
    for r in reports:
        if r.error:
            echo(f"{r.label}: STOPPED EARLY: {r.error}")
    if any(r.error for r in reports):
        raise SystemExit(1)

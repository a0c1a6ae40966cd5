"""``ragbench frontier``: compare's grid, then the cheapest configuration at a given nDCG@10."""

from __future__ import annotations

from typing import Any

import click

from ..orders import DESIGNS
from ..results.records import RecordWriter, new_record
from ..results.tables import compare_table
from ..results.tables.runs import fixed_line
from ..settings import Config
from .configs import backend_options, configurations
from .options import (
    check_outputs,
    echo,
    fast_build_option,
    out_option,
    plot_option,
    queries_option,
    repeat_option,
)
from .pipelines import measure_combinations

__all__ = ["frontier"]


@click.command()
@backend_options
@queries_option(help="Measured requests per combination.")
@click.option("--warmup", type=click.IntRange(min=0), help="Warm-up requests per combination.")
@repeat_option()
@out_option("Append one run record per combination, then the frontier record.")
@click.option(
    "--order",
    type=click.Choice(DESIGNS),
    default="balanced",
    show_default=True,
    help="Order of the interleaved turns (as compare's --order).",
)
@click.option("--order-seed", "order_seed", type=int, default=0, show_default=True)
@click.option(
    "--within",
    type=click.FloatRange(min=0.0, max=100.0),
    default=1.0,
    show_default=True,
    help="Percent of the best nDCG@10 the cheapest configuration may lose.",
)
@click.option(
    "--p99-budget-ms",
    "p99_budget_ms",
    type=click.FloatRange(min=0.0, min_open=True),
    help="Print the best nDCG@10 among configurations whose total p99 is at most this (ms).",
)
@click.option(
    "--frontier-only",
    "frontier_only",
    is_flag=True,
    help="Write only the frontier record to --out, not one run record per configuration: "
    "what its table, lines and chart read (~0.5 KB a configuration, where a run record keeps "
    "every request's samples). ragbench diff then compares each configuration's p50 and p99 "
    "without intervals.",
)
@plot_option("Write a PNG of total p50 and p99 against nDCG@10, the Pareto set marked.")
@fast_build_option()
def frontier(**opts: Any) -> None:
    """Measure the product of the given backends as compare does, then latency against nDCG@10.

    Every combination runs side by side, interleaved and order-balanced (compare's scheduler),
    on a dataset with judged answers (qrels). Printed: compare's table, then each configuration's
    total p50 and p99 before the first token and nDCG@10 with 95 % intervals, the Pareto set
    (p50 against nDCG@10, point estimates), the cheapest configuration within --within % of
    the best nDCG@10 and the best one under --p99-budget-ms. A reranker with random weights
    (the cross-encoder without a model folder) is timed but never ranked on quality.
    """
    check_outputs(opts["out"], opts["plot"])
    if opts["frontier_only"] and not opts["out"]:
        from ..errors import ConfigError

        raise ConfigError("--frontier-only says what --out keeps: give --out FILE")
    run_over = {key: opts[key] for key in ("queries", "warmup", "repeat")}
    combos, varying = configurations(opts, run_over)
    _need_qrels(combos[0][0])
    if opts["fast_build"]:
        combos = [(_fast(cfg), label) for cfg, label in combos]
    writer = RecordWriter(opts["out"])
    runs_to = RecordWriter() if opts["frontier_only"] else writer  # kept in memory only
    records = measure_combinations(combos, {**opts, "executor": "local"}, runs_to)
    echo(fixed_line(records, varying))
    echo(compare_table(records, stat="p50"))
    _conclude(records, opts, writer)


def _need_qrels(cfg: Config) -> None:
    """A dataset without judged answers is refused before anything is measured (one line, exit 2)."""
    from .. import datasets
    from ..errors import ConfigError

    table = cfg.dataset
    ds = datasets.from_table(table.to_dict())
    if ds.qrels is None:
        name = table.path or table.name or ds.name
        raise ConfigError(
            f"frontier ranks by nDCG@10 and dataset {name!r} has no judged answers (qrels): "
            "add a BEIR qrels/test.tsv, a qrels.tsv or qrels.csv beside the corpus, or "
            "set dataset.qrels=FILE (docs: how-to/judging-by-relevance)"
        )


def _fast(cfg: Config) -> Config:
    return cfg.replace("retrieve", fast_build=True)


def _conclude(records: list[dict[str, Any]], opts: Any, writer: RecordWriter) -> None:
    """The frontier record (written after the runs), its table and lines, the chart."""
    from ..results.frontier import frontier_fields
    from ..results.tables import render
    from .options import finish_outputs

    fields = frontier_fields(records, opts["within"] / 100.0, opts["p99_budget_ms"])
    summary = new_record("frontier", fields)
    writer.write_all([summary])
    echo(render([summary]))
    finish_outputs(writer, [*records, summary], opts["plot"])
    if any(r.get("error") for r in records):
        raise SystemExit(1)

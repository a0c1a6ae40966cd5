"""The configurations ``compare`` and ``load`` run side by side: one option set, one product.

:func:`backend_options` declares the options both commands take (a base
config, the dataset, one comma list per varied backend, the run settings,
``--set``); :func:`configurations` turns them into one (config, label) per
combination of the comma lists, every config already checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from ..config import load_config, merge, normalize
from .options import (
    config_option,
    counts,
    dataset_option,
    k_option,
    parse_count,
    parse_value,
    set_option,
    set_pairs,
    split_list,
    threads_option,
)
from .payloads import PAYLOAD_AXES, payload_axes, set_axis

__all__ = ["AXES", "backend_options", "configurations", "otel_option", "re_embed_option"]

F = TypeVar("F", bound=Callable[..., Any])

#: Comma-list options → the config table whose backend each varies.
AXES = (
    ("--index", "retrieve"),
    ("--rerank", "rerank"),
    ("--codec", "serialize"),
    ("--transport", "transport"),
)


def backend_options(fn: F) -> F:
    """The options of every command that runs configurations side by side."""
    decorators = [
        config_option(
            help="Base pipeline config (a TOML file or a shipped name such as hashing); "
            "the options below vary it."
        ),
        dataset_option(help="Dataset name (pydocs, synthetic) or path. [default: pydocs]"),
        click.option("--n", "n", help="Corpus size for synthetic (e.g. 10k)."),
        click.option("--dim", type=click.IntRange(min=1), help="Dimension for synthetic."),
        click.option("--embed", help="Embedder backend (minilm, hashing, precomputed)."),
        re_embed_option(),
        click.option(
            "--index", "index", help="Comma-separated index backends, e.g. flat,hnsw,lsh."
        ),
        click.option("--rerank", help="Comma-separated rerankers, e.g. numba,numpy,python,none."),
        click.option("--codec", help="Comma-separated codecs, e.g. json,orjson,protobuf."),
        click.option(
            "--payload-shape",
            "payload_shape",
            help="Comma-separated payload shapes the codecs write: row (one message per hit), "
            "columnar (parallel columns). [serialize] shape; default row.",
        ),
        click.option(
            "--transport",
            help="Comma-separated transports, e.g. inproc,http,grpc,asgi; settings after a +, "
            "e.g. http+tls=true,grpc+compression=gzip+reply=stream ([transport] keys).",
        ),
        click.option("--generate", help="Generator backend (none, stub, openai)."),
        k_option(),
        click.option(
            "--k-candidates",
            "k_candidates",
            help="Comma-separated candidate counts, e.g. 10,100,1000.",
        ),
        click.option(
            "--filter-selectivity",
            "filter_selectivity",
            help="Comma-separated filter selectivities, one row each, e.g. 0.5,0.01 "
            "([retrieve] filter selectivity; attribute and correlation from the config or --set).",
        ),
        click.option(
            "--filter-strategy",
            "filter_strategy",
            help="Comma-separated filter strategies, e.g. pre,post,in-graph ([retrieve] "
            "filter_strategy).",
        ),
        click.option(
            "--payload-k",
            "payload_k",
            help="Comma-separated hit counts per payload, one row each, e.g. 10,100,1000 "
            "([run] k; k_candidates raised to k where lower).",
        ),
        click.option(
            "--payload-embeddings",
            "payload_embeddings",
            help="Comma-separated: without,with -- payloads without and with chunk embeddings, "
            "one row each ([serialize] with_embeddings).",
        ),
        click.option(
            "--with-embeddings/--without-embeddings",
            default=None,
            help="Carry chunk embeddings in the payload.",
        ),
        threads_option(
            "Threads each request's library calls may use (default 1; set-up uses every core)."
        ),
        click.option(
            "--cpu-time",
            "cpu_time",
            is_flag=True,
            default=None,
            help="Also record each stage's thread CPU time (costs ~0.5 µs per stage).",
        ),
        otel_option(),
        set_option(),
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def re_embed_option() -> Callable[[F], F]:
    """``--re-embed``: compute the vectors even when shipped or cached ones apply ([embed] re_embed)."""
    return click.option(
        "--re-embed",
        "re_embed",
        is_flag=True,
        default=None,
        help="Embed the corpus and queries now, ignoring vectors shipped with the dataset and "
        "cached ones (the result is still cached).",
    )


def otel_option() -> Callable[[F], F]:
    """``--otel``: export every measured request as an OpenTelemetry trace ([run] otel)."""
    return click.option(
        "--otel",
        "otel",
        is_flag=True,
        default=None,
        help="Export each measured request as OpenTelemetry spans (OTLP, configured by the "
        "OTEL_EXPORTER_OTLP_* variables), after timing. Needs ragbench[otel].",
    )


def _base(opts: Mapping[str, Any], run_over: Mapping[str, Any]) -> dict[str, Any]:
    """The config every combination starts from: file, then --set, then the named options."""
    from .. import datasets

    base = load_config(opts["config"]) if opts["config"] else {}
    if any(opts[o] is not None for o in ("dataset", "n", "dim")):
        n = parse_count(opts["n"], "--n") if opts["n"] else None
        base["dataset"] = datasets.spec_table(opts["dataset"] or "synthetic", n=n, dim=opts["dim"])
    extra = set_pairs(opts["overrides"])
    named = {
        "run": {
            **run_over,
            "k": opts["k"],
            "threads": opts["threads"],
            "cpu_time": opts["cpu_time"],
            "otel": opts["otel"],
        },
        "embed": {"backend": opts["embed"], "re_embed": opts["re_embed"]},
        "generate": {"backend": opts["generate"]},
        "serialize": {"with_embeddings": opts["with_embeddings"]},
    }
    for table, values in named.items():
        given = {k: v for k, v in values.items() if v is not None}
        if given:
            extra[table] = {**extra.get(table, {}), **given}
    return normalize(merge(base, extra))


def _set_index_params(overrides: Any) -> dict[str, Any]:
    """The ``build`` and ``search`` tables ``--set retrieve.build.X=V`` / ``.search.X=V`` gave."""
    retrieve = set_pairs(overrides).get("retrieve", {})
    return {sub: retrieve.get(sub, {}) for sub in ("build", "search")}


def _axes(opts: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    axes: list[tuple[str, list[Any]]] = []
    for option, table in AXES:
        items = split_list(opts[option.lstrip("-")], option)
        axes += [(table, items)] if items else []
        if table == "serialize":  # the shape varies right after the codec: hnsw/protobuf/columnar
            shapes = split_list(opts["payload_shape"], "--payload-shape")
            axes += [("payload_shape", shapes)] if shapes else []
    kc = counts(opts["k_candidates"], "--k-candidates")
    axes += [("k_candidates", kc)] if kc else []
    axes += payload_axes(opts)
    sels = [
        parse_value(v) for v in split_list(opts.get("filter_selectivity"), "--filter-selectivity")
    ]
    axes += [("filter_selectivity", sels)] if sels else []
    strategies = split_list(opts.get("filter_strategy"), "--filter-strategy")
    return axes + ([("filter_strategy", strategies)] if strategies else [])


def configurations(
    opts: Mapping[str, Any], run_over: Mapping[str, Any] | None = None
) -> tuple[list[tuple[dict[str, Any], str | None]], set[str]]:
    """One (config, label) per combination of the comma lists, and the axes that vary.

    Labels name only what varies between rows. Index build/search parameters
    given with ``--set retrieve.build.X=...``/``retrieve.search.X=...`` apply
    to every index in the list, so one that an index does not take is refused
    (exit 2, as ``run`` refuses it) when its pipeline is created, before
    anything is set up. Without a config file, other indexes get no other
    parameters; with one, its index parameters apply to every index too.
    """
    base = _base(opts, run_over or {})
    given = _set_index_params(opts["overrides"])
    axes = _axes(opts)
    out = []
    for combo in itertools.product(*[values for _, values in axes]):
        cfg = merge(base, {})
        parts = []
        for (axis, values), value in zip(axes, combo, strict=True):
            if axis == "k_candidates":
                cfg["run"]["k_candidates"] = value
                parts += [f"kc={value}"] if len(values) > 1 else []
                continue
            if axis in PAYLOAD_AXES or axis == "transport":
                label = set_axis(cfg, axis, value)
                parts += label if len(values) > 1 else []
                continue
            if axis == "payload_shape":
                cfg["serialize"]["shape"] = value
                parts += [str(value)] if len(values) > 1 else []
                continue
            if axis == "filter_selectivity":
                cfg["retrieve"]["filter"] = {
                    **(cfg["retrieve"]["filter"] or {}),
                    "selectivity": value,
                }
                parts += [f"sel={value}"] if len(values) > 1 else []
                continue
            if axis == "filter_strategy":
                cfg["retrieve"]["filter_strategy"] = value
                parts += [str(value)] if len(values) > 1 else []
                continue
            if axis == "retrieve" and value != cfg["retrieve"]["backend"] and not opts["config"]:
                cfg["retrieve"].update(merge({}, given))  # only what --set gave, for every index
            cfg[axis]["backend"] = value
            parts += [str(value)] if len(values) > 1 else []
        out.append((normalize(cfg), "/".join(parts) if parts else None))
    return out, {axis for axis, values in axes if len(values) > 1}

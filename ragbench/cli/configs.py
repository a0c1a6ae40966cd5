"""The configurations ``compare`` and ``load`` run side by side: one option set, one product.

:func:`backend_options` declares the options both commands take (a base
config, the dataset, one comma list per varied backend, the run settings,
``--set``); :func:`configurations` turns them into one (config, label) per
combination of the comma lists, every config checked: the options are merged
into the config as read, and each combination is converted to its typed
:class:`~ragbench.settings.Config` once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from ..settings import Config, merge, parse_config, read_config
from ..settings.sources import DEFAULTS
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
from .payloads import PAYLOAD_AXES, index_item, payload_axes, set_axis, transport_item

__all__ = [
    "AXES",
    "backend_options",
    "configurations",
    "embed_runtime_option",
    "otel_option",
    "re_embed_option",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Comma-list options → the config table whose backend each varies.
AXES = (
    ("--index", "retrieve"),
    ("--rerank", "rerank"),
    ("--codec", "serialize"),
    ("--transport", "transport"),
)


INDEX_HELP = (
    "Comma-separated index backends, e.g. flat,hnsw,lsh; that index's own parameters after "
    "a +, e.g. hnsw+ef=20,lancedb+index_type=ivf_hnsw_sq+nprobes=10 (query parameters go to "
    "search, others to build; build.KEY/search.KEY to say)."
)


def embed_runtime_option(what: str = "one row each") -> Callable[[F], F]:
    """``--embed-runtime a,b``: the minilm embedder once per runtime ([embed] runtime)."""
    return click.option(
        "--embed-runtime",
        "embed_runtime",
        help=f"Comma-separated runtimes of the minilm embedder, {what}, e.g. "
        "torch,onnx,onnx-int8,openvino ([embed] runtime).",
    )


_EMBED = click.option(
    "--embed",
    help="Embedder backend (minilm, model2vec, hashing, precomputed), or a "
    "comma-separated list, one row each (minilm,model2vec).",
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
        _EMBED,
        embed_runtime_option(),
        re_embed_option(),
        click.option("--index", "index", help=INDEX_HELP),
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
    """The config every combination starts from, unchecked: file, then --set, then the named options."""
    from .. import datasets

    base = read_config(opts["config"]) if opts["config"] else {}
    embed = _one_embedder(opts)
    for table, name in (("embed", embed), ("generate", opts["generate"])):
        if name is not None:  # --embed/--generate naming another backend than the file
            _fresh(base, table, name, {})  # --set is merged below
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
        "embed": {"backend": embed, "re_embed": opts["re_embed"]},
        "generate": {"backend": opts["generate"]},
        "serialize": {"with_embeddings": opts["with_embeddings"]},
    }
    for table, values in named.items():
        given = {k: v for k, v in values.items() if v is not None}
        if given:
            extra[table] = {**extra.get(table, {}), **given}
    return merge(base, extra)


def _one_embedder(opts: Mapping[str, Any]) -> str | None:
    """``--embed`` when it names one embedder (several are an axis, :func:`_embed_axis`)."""
    names = split_list(opts.get("embed"), "--embed")
    return names[0] if len(names) == 1 else None


def _embed_axis(opts: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    """``--embed a,b`` (one row each; with ``--embed-runtime``, minilm once per runtime:
    ``minilm:onnx``), else ``--embed-runtime`` alone (``embed=onnx``)."""
    runtimes = split_list(opts.get("embed_runtime"), "--embed-runtime")
    names = split_list(opts.get("embed"), "--embed")
    if len(names) < 2:
        return [("embed_runtime", runtimes)] if runtimes else []
    items: list[Any] = []
    for name in names:
        items += [f"{name}:{rt}" for rt in runtimes] if name == "minilm" and runtimes else [name]
    return [("embed", items)]


def _axes(opts: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    axes = _embed_axis(opts)
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
) -> tuple[list[tuple[Config, str | None]], set[str]]:
    """One (typed config, label) per combination of the comma lists, and the axes that vary.

    Labels name only what varies between rows. An ``--index`` item's own
    parameters (``pgvector+ef=40``) apply to that index only. Index build/search parameters
    given with ``--set retrieve.build.X=...``/``retrieve.search.X=...`` apply
    to every index in the list, so one that an index does not take is refused
    (exit 2, as ``run`` refuses it) when its pipeline is created, before
    anything is set up. The config file's backend parameters belong to the
    backend it names: an index, reranker, codec or transport of a comma list
    that the file does not name starts from its own defaults (:func:`_fresh`).
    """
    base = _base(opts, run_over or {})
    sets = set_pairs(opts["overrides"])
    axes = _axes(opts)
    out = []
    for combo in itertools.product(*[values for _, values in axes]):
        cfg = merge(base, {})
        parts = []
        for (axis, values), value in zip(axes, combo, strict=True):
            if axis in PAYLOAD_AXES or axis == "transport":
                for table in ("run", "serialize", "transport"):
                    cfg.setdefault(table, {})
                # k_candidates is raised to k where lower: compare with its default when unset
                cfg["run"].setdefault("k_candidates", DEFAULTS["run"]["k_candidates"])
                if axis == "transport":
                    _fresh(cfg, "transport", transport_item(str(value))[0], sets)
                label = set_axis(cfg, axis, value)
                parts += label if len(values) > 1 else []
                continue
            if axis in _FRESH:
                name = index_item(str(value))[0] if axis == "retrieve" else value
                name = str(value).partition(":")[0] if axis == "embed" else name
                _fresh(cfg, axis, name, sets)
            _apply(cfg, axis, value)
            parts += [_part(axis, value)] if len(values) > 1 else []
        out.append((parse_config(cfg), "/".join(parts) if parts else None))
    return out, {axis for axis, values in axes if len(values) > 1}


def _part(axis: str, value: Any) -> str:
    """The label part of one axis value (``kc=100``, ``sel=0.01``, ``hnsw``)."""
    prefix = {"k_candidates": "kc=", "filter_selectivity": "sel=", "embed_runtime": "embed="}.get(
        axis, ""
    )
    return f"{prefix}{value}"


def _apply(cfg: dict[str, Any], axis: str, value: Any) -> None:
    """Set one axis value in a config as read (tables created as needed)."""
    table = {
        "k_candidates": "run",
        "payload_shape": "serialize",
        "filter_selectivity": "retrieve",
        "filter_strategy": "retrieve",
        "embed_runtime": "embed",
    }.get(axis, axis)
    t = cfg.setdefault(table, {})
    if axis == "k_candidates":
        t["k_candidates"] = value
    elif axis == "payload_shape":
        t["shape"] = value
    elif axis == "filter_selectivity":
        t["filter"] = {**(t.get("filter") or {}), "selectivity": value}
    elif axis == "filter_strategy":
        t["filter_strategy"] = value
    elif axis == "embed_runtime":
        t["runtime"] = value
    elif axis == "embed":  # minilm:onnx-int8, model2vec
        name, _, runtime = str(value).partition(":")
        t["backend"] = name
        if runtime:
            t["runtime"] = runtime
    elif axis == "retrieve":  # an item's own parameters (pgvector+ef=40) for that index only
        name, own = index_item(str(value))
        for sub, params in own.items():
            t[sub] = {**(t.get(sub) or {}), **params}
        t["backend"] = name
    else:
        t["backend"] = value


#: Stage table → the keys that describe the stage, not one backend, and so stay when a
#: comma list names another backend than the config's: the index's metric, server, filter
#: and build mode; the codecs' payload settings (every codec takes them, and
#: ``--payload-shape`` varies the shape as a [serialize] setting).
_FRESH: dict[str, tuple[str, ...]] = {
    "embed": ("re_embed",),
    "retrieve": ("metric", "dsn", "filter", "filter_strategy", "fast_build"),
    "rerank": (),
    "serialize": ("with_embeddings", "with_metadata", "shape", "max_payload_bytes"),
    "transport": (),
    "generate": (),
}


def _fresh(cfg: dict[str, Any], table: str, backend: str, sets: Mapping[str, Any]) -> None:
    """Start ``cfg[table]`` from ``backend``'s own defaults when the config names another backend.

    The config's parameters of a backend (hnsw's ``M``, numba's ``parallel``)
    are that backend's: carried to another one they are refused (``unknown key
    'M' for backend 'lsh'``) or, worse, taken to mean something else. What
    ``--set`` gave for the table still applies to every backend of the list.
    ``cfg``: a config as read; changed in place.
    """
    t = cfg.get(table) or {}
    if backend == t.get("backend", DEFAULTS[table]["backend"]):
        return  # the configured backend keeps the file's parameters
    kept = {k: v for k, v in t.items() if k in _FRESH[table]}
    cfg[table] = merge(kept, sets.get(table) or {})

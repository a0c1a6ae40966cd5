"""The ``ragbench`` command line.

Every command has ``--help``. Bad input prints one line and exits 2 (never a
traceback); a run stopped by a failing server exits 1 after writing what it
finished. ``--out`` appends one JSON record per run as soon as it exists.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from .errors import ConfigError, RagbenchError

__all__ = ["main"]


def _split(value: str | None, option: str) -> list[str]:
    if value is None:
        return []
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise click.BadParameter(f"empty item in {value!r}", param_hint=option)
    return items


def _ints(value: str | None, option: str) -> list[int]:
    out = []
    for item in _split(value, option):
        try:
            out.append(_parse_count(item))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a whole number", param_hint=option) from None
    return out


def _parse_count(text: str) -> int:
    """``10k`` → 10_000, ``1M`` → 1_000_000, ``250`` → 250."""
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    value = float(t) * mult
    if value != int(value) or value < 0:
        raise ValueError(text)
    return int(value)


def _parse_value(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def _set_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set retrieve.search.ef=128`` → ``{"retrieve": {"search": {"ef": 128}}}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected TABLE.KEY=VALUE, got {pair!r}", param_hint="--set")
        parts = key.split(".")
        if len(parts) < 2:
            raise click.BadParameter(f"expected TABLE.KEY=VALUE, got {pair!r}", param_hint="--set")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse_value(value)
    return out


def _dataset_table(
    dataset: str | None,
    n: int | None = None,
    dim: int | None = None,
    n_queries: int | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    if dataset is None:
        return {}
    table: dict[str, Any] = {}
    if (
        Path(dataset).exists()
        or "/" in dataset
        or dataset.endswith((".hdf5", ".h5", ".npy", ".fvecs", ".jsonl"))
    ):
        table["path"] = dataset
    else:
        table["name"] = dataset
    for key, value in (("n", n), ("dim", dim), ("n_queries", n_queries), ("seed", seed)):
        if value is not None:
            table[key] = value
    return table


@contextmanager
def _progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; silent otherwise."""
    if not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def _echo(text: str) -> None:
    click.echo(text)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ragbench")
def cli() -> None:
    """Measure where the time goes between a question and the first token of a RAG service."""


@cli.command()
def datasets() -> None:
    """List bundled and cached datasets."""
    from rich.table import Table

    from . import datasets as ds_mod
    from .report import _render

    t = Table(title="datasets", title_justify="left")
    for col in ("name", "size", "what", "source"):
        t.add_column(col)
    described = ds_mod.describe()
    for d in described:
        t.add_row(
            str(d.get("name")),
            str(d.get("size", "")),
            str(d.get("description", "")),
            str(d.get("source", "")),
        )
    known = {str(d.get("name")) for d in described}
    for name in ds_mod.names():
        if name not in known:
            t.add_row(name, "", "loaded from a path before", "remembered in the ragbench cache")
    _echo(_render(t, 160))


def _base_config(config: str | None) -> dict[str, Any]:
    from .config import load_config

    if config is None:
        return {}
    cfg = load_config(config)
    return cfg


def record_writer(
    out: str | None, records: list[dict[str, Any]]
) -> Callable[[dict[str, Any]], None]:
    """A callback that stamps each record with the environment, keeps it in
    ``records`` and appends it to ``out`` at once (so an interrupted run keeps it)."""
    from .env import environment
    from .report import append_record

    env = environment()

    def write(rec: dict[str, Any]) -> None:
        rec["env"] = env
        records.append(rec)
        if out is not None:
            append_record(out, rec)

    return write


def _write_records(out: str | None, reports: Sequence[Any]) -> None:
    if out is None:
        return
    from .report import append_record

    for r in reports:
        for rec in r.to_records():
            append_record(out, rec)


@cli.command()
@click.option(
    "-c",
    "--config",
    "config",
    required=True,
    type=click.Path(dir_okay=False),
    help="Pipeline config (TOML), e.g. bench/configs/default.toml.",
)
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Append the run's JSON record to this file."
)
@click.option("--queries", type=int, help="Measured requests (overrides [run] queries).")
@click.option("--warmup", type=int, help="Warm-up requests (overrides [run] warmup).")
@click.option("--dataset", help="Dataset name or path (overrides [dataset]).")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="TABLE.KEY=VALUE",
    help="Override a config value, e.g. --set retrieve.search.ef=128 (repeatable).",
)
def run(
    config: str,
    out: str | None,
    queries: int | None,
    warmup: int | None,
    dataset: str | None,
    overrides: Sequence[str],
) -> None:
    """Run one pipeline: per-stage table and (with --out) a JSON record."""
    from .config import load_config, merge
    from .pipeline import Pipeline

    cfg = load_config(config)
    extra = _set_overrides(overrides)
    if dataset is not None:
        cfg["dataset"] = _dataset_table(dataset)
    if queries is not None:
        extra.setdefault("run", {})["queries"] = queries
    if warmup is not None:
        extra.setdefault("run", {})["warmup"] = warmup
    cfg = merge(cfg, extra)
    with Pipeline.from_config(cfg) as pipe:
        n = pipe.config["run"]["queries"]
        pipe.setup()
        pipe.warm(pipe.config["run"]["warmup"])
        with _progress(n, "requests") as advance:
            report = pipe.run(queries=n, warmup=0, progress=advance)
    _echo(report.table())
    _write_records(out, [report])
    if report.error:
        raise SystemExit(1)


@cli.command()
@click.option(
    "-c",
    "--config",
    "config",
    type=click.Path(dir_okay=False),
    help="Base pipeline config (TOML); the options below vary it.",
)
@click.option(
    "--dataset", default=None, help="Dataset name (pydocs, synthetic) or path. [default: pydocs]"
)
@click.option("--n", "n", type=str, help="Corpus size for synthetic (e.g. 10k).")
@click.option("--dim", type=int, help="Dimension for synthetic.")
@click.option("--embed", help="Embedder backend (minilm, hashing, precomputed).")
@click.option("--index", "index", help="Comma-separated index backends, e.g. flat,hnsw,lsh.")
@click.option("--rerank", help="Comma-separated rerankers, e.g. numba,numpy,python,none.")
@click.option("--codec", help="Comma-separated codecs, e.g. json,orjson,protobuf.")
@click.option("--transport", help="Comma-separated transports, e.g. inproc,http,grpc.")
@click.option("--generate", help="Generator backend (none, stub, openai).")
@click.option("--k", "k", type=int, help="Hits per request.")
@click.option(
    "--k-candidates", "k_candidates", help="Comma-separated candidate counts, e.g. 10,100,1000."
)
@click.option(
    "--with-embeddings/--without-embeddings",
    default=None,
    help="Carry chunk embeddings in the payload.",
)
@click.option("--queries", type=int, help="Measured requests per combination.")
@click.option("--warmup", type=int, help="Warm-up requests per combination.")
@click.option(
    "--threads",
    type=int,
    help="Threads each request's library calls may use (default 1; set-up uses every core).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="TABLE.KEY=VALUE",
    help="Override any config value, e.g. --set retrieve.search.ef=128.",
)
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Append one JSON record per combination."
)
@click.option(
    "--stat",
    type=click.Choice(["mean", "p50", "p90", "p95", "p99", "max"]),
    default="p50",
    show_default=True,
    help="Statistic shown for each stage.",
)
def compare(
    config: str | None,
    dataset: str | None,
    n: str | None,
    dim: int | None,
    embed: str | None,
    index: str | None,
    rerank: str | None,
    codec: str | None,
    transport: str | None,
    generate: str | None,
    k: int | None,
    k_candidates: str | None,
    with_embeddings: bool | None,
    queries: int | None,
    warmup: int | None,
    threads: int | None,
    overrides: Sequence[str],
    out: str | None,
    stat: str,
) -> None:
    """Run the cartesian product of the given backends side by side, interleaved, in one process."""
    from .config import merge, normalize
    from .pipeline import Pipeline, interleave
    from .report import compare_table

    base = _base_config(config)
    extra = _set_overrides(overrides)
    if dataset is not None or n is not None or dim is not None:
        table = _dataset_table(dataset or "synthetic", _parse_count(n) if n else None, dim)
        base["dataset"] = table
    run_over: dict[str, Any] = {}
    if queries is not None:
        run_over["queries"] = queries
    if warmup is not None:
        run_over["warmup"] = warmup
    if k is not None:
        run_over["k"] = k
    if threads is not None:
        run_over["threads"] = threads
    if run_over:
        extra["run"] = {**extra.get("run", {}), **run_over}
    if embed is not None:
        extra.setdefault("embed", {})["backend"] = embed
    if generate is not None:
        extra.setdefault("generate", {})["backend"] = generate
    if with_embeddings is not None:
        extra.setdefault("serialize", {})["with_embeddings"] = with_embeddings
    base = normalize(merge(base, extra))

    axes: list[tuple[str, list[Any]]] = []
    items: list[Any]
    for tname, value, option in (
        ("retrieve", index, "--index"),
        ("rerank", rerank, "--rerank"),
        ("serialize", codec, "--codec"),
        ("transport", transport, "--transport"),
    ):
        items = _split(value, option)
        if items:
            axes.append((tname, items))
    kc: list[Any] = _ints(k_candidates, "--k-candidates")
    if kc:
        axes.append(("k_candidates", kc))
    combos = list(itertools.product(*[vals for _, vals in axes])) or [()]
    pipelines: list[Pipeline] = []
    try:
        shared: dict[str, Any] = {}
        for combo in combos:
            cfg = merge(base, {})
            parts = []
            for (axis, values), value in zip(axes, combo, strict=True):
                varies = len(values) > 1  # the label names only what differs between rows
                if axis == "k_candidates":
                    cfg["run"]["k_candidates"] = value
                    if varies:
                        parts.append(f"kc={value}")
                else:
                    # build/search params belong to one backend: keep them only for the base's
                    if axis == "retrieve" and value != cfg["retrieve"]["backend"] and not config:
                        cfg["retrieve"]["build"], cfg["retrieve"]["search"] = {}, {}
                    cfg[axis]["backend"] = value
                    if varies:
                        parts.append(str(value))
            label = "/".join(parts) if parts else None
            pipe = Pipeline(cfg, label=label)
            pipelines.append(pipe)
        with _progress(len(pipelines), "setting up") as advance:
            for pipe in pipelines:
                pipe.setup(shared=shared)
                advance(1)
        for pipe in pipelines:
            pipe.warm(pipe.config["run"]["warmup"])
        nreq = base["run"]["queries"]
        with _progress(nreq, f"{len(pipelines)} runs × {nreq} requests, interleaved") as advance:
            interleave(pipelines, nreq, progress=advance)
        reports = [p.report() for p in pipelines]
    finally:
        for p in pipelines:
            p.close()
    _write_records(out, reports)
    _echo(_fixed_line(pipelines[0], {axis for axis, values in axes if len(values) > 1}))
    _echo(compare_table(reports, stat=stat))
    _echo(_setup_summary(reports))
    for r in reports:
        if r.error:
            _echo(f"{r.label}: STOPPED EARLY: {r.error}")
    if any(r.error for r in reports):
        raise SystemExit(1)


def _fixed_line(pipe: Any, varying: set[str]) -> str:
    """What every row of a comparison shares, so labels can name only what differs."""
    info = dict(pipe._info)
    cfg = pipe.config
    fixed = {
        "embed": info.get("embedder", cfg["embed"]["backend"]),
        "retrieve": cfg["retrieve"]["backend"],
        "rerank": cfg["rerank"]["backend"],
        "serialize": cfg["serialize"]["backend"],
        "transport": cfg["transport"]["backend"],
        "generate": cfg["generate"]["backend"],
        "k": cfg["run"]["k"],
        "k_candidates": cfg["run"]["k_candidates"],
        "threads": cfg["run"]["threads"],
    }
    if cfg["serialize"]["with_embeddings"]:
        fixed["with_embeddings"] = True
    return "same in every row: " + ", ".join(
        f"{key}={value}" for key, value in fixed.items() if key not in varying
    )


def _setup_summary(reports: Sequence[Any]) -> str:
    lines = []
    seen: set[str] = set()
    for r in reports:
        for ev in r.cache_events:
            from .report import _event_text

            text = _event_text(ev)
            if text not in seen:
                seen.add(text)
                lines.append(f"cache: {text}")
    keys: dict[str, float] = {}
    for r in reports:
        for k_, v in r.setup_ns.items():
            keys[k_] = keys.get(k_, 0.0) + v / 1e9
    from .report import SETUP_LABELS

    lines.append(
        "setup, not in request latency (summed over runs): "
        + ", ".join(f"{SETUP_LABELS.get(k_, k_)} {v:.2f}s" for k_, v in keys.items())
    )
    recs = {
        f"recall measured against exact search at k={reports[0].k}; per-stage p50s do not add up to the total p50"
    }
    lines.extend(sorted(recs))
    return "\n".join(lines)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "md", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a PNG plot of the runs.")
def report(files: Sequence[str], fmt: str, plot: str | None) -> None:
    """Render saved JSON-lines results side by side."""
    from .report import read_records, render_records

    records = [rec for f in files for rec in read_records(f)]
    if not records:
        raise ConfigError(f"no records in {', '.join(files)}")
    _echo(render_records(records, fmt))
    if plot:
        from .plots import plot_records

        plot_records(records, plot)
        _echo(f"wrote {plot}")


@cli.command("stub-llm")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=0, show_default=True, type=int, help="Port (0: the OS picks one).")
@click.option(
    "--prefill-ms-per-1k",
    "prefill",
    type=float,
    default=None,
    help="Modelled prefill time per 1000 prompt tokens (ms).",
)
@click.option(
    "--base-ms", type=float, default=None, help="Modelled fixed time before the first token (ms)."
)
def stub_llm(host: str, port: int, prefill: float | None, base_ms: float | None) -> None:
    """Serve ragbench's OpenAI-compatible streaming stub (timings are SIMULATED)."""
    from .generators.stub_server import run_forever

    params: dict[str, Any] = {}
    if prefill is not None:
        params["prefill_ms_per_1k_tokens"] = prefill
    if base_ms is not None:
        params["base_ms"] = base_ms
    run_forever(host, port, **params)


def _register_extra_commands() -> None:
    """Commands that live in their own modules (sweep, scale, load)."""
    import importlib

    for module, name in (
        ("ragbench.cli_sweep", "sweep"),
        ("ragbench.cli_sweep", "scale"),
        ("ragbench.cli_load", "load"),
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        cmd = getattr(mod, name, None)
        if cmd is not None:
            cli.add_command(cmd, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one line and exit 2 on bad input; 1 when a run stopped early."""
    _register_extra_commands()
    try:
        cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="ragbench",
            standalone_mode=False,
        )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("ragbench: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"ragbench: error: {exc.format_message()}", err=True)
        return 2
    except RagbenchError as exc:
        click.echo(f"ragbench: error: {_one_line(str(exc))}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("ragbench: interrupted; records already written are kept", err=True)
        return 130
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else 1
    return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

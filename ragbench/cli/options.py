"""What every command shares: option decorators, value parsers, progress bars, output.

Parsers raise :class:`click.BadParameter` naming the option, so every bad
value ends as one line and exit status 2 (see :func:`ragbench.cli.main`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

__all__ = [
    "check_outputs",
    "config_option",
    "counts",
    "dataset_option",
    "echo",
    "executor_from",
    "executor_options",
    "finish_outputs",
    "grid",
    "index_option",
    "k_option",
    "numbers",
    "out_option",
    "parse_count",
    "parse_value",
    "plot_option",
    "progress",
    "queries_option",
    "repeat_option",
    "set_option",
    "parse_start_together",
    "set_pairs",
    "split_list",
    "start_together_options",
    "threads_option",
    "wait_to_start",
]

F = TypeVar("F", bound=Callable[..., Any])


# ---------------------------------------------------------------- parsers


def split_list(value: str | None, option: str) -> list[str]:
    """``"a, b,c"`` → ``["a", "b", "c"]``; an empty item is an error; ``None`` → ``[]``."""
    if value is None:
        return []
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise click.BadParameter(f"empty item in {value!r}", param_hint=option)
    return items


def parse_count(text: str, option: str) -> int:
    """``10k`` → 10_000, ``1M`` → 1_000_000, ``250`` → 250; anything else is a BadParameter."""
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    try:
        value = float(t) * mult
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise click.BadParameter(
            f"{text!r} is not a whole number >= 1 (e.g. 250, 10k, 1M)", param_hint=option
        )
    return int(value)


def counts(value: str | None, option: str) -> list[int]:
    """A comma list of :func:`parse_count` values."""
    return [parse_count(item, option) for item in split_list(value, option)]


def numbers(value: str | None, option: str) -> list[float]:
    """A comma list of finite numbers > 0 (rates, durations)."""
    out = []
    for item in split_list(value, option):
        try:
            number = float(item)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= 0:
            raise click.BadParameter(f"{item!r} is not a finite number > 0", param_hint=option)
        out.append(number)
    return out


def parse_value(text: str) -> Any:
    """A JSON value (``128``, ``true``, ``"flat"``, ``[1, 2]``), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def set_pairs(pairs: Sequence[str], option: str = "--set") -> dict[str, Any]:
    """``retrieve.search.ef=128`` (repeatable) → ``{"retrieve": {"search": {"ef": 128}}}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        parts = key.split(".")
        if not sep or len(parts) < 2 or not all(parts):
            raise click.BadParameter(f"expected TABLE.KEY=VALUE, got {pair!r}", param_hint=option)
        node = out
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise click.BadParameter(f"{pair!r} sets inside a value", param_hint=option)
            node = child
        node[parts[-1]] = parse_value(value)
    return out


def grid(pairs: Sequence[str], option: str) -> dict[str, list[Any]]:
    """``ef=16,32`` (repeatable) → ``{"ef": [16, 32]}``."""
    out: dict[str, list[Any]] = {}
    for pair in pairs:
        name, sep, values = pair.partition("=")
        if not sep or not name.strip() or not values:
            raise click.BadParameter(f"expected NAME=V1,V2,..., got {pair!r}", param_hint=option)
        out[name.strip()] = [parse_value(v) for v in split_list(values, option)]
    return out


def parse_start_together(
    value: str | None, option: str = "--start-together"
) -> tuple[str, int] | None:
    """``DIR:N`` → ``("DIR", N)`` with N a whole number >= 1, DIR made; ``None`` → ``None``.

    The folder is made here, before any work, so one that cannot be is one line and exit 2.
    """
    if value is None:
        return None
    folder, sep, count = value.rpartition(":")
    try:
        n = int(count)
    except ValueError:
        n = 0
    if not sep or not folder or n < 1:
        raise click.BadParameter(
            f"expected DIR:N (a folder and a whole number of processes >= 1), got {value!r}",
            param_hint=option,
        )
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot make the folder {folder!r} ({exc.strerror or exc})", param_hint=option
        ) from None
    return folder, n


# ---------------------------------------------------------------- options


def config_option(
    *, required: bool = False, help: str = "Pipeline config (TOML)."
) -> Callable[[F], F]:
    return click.option(
        "-c", "--config", "config", required=required, type=click.Path(dir_okay=False), help=help
    )


def dataset_option(
    *, default: str | None = None, help: str = "Dataset name (pydocs, synthetic) or path."
) -> Callable[[F], F]:
    return click.option("--dataset", default=default, show_default=default is not None, help=help)


def queries_option(
    *, default: int | None = None, help: str = "Measured requests."
) -> Callable[[F], F]:
    return click.option(
        "--queries",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help,
    )


def repeat_option(
    help: str = "Independent repetitions (each warmed up the same way); intervals resample them.",
) -> Callable[[F], F]:
    return click.option("--repeat", type=click.IntRange(min=1), help=help)


def fast_build_option() -> Callable[[F], F]:
    return click.option(
        "--fast-build",
        "fast_build",
        is_flag=True,
        default=None,
        help="Build indexes on every core: faster, not deterministic (the record says so). "
        "Default: one build thread and the seeds, the same index every time.",
    )


def rebuilds_option() -> Callable[[F], F]:
    return click.option(
        "--rebuilds",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Build each index this many times (seed, seed+1, ...); recall's interval "
        "then covers the build-to-build spread.",
    )


def out_option(help: str) -> Callable[[F], F]:
    return click.option("--out", type=click.Path(dir_okay=False), help=help)


def set_option(
    help: str = "Override a config value, e.g. --set retrieve.search.ef=128 (repeatable).",
) -> Callable[[F], F]:
    return click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help=help)


def threads_option(help: str) -> Callable[[F], F]:
    from ..threads import MAX_THREADS

    return click.option(
        "--threads", type=click.IntRange(min=1, max=MAX_THREADS), help=f"{help} 1 to {MAX_THREADS}."
    )


def k_option(*, default: int | None = None, help: str = "Hits per query.") -> Callable[[F], F]:
    return click.option(
        "--k",
        "k",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help,
    )


def plot_option(help: str) -> Callable[[F], F]:
    return click.option("--plot", type=click.Path(dir_okay=False), help=help)


def index_option(*, required: bool = False, help: str) -> Callable[[F], F]:
    return click.option("--index", "index", required=required, help=help)


def executor_options(fn: F) -> F:
    """``--executor local|ray`` and ``--ray-address``: where the units of work run."""
    fn = click.option(
        "--ray-address",
        "ray_address",
        metavar="auto|ray://HOST:PORT",
        help="Ray cluster for --executor ray: auto (the one running here, or RAY_ADDRESS) or "
        "ray://HOST:PORT (Ray Client). [default: start a local Ray instance]",
    )(fn)
    return click.option(
        "--executor",
        type=click.Choice(["local", "ray"]),
        default="local",
        show_default=True,
        help="Where the work runs: local (this process, in order) or ray (Ray tasks or actors "
        "on a cluster, each asking for the pinned thread count in CPUs; needs ragbench[ray]).",
    )(fn)


def start_together_options(fn: F) -> F:
    """``--start-together DIR:N`` and ``--start-timeout``: begin timing with N other processes."""
    from ..together import DEFAULT_TIMEOUT_S

    fn = click.option(
        "--start-timeout",
        "start_timeout",
        type=click.FloatRange(min=0, min_open=True, max=1e9),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        metavar="SECONDS",
        help="With --start-together: seconds to wait for the others before stopping (exit 2).",
    )(fn)
    return click.option(
        "--start-together",
        "start_together",
        metavar="DIR:N",
        help="DIR:N, e.g. /tmp/pair1:2. Once set up (data loaded, indexes built), announce "
        "this process in folder DIR (created if missing) and wait until N processes have, then "
        "warm up and time the requests: the processes of a pair launched together time their "
        "requests together. The record's start_together says how long it waited.",
    )(fn)


def wait_to_start(spec: tuple[str, int] | None, timeout_s: float) -> dict[str, Any] | None:
    """Wait for ``--start-together``'s processes (a line on stderr before and after); what it waited."""
    if spec is None:
        return None
    from ..together import start_together

    folder, n = spec
    click.echo(f"ragbench: waiting in {folder} for {n} processes to start together", err=True)
    waited = start_together(folder, n, timeout_s)
    click.echo(
        f"ragbench: {waited['arrived']} processes arrived; started after waiting "
        f"{waited['waited_s']:.2f} s",
        err=True,
    )
    return waited


@contextmanager
def executor_from(name: str, address: str | None) -> Iterator[Any]:
    """The executor ``--executor``/``--ray-address`` ask for; a Ray it started is shut down after."""
    from ..executors import LocalExecutor, RayExecutor

    if name != "ray":
        if address is not None:
            raise click.UsageError("--ray-address needs --executor ray")
        yield LocalExecutor()
        return
    with RayExecutor(address) as executor:
        yield executor


# ---------------------------------------------------------------- output


@contextmanager
def progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; else a plain line every ~10 s.

    Drawn by the reporter :func:`ragbench.cli.bars.on_stderr` installed, so
    bars of set-up steps reporting inside this one share its display.
    """
    from .. import progress as hook

    with hook.task(description, total) as advance:
        yield advance


def echo(text: str) -> None:
    click.echo(text)


def check_outputs(out: str | None = None, plot: str | None = None) -> None:
    """Before any work: ``--out`` and ``--plot`` can be written (else one line, exit 2)."""
    from ..files import check_writable

    if out:
        check_writable(out, "--out file")
    if plot:
        from ..results.plots import chart_path

        check_writable(chart_path(plot), "--plot chart")


def finish_outputs(
    writer: Any = None, records: Sequence[Any] | None = None, plot: str | None = None
) -> None:
    """After the table is printed: draw the chart, then say on one line each what was not saved.

    ``writer`` is the command's :class:`~ragbench.results.records.RecordWriter`; a
    record or chart that could not be written (a full disk) exits 1.
    """
    failures = []
    lost = writer.not_saved() if writer is not None else None
    if lost:
        failures.append(lost)
    if plot:
        from ..results.plots import chart_path, plot_records

        try:
            echo(f"wrote {plot_records(records or [], plot)}")
        except OSError as exc:
            failures.append(f"chart NOT written to {chart_path(plot)} ({exc.strerror or exc})")
        except (KeyError, TypeError) as exc:
            what = f"field {exc.args[0]!r} missing" if isinstance(exc, KeyError) else str(exc)
            failures.append(f"chart NOT drawn: a record does not hold what it needs ({what})")
    for line in failures:
        click.echo(f"ragbench: error: {line}", err=True)
    if failures:
        raise SystemExit(1)

"""mkdocs hooks: the generated parts of the documentation site.

A page asks for generated Markdown with one HTML comment on a line of its own::

    <!-- gen: cli -->                       every command of ``ragbench`` (click definitions)
    <!-- gen: config -->                    every table and key of a pipeline config (ragbench.settings)
    <!-- gen: errors -->                    the error classes of ragbench.errors and their docstrings
    <!-- gen: environment -->               every environment variable the package reads
    <!-- gen: otel-attributes -->           the span attribute table of ragbench.otel
    <!-- gen: schemas -->                   ``ragbench schema config|records``, if that command exists
    <!-- gen: params -->                    every typed backend parameter (ragbench.settings.params)
    <!-- gen: index-capabilities -->        what each shipped index declares (ragbench.indexes.contract),
                                            with the counts
    <!-- gen: source examples/x.py -->      a source file next to the page, whole, as a code block
                                            (the file the tests import, never a copy)
    <!-- gen: report data/x.jsonl [ARGS] --> ``ragbench report --format md`` of a committed results file
    <!-- gen: reading data/x.jsonl -->      the reading ``ragbench report`` prints under its table
    <!-- gen: report-text data/x.jsonl -->  ``ragbench report`` as a terminal shows it (the make run block)
    <!-- gen: plot data/x.jsonl x.png -->   ``ragbench report --plot`` drawn into the site
    <!-- gen: plot --payload data/x.jsonl... x.png -->  only transport time against payload bytes
                                            (``bench/transport_settings.py``, ``compare --payload-k``)
    <!-- gen: bench data/x.json -->         a committed pytest-benchmark JSON: medians and extra_info
    <!-- gen: stats data/x.json -->         ``ragbench datasets --stats ... --format json`` side by side
    <!-- gen: engines data/run.jsonl [data/sweep.jsonl...] -->  one row per index of a compare file:
                                            retrieve p50/p99, × the first row, the client's split,
                                            build s, recall mean/p10; memory from sweep records of
                                            the same build (``ragbench sweep``)
    <!-- gen: reproduce NAME... -->         the commands.toml commands that wrote data/NAME
    <!-- gen: detection data/x.jsonl -->    ``tools/recipe_detection.py --summary --markdown``:
                                            A/A pairs passed, planted slowdowns caught per CI job
    <!-- gen: quick-margins data/x.jsonl -->  each quick bench gate's spread and tripwire (bench/_quick.py)
    <!-- gen: interrupts data/x.jsonl -->   ``bench/interrupt_timing.py --out``: one row per
                                            interrupted run, seconds from SIGINT to exit
    <!-- gen: pg-interrupts data/x.jsonl -->  ``bench/pg_interrupt.py --out``: one row per phase
                                            of pgvector's own server, the medians and ranges of
                                            SIGINT to exit and to nothing left

The comment is replaced when the site is built (``make docs``), so nothing generated is
typed into a page. ``report`` paths are relative to the page's folder and runs
``python -m ragbench report --format md`` in a child process, exactly as a reader would.
Every function here is also imported by ``tests/project/test_docs.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!-- gen: (?P<what>[a-z-]+)(?P<args>[^>]*?) -->$", re.MULTILINE)


def _cell(text: object) -> str:
    """A value as one Markdown table cell: no newlines, pipes escaped, reST ````code```` as Markdown."""
    return re.sub(r"``(.+?)``", r"`\1`", " ".join(str(text).split())).replace("|", "\\|")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- the command line


def cli_commands() -> list[tuple[str, Any]]:
    """``(name, click.Command)`` of every ``ragbench`` subcommand, in registration order."""
    from ragbench.cli import cli

    return list(cli.commands.items())


def _param_row(param: Any, ctx: Any) -> list[str]:
    import click

    if isinstance(param, click.Argument):
        return [f"`{param.human_readable_name}`", "argument", "", ""]
    opts = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    record = param.get_help_record(ctx)
    help_text = record[1] if record else ""
    kind = "flag" if param.is_flag else param.type.name
    if isinstance(param.type, click.Choice):
        kind = " | ".join(str(c) for c in param.type.choices)
    if param.multiple:
        kind += ", repeatable"
    default = ""
    if param.default is not None and not param.is_flag and param.show_default is not False:
        value = param.default() if callable(param.default) else param.default
        if value not in ((), [], "") and "UNSET" not in repr(value):
            default = f"`{value}`"
    help_text = re.sub(r"\s*\[default: [^\]]*\]", "", help_text)
    return [opts, kind, default, help_text]


def cli_markdown() -> str:
    """Usage, help and options of every command, from the click definitions."""
    import click

    from ragbench.cli import cli

    # the group's settings (``-h`` beside ``--help``), as ``ragbench`` itself makes its context:
    # click caches each command's help option when first asked, so a context without them
    # listed ``--help`` alone, or ``-h, --help`` for a command already run in this process
    root = click.Context(cli, info_name="ragbench", **cli.context_settings)
    out = [
        "Generated from the click definitions in `ragbench/cli/` when the site is built; "
        "`ragbench COMMAND --help` prints the same.",
        "",
    ]
    for name, cmd in cli_commands():
        ctx = click.Context(cmd, info_name=name, parent=root)
        usage = " ".join(cmd.collect_usage_pieces(ctx))
        out += [f"## `ragbench {name}`", "", f"```\nragbench {name} {usage}\n```", ""]
        out += [inspect.cleandoc(cmd.help or "").replace("\b\n", ""), ""]
        rows = [_param_row(p, ctx) for p in cmd.get_params(ctx)]
        out += [_table(["option", "type", "default", "what"], rows), ""]
    return "\n".join(out)


# ---------------------------------------------------------------- configuration


def config_markdown() -> str:
    """Every table of a pipeline config with its defaults, from ragbench.settings.sources."""
    from ragbench.settings import sources

    rows = []
    for table, defaults in sources.DEFAULTS.items():
        owned = sources.OWN_KEYS.get(table)
        keys = list(defaults) + sorted((owned or set()) - set(defaults))
        for key in keys:
            value = defaults.get(key, "")
            shown = "(unset)" if value is None else f"`{value!r}`" if key in defaults else ""
            rows.append([f"`[{table}]`", f"`{key}`", shown])
        if owned is None:
            rows.append([f"`[{table}]`", "*other keys*", "the backend's own parameters"])
    closed = ", ".join(f"`[{t}]`" for t in sources.OWN_KEYS)
    return "\n".join(
        [
            "Generated from `ragbench.settings.sources.DEFAULTS` and `OWN_KEYS` when the site is built.",
            f"Closed tables (any other key is a `ConfigError`): {closed}; in the others, keys "
            "other than `backend` go to the backend, which refuses the ones it does not take.",
            "",
            _table(["table", "key", "default"], rows),
            "",
            f"`[retrieve] filter` keys: {', '.join(f'`{k}`' for k in sorted(sources.FILTER_KEYS))}; "
            f"`[retrieve] filter_strategy`: {', '.join(f'`{s}`' for s in sources.FILTER_STRATEGIES)}.",
            "",
            f"Shipped configs (`ragbench run -c NAME`): "
            f"{', '.join(f'`{n}`' for n in sources.shipped_names())}.",
        ]
    )


def backends_markdown() -> str:
    """The registered backend names of every stage kind."""
    import ragbench

    rows = []
    for kind in ("embedders", "indexes", "rerankers", "codecs", "transports", "generators"):
        registry = getattr(ragbench, kind)
        names = registry.names() if hasattr(registry, "names") else []
        rows.append([f"`ragbench.{kind}`", ", ".join(f"`{n}`" for n in names)])
    return _table(["registry", "backends"], rows)


def params_markdown() -> str:
    """Every typed backend parameter (ragbench.settings.params): type and default."""
    from ragbench.settings import config_schema, tables, variants

    defs = config_schema()["$defs"]
    rows = []
    for table, typed in variants.VARIANTS.items():
        own = {"backend", *tables.STAGES[table].OWN}
        for backend, cls in typed.items():
            props = defs[cls.__name__]["properties"]
            subs = [("", props)]
            if table == "retrieve":
                subs = [(f"{sub}.", _props(defs, props[sub])) for sub in ("build", "search")]
            keys = [(pre, k, v) for pre, sp in subs for k, v in sp.items() if pre or k not in own]
            for pre, key, spec in keys:
                default = f"`{json.dumps(spec['default'])}`" if "default" in spec else ""
                rows.append([f"`[{table}]`", f"`{backend}`", f"`{pre}{key}`", _type(spec), default])
            if not keys:
                rows.append([f"`[{table}]`", f"`{backend}`", "(none)", "", ""])
    return "\n".join(
        [
            "Generated from the Structs of `ragbench.settings.params` when the site is built; a default "
            "is the backend's own (the key stays unset unless given).",
            "",
            _table(["table", "backend", "key", "type", "default"], rows),
        ]
    )


def index_capabilities_markdown() -> str:
    """The shipped index backends and the capabilities each class declares, with the counts."""
    import ragbench as rb
    from ragbench._registry import BUILTIN_INDEXES

    rows, missing = [], []
    counts = {"filter": 0, "add": 0, "delete": 0}
    for name in BUILTIN_INDEXES:
        try:
            cls = rb.indexes.registry.factory(name)
        except ImportError:  # an optional extra not installed where the site is built
            missing.append(name)
            continue
        declared = rb.indexes.declares(cls, rb.indexes.FilteredIndex)
        filters: tuple[str, ...] = cls.filter_strategies if declared else ()
        adds = rb.indexes.declares(cls, rb.indexes.WritableIndex)
        deletes = rb.indexes.can_delete(cls)
        saves = rb.indexes.declares(cls, rb.indexes.PersistentIndex)
        counts["filter"] += bool(filters)
        counts["add"] += adds
        counts["delete"] += deletes
        rows.append(
            [
                f"`{name}`",
                str(cls.input_kind),
                ", ".join(filters) or "—",
                "yes" if adds else "—",
                f"yes ({cls.delete_mode})" if deletes else "—",
                "yes" if saves else "—",
            ]
        )
    shipped = len(BUILTIN_INDEXES)
    lines = [
        f"{shipped} index backends ship with ragbench: {counts['filter']} search under a filter, "
        f"{counts['add']} take `add`, {counts['delete']} `delete` (generated from the classes "
        "when the site is built: `ragbench.indexes.filtering_backends()`, `writable_backends()`, "
        "`deleting_backends()` give the same lists at run time).",
        "",
        _table(["backend", "input", "filter strategies", "`add`", "`delete`", "save/load"], rows),
    ]
    if missing:
        lines += ["", f"Not installed where this page was built: {', '.join(missing)}."]
    return "\n".join(lines)


def source_markdown(page_dir: Path, args: str) -> str:
    """The file ``args`` (relative to the page's folder) as a fenced code block, whole."""
    path = (page_dir / args).resolve()
    if not args or not path.is_file():
        raise ValueError(f"<!-- gen: source {args} --> names no file next to the page")
    lang = {".py": "python", ".toml": "toml"}.get(path.suffix, "")
    return f"```{lang}\n{path.read_text(encoding='utf-8').rstrip()}\n```"


def _props(defs: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = defs[ref["$ref"].rsplit("/", 1)[1]]["properties"]
    return props


def _type(spec: dict[str, Any]) -> str:
    """A JSON-Schema property as a short type: ``integer``, ``"row" | "columnar"``, ``string | null``."""
    if "anyOf" in spec:
        return " | ".join(_type(s) for s in spec["anyOf"])
    if "enum" in spec:
        return " | ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    if spec.get("type") == "array":
        return "array"
    kind = str(spec.get("type", "any"))
    bounds = [
        f"{op} {spec[k]}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">")) if k in spec
    ]
    return " ".join([kind, *bounds])


# ---------------------------------------------------------------- errors


def error_classes() -> list[type]:
    """Every exception class of ragbench.errors, in the order it is defined."""
    from ragbench import errors

    found = [
        obj
        for obj in vars(errors).values()
        if inspect.isclass(obj)
        and issubclass(obj, errors.RagbenchError)
        and obj.__module__ == errors.__name__
    ]
    return sorted(found, key=lambda c: inspect.getsourcelines(c)[1])


def errors_markdown() -> str:
    """A table of the error classes: what each is, and which builtin it also is."""
    from ragbench import errors

    rows = []
    for cls in error_classes():
        parents = [b.__name__ for b in cls.__mro__[1:] if b.__module__ == errors.__name__]
        builtin = [b.__name__ for b in cls.__mro__ if b.__module__ == "builtins"]
        builtin = [b for b in builtin if b not in ("Exception", "BaseException", "object")]
        doc = inspect.getdoc(cls) or ""
        rows.append(
            [
                f"`{cls.__name__}`",
                " → ".join(parents) or "—",
                ", ".join(f"`{b}`" for b in builtin if b != cls.__name__),
                doc.split("\n\n")[0],
            ]
        )
    return "\n".join(
        [
            "Generated from `ragbench.errors` when the site is built. On the command line every "
            "one of them is one line on stderr and exit status 2 (1: a run stopped early; 130: "
            "Ctrl-C). The tree (a class with two ragbench parents is drawn under each):",
            "",
            "```text",
            *error_tree(),
            "```",
            "",
            _table(["class", "ragbench parents", "also a", "what"], rows),
        ]
    )


def error_tree() -> list[str]:
    """The error classes drawn as a tree from ``RagbenchError``, each with its builtin bases."""
    from ragbench import errors

    classes = error_classes()

    def label(cls: type, parent: type) -> str:
        builtin = [b.__name__ for b in cls.__bases__ if b.__module__ == "builtins"]
        others = [b.__name__ for b in cls.__bases__ if b in classes and b is not parent]
        text = cls.__name__ + (f" ({', '.join(builtin)})" if builtin else "")
        return text + (f", also {', '.join(others)}" if others else "")

    def below(parent: type, prefix: str) -> list[str]:
        kids = [c for c in classes if parent in c.__bases__]
        lines = []
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{label(kid, parent)}")
            lines += below(kid, prefix + ("    " if last else "│   "))
        return lines

    return [errors.RagbenchError.__name__, *below(errors.RagbenchError, "")]


# ---------------------------------------------------------------- environment variables

#: What each environment variable the package reads means. ``environment_names`` finds the
#: names in the source; a test fails when one is found that is not described here.
ENVIRONMENT = {
    "RAGBENCH_CACHE_DIR": "where vectors, exact neighbours and cached arrays are kept "
    "(default `~/.cache/ragbench`)",
    "RAGBENCH_DATASETS_DIR": "the folder of the bundled datasets (default: `datasets/` of a "
    "source checkout, or `share/ragbench/datasets` of an install)",
    "RAGBENCH_THREADS": "threads each request's library calls may use when neither "
    "`[run] threads` nor `--threads` says (default 1 per request; set-up uses every core)",
    "RAGBENCH_INDEX_CACHE_MIN_S": "deterministic index builds that take at least this many "
    "seconds are cached under `$RAGBENCH_CACHE_DIR/indexes/` and loaded next time (default 10)",
    "RAGBENCH_PROGRESS_INTERVAL_S": "seconds between the plain progress lines printed when "
    "stderr is not a terminal (default 10)",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "OTLP collector for `--otel` (default `http://localhost:4318`)",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "OTLP endpoint for traces only (wins over the above)",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "`http/protobuf` (default) or `grpc`",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "the same, for traces only",
    "OTEL_SERVICE_NAME": "the service name of exported spans (default `ragbench`)",
    "OTEL_BSP_MAX_QUEUE_SIZE": "spans waiting for the exporter before whole requests are dropped "
    "and counted (default 2048; `TraceExporter(max_queued=)` wins)",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "spans per export call (default 512)",
    "OPENAI_BASE_URL": '`generate = "openai"`: the endpoint when the config gives no `base_url`',
    "OPENAI_API_KEY": '`generate = "openai"`: the API key when the config gives none',
    "HF_HUB_OFFLINE": "set to 1 by ragbench before a model loads (never downloads); "
    "also read by Hugging Face libraries",
    "TRANSFORMERS_OFFLINE": "set to 1 by ragbench before a model loads",
    "HF_HUB_DISABLE_PROGRESS_BARS": "set to 1 by ragbench: its own bars report model loads",
    "OMP_NUM_THREADS": "set to 1 in worker processes (`ragbench load`); recorded in every record",
    "OPENBLAS_NUM_THREADS": "set to 1 in worker processes; recorded in every record",
}

_ENV_PATTERNS = (
    re.compile(r"environ(?:\.get|\.setdefault|\.pop)?\(\s*[\"']([A-Z][A-Z0-9_]+)[\"']"),
    re.compile(r"environ\[\s*[\"']([A-Z][A-Z0-9_]+)[\"']"),
    re.compile(r"getenv\(\s*[\"']([A-Z][A-Z0-9_]+)[\"']"),
    re.compile(r"^[A-Z_]*ENV[A-Z_]* = [\"']([A-Z][A-Z0-9_]+)[\"']", re.MULTILINE),
    re.compile(r"[\"']((?:RAGBENCH|OTEL)_[A-Z0-9_]+)[\"']"),
)


def environment_names(package: Path = ROOT / "ragbench") -> set[str]:
    """Every environment variable name the package's source reads or sets, found by pattern."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for pattern in _ENV_PATTERNS:
            found.update(pattern.findall(text))
    return found - {"RAGBENCH_VERSION"}  # a Python name (`__version__ as _RAGBENCH_VERSION`)


def environment_markdown() -> str:
    """A table of every environment variable the package reads, with its meaning."""
    names = environment_names() | set(ENVIRONMENT)
    rows = [[f"`{n}`", ENVIRONMENT.get(n, "(not yet described)")] for n in sorted(names)]
    return "\n".join(
        [
            "Generated when the site is built: the names are those found in the package's "
            "source (`os.environ`, `getenv`); `tests/project/test_docs.py` fails when one has no "
            "meaning written here.",
            "",
            _table(["variable", "meaning"], rows),
        ]
    )


# ---------------------------------------------------------------- OpenTelemetry


def otel_rows() -> list[list[str]]:
    """The rows of the span/attribute table in the ``ragbench.otel`` module docstring."""
    import ragbench.otel as otel

    doc = inspect.getdoc(otel) or ""
    block = doc.split("\nAttributes\n", 1)[1].split("\nExport\n", 1)[0]
    lines = [ln[4:] for ln in block.splitlines() if ln.startswith("    ")]
    rules = [i for i, ln in enumerate(lines) if ln.startswith("=====")]
    cols = [len(m.group(0)) for m in re.finditer(r"=+", lines[rules[0]])]
    starts = [m.start() for m in re.finditer(r"=+", lines[rules[0]])]
    rows: list[list[str]] = []
    for ln in lines[rules[1] + 1 : rules[2]]:
        cells = [ln[s : s + w + 2].strip() for s, w in zip(starts, cols, strict=True)]
        cells[-1] = ln[starts[-1] :].strip()
        if cells[1] or not rows:
            rows.append(cells)
        else:  # a continuation line
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return rows


def otel_markdown() -> str:
    """The span attributes ragbench sets, from the ``ragbench.otel`` docstring."""
    import ragbench.otel as otel

    return "\n".join(
        [
            "Generated from the `ragbench.otel` module docstring when the site is built. "
            f"The request span is `{otel.REQUEST_SPAN}`; the first token is the "
            f"`{otel.FIRST_TOKEN_EVENT}` event; OTLP protocols: "
            f"{', '.join(f'`{p}`' for p in otel.PROTOCOLS)}.",
            "",
            _table(["span", "attribute", "value"], otel_rows()),
        ]
    )


# ---------------------------------------------------------------- schemas


def _ragbench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``ragbench ARGS`` run from ``cwd`` in this process, what it prints caught: the entry
    point ``python -m ragbench`` runs (``ragbench.cli.main``), of this checkout (on_startup).

    Not a child process each: a build runs ~80 (every table, reading and chart), and each
    child spent ~0.9 s of CPU importing ragbench, numpy and rich before its ~0.03 s of work.
    """
    from ragbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:
        code = 1
        err.write(traceback.format_exc())
    finally:
        os.chdir(here)
    argv = [sys.executable, "-m", "ragbench", *args]
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _python(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a child process, importing this checkout's ragbench."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def schemas_markdown() -> str:
    """``ragbench schema config`` and ``records`` as JSON blocks, when the command exists."""
    if "schema" not in dict(cli_commands()):
        return (
            "!!! note\n    This version of ragbench has no `ragbench schema` command yet; "
            "when it has one, this page shows its output."
        )
    out = []
    for what in ("config", "records"):
        done = _ragbench("schema", what)
        if done.returncode != 0:
            raise RuntimeError(f"ragbench schema {what} failed: {done.stderr.strip()}")
        out += [f"## `ragbench schema {what}`", "", "```json", done.stdout.rstrip(), "```", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- findings


def report_markdown(page_dir: Path, args: str) -> str:
    """``ragbench report --format md`` of the files named in ``args`` (relative to ``page_dir``)."""
    words = shlex.split(args)
    if not words:
        raise ValueError("<!-- gen: report FILE... --> names no file")
    for w in words:
        if not w.startswith("-") and not (page_dir / w).is_file():
            raise FileNotFoundError(f"report: no results file {page_dir / w}")
    done = _ragbench("report", "--format", "md", *words, cwd=page_dir)
    if done.returncode != 0:
        raise RuntimeError(f"ragbench report {args} failed: {done.stderr.strip()}")
    return done.stdout.rstrip()


def reading_markdown(page_dir: Path, args: str) -> str:
    """The lines ``ragbench report FILE`` prints under its table (its reading), as a text block."""
    done = _ragbench("report", *shlex.split(args), cwd=page_dir)
    if done.returncode != 0:
        raise RuntimeError(f"ragbench report {args} failed: {done.stderr.strip()}")
    return "```text\n" + "\n".join(reading_lines(done.stdout)) + "\n```"


def report_text(page_dir: Path, args: str) -> str:
    """``ragbench report FILE`` as the terminal shows it (table and reading), in a text block.

    The ``cache:`` lines name the folders of the machine that measured: they are left out.
    """
    done = _ragbench("report", *shlex.split(args), cwd=page_dir)
    if done.returncode != 0:
        raise RuntimeError(f"ragbench report {args} failed: {done.stderr.strip()}")
    lines = [ln.rstrip() for ln in done.stdout.rstrip().splitlines()]
    return "```text\n" + "\n".join(ln for ln in lines if not ln.startswith("cache: ")) + "\n```"


def reading_lines(out: str) -> list[str]:
    """The lines of ``ragbench report`` output under its first table that are not a table:
    the notes between tables too (a load report's knee lines sit above its per-stage table),
    without the later tables and their titles."""
    lines = out.rstrip().splitlines()
    first = min(i for i, ln in enumerate(lines) if ln.startswith("└"))
    keep = []
    for i in range(first + 1, len(lines)):
        titled = i + 1 < len(lines) and lines[i + 1].startswith("┏")
        if not titled and not lines[i].startswith(("┏", "┃", "┡", "│", "└", "├")):
            keep.append(lines[i])
    return keep


#: Charts asked for by the pages being built: (results files, PNG path in the site, payload
#: panel only).
PLOTS: list[tuple[list[Path], Path, bool]] = []

#: Draws only the transport-against-payload panel of ``compare --payload-k`` records.
PAYLOAD_PLOT = ROOT / "bench" / "transport_settings.py"


def plot_markdown(page_dir: Path, site_page_dir: Path, args: str) -> str:
    """An ``<img>`` of ``ragbench report FILE... --plot NAME.png``, drawn into the site after the build.

    With ``--payload`` first, the chart is only transport p50 against payload bytes, one line
    per transport setting, over every file named (``bench/transport_settings.py``).
    """
    words = shlex.split(args)
    payload = bool(words) and words[0] == "--payload"
    *files, name = words[1:] if payload else words
    if not files or not name.endswith(".png"):
        raise ValueError("<!-- gen: plot FILE... NAME.png --> needs results files and a .png name")
    PLOTS.append(([page_dir / f for f in files], site_page_dir / name, payload))
    if payload:
        return (
            f'<img src="{name}" alt="python bench/transport_settings.py {" ".join(files)} {name}">'
        )
    return f'<img src="{name}" alt="ragbench report {" ".join(files)} --plot {name}">'


def draw_plots(plots: list[tuple[list[Path], Path, bool]]) -> None:
    """Run ``ragbench report FILE... --plot PATH`` (or the payload chart) for every chart asked for."""
    for files, target, payload in plots:
        target.parent.mkdir(parents=True, exist_ok=True)
        if payload:
            done = _python(str(PAYLOAD_PLOT), *map(str, files), str(target))
        else:
            done = _ragbench("report", *map(str, files), "--plot", str(target))
        if done.returncode != 0 or not target.is_file():
            raise RuntimeError(f"the chart {target} failed: {done.stderr.strip()}")


def _findings_manifest() -> Any:
    """``tools/findings.py`` (the runner of ``make findings``), which reads the manifest."""
    name = "ragbench_docs_findings"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "findings.py")
        if spec is None or spec.loader is None:
            raise ImportError("tools/findings.py is missing")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def reproduce_markdown(args: str) -> str:
    """The commands of ``docs/findings/commands.toml`` that wrote the named results files."""
    names = shlex.split(args)
    if not names:
        raise ValueError("<!-- gen: reproduce NAME... --> names no results file")
    findings = _findings_manifest().load()
    missing = [n for n in names if n not in findings]
    if missing:
        raise ValueError(f"reproduce: {missing} not in docs/findings/commands.toml")
    commands = [c for n in names for c in findings[n].commands]
    wrapped = [" \\\n    ".join(_wrap(c)) for c in commands]
    return "\n".join(
        [
            f"Reproduce with (`make findings` re-measures every page; "
            f"`python tools/findings.py {' '.join(names)}` only this):",
            "",
            "```sh",
            *wrapped,
            "```",
        ]
    )


def _wrap(command: str, width: int = 92) -> list[str]:
    """A long command as lines of at most ``width`` characters, broken between options."""
    lines: list[str] = []
    for word in re.split(r" (?=--?[a-zA-Z])", command):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _num(value: float) -> str:
    """Three significant digits, thousands separated (``12,300``, ``0.0123``)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}"


def _extra(info: dict[str, Any], prefix: str = "") -> list[str]:
    """The numeric ``extra_info`` of a benchmark as ``key value`` items (nested keys dotted)."""
    out = []
    for key, value in info.items():
        if isinstance(value, dict):
            out += _extra(value, f"{prefix}{key}.")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            continue
        else:
            out.append(f"{prefix}{key} {_num(float(value))}")
    return out


def _is_ratio(item: str) -> bool:
    """An ``extra_info`` item that is a ratio measured side by side (``numba_over_floor``, ``a/b``)."""
    key = item.rsplit(" ", 1)[0]
    return "_over_" in key or "/" in key


def bench_markdown(page_dir: Path, args: str) -> str:
    """A pytest-benchmark JSON file (``--benchmark-json``): each benchmark's median and what it measured.

    The ``measured`` column is the benchmark's ``extra_info``: the ratios and side-by-side
    figures the bench suites record (and assert on) besides pytest-benchmark's own timing.
    """
    (name,) = shlex.split(args)
    doc = json.loads((page_dir / name).read_text(encoding="utf-8"))
    cpu = ((doc.get("machine_info") or {}).get("cpu") or {}).get("brand_raw", "?")
    rows = []
    for entry in doc.get("benchmarks") or []:
        stats = entry.get("stats") or {}
        measured = _extra(entry.get("extra_info") or {})
        rows.append(
            [
                f"`{entry.get('fullname', entry.get('name'))}`",
                _num(float(stats.get("median", float("nan"))) * 1e6),
                str(stats.get("rounds", "")),
                "; ".join(i for i in measured if _is_ratio(i)) or "—",
                "; ".join(i for i in measured if not _is_ratio(i)),
            ]
        )
    if not rows:
        raise ValueError(f"bench: {name} holds no benchmarks")
    when = doc.get("datetime", "?")
    return "\n".join(
        [
            _table(
                ["benchmark", "median µs", "rounds", "ratios", "other figures (extra_info)"], rows
            ),
            "",
            f"From `{name}`: pytest-benchmark {doc.get('version', '?')}, {when}, {cpu}.",
        ]
    )


def stats_markdown(page_dir: Path, args: str) -> str:
    """``ragbench datasets --stats A --stats B --format json`` side by side, and how far B is from A."""
    (name,) = shlex.split(args)
    found = json.loads((page_dir / name).read_text(encoding="utf-8"))
    if len(found) < 2:
        raise ValueError(f"stats: {name} describes fewer than two datasets")
    head = {"name", "embedder", "n", "dim", "sample", "hub points"}
    keys = [k for k in found[0] if k not in head and isinstance(found[0][k], int | float)]
    cols = [f"{d['name']} ({d['embedder']}, n={d['n']})" for d in found]
    rows = [[f"`{k}`", *(_num(float(d[k])) for d in found)] for k in keys]
    a, b = found[0], found[1]
    gaps = sorted(
        ((float(b[k]) - float(a[k])) / abs(float(a[k])), k) for k in keys if float(a[k]) != 0
    )
    worst = sorted(gaps, key=lambda g: -abs(g[0]))[:4]
    return "\n".join(
        [
            _table(["statistic", *cols], rows),
            "",
            f"{b['name']} against {a['name']}: every statistic within "
            f"{max(abs(g) for g, _ in gaps):.0%}; the largest gaps "
            + ", ".join(f"`{k}` {g:+.0%}" for g, k in worst)
            + ".",
        ]
    )


def _records(path: Path) -> list[dict[str, Any]]:
    """The records of a results file, read (and checked, upgraded) as ragbench reads them."""
    from ragbench.results.records import read_records

    return read_records(path)


def _memory_of(run: dict[str, Any], sweeps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first sweep record of the same index built with the same parameters on the same data.

    Parameters are compared on the keys both records name: a parameter a later ragbench added
    (at its default) does not make the same build another one.
    """
    index = (run.get("info") or {}).get("index") or {}
    params = index.get("params") or {}
    data = (run.get("dataset") or {}).get("name")
    for rec in sweeps:
        build = rec.get("build") or {}
        same = all(params[k] == build[k] for k in params.keys() & build.keys())
        if rec.get("index") == index.get("backend") and rec.get("dataset") == data and same:
            return rec
    return None


def _retrieve_ns(rec: dict[str, Any]) -> Any:
    import numpy as np

    return np.asarray((rec.get("samples_ns") or {}).get("retrieve") or [], dtype=np.float64)


def _engine_row(
    rec: dict[str, Any], first: dict[str, Any], sweeps: list[dict[str, Any]]
) -> list[str]:
    """One engine's cells of :func:`engines_markdown`."""
    from ragbench import intervals

    retrieve = rec["summary"]["retrieve"]
    lo, hi = retrieve.get("p50_us_ci") or (float("nan"), float("nan"))
    if rec is first:
        ratio = "1 (reference)"
    else:
        iv = intervals.ratio(_retrieve_ns(first), _retrieve_ns(rec), "p50")
        ratio = f"{iv.value:.2f} [{iv.low:.2f}–{iv.high:.2f}]"
    parts = (rec.get("info") or {}).get("retrieve_parts") or {}
    split = " / ".join(
        _num(parts[p]["p50_ns"] / 1e3) for p in ("send", "server", "decode") if p in parts
    )
    build = ((rec.get("info") or {}).get("index") or {}).get("build") or {}
    if build.get("cached"):  # loaded from the index cache: its seconds were another run's
        built = "reused"
    else:
        built = _num(float((rec.get("setup_s") or {}).get("index_build", float("nan"))))
    mem = _memory_of(rec, sweeps)
    from ragbench.results.tables.notes import index_family

    ran = (rec.get("config") or {}).get("retrieve") or {}  # what the run asked for
    index_info = (rec.get("info") or {}).get("index") or {}  # what it built
    family = index_family(
        str(ran.get("backend") or index_info.get("backend")),
        ran.get("build") or index_info.get("params"),
        ran.get("search"),
    )
    return [
        f"`{rec.get('label')}`",
        family,
        f"{rec['recall_at_k']:.3f}",
        f"{rec['recall_p10']:.2f}",
        _zero_of(rec),
        f"{_num(retrieve['p50_us'])} [{_num(lo)}–{_num(hi)}]",
        _num(retrieve["p99_us"]),
        ratio,
        split or "—",
        built,
        _num(mem["memory_bytes"] / 1e6) if mem else "—",
        _num(mem["bytes_per_vector"]) if mem else "—",
    ]


def _zero_of(rec: dict[str, Any]) -> str:
    """``4 / 120``: the run's requests that found none of the true top 10, of all."""
    from ragbench.results.tables.cells import zero_cell

    return zero_cell(rec.get("recall_zero"), rec.get("recall"))


#: The columns of :func:`engines_markdown`.
ENGINE_COLUMNS = [
    "index",
    "index family",
    "recall@10 mean",
    "recall@10 p10",
    "requests at recall 0",
    "retrieve p50 µs [95 % CI]",
    "retrieve p99 µs",
    "× first row's retrieve p50 [95 % CI]",
    "send / server / decode p50 µs",
    "build s",
    "memory MB",
    "bytes / vector",
]


def detection_markdown(page_dir: Path, args: str) -> str:
    """The counts of a ``tools/recipe_detection.py`` results file (path relative to the page)."""
    path = ROOT / "tools" / "recipe_detection.py"
    spec = importlib.util.spec_from_file_location("recipe_detection", path)
    if spec is None or spec.loader is None or not args:
        raise ValueError(f"<!-- gen: detection FILE -->: cannot read {args!r} with {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("recipe_detection", module)  # its dataclasses look the module up
    spec.loader.exec_module(module)
    return str(module.summary_markdown(page_dir / args))


def quick_margins_markdown(page_dir: Path, args: str) -> str:
    """Each quick gate's recorded spread and tripwire, from ``bench/_quick.py``'s ``margins()``
    of a ``tools/quick_gate_spread.py`` results file (path relative to the page)."""
    path = ROOT / "bench" / "_quick.py"
    spec = importlib.util.spec_from_file_location("_quick", path)
    if spec is None or spec.loader is None or not args:
        raise ValueError(f"<!-- gen: quick-margins FILE -->: cannot read {args!r} with {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_quick", module)  # its dataclasses look the module up
    spec.loader.exec_module(module)
    data = page_dir / args
    found = module.margins(data)
    if not found:
        raise ValueError(f"quick-margins: {args} records no gate measured twice")
    rows = []
    for gate, m in sorted(found.items()):
        unit = "" if m.relative else " (in the gate's unit)"
        rows.append(
            [
                _cell(gate),
                f"{m.op} {m.target:.4g}",
                f"{len(m.judged)} ({'quiet' if m.source == 'quiet' else 'all attempts'})",
                f"{min(m.judged):.4g} – {max(m.judged):.4g}",
                f"{m.spread:.1%}" if m.relative else f"{m.spread:.3g}{unit}",
                f"{m.margin:.0%}" if m.relative else f"{m.margin:.3g}",
                f"{m.op} {m.bound(m.target):.4g}",
            ]
        )
    runs = sorted({json.loads(line)["started"] for line in data.read_text().splitlines() if line})
    head = ["gate", "target", "runs judged", "judged values", "spread", "margin", "quick tripwire"]
    return (
        _table(head, rows)
        + f"\n\nFrom `{Path(args).name}`: {len(runs)} runs started {runs[0]} to {runs[-1]} (UTC)."
    )


INTERRUPT_SCHEMA = "ragbench.interrupt-timing/1"
#: A file of the ONNX cache no finished graph is: a writer's temporary (``*.tmp.onnx``, a
#: quantization folder ``*.tmp.d``) or ONNX Runtime's side file ``<graph>-inferred.onnx``.
STRAY_CACHE_FILE = re.compile(r"\.tmp\.|-inferred\.onnx$")


def _interrupt_row(rec: dict[str, Any]) -> list[str]:
    """One interrupted run: its phase, code, delay, seconds to exit, status, leftovers, load."""
    code = f"`{rec['code_ref']}` ({rec['code']})" if rec.get("code_ref") else f"{rec['code']}"
    delay = f"{rec['delay_s']:g}" + ("" if rec.get("in_phase_at_signal", True) else " (step over)")
    procs, files = rec["processes_left"], rec["cache_files_left"]
    stray = [f for f in files if STRAY_CACHE_FILE.search(f)]
    left = [f"{len(procs)} processes"] if procs else []
    left += [", ".join(f"`{f}`" for f in stray)] if stray else []
    if len(files) > len(stray):  # graphs finished before SIGINT (the export's, for int8)
        left = [*(left or ["nothing"]), f"{len(files) - len(stray)} finished cache files kept"]
    before, after = rec["load_before"][0], rec["load_after"][0]
    cores = (rec.get("env") or {}).get("cores") or 0
    busy = " (busy)" if cores and max(before, after) >= cores else ""
    said = rec.get("last_line")  # what a command that did not exit 130 said last
    return [
        f"`{rec['phase']}`",
        code,
        delay,
        f"{rec['seconds_to_exit']:.2f}",
        str(rec["exit"]) + (f": {rec['last_line']}" if rec["exit"] != 130 and said else ""),
        "; ".join(left) or "nothing",
        f"{before:.1f} → {after:.1f}{busy}",
    ]


def interrupts_markdown(page_dir: Path, args: str) -> str:
    """The runs of a ``bench/interrupt_timing.py --out`` file (path relative to the page), in
    its order: one row each, and the runs' time span under the table."""
    (name,) = shlex.split(args)
    lines = (page_dir / name).read_text(encoding="utf-8").splitlines()
    recs = [json.loads(ln) for ln in lines if ln.strip()]
    other = {r.get("schema") for r in recs} - {INTERRUPT_SCHEMA}
    if not recs or other:
        raise ValueError(f"interrupts: {name} holds no {INTERRUPT_SCHEMA} records only ({other})")
    head = ["phase", "code", "delay s", "SIGINT to exit s", "exit status", "left behind"]
    table = _table([*head, "1-min load before → after"], [_interrupt_row(r) for r in recs])
    times = sorted(r["time"] for r in recs)
    return table + f"\n\nFrom `{name}`: {len(recs)} runs from {times[0]} to {times[-1]} (UTC)."


def search_after_markdown(page_dir: Path, args: str) -> str:
    """``bench/test_bench_search_after.py``'s ``--benchmark-json``: one row per engine, each
    condition's search p50 over back-to-back's with its 95 % interval (the bench's extra_info)."""
    (name,) = shlex.split(args)
    doc = json.loads((page_dir / name).read_text(encoding="utf-8"))
    conds = ["embed", "thrash", "sleep", "spin"]
    rows = []
    for entry in doc.get("benchmarks") or []:
        info = entry.get("extra_info") or {}
        cells = [f"`{(entry.get('params') or {}).get('engine', entry.get('name'))}`"]
        cells.append(_num(float(info["back_to_back p50 us"])))
        for c in conds:
            key = f"after_{c}_over_back_to_back"
            cells.append(
                f"{info[key]:.2f} [{info[key + ' 95% low']:.2f}–{info[key + ' 95% high']:.2f}]"
            )
        cells.append(_num(float(info["embed ms"])))
        cells.append(_num(float(info["loadavg_1min"])))
        rows.append(cells)
    if not rows:
        raise ValueError(f"search-after: {name} holds no benchmarks")
    head = ["engine", "back-to-back p50 µs", *(f"after {c}" for c in conds)]
    table = _table([*head, "embed p50 ms", "load (1 min)"], rows)
    return table + f"\n\nFrom `{name}`, {doc.get('datetime', '?')}."


def engines_markdown(page_dir: Path, args: str) -> str:
    """One row per index of a ``ragbench compare`` results file, the figures a user compares
    engines by: recall@10 (mean, the 10th percentile over queries and the requests that found
    none of the true top 10), the retrieve stage's
    p50 with its interval and p99, its p50 over the first row's with a bootstrap interval of
    the ratio (``ragbench.intervals.ratio`` over the two rows' requests), the index's own
    send/server/decode split where it gives one, the build's seconds in that run (or ``reused``, no seconds, for an
    index loaded from the index cache: they were another run's), and the
    memory of the same build from ``ragbench sweep`` records (files after the first)."""
    run_file, *sweep_files = shlex.split(args)
    runs = [r for r in _records(page_dir / run_file) if r.get("kind") == "run"]
    if not runs:
        raise ValueError(f"engines: {run_file} holds no run records")
    sweeps = [r for f in sweep_files for r in _records(page_dir / f) if r.get("kind") == "sweep"]
    rows = [_engine_row(r, runs[0], sweeps) for r in runs]
    mems = [m for m in (_memory_of(r, sweeps) for r in runs) if m]
    builds = {
        bool((((r.get("info") or {}).get("index") or {}).get("build") or {}).get("deterministic"))
        for r in runs
    }
    how = {
        frozenset({True}): "deterministic (one thread)",
        frozenset({False}): "on every core (`--fast-build`)",
    }
    datasets = sorted({(r.get("dataset") or {}).get("name", "?") for r in runs})
    source = f"`{run_file}`" + "".join(f", memory from `{f}`" for f in sweep_files)
    first = ((runs[0].get("info") or {}).get("index") or {}).get("backend")
    iso = _iso_recall_markdown(sweeps, str(first), sweep_files)
    if iso:
        iso += _query_set_note(runs, sweeps)
    return "\n".join(
        [
            _table(_engine_columns(mems), rows),
            "",
            f"From {source}: {', '.join(datasets)}, {runs[0].get('requests')} requests per row, "
            f"builds {how.get(frozenset(builds), 'mixed')}; recorded {runs[0].get('time', '?')}"
            + _threads_of(runs)
            + f"; {_memory_text(mems)}; {_cache_of(runs)}.",
            *(["", iso] if iso else []),
        ]
    )


def _engine_columns(mems: list[dict[str, Any]]) -> list[str]:
    """:data:`ENGINE_COLUMNS`, the memory column named by how its rows were measured."""
    from ragbench.procstat import METHOD, METHOD_COLD, OLD_METHODS

    methods = {m.get("memory_method") for m in mems}
    if methods and methods <= {METHOD, METHOD_COLD}:
        name = "memory MB (PSS delta, new files)"
    elif methods and methods <= OLD_METHODS:
        name = "memory MB (PSS delta)"
    else:
        name = "memory MB (each engine's own accounting)" if methods == {None} else "memory MB"
    return [name if c == "memory MB" else c for c in ENGINE_COLUMNS]


def _memory_text(mems: list[dict[str, Any]]) -> str:
    """What the memory column is (``ragbench.results.tables.points.memory_note``)."""
    from ragbench.results.schema import SweepRecord, read_struct
    from ragbench.results.tables.points import memory_note

    if not mems:
        return "memory not measured"
    return memory_note([read_struct(m, SweepRecord) for m in mems])


def _iso_recall_markdown(sweeps: list[dict[str, Any]], first: str, files: list[str]) -> str:
    """Each engine's search p50 / p99 at recall 0.9, 0.95, 0.99, interpolated on its frontier
    in the sweep records (unfiltered points), and its p50 over the first row's engine's at the
    same recall (``ragbench.results.reading.isorecall``), each with its 95 % bootstrap interval over
    the queries; "" without sweep points."""
    import numpy as np

    from ragbench.results.reading.isorecall import DEFAULT_TARGETS, Point, at_recall

    by: dict[str, list[Point]] = {}
    for r in sweeps:
        if r.get("strategy") is None and r.get("recall") is not None and r.get("p50_us"):
            p99 = float(r["p99_us"]) if r.get("p99_us") is not None else float("nan")
            lat = np.asarray(r.get("latency_ns") or [], dtype=np.float64) / 1e3
            rec = np.asarray(r.get("recall_per_query") or [], dtype=np.float64)
            point = Point(r["recall"], r["p50_us"], p99, lat if lat.size else None, rec)
            by.setdefault(str(r["index"]), []).append(point)
    if not by:
        return ""
    reads = {name: {t: at_recall(pts, t) for t in DEFAULT_TARGETS} for name, pts in by.items()}
    rows = []
    for name, at in reads.items():
        cells = [f"`{name}` sweep"]  # not `name` alone: a page's other tables key rows on that
        for t, a in at.items():
            ref = reads.get(first, {}).get(t)
            cells.append(_iso_cell(a, ref if name != first else None))
        rows.append(cells)
    head = [
        "index",
        *(f"at recall {t:g}: p50 [CI] / p99 [CI] µs (× `{first}` [CI])" for t in DEFAULT_TARGETS),
    ]
    return "\n".join(
        [
            _table(head, rows),
            "",
            f"At equal recall, from {', '.join(f'`{f}`' for f in files)}: each engine's search "
            "p50 / p99 interpolated linearly between the two points of its recall–p50 frontier "
            "around the target (never extrapolated), its p50 over the reference's at the same "
            "recall; [CI]: 95 % bootstrap intervals over the queries (both bracketing points' "
            "recall and latency resampled on the same queries, the ratio's paired across "
            "engines); these are sweep times (one search call at a time, back to back), not the "
            f"retrieve stage above; {_cache_of(sweeps)}.",
        ]
    )


def _cache_of(records: list[dict[str, Any]]) -> str:
    """``cache state: after-stages (...)`` of the records (inferred from their kind when older)."""
    from ragbench.results.tables.cache_state import cache_state_text

    return cache_state_text(records) or "cache state not recorded"


def _threads_of(runs: list[dict[str, Any]]) -> str:
    """``; search threads per query: 1`` from the runs' index info ("" for older records)."""
    from ragbench.results.tables.search_threads import search_threads_text

    by = {}
    for r in runs:
        index = (r.get("info") or {}).get("index") or {}
        if "search_threads" in index:
            by.setdefault(str(index.get("backend")), index["search_threads"])
    text = search_threads_text(by)
    return f"; {text}" if text else "; search threads per query not recorded (older records)"


def _query_set_note(runs: list[dict[str, Any]], sweeps: list[dict[str, Any]]) -> str:
    """A sentence when the compare and the sweep read different query sets (their first N
    queries of the same dataset, N unequal): the same point then shows another recall."""
    ran = {((r.get("config") or {}).get("run") or {}).get("queries") for r in runs}
    swept = {r.get("queries") for r in sweeps if r.get("strategy") is None}
    ran.discard(None)
    swept.discard(None)
    if not ran or not swept or ran == swept:
        return ""
    n_run = "/".join(str(n) for n in sorted(ran))
    n_sweep = "/".join(str(n) for n in sorted(swept))
    return (
        f" NOT the same queries: the sweep measured the dataset's first {n_sweep} queries, "
        f"the compare its first {n_run}, so one engine at one setting reads another recall "
        "in each table; re-measure both on one query set."
    )


def _iso_cell(at: Any, ref: Any) -> str:
    """One cell of :func:`_iso_recall_markdown`: figures, "not reached" or an upper bound."""
    if at.how == "not reached":
        return f"not reached (best {at.below.recall:.3f})"
    if at.how == "below the grid":
        return f"≤ {_num(at.p50_us)} (first point at {at.above.recall:.3f})"
    from ragbench.results.reading.isorecall import ratio_interval

    def ci(span: Any) -> str:
        return "" if span is None else f" [{_num(span[0])}–{_num(span[1])}]"

    text = f"{_num(at.p50_us)}{ci(at.p50_ci)} / {_num(at.p99_us)}{ci(at.p99_ci)}"
    if ref is not None and ref.figure:
        span = ratio_interval(at, ref)
        within = "" if span is None else f" [{span[0]:.2f}–{span[1]:.2f}]"
        text += f" ({at.p50_us / ref.p50_us:.2f}×{within})"
    return text


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_markdown,
    "config": lambda: config_markdown() + "\n\n" + backends_markdown(),
    "errors": errors_markdown,
    "environment": environment_markdown,
    "otel-attributes": otel_markdown,
    "schemas": schemas_markdown,
    "params": params_markdown,
    "index-capabilities": index_capabilities_markdown,
}


PG_INTERRUPT_SCHEMA = "ragbench.pg-interrupt/1"
#: What ``ragbench run`` was doing when ``bench/pg_interrupt.py`` sent SIGINT, by phase.
PG_PHASES = {
    "initdb": "`initdb` running",
    "start": "the server just started (listening)",
    "build": "`CREATE INDEX` running",
}


def _spread(values: list[float]) -> str:
    """``median (min–max)`` of some seconds, or the one value of one run."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def _pg_interrupt_row(recs: list[dict[str, Any]]) -> list[str]:
    """The runs of one phase on one code: medians and ranges of both times, statuses, load."""
    first = recs[0]
    doing = PG_PHASES.get(first["phase"], first["phase"])
    if first["delay_s"]:
        doing += f", SIGINT {first['delay_s']:g} s in"
    clean = [r["seconds_to_nothing_left"] for r in recs if r["seconds_to_nothing_left"] is not None]
    left = [item for r in recs for item in r["left"]]
    gone = _spread(clean) if clean else "—"
    if len(clean) < len(recs):
        gone += f"; {len(recs) - len(clean)} of {len(recs)} runs left something"
    statuses = sorted({r["exit"] for r in recs})
    said = sorted({r["last_line"] for r in recs if r["exit"] != 130 and r.get("last_line")})
    loads = [x for r in recs for x in (r["load_before"][0], r["load_after"][0])]
    cores = (first.get("env") or {}).get("cores") or 0
    busy = " (busy)" if cores and max(loads) >= cores else ""
    return [
        f"`{first['phase']}`",
        doing,
        f"{first['n']:,}".replace(",", " "),
        first["code"],
        str(len(recs)),
        _spread([r["seconds_to_exit"] for r in recs]),
        gone,
        ", ".join(map(str, statuses)) + (f": {'; '.join(said)}" if said else ""),
        ", ".join(f"`{x}`" for x in sorted(set(left))) or "nothing",
        f"{min(loads):.1f}–{max(loads):.1f}{busy}",
    ]


def pg_interrupts_markdown(page_dir: Path, args: str) -> str:
    """The runs of a ``bench/pg_interrupt.py --out`` file (path relative to the page): one row
    per phase and code, in the file's order; the runs' time span and machine under the table."""
    (name,) = shlex.split(args)
    lines = (page_dir / name).read_text(encoding="utf-8").splitlines()
    recs = [json.loads(ln) for ln in lines if ln.strip()]
    other = {r.get("schema") for r in recs} - {PG_INTERRUPT_SCHEMA}
    if not recs or other:
        raise ValueError(
            f"pg-interrupts: {name} holds no {PG_INTERRUPT_SCHEMA} records only ({other})"
        )
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in recs:
        groups.setdefault((rec["phase"], rec["code"]), []).append(rec)
    head = ["phase", "SIGINT sent during", "corpus rows", "code", "runs", "SIGINT to exit s"]
    head += ["SIGINT to nothing left s", "exit status", "left behind", "1-min load"]
    table = _table(head, [_pg_interrupt_row(g) for g in groups.values()])
    times = sorted(r["time"] for r in recs)
    hosts = sorted({f"{r['env']['cpu']}, {r['env']['cores']} cores" for r in recs if r.get("env")})
    return table + (
        f"\n\nMedian (min–max) over the runs. From `{Path(name).name}`: {len(recs)} runs from "
        f"{times[0]} to {times[-1]} (UTC) on {'; '.join(hosts) or 'a machine not recorded'}."
    )


def markers(text: str) -> Iterator[re.Match[str]]:
    """Every ``<!-- gen: ... -->`` line of a page."""
    return MARKER.finditer(text)


def expand(text: str, page_dir: Path, site_page_dir: Path | None = None) -> str:
    """The page with every marker replaced by what it asks for (unknown names are an error)."""

    def one(m: re.Match[str]) -> str:
        what, args = m.group("what"), m.group("args").strip()
        if what == "report":
            return report_markdown(page_dir, args)
        if what == "reading":
            return reading_markdown(page_dir, args)
        if what == "report-text":
            return report_text(page_dir, args)
        if what == "reproduce":
            return reproduce_markdown(args)
        if what == "bench":
            return bench_markdown(page_dir, args)
        if what == "stats":
            return stats_markdown(page_dir, args)
        if what == "engines":
            return engines_markdown(page_dir, args)
        if what == "search-after":
            return search_after_markdown(page_dir, args)
        if what == "detection":
            return detection_markdown(page_dir, args)
        if what == "quick-margins":
            return quick_margins_markdown(page_dir, args)
        if what == "interrupts":
            return interrupts_markdown(page_dir, args)
        if what == "pg-interrupts":
            return pg_interrupts_markdown(page_dir, args)
        if what == "source":
            return source_markdown(page_dir, args)
        if what == "plot":
            if site_page_dir is None:
                raise ValueError("plot markers need the site folder of the page")
            return plot_markdown(page_dir, site_page_dir, args)
        if what not in GENERATORS:
            known = ", ".join(
                [
                    *("report", "report-text", "reading", "plot", "reproduce", "bench", "stats"),
                    "engines",
                    *("search-after", "detection", "quick-margins", "interrupts", "source"),
                    "pg-interrupts",
                    *GENERATORS,
                ]
            )
            raise ValueError(f"unknown generated section {what!r}; known: {known}")
        return GENERATORS[what]()

    return MARKER.sub(one, text)


def on_startup(command: str, dirty: bool) -> None:  # noqa: ARG001 (mkdocs hook signature)
    """Put this checkout first on the path, so the site documents this checkout's ragbench."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    importlib.invalidate_caches()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # noqa: ARG001
    """mkdocs hook: expand the generated sections of one page (a findings page: and name its machine)."""
    src = Path(page.file.abs_src_path)
    site_page_dir = Path(page.file.abs_dest_path).parent
    if src.parent.name == "findings" and src.name != "index.md":
        markdown = with_machine(markdown, src.parent)
    return expand(markdown, src.parent, site_page_dir)


#: A results file a findings page's markers read: ``data/NAME`` or ``reproduce NAME``.
_DATA_REF = re.compile(r"<!-- gen: (?:(?:reproduce) (?P<name>[^ >]+)|[a-z-]+ (?P<args>[^>]*?)) -->")


def _page_data_files(text: str, page_dir: Path) -> list[Path]:
    """The results files (``data/...``) the page's generated sections read, in page order."""
    found: list[Path] = []
    for m in _DATA_REF.finditer(text):
        names = [f"data/{m['name']}"] if m["name"] else shlex.split(m["args"] or "")
        for name in names:
            path = page_dir / name
            if name.startswith("data/") and path.is_file() and path not in found:
                found.append(path)
    return found


def _machines_of(path: Path) -> list[tuple[str, Any, str, float | None]]:
    """(CPU model, cores, SIMD level, 1-min load or None) of each record in ``path``.

    A ``.jsonl`` of ragbench records: each record's ``env``; a pytest-benchmark
    ``.json``: its ``machine_info`` (py-cpuinfo: brand, count, flags; no load).
    """
    from ragbench.results.tables.notes import simd_level

    out = []
    if path.suffix == ".jsonl":
        lines = path.read_text().splitlines()
        for rec in (json.loads(ln) for ln in lines if ln.strip()):
            env = rec.get("env") or {}
            if env.get("cpu"):
                la = env.get("load_avg")
                load = float(la[0]) if isinstance(la, list) and la else None
                flags = env.get("cpu_flags") or []
                out.append((str(env["cpu"]), env.get("cores"), simd_level(flags), load))
        return out
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        return out
    cpu = (doc.get("machine_info") or {}).get("cpu") if isinstance(doc, dict) else None
    if cpu and cpu.get("brand_raw"):
        flags = cpu.get("flags") or []
        out.append((str(cpu["brand_raw"]), cpu.get("count"), simd_level(flags), None))
    return out


def machine_markdown(text: str, page_dir: Path) -> str:
    """One paragraph naming the machine(s) the page's results files were measured on.

    Read from the records (``env.cpu``, ``env.cores``, ``env.cpu_flags``, ``env.load_avg``;
    a pytest-benchmark file's ``machine_info``), never typed: per machine, the files measured
    on it; the files that record no machine are named as such.
    """
    by: dict[tuple[str, Any, str], list[str]] = {}
    loads: list[float] = []
    bare: list[str] = []
    for path in _page_data_files(text, page_dir):
        seen = _machines_of(path)
        if not seen:
            bare.append(path.name)
        for cpu, cores, simd, load in seen:
            names = by.setdefault((cpu, cores, simd), [])
            if path.name not in names:
                names.append(path.name)
            if load is not None:
                loads.append(load)
    if not by and not bare:
        return ""
    parts = [
        f"{cpu}, {cores or '?'} cores, {simd} ({', '.join(f'`{n}`' for n in names)})"
        for (cpu, cores, simd), names in by.items()
    ]
    line = "**Measured on** (from the records): " + ("; ".join(parts) or "no machine recorded")
    if loads:
        low, high = f"{min(loads):.1f}", f"{max(loads):.1f}"
        span = low if low == high else f"{low}–{high}"
        line += f"; 1-min load average {span} when the records were written"
    else:
        line += "; machine load not recorded (records from before env.load_avg)"
    if bare and by:
        line += f"; {', '.join(f'`{n}`' for n in bare)} record no machine"
    if len(by) > 1:
        line += ". NOTE: more than one machine: do not compare figures across them"
    return line + "."


def with_machine(text: str, page_dir: Path) -> str:
    """``text`` with :func:`machine_markdown` after its first heading (unchanged without one)."""
    line = machine_markdown(text, page_dir)
    if not line:
        return text
    head = re.search(r"^# .*$", text, re.M)
    if head is None:
        return line + "\n\n" + text
    return text[: head.end()] + "\n\n" + line + "\n" + text[head.end() :]


_SPHINX_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(?=<code>)")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:  # noqa: ARG001
    """Drop the Sphinx roles (``:class:``) the docstrings use: mkdocstrings leaves them as text."""
    return _SPHINX_ROLE.sub("", html)


def on_pre_build(config: Any) -> None:  # noqa: ARG001
    """Start every build with no charts pending (``mkdocs serve`` rebuilds in one process)."""
    PLOTS.clear()


def on_post_build(config: Any) -> None:  # noqa: ARG001
    """Draw the charts the pages asked for into the built site."""
    draw_plots(PLOTS)
    PLOTS.clear()


#: A block of the README regenerated from committed results (the README is not a site page):
#: ``<!-- readme-gen: engines data/run.jsonl [data/sweep.jsonl] -->`` (the engines table) or
#: ``<!-- readme-gen: report-text data/run.jsonl -->`` (``ragbench report`` as printed) ...
#: ``<!-- /readme-gen -->``, paths relative to ``docs/findings``.
README_BLOCK = re.compile(
    r"(<!-- readme-gen: (?P<what>engines|report-text) (?P<args>[^>]*?) -->\n)(?P<body>.*?)"
    r"(<!-- /readme-gen -->)",
    re.S,
)


def readme_expanded(text: str) -> str:
    """``text`` (the README) with every ``readme-gen`` block's body rendered anew."""

    def render(m: re.Match[str]) -> str:
        findings = ROOT / "docs" / "findings"
        if m.group("what") == "engines":
            body = engines_markdown(findings, m.group("args"))
        else:
            body = report_text(findings, m.group("args"))
        return f"{m.group(1)}\n{body.strip()}\n\n{m.group(5)}"

    return README_BLOCK.sub(render, text)


if __name__ == "__main__":
    # `python tools/docs_hooks.py --readme`: rewrite the README's generated blocks in place
    if sys.argv[1:] != ["--readme"]:
        sys.exit("usage: python tools/docs_hooks.py --readme")
    readme = ROOT / "README.md"
    readme.write_text(readme_expanded(readme.read_text(encoding="utf-8")), encoding="utf-8")

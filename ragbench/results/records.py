"""Result records: their kinds and schemas, the environment stamp, and JSON-lines files.

Every result ragbench produces is a JSON-able dict with ``schema``, ``kind``,
``time`` and ``env`` (each kind's fields are one versioned Struct of
:mod:`ragbench.results.schema`, checked when written and read) (the environment block of :func:`ragbench.env.environment`)::

    kind    schema              written by                      one record per
    run     ragbench.run/1      ragbench.results.report.Report          pipeline run
    sweep   ragbench.sweep/1    ragbench.sweeps.sweep_points    (index, build, query params)
    scale   ragbench.scale/1    ragbench.sweeps.scale_points    (index, corpus size)
    load    ragbench.load/1     ragbench.traffic.load_points    (configuration, offered rate)
    stream  ragbench.stream/1   ragbench.live_writes              stream checkpoint
    diff    ragbench.diff/1     ragbench.results.diff.diff_records     compared (configuration, part)

:func:`new_record` stamps a record of any kind the same way, so a sweep, scale
or load record carries the environment whether or not it is ever written to a
file, and ``node``: the host name of the machine it was measured on (also kept
in ``env``), which tells points measured on different Ray nodes apart. Files
are JSON lines appended record by record and flushed (:func:`append_record`,
:class:`RecordWriter`): an interrupted run keeps every record it finished.
What is derived from sets of records and needed by more than one reader
(Pareto flags, growth exponents) lives here too.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from os import PathLike
from typing import Any

from ..env import environment
from ..errors import ConfigError, DatasetError
from ..files import RESULTS_LIMIT, append_bytes, open_regular
from .schema import CURRENT, Record, RecordError, check_record, schema_name, validate

log = logging.getLogger("ragbench.results.records")

__all__ = [
    "DIFF_SCHEMA",
    "KINDS",
    "LOAD_SCHEMA",
    "RUN_SCHEMA",
    "SCALE_SCHEMA",
    "STREAM_SCHEMA",
    "SWEEP_SCHEMA",
    "Collector",
    "RecordWriter",
    "append_record",
    "caveats_of",
    "cliff_key",
    "filter_cliffs",
    "generator_kept_up",
    "growth_exponents",
    "knee_walks",
    "knees",
    "load_level",
    "jsonable",
    "new_record",
    "node_name",
    "now_iso",
    "pareto",
    "read_records",
    "iter_records",
    "read_benchmark_runs",
    "records_of",
    "without_secrets",
]

RUN_SCHEMA = schema_name("run")
SWEEP_SCHEMA = schema_name("sweep")
SCALE_SCHEMA = schema_name("scale")
LOAD_SCHEMA = schema_name("load")
STREAM_SCHEMA = schema_name("stream")
DIFF_SCHEMA = schema_name("diff")

#: Record kind → schema it is written with (one Struct each: :mod:`ragbench.results.schema`).
KINDS: dict[str, str] = {kind: schema_name(kind) for kind in CURRENT}


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second (the ``time`` of a record)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def node_name() -> str:
    """The host name of this machine: the ``node`` a record was measured on."""
    return platform.node() or "unknown"


def _here() -> dict[str, Any]:
    """The environment now, with the ``node`` it describes."""
    return {**environment(), "node": node_name()}


def new_record(
    kind: str, fields: Mapping[str, Any], *, env: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A record of ``kind``: ``schema``, ``kind``, ``time``, then ``fields``, ``node``, ``env``.

    ``env`` defaults to the environment now (CPU, cores, versions, threads,
    protobuf backend, git revision, and ``node``: this host's name). ``node``
    comes from ``fields`` if they name it, else from ``env``.
    """
    try:
        schema = KINDS[kind]
    except KeyError:
        raise ConfigError(f"unknown record kind {kind!r}; known: {', '.join(KINDS)}") from None
    rec: dict[str, Any] = {"schema": schema, "kind": kind, "time": now_iso()}
    rec.update(fields)
    block = dict(env) if env is not None else _here()
    rec["node"] = fields.get("node", block.get("node"))
    rec["env"] = block
    return rec


Readable = Mapping[str, Any] | Record  # a record as read from a file, or as its kind's Struct


def _field(rec: Readable, key: str) -> Any:
    """``key`` of a record dict or a record Struct (``None`` when it has no such field)."""
    return rec.get(key) if isinstance(rec, Mapping) else getattr(rec, key, None)


def caveats_of(records: Iterable[Readable]) -> list[str]:
    """Every caveat the records carry (a random-weight LLM, ...), once each, sorted."""
    return sorted({c for r in records for c in _field(r, "caveats") or []})


def records_of(records: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    """The records of one kind, in order."""
    return [r for r in records if r.get("kind") == kind]


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy arrays/scalars, tuples and paths turned into JSON types."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    tolist = getattr(obj, "tolist", None)  # numpy arrays and scalars
    if tolist is not None and type(obj).__module__ == "numpy":
        return tolist()
    if isinstance(obj, PathLike):
        return os.fspath(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def without_secrets(obj: Any) -> Any:
    """``obj`` (JSON types) with the password of every ``dsn`` value redacted (``***``).

    A database server's connection string (``[retrieve] dsn``, pgvector's
    ``dsn`` build parameter) may hold a password; no record keeps it.
    """
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key == "dsn" and isinstance(value, str):
                from ..indexes.pgvector.dsn import redact  # only when a record names a server

                value = redact(value)
            out[key] = without_secrets(value)
        return out
    if isinstance(obj, list):
        return [without_secrets(v) for v in obj]
    return obj


def append_record(path: str | PathLike[str], record: Mapping[str, Any]) -> None:
    """Append one JSON line and flush it to disk, so an interrupted run keeps what it finished.

    All or nothing: a write that fails (a full disk) leaves the file as it
    was and raises the ``OSError``.
    """
    plain = without_secrets(jsonable(record))
    try:
        validate(plain)  # written through its kind's schema
    except RecordError as exc:
        raise ConfigError(f"refusing to write a malformed record: {exc}") from None
    line = json.dumps(plain, separators=(",", ":"), allow_nan=True) + "\n"
    append_bytes(path, line.encode("utf-8"))


def _parse(line: bytes, where: str) -> tuple[Any, str | None]:
    """(the JSON value of one line, None) or (None, why it is not one); too deep or too long a number raises."""
    try:
        return json.loads(line.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except json.JSONDecodeError as exc:
        return None, exc.msg
    except RecursionError:
        raise DatasetError(f"{where}: a JSON line nested too deeply to read") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise DatasetError(f"{where}: a value cannot be read ({exc})") from None


def _check_kind(rec: Any, where: str) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise DatasetError(f"{where}: a record must be a JSON object")
    try:
        out = check_record(rec)  # older versions read, newer ones refused
    except RecordError as exc:
        raise DatasetError(f"{where}: {exc}") from None
    if out.get("kind") == "load":
        _check_load_counts(out, where)
    return out


#: A load level's requests, by outcome: every one ``scheduled`` ended in at most one of the others.
_LOAD_OUTCOMES = ("completed", "timed_out", "rejected", "failed")
#: Fields of a load record that cannot be negative (counts, then rates and seconds).
_LOAD_NON_NEGATIVE: tuple[str, ...] = (
    "scheduled",
    *_LOAD_OUTCOMES,
    "workers",
    "concurrency",
    "queue_size",
    "offered_qps",
    "achieved_qps",
    "goodput_qps",
    "window_s",
    "duration_s",
)


def _check_load_counts(rec: Mapping[str, Any], where: str) -> None:
    """Refuse a load record whose counts no run produces: negative, or more ended than scheduled."""
    for key in _LOAD_NON_NEGATIVE:
        value = rec.get(key)
        if isinstance(value, (int, float)) and value < 0:
            raise DatasetError(
                f"{where}: load record field {key!r} is {value}; it cannot be negative"
            )
    scheduled = rec.get("scheduled")
    ended = {key: rec.get(key) for key in _LOAD_OUTCOMES}
    if isinstance(scheduled, int) and all(isinstance(v, int) for v in ended.values()):
        total = sum(ended.values())  # type: ignore[arg-type]  # ints, checked above
        if total > scheduled:
            parts = " + ".join(f"{key} {v}" for key, v in ended.items())
            raise DatasetError(
                f"{where}: load record field 'scheduled' is {scheduled}, fewer than the requests "
                f"that ended ({parts} = {total}); the counts are inconsistent"
            )


def _lines(fh: Any, p: str) -> Iterator[bytes]:
    """``fh``'s lines, at most :data:`RESULTS_LIMIT` bytes in all, a read error as DatasetError.

    The size ``open_regular`` checked is not enough: a ``/proc`` file says 0
    bytes and then reads endlessly, or fails (``/proc/self/mem``: EIO).
    """
    got = 0
    try:
        while line := fh.readline(RESULTS_LIMIT + 1 - got):
            got += len(line)
            if got > RESULTS_LIMIT:
                raise DatasetError(
                    f"results file {p} holds over the {RESULTS_LIMIT:,} bytes a results file may have"
                )
            yield line
    except OSError as exc:
        raise DatasetError(f"cannot read results file {p}: {exc.strerror or exc}") from None


def iter_records(path: str | PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each record of a JSON-lines results file, read line by line.

    Only a regular file of at most :data:`ragbench.files.RESULTS_LIMIT` bytes
    is read. A line that is not a whole JSON value -- a write cut short (a
    full disk, a killed run) leaves a fragment, and whatever is appended next
    continues its line -- is skipped wherever it is, and a whole record that
    follows a fragment on its line is still read. One warning names the file,
    how many lines were skipped and where. A file of which no line is a
    record is an error; so is a record of an unknown kind or schema.
    """
    p = os.fspath(path)
    skipped: list[tuple[int, str]] = []
    whole = 0
    with open_regular(p, limit_bytes=RESULTS_LIMIT, what="results file") as fh:
        for n, line in enumerate(_lines(fh, p), 1):
            if not line.strip():
                continue
            values, problem = _values_of(line, f"{p}:{n}")
            if problem is not None:
                skipped.append((n, problem))
            for value in values:
                whole += 1
                yield n, _check_kind(value, f"{p}:{n}")
    if skipped:
        _say_skipped(p, skipped, whole)


def _say_skipped(p: str, skipped: Sequence[tuple[int, str]], whole: int) -> None:
    """Warn about the lines :func:`iter_records` skipped (an error when no record was read)."""
    first, problem = skipped[0]
    lines = ", ".join(str(n) for n, _ in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
    if not whole:
        raise DatasetError(f"{p}:{first}: not a JSON line ({problem}); the file holds no record")
    log.warning(
        "%s: skipped %d line(s) that are not whole records (line %s; %s), probably writes "
        "cut short; read the %d whole record(s)",
        p,
        len(skipped),
        lines,
        problem,
        whole,
    )


# where a record starts: every record ragbench writes begins with its schema
_RECORD_START = re.compile(rb'\{\s*"schema"\s*:')
_MAX_STARTS = 64  # candidates tried in one bad line (bounds the work on a garbage line)


def _values_of(line: bytes, where: str) -> tuple[list[Any], str | None]:
    """(the JSON values of one line, None) or (the whole values it still holds, why it is bad).

    A good line is one value. A bad one is usually a fragment (a write cut
    short) followed by a whole record appended after it: the record is found
    at the first place a record starts after which the rest of the line is
    one JSON object; the fragment before it is what is bad (unless it too is
    a whole value: two records with no newline between them).
    """
    value, problem = _parse(line, where)
    if problem is None:
        return [value], None
    for i, start in enumerate(_RECORD_START.finditer(line, 1)):
        if i == _MAX_STARTS:
            break
        rest, rest_problem = _parse(line[start.start() :], where)
        if rest_problem is None and isinstance(rest, dict):
            head, head_problem = _parse(line[: start.start()], where)
            if head_problem is None:
                return [head, rest], None
            return [rest], head_problem
    return [], problem


def read_records(path: str | PathLike[str]) -> list[dict[str, Any]]:
    """Every record of a JSON-lines results file (see :func:`iter_records`)."""
    return [rec for _, rec in iter_records(path)]


_EXPECTED = (
    "expected ragbench JSON lines (one record per line) or a pytest-benchmark file "
    "(--benchmark-json: one document per run, one after another)"
)


def read_benchmark_runs(path: str | PathLike[str]) -> list[dict[str, Any]] | None:
    """Every run in a pytest-benchmark JSON file, in order; None for anything else.

    A run is one ``--benchmark-json`` document (a JSON object with a
    ``benchmarks`` list). A file holds one (pytest-benchmark writes it
    indented), or several one after another: one per line (JSON lines) or
    concatenated as written (``cat run.json >> side.json``). The file is read
    as one when its first line is ``{`` alone or begins a document with a
    ``benchmarks`` list; a document that is not valid JSON or not a run then
    raises :class:`DatasetError` naming the file and the line it starts on.
    """
    p = os.fspath(path)
    with open_regular(p, limit_bytes=RESULTS_LIMIT, what="results file") as fh:
        lines = _lines(fh, p)
        first = next((line for line in lines if line.strip()), b"")
        # an indented document starts with "{" alone; a JSON line holds a whole one
        if first.strip() != b"{" and not _is_run(_first_value(first)):
            return None
        text = first + b"".join(lines)
    return _benchmark_documents(text, p)


def _first_value(line: bytes) -> Any:
    """The first JSON value on ``line`` (more may follow it), or None when it does not start with one."""
    try:
        return json.JSONDecoder().raw_decode(line.decode("utf-8").lstrip())[0]
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _is_run(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list)


def _benchmark_documents(data: bytes, p: str) -> list[dict[str, Any]]:
    """The JSON documents of ``data`` one after another, each checked to be a pytest-benchmark run."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DatasetError(f"{p}: not UTF-8; {_EXPECTED}") from None
    decoder, at = json.JSONDecoder(), 0
    docs: list[dict[str, Any]] = []
    while True:
        blank = _WHITESPACE.match(text, at)
        at = blank.end() if blank else at
        if at == len(text):
            return docs
        where = f"{p}:{text.count(chr(10), 0, at) + 1}"
        try:
            doc, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{where}: run {len(docs) + 1} is not valid JSON ({exc.msg}); {_EXPECTED}"
            ) from None
        except RecursionError:
            raise DatasetError(f"{where}: a JSON document nested too deeply to read") from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise DatasetError(f"{where}: a value cannot be read ({exc})") from None
        if not _is_run(doc):
            raise DatasetError(
                f"{where}: run {len(docs) + 1} is a JSON document without a benchmarks list; {_EXPECTED}"
            )
        docs.append(doc)


_WHITESPACE = re.compile(r"[ \t\r\n]*")


class Collector:
    """What a driver does with each record it makes: keep it, hand it on, count progress.

    ``on_record`` (a :class:`RecordWriter`, say) gets each record the moment
    it exists; ``progress`` is called with 1 per record.
    """

    def __init__(
        self,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.records: list[dict[str, Any]] = []
        self._on_record = on_record
        self._progress = progress

    def __call__(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self._on_record is not None:
            self._on_record(record)
        if self._progress is not None:
            self._progress(1)


class RecordWriter:
    """Keeps every record it is given and appends it to ``path`` (if any) at once.

    Use it as the ``on_record`` callback of a driver: a record missing its
    environment block gets one, so records from every kind compare honestly.
    A write that fails (a full disk, ``/dev/full``) does not stop the
    measurement: the file keeps the records written before (each append is
    all or nothing), later records are kept in memory only, and
    :meth:`not_saved` says what was lost.
    """

    def __init__(self, path: str | PathLike[str] | None = None) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self.unsaved = 0
        self.write_error: str | None = None

    def __call__(self, record: Mapping[str, Any]) -> None:
        rec = dict(record)
        if "env" not in rec:
            rec["env"] = _here()
            rec.setdefault("node", rec["env"]["node"])
        self.records.append(rec)
        if self.path is None:
            return
        if self.write_error is None:
            try:
                append_record(self.path, rec)
                return
            except OSError as exc:
                self.write_error = exc.strerror or str(exc)
        self.unsaved += 1

    def write_all(self, records: Iterable[Mapping[str, Any]]) -> None:
        for rec in records:
            self(rec)

    def not_saved(self) -> str | None:
        """One line saying which records could not be written and why; None when all were."""
        if self.write_error is None:
            return None
        saved = len(self.records) - self.unsaved
        kept = "none of them is in it" if not saved else f"the {saved} before the failure are in it"
        return (
            f"{self.unsaved} of {len(self.records)} record(s) NOT saved to {self.path} "
            f"({self.write_error}); {kept}"
        )


# ---------------------------------------------------------------- derived from records


def pareto(
    points: Sequence[Mapping[str, Any]], *, x: str = "recall", y: str = "qps_single"
) -> list[bool]:
    """True for points no other point beats on both ``x`` and ``y`` (higher is better).

    O(n log n): walked by ``x`` from the highest, a point is beaten when a point
    of higher ``x`` has at least its ``y``, or one of equal ``x`` a higher ``y``.
    A point with a NaN coordinate beats none and is beaten by none.
    """
    vals = [(float(p[x]), float(p[y])) for p in points]
    flags = [True] * len(points)
    order = sorted(
        (i for i, (a, b) in enumerate(vals) if a == a and b == b), key=lambda i: -vals[i][0]
    )
    best = -math.inf  # highest y among the points of higher x than the current group
    start = 0
    while start < len(order):
        end = start
        while end < len(order) and vals[order[end]][0] == vals[order[start]][0]:
            end += 1
        group = order[start:end]
        top = max(vals[i][1] for i in group)
        for i in group:
            flags[i] = not (best >= vals[i][1] or top > vals[i][1])
        best = max(best, top)
        start = end
    return flags


def _cliff_group(p: Mapping[str, Any]) -> str:
    keys = ("index", "build", "query", "rescore", "strategy")
    return json.dumps([p.get(k) for k in keys], sort_keys=True, default=str)


def filter_cliffs(
    points: Sequence[Mapping[str, Any]], *, target: float = 0.9, jump: float = 3.0
) -> dict[str, dict[str, Any]]:
    """Per filtered sweep line, the selectivity where it falls off: ``{group: cliff}``.

    A line is the points of one (index, build, query parameters, rescore,
    strategy) at several requested selectivities. Going from the largest
    selectivity down, its cliff is the first selectivity whose mean recall
    is under ``target`` or whose p50 is more than ``jump`` times the p50 at
    the largest selectivity. ``cliff`` is ``{"selectivity": s or None,
    "reason": str, "strategy": ..., "index": ..., "above": the last
    selectivity before it or None}``; group keys are JSON text.
    """
    lines: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        if p.get("strategy") is not None and p.get("selectivity") is not None:
            lines.setdefault(_cliff_group(p), []).append(p)
    out: dict[str, dict[str, Any]] = {}
    for key, line in lines.items():
        line = sorted(line, key=lambda p: -float(p["selectivity"]))
        base = float(line[0]["p50_us"])
        cliff: dict[str, Any] = {"selectivity": None, "reason": "", "above": None}
        for prev, p in zip([None, *line[:-1]], line, strict=True):
            if p["recall"] < target:
                cliff = {
                    "selectivity": p["selectivity"],
                    "reason": f"recall {p['recall']:.3f} < {target}",
                }
            elif base > 0 and p["p50_us"] > jump * base:
                cliff = {
                    "selectivity": p["selectivity"],
                    "reason": f"p50 {p['p50_us'] / base:.1f}× that at {line[0]['selectivity']}",
                }
            else:
                continue
            cliff["above"] = None if prev is None else prev["selectivity"]
            break
        out[key] = {**cliff, "strategy": line[0]["strategy"], "index": line[0]["index"]}
    return out


def cliff_key(point: Mapping[str, Any]) -> str:
    """The :func:`filter_cliffs` group key of a sweep point."""
    return _cliff_group(point)


def growth_exponents(records: Sequence[Mapping[str, Any]], key: str = "p50_us") -> dict[str, float]:
    """Least-squares slope of log(``key``) against log(n) per index (1.0 = linear, ~0 = flat).

    NaN for an index measured at fewer than two sizes.
    """
    by: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        if r.get("kind") == "scale" and r.get(key, 0) > 0:
            by.setdefault(r["index"], []).append((math.log(r["n"]), math.log(r[key])))
    out = {}
    for name, pts in by.items():
        xs = [p[0] for p in pts]
        if len(set(xs)) < 2:
            out[name] = float("nan")
            continue
        ys = [p[1] for p in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        out[name] = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return out


def load_level(rec: Readable) -> float:
    """The load a load record was measured at: offered QPS (open loop) or clients (closed)."""
    level = _field(rec, "offered_qps")
    return float(level if level is not None else _field(rec, "concurrency") or 0)


def generator_kept_up(rec: Readable) -> bool:
    """Whether a load record's load generator kept up (``generator_ok``; older records: not lagged)."""
    ok = _field(rec, "generator_ok")
    return bool(ok) if ok is not None else not _field(rec, "generator_lagged")


def knees(records: Sequence[Mapping[str, Any]], slo_ms: float) -> dict[str, float | None]:
    """Per configuration label: its knee, the highest load meeting ``slo_ms`` (:func:`knee_walks`)."""
    return {label: walk[0] for label, walk in knee_walks(records, slo_ms).items()}


def knee_walks(
    records: Sequence[Mapping[str, Any]], slo_ms: float
) -> dict[str, tuple[float | None, list[float]]]:
    """Per configuration label: ``(knee, unsure)``, the knee and the levels under it whose p99
    was over ``slo_ms`` only within its own noise.

    Levels are walked upwards. A level *surely misses* the objective when its p99 (failures
    counted at the timeout) is over it and either a request failed (timed out, rejected,
    failed) or the low end of its p99's bootstrap interval is over it too; the walk stops
    there. A level over the objective whose interval reaches back under it (a p99 of 50
    requests is nearly their maximum: one slow request moves it) does not stop the walk: it
    is listed in ``unsure``, never a knee. The knee is the highest level at or under the
    objective before the first sure miss; ``None`` when none is.
    """
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("kind") == "load":
            by.setdefault(str(r["label"]), []).append(r)
    out: dict[str, tuple[float | None, list[float]]] = {}
    for label, recs in by.items():
        knee, unsure = None, []
        for r in sorted(recs, key=load_level):
            p99 = r.get("response_all_p99_us")
            if p99 is None or p99 != p99:
                break
            if p99 <= slo_ms * 1e3:
                knee = load_level(r)
                continue
            failures = sum(int(r.get(f) or 0) for f in ("timed_out", "rejected", "failed"))
            ci = r.get("response_p99_us_ci")
            if failures or not ci or ci[0] > slo_ms * 1e3:
                break
            unsure.append(load_level(r))
        out[label] = (knee, [u for u in unsure if knee is not None and u < knee])
    return out

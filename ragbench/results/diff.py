"""``ragbench diff``: is B faster or slower than A, per stage and in total, beyond the noise?

Both sides are results files: ragbench JSON lines (run and sweep records,
which keep their raw samples) or pytest-benchmark JSON (``--benchmark-json``;
raw timings only with ``--benchmark-save-data``, per-stage figures from the
``rb_bench`` fixture's ``extra_info``) -- one document, or several runs one
after another (one per line, or concatenated). Records are matched by
configuration: a run by its label, a sweep point by index and parameters, a
stream checkpoint by index, parameters, stream options and checkpoint number,
a benchmark by its full name. A ``frontier`` record sums up the run records
before it, which are compared instead; in a file without run records
(``ragbench frontier --frontier-only``) each of its points is compared by
label, on its total p50 and p99 (no samples, so no interval).

The run is the unit of replication. Several records of one configuration in
a file -- the same benchmark run three times into it, in three processes --
are its runs, and so is each repetition of a ``--repeat N`` record. Every run
weighs the same, whatever its number of samples: a side's value is the mean
of its runs' statistics, and the interval of B / A is a two-level bootstrap
that resamples runs, then samples within each chosen run
(:func:`ragbench.intervals.runs_ratio`). That is how the variation between
processes (memory layout, a busier neighbour) gets into the interval, and
why a run of 16 864 rounds cannot outvote one of 28.

One verdict rule, applied once per row (:func:`verdict`) and only worded
elsewhere:

- ``slower``: the 95 % interval lies wholly above ``1 + threshold`` -- the
  verdict that makes the command exit 1;
- ``faster``: the interval lies wholly below ``1 / (1 + threshold)``;
- ``no detectable difference``: anything else.

A change is *sure* exactly when its verdict is ``slower`` or ``faster``.

Paired (``diff(..., paired=True)``, ``ragbench diff --paired``): when base and head
ran alternately on one host, the i-th run of a configuration in A is paired with the
i-th in B (:func:`pairs`: records, or pytest-benchmark documents, in file order; when
each side is one record, its ``--repeat`` repetitions in order). B / A is then the
geometric mean of the pairs' ratios with a paired t interval
(:func:`ragbench.intervals.paired_ratio`): the machine's drift between pairs cancels
within each pair instead of widening the interval.

Records measured on different machines or library versions are compared
only when allowed, and the table then names what differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from .. import intervals
from ..errors import ConfigError, DatasetError
from .records import iter_records, new_record, read_benchmark_runs
from .schema import (
    FrontierRecord,
    IndexPoint,
    LoadRecord,
    RecordError,
    RunRecord,
    StreamRecord,
    need,
    read_struct,
)
from .tables.cells import num, text_table

__all__ = [
    "FASTER",
    "SAME",
    "SLOWER",
    "SURE",
    "Comparable",
    "DiffRow",
    "diff",
    "diff_records",
    "diff_table",
    "env_differences",
    "pairing_note",
    "pairs",
    "read_comparables",
    "single_run_warning",
    "verdict",
]

#: Environment fields two records must share to be compared without being told to.
ENV_FIELDS = ("cpu", "cores", "python", "python_impl", "protobuf_backend")


@dataclass
class Comparable:
    """One configuration's raw samples (ns) per statistic name and run, from one file."""

    key: str
    what: str  # "run", "sweep", "load", "stream", "pytest-benchmark"
    # "total" and each stage (runs), "latency" (sweeps, benchmarks) -> one 1-D array per run
    by_run: dict[str, list[np.ndarray]]
    values: dict[str, dict[str, float]]  # stat -> summary value when no raw samples exist
    env: dict[str, Any]
    runs: int = 1  # records (or pytest-benchmark documents) pooled
    # part -> how many of its runs each pooled record gave, in file order (empty: one record)
    record_sizes: dict[str, list[int]] = field(default_factory=dict)
    times: list[str] = field(default_factory=list)  # each record's time (ISO), when it has one

    @property
    def samples(self) -> dict[str, np.ndarray]:
        """Every run's samples of each part, one after another."""
        return {p: np.concatenate(rs) for p, rs in self.by_run.items()}

    def records(self, part: str) -> list[list[np.ndarray]]:
        """The runs of ``part`` grouped by the record (or document) they came from, in file order."""
        runs = self.by_run[part]
        sizes = self.record_sizes.get(part) or [len(runs)]
        ends = np.cumsum([0, *sizes])
        return [runs[lo:hi] for lo, hi in zip(ends[:-1], ends[1:], strict=True)]

    def repeated(self) -> bool:
        """Whether the samples span several runs (pooled records, or one record's repetitions)."""
        return any(len(rs) > 1 for rs in self.by_run.values())


@dataclass
class DiffRow:
    key: str
    part: str
    a: float
    b: float
    ratio: intervals.Interval
    verdict: str
    pairs: int | None = None  # paired: the pairs of runs the ratio came from


def _split(samples: np.ndarray, repetition: Sequence[int] | None) -> list[np.ndarray]:
    """One record's samples as its runs: one per repetition (``--repeat N``), else one."""
    if repetition is None:
        return [samples]
    labels = np.asarray(repetition)
    if labels.shape != samples.shape:
        raise ValueError(f"{labels.size} repetition labels for {samples.size} samples")
    return [samples[labels == g] for g in np.unique(labels)]


def _runs(rec: RunRecord) -> Comparable:
    cols = {
        n: np.asarray(v, dtype=np.float64) for n, v in need(rec.samples_ns, "samples_ns").items()
    }
    cols["total"] = np.sum([cols[n] for n in need(rec.stages, "stages")], axis=0)
    by_run = {n: _split(x, rec.repetition) for n, x in cols.items()}
    return Comparable(str(rec.label), "run", by_run, {}, dict(rec.env or {}))


def _sweep(rec: IndexPoint) -> Comparable:
    params = " ".join(_params(rec) + ([f"rescore={rec.rescore}"] if rec.rescore else []))
    by_run = {}
    if rec.latency_ns:
        by_run["latency"] = _split(np.asarray(rec.latency_ns, dtype=np.float64), rec.repetition)
    stats = {"p50": rec.p50_us, "p95": rec.p95_us, "p99": rec.p99_us}
    values = {"latency": {s: us * 1e3 for s, us in stats.items() if us is not None}}
    key = f"{need(rec.index, 'index')} {params}".strip()
    return Comparable(key, "sweep", by_run, values, dict(rec.env or {}))


def _params(rec: IndexPoint | StreamRecord) -> list[str]:
    return [f"{k}={v}" for k, v in sorted((rec.build or {}).items())] + [
        f"{k}={v}" for k, v in sorted((rec.query or {}).items())
    ]


def _stream(rec: StreamRecord) -> Comparable:
    """A stream checkpoint: its search, insert and delete calls (raw ns when the record has them)."""
    options = " ".join(f"{k}={v}" for k, v in sorted((rec.options or {}).items()))
    samples, values = {}, {}
    for op, got in (("search", rec.search), ("insert", rec.insert), ("delete", rec.delete)):
        stats = need(got, op)
        if stats.get("latency_ns"):
            samples[op] = [np.asarray(stats["latency_ns"], dtype=np.float64)]
        us = {"p50": stats.get("p50_us"), "p99": stats.get("p99_us")}
        values[op] = {s: v * 1e3 for s, v in us.items() if v is not None}
    params = " ".join(_params(rec))
    key = f"stream {need(rec.index, 'index')} {params} [{options}] checkpoint "
    key += str(need(rec.checkpoint, "checkpoint"))
    return Comparable(key, "stream", samples, values, dict(rec.env or {}))


def _bench(entry: Mapping[str, Any], machine: Mapping[str, Any]) -> Comparable:
    """One benchmark of one pytest-benchmark run (``stats.data`` in s, ``rb_bench`` stages in ns)."""
    stats = entry.get("stats") or {}
    samples = {}
    if stats.get("data"):
        samples["latency"] = [np.asarray(stats["data"], dtype=np.float64) * 1e9]
    values = {
        "latency": {
            "p50": stats.get("median", np.nan) * 1e9,
            "mean": stats.get("mean", np.nan) * 1e9,
        }
    }
    rag = (entry.get("extra_info") or {}).get("ragbench") or {}
    for stage, cols in (rag.get("samples_ns") or {}).items():
        samples[stage] = [np.asarray(cols, dtype=np.float64)]
    env = {
        "cpu": (machine.get("cpu") or {}).get("brand_raw"),
        "python": machine.get("python_version"),
        "python_impl": machine.get("python_implementation"),
    }
    key = str(entry.get("fullname") or entry.get("name"))
    return Comparable(key, "pytest-benchmark", samples, values, env)


def _load(rec: LoadRecord) -> Comparable:
    """A load record: response-time summaries only (no raw samples are kept), so no interval."""
    level = rec.concurrency if rec.mode == "closed" else rec.offered_qps
    unit = "clients" if rec.mode == "closed" else "QPS"
    stats = {
        "p50": rec.response_p50_us,
        "p90": rec.response_p90_us,
        "p99": rec.response_p99_us,
        "max": rec.response_max_us,
    }
    values = {"response": {s: us * 1e3 for s, us in stats.items() if us is not None}}
    key = f"{need(rec.label, 'label')} at {level} {unit}"
    return Comparable(key, "load", {}, values, dict(rec.env or {}))


def _frontier(rec: FrontierRecord) -> list[Comparable]:
    """A frontier's points: each configuration's total p50 and p99 (summaries: no interval)."""
    out = []
    for p in rec.points or []:
        us = {"p50": p.p50_us, "p99": p.p99_us}
        values = {"total": {s: v * 1e3 for s, v in us.items() if v is not None}}
        out.append(Comparable(p.label, "frontier", {}, values, dict(rec.env or {})))
    return out


#: Record kinds that hold no timings of their own to compare (a saved diff; a frontier's
#: points are read only from a file without run records, see :func:`read_comparables`).
_NOT_COMPARED = frozenset({"diff", "frontier"})


def _comparable(rec: Mapping[str, Any], where: str) -> Comparable | None:
    """The comparable of one record (None for a run without raw samples), or an error naming the field."""
    kind = rec["kind"]
    if kind in _NOT_COMPARED:
        return None
    try:
        if kind == "run":
            run = read_struct(rec, RunRecord)
            return _runs(run) if run.samples_ns else None
        if kind in ("sweep", "scale"):
            return _sweep(read_struct(rec, IndexPoint))
        if kind == "load":
            return _load(read_struct(rec, LoadRecord))
        if kind == "stream":
            return _stream(read_struct(rec, StreamRecord))
        raise KeyError(kind)
    except KeyError as exc:
        raise DatasetError(f"{where}: {kind} record lacks field {exc.args[0]!r}") from None
    except RecordError as exc:
        raise DatasetError(f"{where}: {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise DatasetError(
            f"{where}: {kind} record has a field of the wrong type or shape ({exc})"
        ) from None


def read_comparables(path: str | PathLike[str]) -> dict[str, Comparable]:
    """Every comparable configuration in a ragbench JSON-lines or pytest-benchmark JSON file.

    Each record, and each pytest-benchmark document (run), of one
    configuration is one of its runs; they are pooled once, after the file is
    read, so the work grows linearly with the number of records.
    """
    p = Path(path)
    docs = read_benchmark_runs(p)
    found: dict[str, list[Comparable]] = {}
    if docs is not None:
        for run, doc in enumerate(docs, 1):
            for i, entry in enumerate(doc["benchmarks"]):
                try:
                    bench = _bench(entry, doc.get("machine_info") or {})
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    raise DatasetError(
                        f"{p}: run {run}, benchmark {i} has a field missing or of the wrong "
                        f"type ({exc!r})"
                    ) from None
                bench.times = [str(doc["datetime"])] if doc.get("datetime") else []
                found.setdefault(bench.key, []).append(bench)
    else:
        summed: list[Comparable] = []  # frontier points: used when the file has no run records
        runs = False
        for n, rec in iter_records(p):
            runs = runs or rec["kind"] == "run"
            if rec["kind"] == "frontier":
                summed += _frontier_points(rec, f"{p}:{n}")
            c = _comparable(rec, f"{p}:{n}")
            if c is not None:
                c.times = [str(rec["time"])] if rec.get("time") else []
                found.setdefault(c.key, []).append(c)
        for c in [] if runs else summed:
            found.setdefault(c.key, []).append(c)
    return {key: _pool(cs) for key, cs in found.items()}


def _frontier_points(rec: Mapping[str, Any], where: str) -> list[Comparable]:
    try:
        return _frontier(read_struct(rec, FrontierRecord))
    except RecordError as exc:
        raise DatasetError(f"{where}: {exc}") from None


def _pool(cs: Sequence[Comparable]) -> Comparable:
    """Records of one configuration as its runs (each record's own repetitions kept apart).

    Parts missing from a record are dropped: every run must have them.
    """
    last = cs[-1]
    if len(cs) == 1:
        return last
    parts = [p for p in cs[0].by_run if all(p in c.by_run for c in cs)]
    by_run = {p: [run for c in cs for run in c.by_run[p]] for p in parts}
    sizes = {p: [len(c.by_run[p]) for c in cs] for p in parts}
    times = [t for c in cs for t in c.times]
    return Comparable(last.key, last.what, by_run, last.values, last.env, len(cs), sizes, times)


def pairs(
    a: Comparable, b: Comparable, part: str
) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """``part``'s runs of A and B paired in order: (A's runs, B's runs) per pair.

    The i-th record (or pytest-benchmark document) of the configuration in A pairs with
    the i-th in B, each bringing all its repetitions; when each side is one record, its
    repetitions pair in order instead. Anything else -- a different number of records, or
    of repetitions of one record -- cannot be paired: :class:`ConfigError` says what each
    side holds.
    """
    ra, rb = a.records(part), b.records(part)
    if len(ra) == len(rb) >= 2:
        return list(zip(ra, rb, strict=True))
    if len(ra) == len(rb) == 1 and len(ra[0]) == len(rb[0]) >= 2:
        return [([x], [y]) for x, y in zip(ra[0], rb[0], strict=True)]
    raise ConfigError(
        f"--paired: {a.key} ({part}) has {_holding(ra)} in A and {_holding(rb)} in B; pairing "
        "needs the same number of runs on each side, made alternately (base, head, base, "
        "head, ...), two or more"
    )


def _holding(records: Sequence[Sequence[np.ndarray]]) -> str:
    if len(records) == 1:
        n = len(records[0])
        return f"1 record of {n} repetition{'s' * (n != 1)}"
    return f"{len(records)} records"


def pairing_note(a: Mapping[str, Comparable], b: Mapping[str, Comparable]) -> str | None:
    """A note when the records' times show the paired sides ran one after the other.

    Pairs cancel the drift between them only when each pair's runs ran at the same time:
    if every record of a configuration in one file is older than every one in the other,
    the pairs were not interleaved (None when they were, or times are missing).
    """
    for key in (k for k in a if k in b):
        ta, tb = a[key].times, b[key].times
        if len(ta) < 2 or len(ta) != a[key].runs or len(tb) != b[key].runs:
            continue  # one record of repetitions, or a record without a time
        if max(ta) < min(tb) or max(tb) < min(ta):
            return (
                f"NOTE: {key}: every run of one side was written before the other side's "
                "first, so the pairs were not made at the same time; pairing cancels drift "
                "only when the runs alternate (base, head, base, head, ...)"
            )
    return None


def env_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two environment blocks that changes timings (CPU, Python, versions, threads)."""
    diffs = [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in ENV_FIELDS if a.get(k) != b.get(k)]
    la, lb = a.get("libraries") or {}, b.get("libraries") or {}
    for lib in sorted(set(la) | set(lb)):
        if lib != "ragbench" and la.get(lib) != lb.get(lib):
            diffs.append(f"{lib} {la.get(lib)} vs {lb.get(lib)}")
    ta, tb = (
        (a.get("threads") or {}).get("ragbench_threads"),
        (b.get("threads") or {}).get("ragbench_threads"),
    )
    if ta != tb:
        diffs.append(f"threads {ta} vs {tb}")
    return diffs


SLOWER = "slower"
FASTER = "faster"
SAME = "no detectable difference"
#: The verdicts of a sure change.
SURE = frozenset({SLOWER, FASTER})
#: Fewer samples than this on a side: no interval (a stream runbook step's one delete call).
MIN_SAMPLES = 5


def verdict(iv: intervals.Interval, threshold: float, why: str = "no raw samples") -> str:
    """The one verdict rule: slower or faster only when the interval lies wholly beyond the threshold.

    ``iv`` is B / A with its interval; an interval inside, or straddling,
    ``[1 / (1 + threshold), 1 + threshold]`` is no detectable difference, even when it
    excludes 1. Without an interval (NaN bounds) the verdict says why.
    """
    if iv.low != iv.low:  # no interval: no raw samples on one side, or too few
        return f"no interval ({why})"
    if iv.low > 1.0 + threshold:
        return SLOWER
    if iv.high < 1.0 / (1.0 + threshold):
        return FASTER
    return SAME


def _rows(
    a: Comparable, b: Comparable, stat: str, threshold: float, paired: bool = False
) -> list[DiffRow]:
    rows = []
    parts = [p for p in a.by_run if p in b.by_run] or [p for p in a.values if p in b.values]
    # the total first, then stages in their order
    parts.sort(key=lambda p: (p != "total", p != "latency"))
    nan = float("nan")
    for part in parts:
        iv, why, count = None, "no raw samples", None
        if part in a.by_run and part in b.by_run:
            ra, rb = a.by_run[part], b.by_run[part]
            # each run weighs the same: the mean of the runs' statistics
            va, vb = intervals.runs_point(ra, stat), intervals.runs_point(rb, stat)
            n = min(sum(r.size for r in ra), sum(r.size for r in rb))
            if n >= MIN_SAMPLES and paired:
                matched = pairs(a, b, part)
                iv = intervals.paired_ratio(matched, stat)
                count = len(matched)
            elif n >= MIN_SAMPLES:
                iv = intervals.runs_ratio(ra, rb, stat)
            else:
                why = f"{n} sample{'s' * (n != 1)} on a side, fewer than {MIN_SAMPLES}"
        else:
            va = a.values.get(part, {}).get(stat, np.nan)
            vb = b.values.get(part, {}).get(stat, np.nan)
        if iv is None:  # a ratio of the two values, without an interval
            iv = intervals.Interval(vb / va if va else nan, nan, nan)
        rows.append(DiffRow(a.key, part, va, vb, iv, verdict(iv, threshold, why), count))
    return rows


def diff(
    a: Mapping[str, Comparable],
    b: Mapping[str, Comparable],
    *,
    stat: str = "p50",
    threshold: float = 0.05,
    allow_env_mismatch: bool = False,
    paired: bool = False,
) -> tuple[list[DiffRow], list[str], list[str]]:
    """(rows, environment differences, keys found on one side only).

    ``paired``: each row's B / A comes from the runs paired in order (:func:`pairs`,
    :func:`ragbench.intervals.paired_ratio`) instead of the two sides resampled apart.
    Raises :class:`ConfigError` when the environments differ and that is not allowed,
    or when ``paired`` and a configuration's runs cannot be paired.
    """
    if stat not in intervals.STATS:
        raise ConfigError(f"unknown statistic {stat!r}; use one of {', '.join(intervals.STATS)}")
    keys = [k for k in a if k in b]
    only = [f"only in A: {k}" for k in a if k not in b] + [
        f"only in B: {k}" for k in b if k not in a
    ]
    if not keys:
        raise ConfigError(
            "no configuration appears in both files (runs with raw samples match by label, "
            "sweep and scale points by index and parameters, load points by label and load "
            "level, stream checkpoints by index, options and number, frontier points of a "
            "file without run records by label, pytest-benchmark entries by full name)"
        )
    env: list[str] = []
    for k in keys:
        env += [d for d in env_differences(a[k].env, b[k].env) if d not in env]
    if env and not allow_env_mismatch:
        raise ConfigError(
            f"the records come from different environments ({'; '.join(env)}); "
            "compare them anyway with --allow-env-mismatch"
        )
    rows = [row for k in keys for row in _rows(a[k], b[k], stat, threshold, paired)]
    return rows, env, only


def diff_records(
    rows: Sequence[DiffRow],
    env: Sequence[str],
    sides: tuple[Mapping[str, Comparable], Mapping[str, Comparable]],
    files: tuple[str, str],
    *,
    stat: str,
    threshold: float,
) -> list[dict[str, Any]]:
    """One ``diff`` record per row of :func:`diff` (``ragbench diff A B --out F`` appends them).

    ``sides`` are the comparables of A and B the rows came from (``runs``:
    the records pooled on each side), ``files`` their paths.
    """
    a_side, b_side = sides
    out = []
    for r in rows:
        fields = {
            "key": r.key,
            "part": r.part,
            "compared": a_side[r.key].what,
            "stat": stat,
            "a": float(r.a),
            "b": float(r.b),
            "ratio": float(r.ratio.value),
            "ratio_low": float(r.ratio.low),
            "ratio_high": float(r.ratio.high),
            "threshold": float(threshold),
            "verdict": r.verdict,
            "a_file": files[0],
            "b_file": files[1],
            "a_runs": a_side[r.key].runs,
            "b_runs": b_side[r.key].runs,
            "pairs": r.pairs,
            "env_differences": list(env),
        }
        out.append(new_record("diff", fields))
    return out


def single_run_warning(a: Mapping[str, Comparable], b: Mapping[str, Comparable]) -> str | None:
    """What a verdict cannot mean when a side holds one run of a configuration (None when both repeat)."""
    # only where an interval is drawn: both sides have raw samples
    keys = [k for k in a if k in b and a[k].by_run and b[k].by_run]
    sides = [side for side, m in (("A", a), ("B", b)) if any(not m[k].repeated() for k in keys)]
    if not sides:
        return None
    which = "both sides hold" if len(sides) == 2 else f"side {sides[0]} holds"
    return (
        f"WARNING: {which} a single run of a configuration, so no run-to-run variance is known: "
        "the interval covers only the noise between requests within that run. Two runs of "
        "unchanged code can differ by more (another process, memory layout, CPU frequency, a "
        "busy neighbour), so 'slower' or 'faster' may be that difference, not the change. "
        "For a verdict that includes it, record several runs per side (--repeat N, or append "
        "several runs to each file: ragbench --out appends; pytest-benchmark files take one "
        "--benchmark-json document per run, one after another)."
    )


def _unit(value: float) -> str:
    return f"{num(value / 1e3)}" if value == value else "—"


def diff_table(
    rows: Sequence[DiffRow],
    env: Iterable[str],
    only: Iterable[str],
    *,
    stat: str,
    threshold: float,
    width: int = 400,
    notes: Iterable[str] = (),
    paired: bool = False,
) -> str:
    """The diff as a text table, with the environment differences and unmatched keys below."""
    cols = [
        ("configuration", "left"),
        ("part", "left"),
        (f"A {stat} µs", "right"),
        (f"B {stat} µs", "right"),
    ]
    cols += [("B / A", "right"), ("95 % interval", "right"), ("verdict", "left")]
    body = []
    for r in rows:
        iv = r.ratio
        interval = f"[{iv.low:.3f}–{iv.high:.3f}]" if iv.low == iv.low else "—"
        body.append([r.key, r.part, _unit(r.a), _unit(r.b), f"{iv.value:.3f}", interval, r.verdict])
    lines = [
        text_table(f"ragbench diff — {stat}, threshold {threshold:.0%}", cols, body, width=width)
    ]
    counts = sorted({r.pairs for r in rows if r.pairs})
    n = "–".join(str(c) for c in dict.fromkeys(counts[:1] + counts[-1:])) or "no"
    how = (
        f"B / A is the geometric mean of the ratios of {n} pairs of runs (the i-th run of A "
        "with the i-th of B, made alternately), with a paired t 95 % interval"
        if paired
        else "the 95 % interval of B / A resamples runs, then samples within each"
    )
    lines.append(
        f"each side's {stat} is the mean of its runs' {stat} (every run weighs the same); "
        f"{how}. Verdict: interval wholly above {1 + threshold:.2f} = {SLOWER} (exit 1), wholly below "
        f"{1 / (1 + threshold):.2f} = {FASTER}, else {SAME}; only {SLOWER} and {FASTER} are "
        "sure changes"
    )
    env = list(env)
    if env:
        lines.append("environments differ: " + "; ".join(env))
    lines.extend(only)
    lines.extend(notes)
    return "\n".join(lines)

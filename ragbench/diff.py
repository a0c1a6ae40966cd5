"""``ragbench diff``: is B faster or slower than A, per stage and in total, beyond the noise?

Both sides are results files: ragbench JSON lines (run and sweep records,
which keep their raw samples) or pytest-benchmark JSON files (``--benchmark-json``;
raw timings only with ``--benchmark-save-data``, per-stage figures from the
``rb_bench`` fixture's ``extra_info``). Records are matched by configuration:
a run by its label, a sweep point by index and parameters, a benchmark by its
full name. Several records of one configuration in a file -- the same
benchmark run three times into it, in three processes -- are pooled as
repetitions, and the intervals resample them: that is how the variation
between processes (memory layout, a busier neighbour) gets into the
interval; the samples of one run only tell request-to-request noise.

For every matched statistic the ratio B / A comes with a 95 % bootstrap
interval (:mod:`ragbench.intervals`; repetitions resampled when the records
have them), and a verdict:

- ``slower``: the whole interval lies above ``1 + threshold`` -- the verdict
  that makes the command exit 1, so a CI job fails on a regression it is
  sure of and that is larger than the threshold, not on noise;
- ``faster``: the whole interval lies below ``1 / (1 + threshold)``;
- ``no detectable difference``: anything else; ``(within threshold)`` is
  added when the interval excludes 1 but not the threshold band.

Records measured on different machines or library versions are compared
only when allowed, and the table then names what differs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from . import intervals
from .errors import ConfigError, DatasetError
from .records import read_records
from .rendering import num, text_table

__all__ = [
    "Comparable",
    "DiffRow",
    "diff",
    "diff_table",
    "env_differences",
    "read_comparables",
]

#: Environment fields two records must share to be compared without being told to.
ENV_FIELDS = ("cpu", "cores", "python", "python_impl", "protobuf_backend")


@dataclass
class Comparable:
    """One configuration's samples (ns or s, as measured) per statistic name, from one file."""

    key: str
    what: str  # "run", "sweep", "pytest-benchmark"
    samples: dict[str, np.ndarray]  # "total" and each stage (runs), "latency" (sweeps, benchmarks)
    groups: np.ndarray | None
    values: dict[str, dict[str, float]]  # stat -> summary value when no raw samples exist
    env: dict[str, Any]


@dataclass
class DiffRow:
    key: str
    part: str
    a: float
    b: float
    ratio: intervals.Interval
    verdict: str


def _runs(rec: Mapping[str, Any]) -> Comparable:
    cols = {n: np.asarray(v, dtype=np.float64) for n, v in rec["samples_ns"].items()}
    cols["total"] = np.sum([cols[n] for n in rec["stages"]], axis=0)
    groups = np.asarray(rec["repetition"]) if rec.get("repetition") is not None else None
    return Comparable(str(rec["label"]), "run", cols, groups, {}, dict(rec.get("env") or {}))


def _sweep(rec: Mapping[str, Any]) -> Comparable:
    params = " ".join(
        [f"{k}={v}" for k, v in sorted((rec.get("build") or {}).items())]
        + [f"{k}={v}" for k, v in sorted((rec.get("query") or {}).items())]
        + ([f"rescore={rec['rescore']}"] if rec.get("rescore") else [])
    )
    samples = {}
    if rec.get("latency_ns"):
        samples["latency"] = np.asarray(rec["latency_ns"], dtype=np.float64)
    values = {
        "latency": {s: rec[f"{s}_us"] * 1e3 for s in ("p50", "p95", "p99") if f"{s}_us" in rec}
    }
    key = f"{rec['index']} {params}".strip()
    groups = np.asarray(rec["repetition"]) if rec.get("repetition") is not None else None
    return Comparable(key, "sweep", samples, groups, values, dict(rec.get("env") or {}))


def _bench(entry: Mapping[str, Any], machine: Mapping[str, Any]) -> Comparable:
    stats = entry.get("stats") or {}
    samples = {}
    if stats.get("data"):
        samples["latency"] = np.asarray(stats["data"], dtype=np.float64) * 1e9
    values = {
        "latency": {
            "p50": stats.get("median", np.nan) * 1e9,
            "mean": stats.get("mean", np.nan) * 1e9,
        }
    }
    rag = (entry.get("extra_info") or {}).get("ragbench") or {}
    for stage, cols in (rag.get("samples_ns") or {}).items():
        samples[stage] = np.asarray(cols, dtype=np.float64)
    env = {
        "cpu": (machine.get("cpu") or {}).get("brand_raw"),
        "python": machine.get("python_version"),
        "python_impl": machine.get("python_implementation"),
    }
    key = str(entry.get("fullname") or entry.get("name"))
    return Comparable(key, "pytest-benchmark", samples, None, values, env)


def read_comparables(path: str | PathLike[str]) -> dict[str, Comparable]:
    """Every comparable configuration in a ragbench JSON-lines or pytest-benchmark JSON file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read results file {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{p}: not a UTF-8 results file") from None
    out: dict[str, Comparable] = {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None  # JSON lines
    if isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list):
        for entry in doc["benchmarks"]:
            c = _bench(entry, doc.get("machine_info") or {})
            out[c.key] = c
        return out
    for rec in read_records(p):
        if rec["kind"] == "run" and rec.get("samples_ns"):
            c = _runs(rec)
        elif rec["kind"] in ("sweep", "scale"):
            c = _sweep(rec)
        else:
            continue
        out[c.key] = _pool(out[c.key], c) if c.key in out else c
    return out


def _pool(a: Comparable, b: Comparable) -> Comparable:
    """Two records of one configuration as repetitions of it (each record's own repetitions kept apart)."""

    def labels(c: Comparable, tag: int) -> np.ndarray:
        n = len(next(iter(c.samples.values()))) if c.samples else 0
        inner = c.groups if c.groups is not None else np.zeros(n, dtype=np.int64)
        return np.asarray(inner, dtype=np.int64) + tag * 1_000_000

    parts = [p for p in a.samples if p in b.samples]
    tag = int(a.groups.max() // 1_000_000) + 1 if a.groups is not None and a.groups.size else 1
    samples = {p: np.concatenate([a.samples[p], b.samples[p]]) for p in parts}
    groups = (
        np.concatenate([labels(a, 0) if a.groups is None else a.groups, labels(b, tag)])
        if parts
        else None
    )
    return Comparable(a.key, a.what, samples, groups, b.values, b.env)


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


def _verdict(iv: intervals.Interval, threshold: float) -> str:
    if iv.low != iv.low:  # no interval: no raw samples on one side
        return "no interval (no raw samples)"
    if iv.low > 1.0 + threshold:
        return SLOWER
    if iv.high < 1.0 / (1.0 + threshold):
        return "faster"
    if iv.low > 1.0 or iv.high < 1.0:
        return "no detectable difference (within threshold)"
    return "no detectable difference"


def _rows(a: Comparable, b: Comparable, stat: str, threshold: float) -> list[DiffRow]:
    rows = []
    parts = [p for p in a.samples if p in b.samples] or [p for p in a.values if p in b.values]
    # the total first, then stages in their order
    parts.sort(key=lambda p: (p != "total", p != "latency"))
    for part in parts:
        if part in a.samples and part in b.samples:
            iv = intervals.ratio(
                a.samples[part], b.samples[part], stat, base_groups=a.groups, other_groups=b.groups
            )
            va, vb = intervals.point(a.samples[part], stat), intervals.point(b.samples[part], stat)
        else:
            va = a.values.get(part, {}).get(stat, np.nan)
            vb = b.values.get(part, {}).get(stat, np.nan)
            nan = float("nan")
            iv = intervals.Interval(vb / va if va else nan, nan, nan)
        rows.append(DiffRow(a.key, part, va, vb, iv, _verdict(iv, threshold)))
    return rows


def diff(
    a: Mapping[str, Comparable],
    b: Mapping[str, Comparable],
    *,
    stat: str = "p50",
    threshold: float = 0.05,
    allow_env_mismatch: bool = False,
) -> tuple[list[DiffRow], list[str], list[str]]:
    """(rows, environment differences, keys found on one side only).

    Raises :class:`ConfigError` when the environments differ and that is not allowed.
    """
    if stat not in intervals.STATS:
        raise ConfigError(f"unknown statistic {stat!r}; use one of {', '.join(intervals.STATS)}")
    keys = [k for k in a if k in b]
    only = [f"only in A: {k}" for k in a if k not in b] + [
        f"only in B: {k}" for k in b if k not in a
    ]
    if not keys:
        raise ConfigError(
            "no configuration appears in both files (runs match by label, sweep points by "
            "index and parameters, pytest-benchmark entries by full name)"
        )
    env: list[str] = []
    for k in keys:
        env += [d for d in env_differences(a[k].env, b[k].env) if d not in env]
    if env and not allow_env_mismatch:
        raise ConfigError(
            f"the records come from different environments ({'; '.join(env)}); "
            "compare them anyway with --allow-env-mismatch"
        )
    rows = [row for k in keys for row in _rows(a[k], b[k], stat, threshold)]
    return rows, env, only


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
    lines.append(
        f"verdicts on the ratio's 95 % bootstrap interval (several records of a configuration "
        f"in a file are resampled as repetitions): wholly above {1 + threshold:.2f} = slower (exit 1), "
        f"wholly below {1 / (1 + threshold):.2f} = faster, else no detectable difference"
    )
    env = list(env)
    if env:
        lines.append("environments differ: " + "; ".join(env))
    lines.extend(only)
    return "\n".join(lines)

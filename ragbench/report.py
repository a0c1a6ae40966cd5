"""Per-stage statistics, side-by-side tables and versioned JSON-lines records.

A :class:`Report` keeps the raw per-request samples; every statistic is
computed from them on demand. ``to_records()`` gives JSON-able dicts with a
versioned schema (``SCHEMA``) and the environment block; ``from_record``
reads one back, so ``ragbench report`` re-renders saved runs exactly.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DatasetError
from .timing import Stats

__all__ = ["SCHEMA", "Report", "append_record", "compare_table", "read_records"]

SCHEMA = "ragbench.run/1"

SETUP_LABELS = {
    "dataset_load": "dataset load",
    "model_load": "model load",
    "corpus_vectors": "corpus vectors",
    "query_vectors": "query vectors",
    "index_build": "index build",
    "exact_neighbors": "exact neighbours",
    "jit_compile": "JIT compile",
    "transport_start": "transport start",
    "generator_start": "LLM start",
    "warmup": "warm-up",
}


@dataclass(frozen=True, slots=True)
class Report:
    """The outcome of one pipeline run: raw samples plus what is needed to read them."""

    label: str
    config: dict[str, Any]
    stage_names: list[str]
    samples_ns: np.ndarray  # int64 (requests, stages)
    recall: np.ndarray  # float (requests,)
    payload_bytes: np.ndarray
    wire_bytes: np.ndarray
    prompt_tokens: np.ndarray
    setup_ns: dict[str, int]
    cache_hits: int | None = None
    cache_lookups: int | None = None
    simulated: list[str] = field(default_factory=list)
    dataset: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    cache_events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    env: dict[str, Any] | None = None
    time: str | None = None

    # ---- statistics (derived from the samples)

    @property
    def requests(self) -> int:
        return int(self.samples_ns.shape[0])

    @property
    def totals_ns(self) -> np.ndarray:
        """Per-request time before first token: the sum of every stage."""
        totals: np.ndarray = self.samples_ns.sum(axis=1)
        return totals

    def stage(self, name: str) -> Stats:
        return Stats.from_samples(self.samples_ns[:, self.stage_names.index(name)])

    def total(self) -> Stats:
        return Stats.from_samples(self.totals_ns)

    def shares(self) -> dict[str, float]:
        """Each stage's share of the summed time before first token (mean-based)."""
        sums = self.samples_ns.sum(axis=0).astype(np.float64)
        whole = float(sums.sum())
        return {
            n: (float(s) / whole if whole else float("nan"))
            for n, s in zip(self.stage_names, sums, strict=True)
        }

    @property
    def mean_recall(self) -> float:
        return float(self.recall.mean()) if self.recall.size else float("nan")

    @property
    def cache_hit_rate(self) -> float | None:
        if not self.cache_lookups:
            return None
        return (self.cache_hits or 0) / self.cache_lookups

    @property
    def k(self) -> int:
        return int(self.config["run"]["k"])

    # ---- rendering

    def table(self, *, width: int = 110) -> str:
        """The per-stage table (mean/p50/p90/p99/max in µs, share) as text."""
        from rich.table import Table

        title = f"{self.label}  —  {self.dataset.get('name', '?')}, {self.requests} requests"
        if self.simulated:
            title += f"  [SIMULATED: {', '.join(self.simulated)}]"
        t = Table(title=title, title_justify="left")
        t.add_column("stage")
        for col in ("mean µs", "p50 µs", "p90 µs", "p99 µs", "max µs", "share"):
            t.add_column(col, justify="right")
        shares = self.shares()
        for name in self.stage_names:
            s = self.stage(name)
            label = name + (" (simulated)" if name == "generate" and self.simulated else "")
            t.add_row(
                label,
                *_us(s.mean_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns),
                f"{100 * shares[name]:.1f}%",
            )
        tot = self.total()
        t.add_row(
            "[b]before first token[/b]",
            *_us(tot.mean_ns, tot.p50_ns, tot.p90_ns, tot.p99_ns, tot.max_ns),
            "100%",
            end_section=True,
        )
        lines = [_render(t, width)]
        extra = [
            f"recall@{self.k} {self.mean_recall:.3f} (tie-aware, vs exact search)",
            f"payload {_num(np.median(self.payload_bytes) if self.payload_bytes.size else float('nan'))} B p50",
        ]
        if self.wire_bytes.size and self.wire_bytes.any():
            extra.append(f"on the wire {_num(float(np.median(self.wire_bytes)))} B p50")
        if self.cache_hit_rate is not None:
            extra.append(f"cache hit rate {100 * self.cache_hit_rate:.1f}%")
        lines.append("  ".join(extra))
        lines.append(
            "setup (not in request latency): "
            + ", ".join(
                f"{SETUP_LABELS.get(k, k)} {v / 1e9:.3f}s" for k, v in self.setup_ns.items()
            )
        )
        for ev in self.cache_events:
            lines.append(f"cache: {_event_text(ev)}")
        if self.error:
            lines.append(f"STOPPED EARLY: {self.error}")
        return "\n".join(lines)

    # ---- records

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-able record for this run (a list, so several runs concatenate)."""
        from .env import environment
        from .pipeline import now_iso

        stages = {}
        shares = self.shares()
        for name in self.stage_names:
            d = self.stage(name).as_dict("us")
            d["share"] = shares[name]
            stages[name] = d
        return [
            {
                "schema": SCHEMA,
                "kind": "run",
                "time": self.time or now_iso(),
                "label": self.label,
                "config": _jsonable(self.config),
                "dataset": self.dataset,
                "info": _jsonable(self.info),
                "stages": self.stage_names,
                "summary": stages,
                "total": self.total().as_dict("us"),
                "requests": self.requests,
                "k": self.k,
                "recall_at_k": self.mean_recall,
                "payload_bytes_p50": float(np.median(self.payload_bytes))
                if self.payload_bytes.size
                else None,
                "wire_bytes_p50": float(np.median(self.wire_bytes))
                if self.wire_bytes.size
                else None,
                "cache_hit_rate": self.cache_hit_rate,
                "setup_s": {k: v / 1e9 for k, v in self.setup_ns.items()},
                "simulated": self.simulated,
                "cache_events": _jsonable(self.cache_events),
                "error": self.error,
                "samples_ns": {
                    n: self.samples_ns[:, j].tolist() for j, n in enumerate(self.stage_names)
                },
                "recall": self.recall.tolist(),
                "payload_bytes": self.payload_bytes.tolist(),
                "wire_bytes": self.wire_bytes.tolist(),
                "prompt_tokens": self.prompt_tokens.tolist(),
                "cache": {"hits": self.cache_hits, "lookups": self.cache_lookups},
                "env": self.env or environment(),
            }
        ]

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Report:
        """Rebuild a report from a record written by :meth:`to_records`."""
        if rec.get("schema") != SCHEMA:
            raise DatasetError(f"not a {SCHEMA} record (schema={rec.get('schema')!r})")
        try:
            names = list(rec["stages"])
            samples = np.array([rec["samples_ns"][n] for n in names], dtype=np.int64).T.reshape(
                -1, len(names)
            )
            return cls(
                label=str(rec["label"]),
                config=dict(rec["config"]),
                stage_names=names,
                samples_ns=samples,
                recall=np.asarray(rec["recall"], dtype=np.float64),
                payload_bytes=np.asarray(rec["payload_bytes"], dtype=np.int64),
                wire_bytes=np.asarray(rec["wire_bytes"], dtype=np.int64),
                prompt_tokens=np.asarray(rec["prompt_tokens"], dtype=np.int64),
                setup_ns={k: int(v * 1e9) for k, v in rec["setup_s"].items()},
                cache_hits=rec["cache"]["hits"],
                cache_lookups=rec["cache"]["lookups"],
                simulated=list(rec["simulated"]),
                dataset=dict(rec["dataset"]),
                info=dict(rec["info"]),
                cache_events=list(rec.get("cache_events", [])),
                error=rec["error"],
                env=rec["env"],
                time=rec["time"],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"malformed {SCHEMA} record: {exc!r}") from None


STATS = ("mean", "p50", "p90", "p95", "p99", "max")


def compare_table(
    reports: Sequence[Report],
    *,
    width: int = 400,
    stages: Iterable[str] | None = None,
    stat: str = "p50",
) -> str:
    """One row per run: ``stat`` of each stage, total p50/p99, recall, bytes; ratio to the fastest.

    ``stat`` is one of ``mean``, ``p50``, ``p90``, ``p95``, ``p99``, ``max``.
    """
    if stat not in STATS:
        from .errors import ConfigError

        raise ConfigError(f"unknown statistic {stat!r}; use one of {', '.join(STATS)}")
    from rich.table import Table

    if not reports:
        return "(no runs)"
    names: list[str] = []
    for r in reports:
        for n in r.stage_names:
            if n not in names:
                names.append(n)
    if stages is not None:
        names = [n for n in names if n in set(stages)]
    simulated = sorted({s for r in reports for s in r.simulated})
    title = (
        f"side by side, interleaved, {stat} µs per stage — {reports[0].dataset.get('name', '?')}"
    )
    if simulated:
        title += f"  [SIMULATED: {', '.join(simulated)}]"
    t = Table(title=title, title_justify="left")
    t.add_column("run")
    for n in names:
        t.add_column(n + (" (sim)" if n == "generate" and simulated else ""), justify="right")
    wire = any(r.wire_bytes.size and r.wire_bytes.any() for r in reports)
    for col in ("total p50", "total p99", "× best", "recall@k", "bytes") + (
        ("wire B",) if wire else ()
    ):
        t.add_column(col, justify="right")
    best = min((r.total().p50_ns for r in reports if r.requests), default=float("nan"))
    for r in reports:
        cells = []
        for n in names:
            value = getattr(r.stage(n), f"{stat}_ns") if n in r.stage_names else None
            cells.append(_us(value)[0] if value is not None else "—")
        tot = r.total()
        ratio = tot.p50_ns / best if best and r.requests else float("nan")
        label = r.label + (" [stopped early]" if r.error else "")
        t.add_row(
            label,
            *cells,
            *_us(tot.p50_ns, tot.p99_ns),
            f"{ratio:.2f}",
            f"{r.mean_recall:.3f}",
            _num(float(np.median(r.payload_bytes)) if r.payload_bytes.size else float("nan")),
            *(
                (_num(float(np.median(r.wire_bytes))) if r.wire_bytes.size else "—",)
                if wire
                else ()
            ),
        )
    return _render(t, width)


def append_record(path: str | PathLike[str], record: Mapping[str, Any]) -> None:
    """Append one JSON line and flush it, so an interrupted run keeps what it finished."""
    import os

    line = json.dumps(_jsonable(record), separators=(",", ":"), allow_nan=True) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_records(path: str | PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSON-lines results file; a malformed line is an error naming file and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read results file {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{p}: not a UTF-8 JSON-lines file") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{p}:{n}: not a JSON line ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise DatasetError(f"{p}:{n}: a record must be a JSON object")
        out.append(rec)
    return out


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def _us(*values_ns: float) -> list[str]:
    return [_num(v / 1e3) for v in values_ns]


def _num(v: float) -> str:
    if v != v:  # NaN
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _render(table: Any, width: int) -> str:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


def _event_text(ev: Mapping[str, Any]) -> str:
    what = ev.get("what", "?")
    hit = ev.get("hit")
    secs = ev.get("seconds")
    state = "hit" if hit else "miss (computed and stored)"
    out = f"{what}: {state}"
    if isinstance(secs, (int, float)):
        out += f" in {secs:.2f}s"
    if ev.get("path"):
        out += f" [{ev['path']}]"
    return out


# ---------------------------------------------------------------- saved records

SUMMARY_COLUMNS = (
    "label",
    "dataset",
    "requests",
    "total_p50_us",
    "total_p99_us",
    "recall_at_k",
    "payload_bytes_p50",
)


def _summary_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rec in records:
        if rec.get("kind") != "run":
            continue
        row = {
            "label": rec.get("label"),
            "dataset": (rec.get("dataset") or {}).get("name"),
            "requests": rec.get("requests"),
            "total_p50_us": (rec.get("total") or {}).get("p50_us"),
            "total_p99_us": (rec.get("total") or {}).get("p99_us"),
            "recall_at_k": rec.get("recall_at_k"),
            "payload_bytes_p50": rec.get("payload_bytes_p50"),
        }
        for stage, stats in (rec.get("summary") or {}).items():
            row[f"{stage}_p50_us"] = stats.get("p50_us")
            row[f"{stage}_share"] = stats.get("share")
        row["simulated"] = ",".join(rec.get("simulated") or [])
        rows.append(row)
    return rows


def render_records(records: Sequence[Mapping[str, Any]], fmt: str = "table") -> str:
    """Render saved records: ``table`` (side by side), ``md``, ``csv`` or ``json`` (summaries)."""
    runs = [r for r in records if r.get("kind") == "run"]
    others = [r for r in records if r.get("kind") != "run"]
    parts: list[str] = []
    if others:
        from .sweeps import render_sweep_records

        parts.append(render_sweep_records(others, fmt))
    if not runs:
        return "\n".join(parts)
    rows = _summary_rows(runs)
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    if fmt == "table":
        parts.append(compare_table([Report.from_record(r) for r in runs]))
    elif fmt == "json":
        parts.append(json.dumps(rows, indent=2))
    elif fmt == "csv":
        import csv

        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        parts.append(buf.getvalue().rstrip("\n"))
    elif fmt == "md":
        head = "| " + " | ".join(columns) + " |"
        sep = "| " + " | ".join("---" for _ in columns) + " |"
        body = ["| " + " | ".join(_md(row.get(c)) for c in columns) + " |" for row in rows]
        parts.append("\n".join([head, sep, *body]))
    else:
        from .errors import ConfigError

        raise ConfigError(f"unknown format {fmt!r}; use table, md, csv or json")
    return "\n".join(parts)


def _md(value: Any) -> str:
    if isinstance(value, float):
        return _num(value)
    return "" if value is None else str(value)

"""Records as flat rows, one per record, for the ``md``, ``csv`` and ``json`` formats."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import pareto, records_of
from ..schema import RunRecord, StreamRecord, need, read_struct
from .cells import num
from .judged import judged_columns
from .points import params_text

__all__ = [
    "flat_cell",
    "flat_rows",
]


def _retrieve_ratio(rec: RunRecord, first: RunRecord) -> float | None:
    """``rec``'s retrieve p50 over that of ``first`` (the file's first run on the same dataset)."""
    mine = (need(rec.summary, "summary").get("retrieve") or {}).get("p50_us")
    base = (need(first.summary, "summary").get("retrieve") or {}).get("p50_us")
    return mine / base if mine and base else None


def _run_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    firsts: dict[Any, RunRecord] = {}
    for rec in (read_struct(r, RunRecord) for r in records):
        dataset = (rec.dataset or {}).get("name")
        first = firsts.setdefault(dataset, rec)
        total = need(rec.total, "total")
        row = {
            "kind": "run",
            "label": rec.label,
            "dataset": dataset,
            "requests": rec.requests,
            "total_p50_us": total.get("p50_us"),
            "total_p50_us_ci": total.get("p50_us_ci"),
            "total_p99_us": total.get("p99_us"),
            "total_p99_us_ci": total.get("p99_us_ci"),
            "recall_at_k": rec.recall_at_k,
            "recall_p10": rec.recall_p10,
            "recall_zero": (
                rec.recall_zero
                if rec.recall_zero is not None or rec.recall is None
                else sum(1 for v in rec.recall if v == 0)
            ),
            "index_build_s": (rec.setup_s or {}).get("index_build"),
            "payload_bytes_p50": rec.payload_bytes_p50,
        }
        for stage, stats in need(rec.summary, "summary").items():
            row[f"{stage}_p50_us"] = stats.get("p50_us")
            row[f"{stage}_p50_us_ci"] = stats.get("p50_us_ci")
            row[f"{stage}_share"] = stats.get("share")
        # × the first row's retrieve p50 (put the reference index first: --index hnsw,...)
        row["retrieve_x_first"] = _retrieve_ratio(rec, first)
        row.update(judged_columns(rec.judged))
        row.update(_part_cells(rec))
        row["simulated"] = ",".join(rec.simulated or [])
        row["caveats"] = "; ".join(rec.caveats or [])
        rows.append(row)
    return rows


def _part_cells(rec: RunRecord) -> dict[str, Any]:
    """The parts of a stage a run record carries, as flat columns (only those it has).

    ``connection_NAME_p50_us`` (a new connection per request: connect, tls, first_byte;
    grpc's channel), ``retrieve_NAME_p50_us`` (an index behind a client: send, server,
    decode) and ``rerank_recall`` (a cross-encoder's own k against exact search).
    """
    cells: dict[str, Any] = {}
    for name, stats in (rec.connection or {}).items():
        cells[f"connection_{name}_p50_us"] = stats.get("p50_us")
    info = rec.info or {}
    for name, stats in (info.get("retrieve_parts") or {}).items():
        cells[f"retrieve_{name}_p50_us"] = stats["p50_ns"] / 1e3
    if info.get("rerank_recall") is not None:
        cells["rerank_recall"] = info["rerank_recall"]
    return cells


def _point_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Sweep and scale points as stored, every field (a Struct keeps only those it names)."""
    flags = pareto(records_of(records, "sweep"))
    it = iter(flags)
    rows = []
    for r in records:
        row = {
            k: v
            for k, v in r.items()
            if k not in ("env", "schema", "time", "latency_ns", "repetition", "recall_per_query")
        }
        row.update(judged_columns(row.pop("judged", None)))
        row["params"] = params_text(r)
        if r["kind"] == "sweep":
            row["pareto"] = next(it)
        rows.append(row)
    return rows


def _load_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Load levels as stored, every field but the environment and config blocks."""
    rows = [
        {k: v for k, v in r.items() if k not in ("env", "config", "schema", "time")}
        for r in records
    ]
    for row in rows:
        row.update(judged_columns(row.pop("judged", None)))
    return rows


def flat_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = _run_rows(records_of(records, "run"))
    rows += _point_rows([r for r in records if r.get("kind") in ("sweep", "scale")])
    rows += _load_rows(records_of(records, "load"))
    rows += _stream_rows(records_of(records, "stream"))
    rows += [
        {k: v for k, v in r.items() if k not in ("env", "schema", "time")}
        for r in records_of(records, "diff")
    ]
    for r in records_of(records, "frontier"):  # one row per configuration of the frontier
        for p in r.get("points") or []:
            point = {k: v for k, v in p.items() if k != "stages_p50_us"}
            stages = p.get("stages_p50_us") or {}  # a column per stage, as a run row has
            rows.append({"kind": "frontier", **point, **{f"{s}_p50_us": stages[s] for s in stages}})
    return rows


def _stream_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per stream checkpoint: the columns of :func:`stream_table`, unrounded."""
    rows = []
    for r in (read_struct(rec, StreamRecord) for rec in records):
        row: dict[str, Any] = {
            "kind": r.kind,
            "dataset": need(r.dataset, "dataset"),
            "index": need(r.index, "index"),
            "n": need(r.n, "n"),
            "k": need(r.k, "k"),
            "initial": need(r.initial, "initial"),
            "checkpoint": need(r.checkpoint, "checkpoint"),
            "elapsed_s": need(r.elapsed_s, "elapsed_s"),
        }
        row.update(live=need(r.live, "live"), recall=need(r.recall, "recall"))
        row["recall_p10"] = need(r.recall_p10, "recall_p10")
        ops = {"search": r.search, "insert": r.insert, "delete": r.delete}
        for op, got in ops.items():
            stats = need(got, op)
            row.update({f"{op}_{q}": stats[q] for q in ("p50_us", "p99_us")})
            row[f"{op}_completed"], row[f"{op}_failed"] = stats["completed"], stats["failed"]
        fresh = need(r.freshness, "freshness")
        row["fresh_p50_s"], row["fresh_p99_s"] = fresh["p50_s"], fresh["p99_s"]
        row["deleted_returned"] = need(r.deleted_returned, "deleted_returned")
        rows.append(row)
    return rows


def flat_cell(value: Any, *, exact: bool = False) -> str:
    if isinstance(value, float) and not exact:
        return num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)

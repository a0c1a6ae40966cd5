"""Records as flat rows, one per record, for the ``md``, ``csv`` and ``json`` formats."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import pareto, records_of
from .cells import num
from .points import params_text

__all__ = [
    "flat_cell",
    "flat_rows",
]


def _retrieve_ratio(rec: Mapping[str, Any], first: Mapping[str, Any]) -> float | None:
    """``rec``'s retrieve p50 over that of ``first`` (the file's first run on the same dataset)."""
    mine = (rec["summary"].get("retrieve") or {}).get("p50_us")
    base = (first["summary"].get("retrieve") or {}).get("p50_us")
    return mine / base if mine and base else None


def _run_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    firsts: dict[Any, Mapping[str, Any]] = {}
    for rec in records:
        first = firsts.setdefault((rec.get("dataset") or {}).get("name"), rec)
        row = {
            "kind": "run",
            "label": rec.get("label"),
            "dataset": (rec.get("dataset") or {}).get("name"),
            "requests": rec.get("requests"),
            "total_p50_us": rec["total"].get("p50_us"),
            "total_p50_us_ci": rec["total"].get("p50_us_ci"),
            "total_p99_us": rec["total"].get("p99_us"),
            "total_p99_us_ci": rec["total"].get("p99_us_ci"),
            "recall_at_k": rec.get("recall_at_k"),
            "recall_p10": rec.get("recall_p10"),
            "index_build_s": (rec.get("setup_s") or {}).get("index_build"),
            "payload_bytes_p50": rec.get("payload_bytes_p50"),
        }
        for stage, stats in rec["summary"].items():
            row[f"{stage}_p50_us"] = stats.get("p50_us")
            row[f"{stage}_p50_us_ci"] = stats.get("p50_us_ci")
            row[f"{stage}_share"] = stats.get("share")
        # × the first row's retrieve p50 (put the reference index first: --index hnsw,...)
        row["retrieve_x_first"] = _retrieve_ratio(rec, first)
        row.update(_part_cells(rec))
        row["simulated"] = ",".join(rec.get("simulated") or [])
        row["caveats"] = "; ".join(rec.get("caveats") or [])
        rows.append(row)
    return rows


def _part_cells(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a stage a run record carries, as flat columns (only those it has).

    ``connection_NAME_p50_us`` (a new connection per request: connect, tls, first_byte;
    grpc's channel), ``retrieve_NAME_p50_us`` (an index behind a client: send, server,
    decode) and ``rerank_recall`` (a cross-encoder's own k against exact search).
    """
    cells: dict[str, Any] = {}
    for name, stats in (rec.get("connection") or {}).items():
        cells[f"connection_{name}_p50_us"] = stats.get("p50_us")
    info = rec.get("info") or {}
    for name, stats in (info.get("retrieve_parts") or {}).items():
        cells[f"retrieve_{name}_p50_us"] = stats["p50_ns"] / 1e3
    if info.get("rerank_recall") is not None:
        cells["rerank_recall"] = info["rerank_recall"]
    return cells


def _point_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    flags = pareto(records_of(records, "sweep"))
    it = iter(flags)
    rows = []
    for r in records:
        row = {
            k: v
            for k, v in r.items()
            if k not in ("env", "schema", "time", "latency_ns", "repetition", "recall_per_query")
        }
        row["params"] = params_text(r)
        if r["kind"] == "sweep":
            row["pareto"] = next(it)
        rows.append(row)
    return rows


def _load_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k not in ("env", "config", "schema", "time")}
        for r in records
    ]


def flat_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = _run_rows(records_of(records, "run"))
    rows += _point_rows([r for r in records if r.get("kind") in ("sweep", "scale")])
    rows += _load_rows(records_of(records, "load"))
    rows += _stream_rows(records_of(records, "stream"))
    return rows


def _stream_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per stream checkpoint: the columns of :func:`stream_table`, unrounded."""
    rows = []
    for r in records:
        row: dict[str, Any] = {
            k: r[k]
            for k in ("kind", "dataset", "index", "n", "k", "initial", "checkpoint", "elapsed_s")
        }
        row.update(live=r["live"], recall=r["recall"], recall_p10=r["recall_p10"])
        for op in ("search", "insert", "delete"):
            row.update({f"{op}_{q}": r[op][q] for q in ("p50_us", "p99_us")})
            row[f"{op}_completed"], row[f"{op}_failed"] = r[op]["completed"], r[op]["failed"]
        row["fresh_p50_s"], row["fresh_p99_s"] = r["freshness"]["p50_s"], r["freshness"]["p99_s"]
        row["deleted_returned"] = r["deleted_returned"]
        rows.append(row)
    return rows


def flat_cell(value: Any, *, exact: bool = False) -> str:
    if isinstance(value, float) and not exact:
        return num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)

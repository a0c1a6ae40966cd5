"""Stream checkpoints: recall and latency while rows are inserted and deleted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..schema import StreamRecord, need, read_struct
from .cells import num, text_table

__all__ = [
    "stream_table",
]


def stream_table(records: Sequence[Mapping[str, Any] | StreamRecord], *, width: int = 400) -> str:
    """One row per stream checkpoint: live rows, recall, search/insert/delete latency, freshness."""
    recs = [read_struct(r, StreamRecord) for r in records]
    r0 = recs[0]
    title = (
        f"stream — {need(r0.dataset, 'dataset')} {need(r0.index, 'index')} n={need(r0.n, 'n')} "
        f"k={need(r0.k, 'k')}, built on {need(r0.initial, 'initial')} rows; µs per call, "
        "freshness in s"
    )
    cols = [("checkpoint", "right")] + [
        (c, "right")
        for c in (
            "elapsed s", "live", "recall", "recall p10", "search p50", "search p99",
            "insert p50", "insert p99", "delete p50", "delete p99", "fresh p50", "fresh p99",
            "searches ok/failed", "writes ok/failed", "deleted returned",
        )
    ]  # fmt: skip
    return text_table(title, cols, [_row(r) for r in recs], width=width)


def _row(r: StreamRecord) -> list[str]:
    s, i = need(r.search, "search"), need(r.insert, "insert")
    d, f = need(r.delete, "delete"), need(r.freshness, "freshness")
    return [
        str(need(r.checkpoint, "checkpoint")),
        f"{need(r.elapsed_s, 'elapsed_s'):.1f}",
        num(need(r.live, "live")),
        f"{need(r.recall, 'recall'):.4f}",
        f"{need(r.recall_p10, 'recall_p10'):.3f}",
        num(s["p50_us"]),
        num(s["p99_us"]),
        num(i["p50_us"]),
        num(i["p99_us"]),
        num(d["p50_us"]),
        num(d["p99_us"]),
        "—" if f["p50_s"] is None else f"{f['p50_s']:.3f}",
        "—" if f["p99_s"] is None else f"{f['p99_s']:.3f}",
        f"{s['completed']}/{s['failed']}",
        f"{i['completed'] + d['completed']}/{i['failed'] + d['failed']}",
        str(need(r.deleted_returned, "deleted_returned")),
    ]

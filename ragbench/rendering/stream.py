"""Stream checkpoints: recall and latency while rows are inserted and deleted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .cells import num, text_table

__all__ = [
    "stream_table",
]


def stream_table(records: Sequence[Mapping[str, Any]], *, width: int = 400) -> str:
    """One row per stream checkpoint: live rows, recall, search/insert/delete latency, freshness."""
    r0 = records[0]
    title = (
        f"stream — {r0['dataset']} {r0['index']} n={r0['n']} k={r0['k']}, built on "
        f"{r0['initial']} rows; µs per call, freshness in s"
    )
    cols = [("checkpoint", "right")] + [
        (c, "right")
        for c in (
            "elapsed s", "live", "recall", "recall p10", "search p50", "search p99",
            "insert p50", "insert p99", "delete p50", "delete p99", "fresh p50", "fresh p99",
            "searches ok/failed", "writes ok/failed", "deleted returned",
        )
    ]  # fmt: skip
    rows = []
    for r in records:
        s, i, d, f = r["search"], r["insert"], r["delete"], r["freshness"]
        rows.append(
            [
                str(r["checkpoint"]),
                f"{r['elapsed_s']:.1f}",
                num(r["live"]),
                f"{r['recall']:.4f}",
                f"{r['recall_p10']:.3f}",
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
                str(r["deleted_returned"]),
            ]
        )
    return text_table(title, cols, rows, width=width)

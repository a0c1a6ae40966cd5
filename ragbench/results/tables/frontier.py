"""Saved frontiers (``ragbench frontier --out F``): latency against nDCG@10 per configuration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..frontier import frontier_lines
from ..schema import FrontierRecord, read_struct
from .cells import text_table
from .judged import short_qrels

__all__ = ["frontier_table"]


def _ms(us: float | None, ci: Sequence[Any] | None) -> str:
    if us is None:
        return "—"
    return f"{us / 1000:.2f}" + (f" [{ci[0] / 1000:.2f}–{ci[1] / 1000:.2f}]" if ci else "")


def _ndcg(value: float | None, ci: Sequence[Any] | None, cost_only: str | None) -> str:
    if cost_only is not None or value is None:
        return "— (not ranked)"
    return f"{value:.3f}" + (f" [{ci[0]:.3f}–{ci[1]:.3f}]" if ci else "")


def frontier_table(
    records: Sequence[Mapping[str, Any] | FrontierRecord], *, width: int = 400
) -> str:
    """One table per frontier record (a row per configuration), then its conclusions."""
    parts = []
    for rec in (read_struct(r, FrontierRecord) for r in records):
        fields = msgspec.structs.asdict(rec)
        fields["points"] = [msgspec.structs.asdict(p) for p in rec.points or []]
        title = (
            f"frontier — {rec.dataset}: total before first token (ms, [95 % interval]) "
            f"against nDCG@10 ({short_qrels(rec.qrels) if rec.qrels else 'no qrels'})"
        )
        cols = [("configuration", "left"), ("p50 ms", "right"), ("p99 ms", "right")]
        cols += [("nDCG@10", "right"), ("Pareto", "left"), ("note", "left")]
        body = [
            [
                p["label"],
                _ms(p["p50_us"], p["p50_us_ci"]),
                _ms(p["p99_us"], p["p99_us_ci"]),
                _ndcg(p["ndcg_at_10"], p["ndcg_at_10_ci"], p["cost_only"]),
                "yes" if p["pareto"] else "",
                p["cost_only"] or "",
            ]
            for p in fields["points"]
        ]
        parts.append(text_table(title, cols, body, width=width))
        parts.append("\n".join(frontier_lines(fields)))
    return "\n".join(parts)

"""The cheapest configuration at a given answer quality: latency against nDCG@10.

``ragbench frontier`` measures a grid of configurations as ``compare`` does
(interleaved, order-balanced, one run record each) and reads the run records
here, as points: total latency before the first token (p50 and p99, µs, each
with its 95 % bootstrap interval over requests) against nDCG@10 (mean over the
judged queries, with its 95 % bootstrap interval over them).

Rules (the docs' "Finding the cheapest configuration" says why):

- A point is *cost only* — drawn on the latency axis, never ranked on quality —
  when its reranker has random weights (the cross-encoder without a model
  folder: its record carries the reranker's ``RANDOM WEIGHTS`` caveat), when
  its run failed, or when it has no nDCG@10.
- The Pareto set is over the ranked points by **p50** and nDCG@10 point
  estimates: a point is dominated when another is no slower at p50 and no worse
  in nDCG@10, and strictly better in one of the two. The intervals are shown,
  not used to drop points (with ~20 judged queries nDCG intervals overlap
  almost always; using them would put nearly every point on the set).
- "cheapest within 1 %": among ranked points whose nDCG@10 is at least
  ``(1 - within)`` times the best, the lowest p50 (ties: lower p99, then label).
- "best under a p99 of X ms": among ranked points whose p99 is at most X ms,
  the highest nDCG@10 (ties: lower p50, then label).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..rerankers import CAVEAT_PREFIX

__all__ = [
    "COST_ONLY_RANDOM",
    "best_under",
    "cheapest_within",
    "frontier_fields",
    "frontier_lines",
    "pareto_labels",
    "points_of",
]

#: The mark of a configuration whose reranker has random weights.
COST_ONLY_RANDOM = "cost only: random weights"

Point = dict[str, Any]


def _cost_only(rec: Mapping[str, Any]) -> str | None:
    """Why ``rec`` is not ranked on quality, or ``None`` when it is."""
    if any(str(c).startswith(CAVEAT_PREFIX) for c in rec.get("caveats") or []):
        return COST_ONLY_RANDOM
    if rec.get("error"):
        return "cost only: the run failed"
    judged = rec.get("judged") or {}
    if judged.get("ndcg_at_10") is None or judged["ndcg_at_10"] != judged["ndcg_at_10"]:
        return "cost only: not judged"
    return None


def points_of(records: Sequence[Mapping[str, Any]]) -> list[Point]:
    """One point per run record: ``label``, ``p50_us``/``p99_us`` (µs) and their ``_ci``,
    ``ndcg_at_10`` and ``ndcg_at_10_ci``, ``cost_only`` (a reason, or ``None``), ``pareto``,
    ``requests`` and ``stages_p50_us`` (each stage's p50, µs: where the total goes)."""
    points = []
    for i, rec in enumerate(r for r in records if r.get("kind") == "run"):
        total = rec.get("total") or {}
        judged = rec.get("judged") or {}
        summary = rec.get("summary") or {}
        stages = {s: (summary.get(s) or {}).get("p50_us") for s in rec.get("stages") or []}
        points.append(
            {
                "label": rec.get("label") or f"run {i + 1}",
                "p50_us": total.get("p50_us"),
                "p50_us_ci": total.get("p50_us_ci"),
                "p99_us": total.get("p99_us"),
                "p99_us_ci": total.get("p99_us_ci"),
                "ndcg_at_10": judged.get("ndcg_at_10"),
                "ndcg_at_10_ci": judged.get("ndcg_at_10_ci"),
                "cost_only": _cost_only(rec),
                "requests": rec.get("requests"),
                "stages_p50_us": {s: us for s, us in stages.items() if us is not None},
            }
        )
    on = pareto_labels(points)
    for p in points:
        p["pareto"] = p["label"] in on
    return points


def _ranked(points: Sequence[Point]) -> list[Point]:
    return [p for p in points if p["cost_only"] is None and p["p50_us"] is not None]


def pareto_labels(points: Sequence[Point]) -> list[str]:
    """Labels of the ranked points no other ranked point dominates (p50 and nDCG@10), by p50."""

    def dominates(b: Point, a: Point) -> bool:
        no_worse = b["p50_us"] <= a["p50_us"] and b["ndcg_at_10"] >= a["ndcg_at_10"]
        better = b["p50_us"] < a["p50_us"] or b["ndcg_at_10"] > a["ndcg_at_10"]
        return bool(no_worse and better)

    ranked = _ranked(points)
    on = [a for a in ranked if not any(dominates(b, a) for b in ranked if b is not a)]
    return [p["label"] for p in sorted(on, key=lambda p: (p["p50_us"], p["label"]))]


def cheapest_within(points: Sequence[Point], within: float = 0.01) -> Point | None:
    """The lowest-p50 ranked point whose nDCG@10 >= (1 - ``within``) × the best; None if none ranked."""
    ranked = _ranked(points)
    if not ranked:
        return None
    floor = max(p["ndcg_at_10"] for p in ranked) * (1.0 - within)
    near = [p for p in ranked if p["ndcg_at_10"] >= floor]
    return min(near, key=lambda p: (p["p50_us"], p["p99_us"], p["label"]))


def best_under(points: Sequence[Point], p99_budget_ms: float) -> Point | None:
    """The highest-nDCG@10 ranked point with p99 <= ``p99_budget_ms``; None if none fits."""
    fits = [p for p in _ranked(points) if p["p99_us"] <= p99_budget_ms * 1000.0]
    if not fits:
        return None
    return min(fits, key=lambda p: (-p["ndcg_at_10"], p["p50_us"], p["label"]))


def frontier_fields(
    records: Sequence[Mapping[str, Any]], within: float, p99_budget_ms: float | None
) -> dict[str, Any]:
    """The fields of a ``frontier`` record (:class:`ragbench.results.schema.FrontierRecord`)."""
    points = points_of(records)
    ranked = _ranked(points)
    best = max(ranked, key=lambda p: p["ndcg_at_10"]) if ranked else None
    cheap = cheapest_within(points, within)
    under = best_under(points, p99_budget_ms) if p99_budget_ms is not None else None
    runs = [r for r in records if r.get("kind") == "run"]
    judged = (runs[0].get("judged") or {}) if runs else {}
    return {
        "dataset": ((runs[0].get("dataset") or {}).get("name") if runs else None),
        "qrels": judged.get("qrels"),
        "pareto_stat": "p50",
        "within": within,
        "p99_budget_ms": p99_budget_ms,
        "best": best["label"] if best else None,
        "cheapest": cheap["label"] if cheap else None,
        "best_under_budget": under["label"] if under else None,
        "pareto": [p["label"] for p in points if p["pareto"]],
        "cost_only": [p["label"] for p in points if p["cost_only"]],
        "points": points,
    }


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def _ci(ci: Sequence[float] | None, scale: float = 1.0, digits: int = 2) -> str:
    return f" [{ci[0] / scale:.{digits}f}–{ci[1] / scale:.{digits}f}]" if ci else ""


def describe(p: Point) -> str:
    """``label: nDCG@10 0.41 [0.30–0.52], p50 1.20 ms [..], p99 3.40 ms [..]``."""
    return (
        f"{p['label']}: nDCG@10 {p['ndcg_at_10']:.3f}{_ci(p['ndcg_at_10_ci'], digits=3)}, "
        f"p50 {_ms(p['p50_us'])}{_ci(p['p50_us_ci'], 1000)}, "
        f"p99 {_ms(p['p99_us'])}{_ci(p['p99_us_ci'], 1000)}"
    )


def _overlap(a: Point, b: Point) -> bool:
    ca, cb = a.get("ndcg_at_10_ci"), b.get("ndcg_at_10_ci")
    return bool(ca and cb and ca[0] <= cb[1] and cb[0] <= ca[1])


def frontier_lines(fields: Mapping[str, Any]) -> list[str]:
    """What ``ragbench frontier`` and ``ragbench report`` print under the table of a frontier record."""
    points = {p["label"]: p for p in fields["points"]}
    pct = f"{fields['within'] * 100:g} %"
    best = points.get(fields["best"]) if fields["best"] else None
    cheap = points.get(fields["cheapest"]) if fields["cheapest"] else None
    if best is None or cheap is None:
        lines = [f"cheapest within {pct} of the best nDCG@10: none (no configuration is ranked)"]
    else:
        tie = (
            "; its nDCG@10 interval overlaps the best's: the judged queries do not tell them apart"
            if cheap is not best and _overlap(cheap, best)
            else ""
        )
        lines = [
            f"cheapest within {pct} of the best nDCG@10: {describe(cheap)}"
            f" (best: {best['label']} {best['ndcg_at_10']:.3f}){tie}"
        ]
    budget = fields["p99_budget_ms"]
    if budget is None:
        lines.append("best nDCG@10 under a p99 budget: give --p99-budget-ms")
    elif fields["best_under_budget"]:
        lines.append(
            f"best nDCG@10 under a p99 of {budget:g} ms: "
            f"{describe(points[fields['best_under_budget']])}"
        )
    else:
        lines.append(f"best nDCG@10 under a p99 of {budget:g} ms: none (no ranked configuration)")
    lines.append(
        f"Pareto set (p50 against nDCG@10, point estimates): {', '.join(fields['pareto']) or 'none'}"
    )
    for label in fields["cost_only"]:
        p = points[label]
        lines.append(f"{label}: {p['cost_only']} (p50 {_ms(p['p50_us'])}, p99 {_ms(p['p99_us'])})")
    return lines

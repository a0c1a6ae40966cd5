"""The reading of answer quality: which rows' judged answers differ beyond their intervals.

Tables print each row's nDCG@10 with its 95 % bootstrap interval over the
judged queries (:mod:`ragbench.results.tables.judged`); the reading says which row
ranks best and worst and whether that gap is beyond the intervals (they do not
overlap) or not (they overlap: these judged queries do not tell the rows apart).
Non-overlapping intervals are a conservative test: rows that overlap may still
differ on a larger judged set.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..schema import JudgedAnswers

__all__ = ["judged_reading"]


def _ci(j: JudgedAnswers) -> tuple[float, float] | None:
    ci = j.ndcg_at_10_ci
    if not ci or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return None
    return float(ci[0]), float(ci[1])


def judged_reading(rows: Sequence[tuple[str, JudgedAnswers | None]]) -> list[str]:
    """One line on nDCG@10 across ``rows`` (label, judged answers), or none with fewer than two judged."""
    judged = [
        (label, j)
        for label, j in rows
        if j is not None and j.ndcg_at_10 is not None and j.ndcg_at_10 == j.ndcg_at_10
    ]
    if len(judged) < 2:
        return []
    ranked = sorted(judged, key=lambda lj: -float(lj[1].ndcg_at_10 or 0.0))
    (best, jb), (worst, jw) = ranked[0], ranked[-1]
    if abs(float(jb.ndcg_at_10 or 0) - float(jw.ndcg_at_10 or 0)) < 1e-12:
        return [f"answer quality: nDCG@10 the same in every row ({float(jb.ndcg_at_10 or 0):.3f})"]
    cb, cw = _ci(jb), _ci(jw)
    text = (
        f"answer quality: nDCG@10 highest {best} {float(jb.ndcg_at_10 or 0):.3f}, lowest {worst} "
        f"{float(jw.ndcg_at_10 or 0):.3f}"
    )
    if cb is None or cw is None:
        return [text]
    n = jb.queries
    if cw[1] < cb[0]:
        return [f"{text}: apart beyond their 95 % intervals ({n} judged queries)"]
    return [
        f"{text}: their 95 % intervals overlap, so {n} judged queries do not tell them apart "
        "(judge more queries, or compare on a larger judged set)"
    ]

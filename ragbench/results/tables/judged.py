"""Answer quality in tables: nDCG@10, MRR@10 and recall@100 against judged answers, or why there are none.

Every record kind carries the same ``judged`` object (:class:`~ragbench.results.schema.JudgedAnswers`).
A table whose rows have it gets three columns, each ``mean [low–high]``; a
table whose dataset has no qrels gets no empty columns but one line saying so
(:data:`NO_JUDGED`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

import msgspec

from ..schema import JudgedAnswers

__all__ = [
    "JUDGED_HEADS",
    "NO_JUDGED",
    "judged_cells",
    "judged_columns",
    "judged_line",
    "judged_note",
    "short_qrels",
]

#: What a table says instead of empty answer-quality columns.
NO_JUDGED = "no judged answers"

#: The column heads, in the order of :func:`judged_cells`.
JUDGED_HEADS = ("nDCG@10", "MRR@10", "R@100")


def _cell(value: float | int | None, ci: Sequence[float | int | None] | None) -> str:
    """``0.612 [0.550–0.671]``; ``—`` for NaN or nothing."""
    if value is None or value != value:
        return "—"
    text = f"{float(value):.3f}"
    if ci and len(ci) == 2 and ci[0] is not None and ci[1] is not None and ci[0] == ci[0]:
        text += f" [{float(ci[0]):.3f}–{float(ci[1]):.3f}]"
    return text


def judged_cells(judged: JudgedAnswers | None) -> list[str]:
    """nDCG@10, MRR@10 and recall@100 cells of one row (``—`` each without judgments)."""
    if judged is None:
        return ["—"] * len(JUDGED_HEADS)
    return [
        _cell(judged.ndcg_at_10, judged.ndcg_at_10_ci),
        _cell(judged.mrr_at_10, judged.mrr_at_10_ci),
        _cell(judged.recall_at_100, judged.recall_at_100_ci),
    ]


def _depth_text(judged: Sequence[JudgedAnswers]) -> str:
    depths = sorted({j.depth for j in judged if j.depth is not None})
    short = [d for d in depths if d < 100]
    if not short:
        return ""
    shown = ", ".join(str(d) for d in short)
    return (
        f"; R@100 is on the {shown} results returned (k < 100: raise --k to 100 for the full depth)"
    )


def short_qrels(path: str) -> str:
    """``/any/where/pydocs/qrels.tsv`` -> ``pydocs/qrels.tsv`` (a BEIR split: ``qrels/test.tsv``)."""
    parts = PurePath(path).parts
    return "/".join(parts[-2:]) if len(parts) > 2 else path


def judged_note(judged: Sequence[JudgedAnswers | None], dataset: str) -> str:
    """The line under a table: what the answer-quality columns are, or that there are none."""
    have = [j for j in judged if j is not None]
    if not have:
        return (
            f"answer quality: {NO_JUDGED} in these records (no qrels for {dataset} when they "
            "ran): recall is against exact search only"
        )
    # the dataset's folder and the file, not the measuring machine's absolute path
    sources = sorted({short_qrels(str(j.qrels)) for j in have if j.qrels})
    counts = sorted({f"{j.queries} of {j.measured}" for j in have})
    return (
        f"nDCG@10 (linear gain), MRR@10, R@100: against the judged answers in "
        f"{', '.join(sources)} ({' / '.join(counts)} queries judged), mean over judged queries "
        f"[95 % bootstrap interval over them]{_depth_text(have)}"
    )


def judged_line(judged: JudgedAnswers | None, dataset: str) -> str:
    """One record's answer quality on one line (a run's table), or that there are no judged answers."""
    if judged is None:
        return judged_note([None], dataset)
    cells = judged_cells(judged)
    depth = judged.depth if judged.depth is not None else 100
    r_at = "recall@100" if depth >= 100 else f"recall@100 on the {depth} returned"
    return (
        f"judged answers ({judged.qrels}, {judged.queries} of {judged.measured} queries judged): "
        f"nDCG@10 {cells[0]}, MRR@10 {cells[1]}, {r_at} {cells[2]} "
        "(mean [95 % bootstrap over judged queries]; gain = grade)"
    )


def judged_columns(judged: JudgedAnswers | Mapping[str, Any] | None) -> dict[str, Any]:
    """Flat columns of the ``md``/``csv``/``json`` formats: each measure, its interval, the judged
    queries and the depth of recall@100 (``{}`` without judged answers; never the per-query lists)."""
    if judged is None:
        return {}
    j = judged if isinstance(judged, JudgedAnswers) else msgspec.convert(judged, JudgedAnswers)
    out: dict[str, Any] = {"judged_queries": j.queries, "judged_depth": j.depth}
    for name in ("ndcg_at_10", "mrr_at_10", "recall_at_100"):
        out[name] = getattr(j, name)
        out[f"{name}_ci"] = getattr(j, f"{name}_ci")
    return out

"""Sweep points of several embedders (``sweep --embed-runtime torch,onnx-int8``): one table each.

A sweep over several embedder configurations measures the same grid on each
configuration's own vectors, so its points are compared within one embedder
only: recall is against exact search over that embedder's vectors, and the
Pareto stars of one table say nothing about another's. Each table is headed
by the embedder that made its vectors and what that embedder changes against
MiniLM on torch (``embed_agreement``: the overlap of the exact top 10, the
query vectors' cosine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..schema import SweepRecord, read_struct
from .points import sweep_table

__all__ = ["REFERENCE", "agreement_text", "by_embedder", "sweep_tables"]

#: The embedder configuration every other one's vectors are compared with.
REFERENCE = "minilm:torch"

Rec = Mapping[str, Any] | SweepRecord


def by_embedder(records: Sequence[Rec]) -> list[tuple[str | None, list[Rec]]]:
    """``records`` grouped by the embedder that made their vectors, in order of first appearance
    (``None``: vectors that came with the dataset)."""
    groups: dict[str | None, list[Rec]] = {}
    for rec in records:
        groups.setdefault(read_struct(rec, SweepRecord).embedder, []).append(rec)
    return list(groups.items())


def agreement_text(got: Mapping[str, Any] | None) -> str:
    """``against minilm torch: top-10 agreement 0.94 (min 0.70 over queries), query cosine mean
    0.9941, p1 0.9880``; ``""`` for the reference itself (no agreement recorded)."""
    if not got:
        return ""
    head = (
        f"against {got['reference']}: top-{got['k']} agreement {got['top_k_mean']:.2f} "
        f"(min {got['top_k_min']:.2f} over queries)"
    )
    if got.get("cosine_mean") is None:  # another space (a static model's PCA basis)
        return f"{head}; query cosine: {got.get('cosine_note') or 'not recorded'}"
    return f"{head}, query cosine mean {got['cosine_mean']:.4f}, p1 {got['cosine_p1']:.4f}"


def sweep_tables(records: Sequence[Rec], *, width: int = 400) -> str:
    """:func:`~ragbench.results.tables.points.sweep_table` per embedder, each headed by it."""
    groups = by_embedder(records)
    if groups == [(None, list(records))]:
        return sweep_table(records, width=width)
    out = []
    for label, recs in groups:
        agreement = agreement_text(read_struct(recs[0], SweepRecord).embed_agreement)
        head = f"embedder {label or '(the dataset vectors)'}"
        if agreement:
            head += f" — {agreement}"
        elif label == REFERENCE:
            head += " — the reference the others are compared with"
        out.append(head + "\n" + sweep_table(recs, width=width))
    return "\n\n".join(out)

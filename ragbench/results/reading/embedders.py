"""The query embedder's choices ranked against the torch reference, with what each changes.

When the rows of a comparison differ in their embedder configuration (the
MiniLM runtime, ``query_only``, or another embedder such as ``model2vec``),
each configuration is compared with MiniLM on torch (the reference: the
embedder every other one is measured against, ``info.embed_agreement``),
pooled over the other axes:

``minilm:onnx-int8: embed 4.80× faster than minilm:torch [4.61, 5.02], whole
request 4.05× [3.81, 4.69], 75.3 % of minilm:torch's time before first token
saved; top-10 agreement 0.94 (min 0.70)``

Every ratio is ``p50(reference) / p50(configuration)`` with its 95 % bootstrap
interval (:func:`ragbench.intervals.ratio`); the saving is the difference of
the two whole-request p50s over the reference's. Without a torch row the
slowest configuration on the embed stage is the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ... import intervals
from ..schema import RunRecord, need
from .common import within_noise

__all__ = ["REFERENCE", "embedder_key", "embedder_lines"]

#: The configuration every other one is compared with.
REFERENCE = "minilm:torch"


def embedder_key(run: RunRecord) -> str:
    """``minilm:torch``, ``minilm:onnx-int8+query-only``, ``model2vec``: what embedded the queries."""
    info = run.info or {}
    name = str(info.get("embedder") or "")
    about = info.get("embedder_info")
    about = about if isinstance(about, Mapping) else {}
    runtime = about.get("runtime")
    key = f"{name}:{runtime}" if name == "minilm" and runtime else name
    if about.get("query_only") and runtime not in (None, "torch"):
        key += "+query-only"
    return key


def _samples(runs: Sequence[RunRecord], whole: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The embed stage's (or the whole request's) ns per request over ``runs``, with each
    request's repetition when the records name them."""
    xs, groups = [], []
    for r in runs:
        cols = r.samples_ns or {}
        stages = [s for s in need(r.stages, "stages") if s in cols] if whole else ["embed"]
        if not stages or any(s not in cols for s in stages):
            continue
        xs.append(np.sum([np.asarray(cols[s], dtype=np.float64) for s in stages], axis=0))
        reps = r.repetition
        groups.append(np.asarray(reps) if reps is not None else np.zeros(xs[-1].size, np.int64))
    if not xs:
        return np.zeros(0), None
    have_reps = any(r.repetition is not None for r in runs)
    return np.concatenate(xs), (np.concatenate(groups) if have_reps else None)


def _speed(iv: intervals.Interval, ref: str) -> str:
    """``4.80× faster than REF [4.61, 5.02]``, ``1.30× slower than REF [...]``, or
    ``≈ REF (1.02× [0.97, 1.08], within noise)``; ``iv`` is p50(ref) / p50(this)."""
    if within_noise(iv):
        return f"≈ {ref} ({iv.value:.2f}× [{iv.low:.2f}, {iv.high:.2f}], within noise)"
    if iv.value >= 1:
        return f"{iv.value:.2f}× faster than {ref} [{iv.low:.2f}, {iv.high:.2f}]"
    return f"{1 / iv.value:.2f}× slower than {ref} [{1 / iv.high:.2f}, {1 / iv.low:.2f}]"


def _agreement(runs: Sequence[RunRecord]) -> str:
    found = [(r.info or {}).get("embed_agreement") for r in runs]
    got = [a for a in found if isinstance(a, Mapping) and a.get("top_k_mean") is not None]
    if not got:
        return ""
    mean = float(np.mean([a["top_k_mean"] for a in got]))
    low = float(min(a["top_k_min"] for a in got))
    return f"; top-{got[0]['k']} agreement {mean:.2f} (min {low:.2f})"


def embedder_lines(runs: Sequence[RunRecord]) -> list[str]:
    """One line per embedder configuration other than the reference, fastest on embed first
    (see the module docstring); nothing when the rows share one configuration."""
    by: dict[str, list[RunRecord]] = {}
    for r in runs:
        if r.samples_ns:
            by.setdefault(embedder_key(r), []).append(r)
    if len(by) < 2:
        return []
    embed = {k: _samples(rs, whole=False) for k, rs in by.items()}
    if any(x.size == 0 for x, _ in embed.values()):
        return []
    whole = {k: _samples(rs, whole=True) for k, rs in by.items()}
    ref = (
        REFERENCE
        if REFERENCE in by
        else max(embed, key=lambda k: intervals.point(embed[k][0], "p50"))
    )
    lines = []
    for key in sorted(
        (k for k in by if k != ref), key=lambda k: intervals.point(embed[k][0], "p50")
    ):
        e = _ratio(embed[key], embed[ref])
        w = _ratio(whole[key], whole[ref])
        ref_total = intervals.point(whole[ref][0], "p50")
        saved = (ref_total - intervals.point(whole[key][0], "p50")) / ref_total
        lines.append(
            f"{key}: embed {_speed(e, ref)}, whole request {_speed(w, ref)}, "
            f"{100 * saved:.1f} % of {ref}'s time before first token "
            f"{'saved' if saved >= 0 else 'added'}{_agreement(by[key])}"
        )
    return lines


def _ratio(
    mine: tuple[np.ndarray, np.ndarray | None], ref: tuple[np.ndarray, np.ndarray | None]
) -> intervals.Interval:
    """``p50(ref) / p50(mine)``: how many times faster this configuration is."""
    return intervals.ratio(mine[0], ref[0], "p50", base_groups=mine[1], other_groups=ref[1])

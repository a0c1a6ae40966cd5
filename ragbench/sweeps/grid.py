"""The default query grid: dense near the recall targets the reading reports.

A fixed grid of a few values lands wherever it lands: ``ef`` 40 and 80 read
recall 0.943 and 0.978, and "the latency at 0.95" is then interpolated across
a gap of 3.5 recall points. When ``--param`` does not name an index's recall
knob (``ef`` for the HNSW engines, ``nprobe`` for faiss's IVF indexes,
``nprobes`` for LanceDB's IVF indexes without HNSW), ``sweep`` chooses the
knob's values itself, on the one build, judged on every query the sweep
measures (:func:`next_value`):

1. **Coarse pass**: the knob's smallest useful value (``ef`` = the candidates
   each search asks for: k, or ``rescore``, times LanceDB's ``refine_factor``;
   ``nprobe`` = 1), then doubling, until the mean recall reaches the highest
   target, the knob reaches its cap (:data:`CAP`), or, from 8 × the first
   value on, two doublings in a row gain less than :data:`PLATEAU` (the recall
   has stopped rising: a quantized index without re-scoring).
2. **Refinement**: for each target, the two measured values around it (the
   largest under it and the smallest at or above it, in the knob's order) are
   split at their geometric mean while their recalls differ by more than
   :data:`BRACKET` or the larger value is more than :data:`SPREAD` times the
   smaller, and the values are not adjacent integers.

So each target the frontier reaches is bracketed by two points at most
:data:`BRACKET` apart in recall and :data:`SPREAD` apart in the knob (unless
the knob's integer steps are coarser than that), and the iso-recall reading (:mod:`ragbench.results.reading.isorecall`)
interpolates between them; a target the index never reaches stays "not
reached" (nothing is extrapolated). At most :data:`MAX_POINTS` points per
line. Recall is a property of the build and the queries, not of the clock, so
the values chosen are the same on a busy machine and a quiet one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BRACKET",
    "CAP",
    "KNOBS",
    "MAX_POINTS",
    "PLATEAU",
    "SPREAD",
    "Knob",
    "knob_of",
    "next_value",
]

#: Largest recall gap the default grid leaves between the two points around each target.
BRACKET = 0.02
#: Largest ratio of knob values the default grid leaves between the two points around each
#: target. Near the top of the frontier recall rises ever less per step while latency keeps
#: rising with the knob, so two points close in recall can be far apart in latency, and the
#: straight line between them overstates the latency at a target near the flat end (the
#: pydocs sweep's ef 20 and 40 bracketed recall 0.99 within BRACKET; tests/sweeps/
#: test_sweep_grid.py plants such a curve and measures the error).
SPREAD = 1.5
#: Recall gain under which two doublings in a row end the coarse pass.
PLATEAU = 0.001
#: Points one line of the default grid measures at most.
MAX_POINTS = 16
#: The largest value the coarse pass tries (pgvector caps ``hnsw.ef_search`` at 1000).
CAP = {"ef": 1000, "nprobe": 4096, "nprobes": 4096}
#: The query parameters a default grid refines, in the order they are looked for.
KNOBS = ("ef", "nprobe", "nprobes")


@dataclass(frozen=True)
class Knob:
    """The query parameter a default grid refines: its name, first value and cap."""

    name: str
    start: int
    cap: int


def knob_of(index: Any, params: Mapping[str, Any], candidates: int) -> Knob | None:
    """The recall knob of the built ``index`` searched with ``params`` (``None``: it has none).

    ``candidates``: results each search asks for (k, or ``rescore``). An index
    kind whose knob does nothing on this build has none: LanceDB's ``flat``
    table, a pgvector ``ivfflat`` index (its ``probes`` is not a query
    parameter here); LanceDB's HNSW partitions take ``ef`` (from ``candidates``
    × ``refine_factor``: it refuses less), its other IVF indexes ``nprobes``.
    """
    names = set(index.query_params)
    build = dict(index.build_params)
    kind = build.get("index_type")
    if kind is not None and "nprobes" in names:  # LanceDB
        if kind == "flat":
            return None
        if "hnsw" not in str(kind):
            return Knob("nprobes", 1, CAP["nprobes"])
        refine = params.get("refine_factor", dict(index.default_query_params).get("refine_factor"))
        return Knob("ef", candidates * max(1, int(refine or 0)), CAP["ef"])
    if build.get("index") not in (None, "hnsw"):  # pgvector's ivfflat
        return None
    if "ef" in names:
        return Knob("ef", min(candidates, CAP["ef"]), CAP["ef"])
    if "nprobe" in names:
        return Knob("nprobe", 1, CAP["nprobe"])
    return None


def next_value(measured: Mapping[int, float], knob: Knob, targets: Sequence[float]) -> int | None:
    """The next knob value to measure given ``measured`` (value → mean recall); ``None``: done.

    See the module docstring for the two passes.
    """
    if len(measured) >= MAX_POINTS:
        return None
    values = sorted(measured)
    if not values:
        return knob.start
    top = values[-1]
    flat = top >= 8 * knob.start and _plateau(values, measured)
    if measured[top] < max(targets) and top < knob.cap and not flat:
        return min(2 * top, knob.cap)
    for target in sorted(targets):
        mid = _split(values, measured, target)
        if mid is not None:
            return mid
    return None


def _plateau(values: list[int], measured: Mapping[int, float]) -> bool:
    """Whether the last two steps of the coarse pass each gained less than :data:`PLATEAU`."""
    if len(values) < 3:
        return False
    a, b, c = (measured[v] for v in values[-3:])
    return b - a < PLATEAU and c - b < PLATEAU


def _split(values: list[int], measured: Mapping[int, float], target: float) -> int | None:
    """The value between the two around ``target`` when they are too far apart, else ``None``."""
    hi = next((v for v in values if measured[v] >= target), None)
    if hi is None or hi == values[0]:
        return None  # not reached, or below the grid: nothing to split
    lo = values[values.index(hi) - 1]
    if hi - lo <= 1 or (measured[hi] - measured[lo] <= BRACKET and hi <= SPREAD * lo):
        return None
    mid = round(math.sqrt(lo * hi))
    return min(max(mid, lo + 1), hi - 1)

"""What the numbers mean: a few sentences under every table, derived from the records.

A table of per-stage percentiles answers "how long"; the reader still has to
work out "so what": which stage the time goes to, which of the things varied
is faster and by how much *beyond the noise*, and whether a load level was
beyond what the system (or the load generator) could do. Every function here
takes records (the dicts of :mod:`ragbench.records`; :func:`diff_reading`
takes :class:`ragbench.diff.DiffRow`-like rows) and returns lines of text;
nothing is typed in, every figure comes from the records:

- :func:`run_reading` (``run``, ``compare``, run records in ``report``): the
  dominant stage and the share of the rest; for each axis that varies
  between the rows (index, codec, ...), its choices ranked on the stages it
  touches, each step with a 95 % bootstrap interval
  (:func:`ragbench.intervals.ratio`), pooled over the other axes; a warning
  when the ranking is decided by noise; how the interleaved order was
  balanced; and why retrieval reads slower after a model's forward pass.
- :func:`sweep_reading`, :func:`scale_reading`: the indexes ranked at a
  recall every one of them reaches, or at the largest corpus.
- :func:`load_reading`: the dominant stage under load, the highest level each
  configuration sustained, and the levels at capacity.
- :func:`diff_reading`: the verdict in total and the largest sure change;
  :func:`saved_diff_reading` says the same of saved ``diff`` records.

:func:`reading` dispatches on record kinds, like :func:`ragbench.rendering.render`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from . import intervals
from .record_schema import (
    DiffRecord,
    IndexPoint,
    LoadRecord,
    RunRecord,
    ScaleRecord,
    SweepRecord,
    need,
    read_struct,
)
from .records import load_level, records_of

__all__ = [
    "AXES",
    "DOMINANT_SHARE",
    "SUSTAINED",
    "diff_reading",
    "dominant_stage",
    "load_reading",
    "order_note",
    "ranking",
    "reading",
    "run_reading",
    "saved_diff_reading",
    "scale_reading",
    "sweep_reading",
]

Records = Sequence[Mapping[str, Any]]

#: A stage with at least this share of the time before first token dominates it.
DOMINANT_SHARE = 0.5
#: A load level is sustained when at least this fraction of its offered rate completed.
SUSTAINED = 0.95
#: Repetitions suggested when a verdict is within noise.
SUGGESTED_REPEAT = 5


def _cfg(*path: str) -> Callable[[RunRecord], Any]:
    def get(rec: RunRecord) -> Any:
        value: Any = rec.config or {}
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        return value

    return get


#: (what is varied, its plural, how to read it from a run record, the stages it acts on).
AXES: tuple[tuple[str, str, Callable[[RunRecord], Any], tuple[str, ...]], ...] = (
    ("index", "indexes", _cfg("retrieve", "backend"), ("retrieve",)),
    ("reranker", "rerankers", _cfg("rerank", "backend"), ("rerank",)),
    ("codec", "codecs", _cfg("serialize", "backend"), ("serialize", "deserialize")),
    ("payload shape", "payload shapes", _cfg("serialize", "shape"), ("serialize", "deserialize")),
    ("transport", "transports", _cfg("transport", "backend"), ("transport",)),
    ("k_candidates", "candidate counts", _cfg("run", "k_candidates"), ("retrieve", "rerank")),
    ("embedder", "embedders", lambda r: (r.info or {}).get("embedder"), ("embed",)),
)


def _pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def _span(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def _us(value: float) -> str:
    if value != value:
        return "—"
    return f"{value:,.0f} µs" if abs(value) >= 100 else f"{value:.1f} µs"


def _stat(stat: str) -> str:
    return stat if stat in intervals.STATS else "p50"


# ---------------------------------------------------------------- dominance


def _runs(records: Sequence[Mapping[str, Any] | RunRecord]) -> list[RunRecord]:
    return [read_struct(r, RunRecord) for r in records]


def _summary(rec: RunRecord) -> dict[str, dict[str, Any]]:
    return need(rec.summary, "summary")


def dominant_stage(
    records: Sequence[Mapping[str, Any] | RunRecord], shares_key: str = "share"
) -> str | None:
    """The stage with at least :data:`DOMINANT_SHARE` of the time in every run record, or ``None``."""
    runs = _runs(records)
    found = {_largest(r)[0] for r in runs}
    if len(found) != 1:
        return None
    stage = found.pop()
    ok = all((_summary(r)[stage].get(shares_key) or 0.0) >= DOMINANT_SHARE for r in runs)
    return stage if ok else None


def _largest(rec: RunRecord) -> tuple[str, float]:
    summary = _summary(rec)
    shares = {s: float(summary[s].get("share") or 0.0) for s in need(rec.stages, "stages")}
    top = max(shares, key=lambda s: shares[s])
    return top, shares[top]


def _simulated(records: Sequence[RunRecord]) -> bool:
    return any(r.simulated for r in records)


def _share_line(records: Sequence[RunRecord]) -> str:
    """Which stage the time before first token goes to, and what the others share."""
    tops = [_largest(r) for r in records]
    stages = {t for t, _ in tops}
    n_other = max(len(need(r.stages, "stages")) for r in records) - 1
    if len(stages) == 1:
        stage = stages.pop()
        shares = [s for _, s in tops]
        rows = " in every row" if len(records) > 1 else ""
        verb = "is" if min(shares) >= DOMINANT_SHARE else "is the largest stage at"
        name = stage + (" (simulated)" if stage == "generate" and _simulated(records) else "")
        line = (
            f"{name} {verb} {_span(shares, _pct)} of the time before first token{rows}; "
            f"the other {n_other} stages share {_span([1 - s for s in shares], _pct)}"
        )
        if len(records) == 1:
            rest = sorted(
                (
                    (s, float(_summary(records[0])[s].get("share") or 0.0))
                    for s in need(records[0].stages, "stages")
                    if s != stage
                ),
                key=lambda x: -x[1],
            )[:3]
            rest = [(s, v) for s, v in rest if v > 0]
            if rest:
                line += ", most of it " + ", ".join(f"{s} {_pct(v)}" for s, v in rest)
        return line
    parts = [f"{r.label}: {t} {_pct(s)}" for r, (t, s) in zip(records, tops, strict=True)]
    return "the largest stage differs between rows: " + "; ".join(parts)


# ---------------------------------------------------------------- ranking


def _pooled(
    records: Sequence[RunRecord], stages: Sequence[str]
) -> tuple[np.ndarray, np.ndarray | None]:
    """The summed ns of ``stages`` per request, over every record, and each request's repetition."""
    xs, groups = [], []
    have_reps = any(r.repetition is not None for r in records)
    for r in records:
        cols = r.samples_ns or {}
        present = [s for s in stages if s in cols]
        if not present:
            continue
        x = np.sum([np.asarray(cols[s], dtype=np.float64) for s in present], axis=0)
        xs.append(x)
        reps = r.repetition
        groups.append(np.asarray(reps) if reps is not None else np.zeros(x.size, dtype=np.int64))
    if not xs:
        return np.zeros(0), None
    return np.concatenate(xs), (np.concatenate(groups) if have_reps else None)


def ranking(
    levels: Mapping[str, tuple[np.ndarray, np.ndarray | None]], stat: str = "p50"
) -> list[tuple[str, str, intervals.Interval]]:
    """Choices sorted fastest first; each step ``(faster, slower, slower / faster with interval)``."""
    stat = _stat(stat)
    order = sorted(levels, key=lambda k: intervals.point(levels[k][0], stat))
    steps = []
    for fast, slow in zip(order, order[1:], strict=False):
        (a, ga), (b, gb) = levels[fast], levels[slow]
        steps.append((fast, slow, intervals.ratio(a, b, stat, base_groups=ga, other_groups=gb)))
    return steps


def _within_noise(iv: intervals.Interval) -> bool:
    return iv.low != iv.low or iv.low <= 1.0 <= iv.high


def _step_text(fast: str, slow: str, iv: intervals.Interval) -> str:
    if iv.low != iv.low:
        return f"{fast} {iv.value:.2f}× faster than {slow} (no interval: no raw samples)"
    if _within_noise(iv):
        return f"{fast} ≈ {slow} (within noise: {iv.value:.2f}× [{iv.low:.2f}, {iv.high:.2f}])"
    return f"{fast} {iv.value:.2f}× faster than {slow} [{iv.low:.2f}, {iv.high:.2f}]"


def _axis_lines(
    records: Sequence[RunRecord],
    axis: tuple[str, str, Callable[..., Any], tuple[str, ...]],
    pooled: bool,
    stat: str,
) -> list[str]:
    what, plural, get, stages = axis
    by: dict[str, list[RunRecord]] = {}
    for r in records:
        by.setdefault(str(get(r)), []).append(r)
    levels = {name: _pooled(rs, stages) for name, rs in by.items()}
    if any(x.size == 0 for x, _ in levels.values()):
        return []
    steps = ranking(levels, stat)
    over = ", pooled over the other choices" if pooled else ""
    lines = [
        f"{what} ({' + '.join(stages)} {_stat(stat)}{over}): "
        + ", ".join(_step_text(*step) for step in steps)
    ]
    values = [intervals.point(x, _stat(stat)) for x, _ in levels.values()]
    total = float(np.mean([need(r.total, "total").get("p50_us") or np.nan for r in records])) * 1e3
    if total == total and total > 0:
        spread = max(values) - min(values)
        lines[0] += (
            f"; fastest to slowest {what}: {_us(spread / 1e3)}, "
            f"{_pct(spread / total)} of the time before first token"
        )
    if all(_within_noise(iv) for _, _, iv in steps):
        reps = max(int(r.repeats or 1) for r in records)
        how = (
            f"run with --repeat {SUGGESTED_REPEAT}"
            if reps < SUGGESTED_REPEAT
            else "run with more --queries"
        )
        lines.append(f"WARNING: the {plural}' differences are within noise; {how}")
    return lines


def _varied(
    records: Sequence[RunRecord],
) -> list[tuple[str, str, Callable[..., Any], tuple[str, ...]]]:
    return [a for a in AXES if len({repr(a[2](r)) for r in records}) > 1]


# ---------------------------------------------------------------- notes


def order_note(records: Sequence[Mapping[str, Any] | RunRecord]) -> str:
    """How the side-by-side order was balanced (or that it was not), from ``info["order"]``."""
    runs = _runs(records)
    if any(r.interleaved is False for r in runs):
        return (
            "order: not interleaved -- each configuration ran in its own task, so their "
            "differences include whatever else ran at the time"
        )
    found = [(r.info or {}).get("order") for r in runs]
    orders = [o for o in found if o]
    if len(records) < 2 or not orders:
        return ""
    o = orders[0]
    n = int(o.get("configurations") or len(records))
    if o.get("design") == "same-query":
        return (
            f"order: same-query (--order same-query) -- all {n} configurations ran the same "
            "query in turn, the order rotating each round: the first in a round meets the "
            "query's data cold, the rest find it warm"
        )
    counts = [c for x in orders for c in x.get("positions") or []]
    offsets = sorted(int(x.get("query_offset") or 0) for x in orders)
    shown = ", ".join(map(str, offsets))
    if len(offsets) > 4:
        shown = f"{offsets[0]}, {offsets[1]}, …, {offsets[-1]}"
    line = (
        f"order: balanced (seed {o.get('seed')}) -- each of the {n} configurations ran "
        f"{_span(counts, lambda v: f'{v:.0f}')} times in each of the {n} positions "
        "(Williams design: also balanced for who runs right after whom); in a round each "
        f"served a different query (offsets {shown}), and every "
        "configuration ran every query the same number of times"
    )
    repeats = int(o.get("consecutive_same_query") or 0)
    if repeats:
        line += f"; {repeats} consecutive request pair(s) shared a query (too few queries)"
    return line


def _model_note(records: Sequence[RunRecord]) -> str:
    """Why retrieval reads slower here than in ``sweep`` when a model embeds each query first."""
    if not records or dominant_stage(records) != "embed":
        return ""
    embedders = sorted({str((r.info or {}).get("embedder")) for r in records})
    by_index: dict[str, list[float]] = {}
    for r in records:
        if "retrieve" in _summary(r):
            name = str(_cfg("retrieve", "backend")(r))
            by_index.setdefault(name, []).append(float(_summary(r)["retrieve"]["p50_us"]))
    example = ""
    if by_index:
        parts = [f"{name} {_us(float(np.median(v)))}" for name, v in by_index.items()]
        example = f" (retrieve p50 here: {', '.join(parts)})"
    return (
        f"note: the embed stage ({', '.join(embedders)}) runs a model's forward pass before every "
        "retrieval and leaves the CPU caches full of its own data, so the index is read cold"
        f"{example}; `ragbench sweep` times search calls alone, back to back, with hot caches, "
        "and reads lower"
    )


def _total_line(records: Sequence[RunRecord]) -> str:
    """End to end: the fastest and slowest rows by total p50, or that no row is surely faster."""
    totals = {str(r.label): _pooled([r], need(r.stages, "stages")) for r in records if r.samples_ns}
    if len(totals) < 2:
        return ""
    order = sorted(totals, key=lambda k: intervals.point(totals[k][0], "p50"))
    fast = totals[order[0]]
    ivs = [
        intervals.ratio(
            fast[0], totals[k][0], "p50", base_groups=fast[1], other_groups=totals[k][1]
        )
        for k in order[1:]
    ]
    if all(_within_noise(iv) for iv in ivs):
        reps = max(int(r.repeats or 1) for r in records)
        how = (
            f"run with --repeat {SUGGESTED_REPEAT}"
            if reps < SUGGESTED_REPEAT
            else "run with more --queries"
        )
        line = (
            "WARNING: end to end (total p50) the rows' differences are within noise (every "
            f"ratio to the fastest, {order[0]}, has an interval including 1.00); {how}"
        )
        top = dominant_stage(records)
        if top is not None:
            widths = [_half_width(_summary(r)[top]) for r in records]
            line += f" -- {top}'s own p50 alone is ±{max(widths):.0f} % in one row"
        return line
    slow = ivs[-1]
    return (
        f"end to end (total p50): {order[0]} fastest, {order[-1]} slowest, "
        f"{slow.value:.2f}× [{slow.low:.2f}, {slow.high:.2f}]"
    )


def _half_width(summary: Mapping[str, Any]) -> float:
    ci, value = summary.get("p50_us_ci"), summary.get("p50_us")
    if not ci or not value:
        return float("nan")
    return 100.0 * (float(ci[1]) - float(ci[0])) / 2.0 / float(value)


def run_reading(
    records: Sequence[Mapping[str, Any] | RunRecord], *, stat: str = "p50"
) -> list[str]:
    """The reading of run records (one run, or a comparison): see the module docstring."""
    runs = [r for r in _runs(records) if r.requests]
    if not runs:
        return []
    lines = [_share_line(runs)]
    varied = _varied(runs)
    for axis in varied:
        lines += _axis_lines(runs, axis, len(varied) > 1, stat)
    total = _total_line(runs)
    if total:
        lines.append(total)
    for note in (_model_note(runs), order_note(runs)):
        if note:
            lines.append(note)
    return lines


# ---------------------------------------------------------------- sweeps and scale


def _latency(rec: IndexPoint) -> tuple[np.ndarray, np.ndarray | None]:
    reps = rec.repetition
    x = np.asarray(rec.latency_ns or [], dtype=np.float64)
    return x, (np.asarray(reps) if reps is not None and len(reps) == x.size else None)


def _point_name(rec: IndexPoint) -> str:
    params = [f"{k}={v}" for k, v in (rec.query or {}).items()]
    params += [f"rescore={rec.rescore}"] if rec.rescore else []
    return " ".join([str(need(rec.index, "index")), *params])


def _rank_points(best: Mapping[str, IndexPoint], what: str) -> list[str]:
    if len(best) < 2 or any(not p.latency_ns for p in best.values()):
        return []
    levels = {_point_name(p): _latency(p) for p in best.values()}
    steps = ranking(levels)
    lines = [f"{what}: " + ", ".join(_step_text(*s) for s in steps) + " (p50 per query)"]
    if all(_within_noise(iv) for _, _, iv in steps):
        lines.append(
            f"WARNING: the indexes' differences are within noise; run with --repeat {SUGGESTED_REPEAT}"
        )
    return lines


def sweep_reading(records: Sequence[Mapping[str, Any] | SweepRecord]) -> list[str]:
    """The indexes ranked at the best recall all of them reach; what sweep times."""
    if not records:
        return []
    by: dict[str, list[SweepRecord]] = {}
    for r in (read_struct(rec, SweepRecord) for rec in records):
        by.setdefault(str(need(r.index, "index")), []).append(r)
    reach = min(max(float(need(p.recall, "recall")) for p in pts) for pts in by.values())
    best = {
        name: min(
            (p for p in pts if float(need(p.recall, "recall")) >= reach),
            key=lambda p: need(p.p50_us, "p50_us"),
        )
        for name, pts in by.items()
    }
    lines = []
    if len(by) > 1:
        lines += _rank_points(
            best, f"fastest point per index at recall ≥ {reach:.3f} (the best all reach)"
        )
    else:
        ((name, p),) = best.items()
        lines.append(
            f"highest recall {reach:.4f} at {_point_name(p)}, p50 {_us(float(need(p.p50_us, 'p50_us')))}"
        )
    lines.append(
        "these times are retrieval alone (one search call at a time, back to back, hot caches); "
        "in `compare` the index runs between the other stages of each request and reads slower"
    )
    return lines


def scale_reading(records: Sequence[Mapping[str, Any] | ScaleRecord]) -> list[str]:
    """The indexes ranked at the largest corpus size measured."""
    if not records:
        return []
    points = [read_struct(r, ScaleRecord) for r in records]
    n = max(int(need(r.n, "n")) for r in points)
    at = {str(need(r.index, "index")): r for r in points if int(need(r.n, "n")) == n}
    missed = sorted(name for name, r in at.items() if r.reached is False)
    lines = _rank_points(at, f"at n={n:,}")
    if missed:
        lines.append(
            f"WARNING: {', '.join(missed)} did not reach recall {points[0].target_recall} "
            f"at n={n:,}: its time is not at the same recall as the others'"
        )
    return lines


# ---------------------------------------------------------------- load


def _capacity(rec: LoadRecord) -> str:
    """Why a load level was at capacity ("" when it was not)."""
    why = []
    if rec.generator_ok is False:
        why.append(str(rec.generator_note or "the load generator said it fell behind"))
    offered = rec.offered_qps
    achieved = float(rec.achieved_qps or 0.0)
    if offered:
        if achieved < SUSTAINED * float(offered):
            why.append(f"achieved {achieved:,.0f} of {float(offered):,.0f} QPS offered")
        gap_us = 1e6 / float(offered)
        delay = rec.dispatch_delay_p99_us
        if delay is not None and float(delay) > gap_us:
            why.append(
                f"dispatch delay p99 {_us(float(delay))} > the {_us(gap_us)} between arrivals"
            )
    return "; ".join(why)


def _level(rec: LoadRecord) -> float:
    """:func:`ragbench.records.load_level` of a typed load record."""
    return load_level(msgspec.structs.asdict(rec))


def load_reading(records: Sequence[Mapping[str, Any] | LoadRecord]) -> list[str]:
    """The dominant stage under load, each configuration's highest sustained level, levels at capacity."""
    if not records:
        return []
    levels = [read_struct(r, LoadRecord) for r in records]
    closed = levels[0].mode == "closed"
    lines = []
    cpu = all(r.cpu_share is not None for r in levels)
    low = [min((r for r in levels if r.label == lab), key=_level) for lab in _labels(levels)]
    shares = [(r.cpu_share if cpu else r.stage_share) or {} for r in low]
    tops = {max(s, key=lambda k: s[k] or 0.0) for s in shares if s}
    if len(tops) == 1:
        top = tops.pop()
        vals = [float(s[top] or 0.0) for s in shares]
        verb = "is" if min(vals) >= DOMINANT_SHARE else "is the largest stage at"
        lines.append(
            f"{top} {verb} {_span(vals, _pct)} of each request's {'CPU' if cpu else 'wall'} time "
            f"at the lowest load level; the other stages share {_span([1 - v for v in vals], _pct)}"
        )
    best = []
    for lab in _labels(levels):
        pts = [r for r in levels if r.label == lab]
        if closed:
            top_pt = max(pts, key=lambda r: float(r.achieved_qps or 0.0))
            best.append(
                f"{lab} {float(need(top_pt.achieved_qps, 'achieved_qps')):,.0f} QPS at "
                f"{_level(top_pt):g} clients"
            )
            continue
        ok = [r for r in pts if not _capacity(r)]
        best.append(
            f"{lab} {max(_level(r) for r in ok):,g} QPS" if ok else f"{lab} none of the levels"
        )
    head = "highest throughput" if closed else "highest offered rate sustained"
    lines.append(f"{head}: " + ", ".join(best))
    if not closed:
        full = [f"{r.label} @ {_level(r):,g}: {_capacity(r)}" for r in levels if _capacity(r)]
        if full:
            lines.append("at capacity (these rows measure a queue): " + " | ".join(full))
    return lines


def _labels(records: Sequence[LoadRecord]) -> list[str]:
    return list(dict.fromkeys(str(need(r.label, "label")) for r in records))


# ---------------------------------------------------------------- diff


def diff_reading(rows: Iterable[Any]) -> list[str]:
    """The total's verdict per configuration, the largest sure stage change, and a noise warning.

    ``rows`` are :class:`ragbench.diff.DiffRow` (``key``, ``part``, ``ratio``, ``verdict``).
    """
    rows = list(rows)
    lines = []
    for key in dict.fromkeys(r.key for r in rows):
        mine = [r for r in rows if r.key == key]
        total = next((r for r in mine if r.part in ("total", "latency")), mine[0])
        lines.append(f"{key}: {_diff_text(total)}")
        sure = [r for r in mine if r is not total and not _within_noise(r.ratio)]
        if sure:
            big = max(sure, key=lambda r: abs(math.log(r.ratio.value)) if r.ratio.value > 0 else 0)
            lines[-1] += f"; the largest sure change is {big.part}: {_diff_text(big)}"
    if rows and all(_within_noise(r.ratio) for r in rows):
        lines.append(
            "WARNING: every difference is within noise; record each side with "
            f"--repeat {SUGGESTED_REPEAT} (or several runs into one file)"
        )
    return lines


class _SavedRow:
    """A saved diff record in the shape :func:`diff_reading` reads (key, part, ratio, verdict)."""

    def __init__(self, rec: DiffRecord) -> None:
        nan = float("nan")
        self.key, self.part = need(rec.key, "key"), need(rec.part, "part")
        low = nan if rec.ratio_low is None else rec.ratio_low
        high = nan if rec.ratio_high is None else rec.ratio_high
        self.ratio = intervals.Interval(need(rec.ratio, "ratio"), low, high)
        self.verdict = need(rec.verdict, "verdict")


def saved_diff_reading(records: Records) -> list[str]:
    """:func:`diff_reading` of saved ``diff`` records (``ragbench diff A B --out F``)."""
    return diff_reading([_SavedRow(read_struct(r, DiffRecord)) for r in records])


def _diff_text(row: Any) -> str:
    iv = row.ratio
    if iv.value != iv.value or iv.value <= 0:
        return "no ratio"
    if iv.low != iv.low:
        return f"B / A {iv.value:.2f} (no interval: no raw samples)"
    if _within_noise(iv):
        return f"no sure difference (B / A {iv.value:.2f} [{iv.low:.2f}, {iv.high:.2f}])"
    if iv.value < 1:
        return f"B {1 / iv.value:.2f}× faster than A [{1 / iv.high:.2f}, {1 / iv.low:.2f}]"
    return f"B {iv.value:.2f}× slower than A [{iv.low:.2f}, {iv.high:.2f}]"


# ---------------------------------------------------------------- one entry point


def reading(records: Records, *, stat: str = "p50") -> list[str]:
    """The reading of records of any kinds, kind by kind (run, sweep, scale, load, diff)."""
    lines: list[str] = []
    for kind, read in (
        ("run", lambda rs: run_reading(rs, stat=stat)),
        ("sweep", sweep_reading),
        ("scale", scale_reading),
        ("load", load_reading),
        ("diff", saved_diff_reading),
    ):
        of_kind = records_of(records, kind)
        if of_kind:
            lines += read(of_kind)
    return lines

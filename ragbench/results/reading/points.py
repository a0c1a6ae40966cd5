"""The reading of sweep and scale points: per filter group, the indexes ranked and at a target; scale at the largest n."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ... import intervals
from ..schema import IndexPoint, ScaleRecord, SweepRecord, need, read_struct
from ..tables.cells import num
from ..tables.embedded import agreement_text, by_embedder
from ..tables.points import params_text
from .common import SUGGESTED_REPEAT, ranking, step_text, us_text, within_noise
from .isorecall import DEFAULT_TARGETS, Point, iso_recall_lines
from .judged import judged_reading

__all__ = [
    "scale_reading",
    "sweep_reading",
]


def _latency(rec: IndexPoint) -> tuple[np.ndarray, np.ndarray | None]:
    reps = rec.repetition
    x = np.asarray(rec.latency_ns or [], dtype=np.float64)
    return x, (np.asarray(reps) if reps is not None and len(reps) == x.size else None)


def _point_name(rec: IndexPoint, build_keys: set[str] | None = None) -> str:
    """``hnsw M=32 ef=8→10``: the index, the build parameters named, what the query ran with."""
    params = params_text(rec, build_keys or set())
    return " ".join([str(need(rec.index, "index")), *([params] if params else [])])


def _rank_points(
    best: Mapping[str, IndexPoint], what: str, names: Mapping[str, str] | None = None
) -> list[str]:
    if len(best) < 2 or any(not p.latency_ns for p in best.values()):
        return []
    name = (names or {}).get
    levels = {name(i) or _point_name(p): _latency(p) for i, p in best.items()}
    steps = ranking(levels)
    lines = [f"{what}: " + ", ".join(step_text(*s) for s in steps) + " (p50 per query)"]
    if all(within_noise(iv) for _, _, iv in steps):
        lines.append(
            f"WARNING: the indexes' differences are within noise; run with --repeat {SUGGESTED_REPEAT}"
        )
    return lines


#: The recall target of records written before they carried one (``--recall-target``'s default).
DEFAULT_TARGET = 0.9

Group = tuple[Any, ...]


def _group_of(r: SweepRecord) -> Group:
    """What a point is comparable on: unfiltered ``()``, else (attribute, correlated, selectivity, strategy)."""
    if r.strategy is None:
        return ()
    f = r.filter or {}
    sel = float(need(r.selectivity, "selectivity"))
    return (str(f.get("attribute")), bool(f.get("correlated")), sel, str(r.strategy))


def _group_name(key: Group) -> str:
    if not key:
        return "unfiltered"
    attribute, correlated, sel, strategy = key
    how = "correlated" if correlated else "random"
    return f"filtered on {attribute} ({how}) at selectivity {sel:g}, strategy {strategy}"


def _build_keys(points: Sequence[SweepRecord]) -> dict[str, set[str]]:
    """Per index, the build parameters to name: those that vary and those --build set."""
    by: dict[str, list[SweepRecord]] = {}
    for p in points:
        by.setdefault(str(need(p.index, "index")), []).append(p)
    out = {}
    for name, pts in by.items():
        keys = {k for p in pts for k in p.build or {}}
        out[name] = {k for k in keys if len({repr((p.build or {}).get(k)) for p in pts}) > 1}
        out[name] |= {k for p in pts for k in p.build_given or {}}
    return out


def _group_lines(key: Group, pts: Sequence[SweepRecord], keys: Mapping[str, set[str]]) -> list[str]:
    """The verdicts on one group's points: ranked at the best recall all reach, and at the target."""
    by: dict[str, list[SweepRecord]] = {}
    for r in pts:
        by.setdefault(str(need(r.index, "index")), []).append(r)
    label = _group_name(key)
    if key and len(by) < 2:
        return []  # one index under this filter: its line and cliff are in the table
    reach = min(max(float(need(p.recall, "recall")) for p in ps) for ps in by.values())
    best = {name: _cheapest(ps, reach) for name, ps in by.items()}
    names = {i: _point_name(p, keys.get(i)) for i, p in best.items() if p is not None}
    lines = []
    if len(by) > 1:
        what = f"{label}: fastest point per index at recall ≥ {reach:.3f} (the best all reach)"
        lines += _rank_points({i: p for i, p in best.items() if p is not None}, what, names)
    else:
        ((name, p),) = best.items()
        assert p is not None  # every index reaches its own best
        lines.append(
            f"{label}: highest recall {reach:.4f} at {names[name]}, "
            f"p50 {us_text(float(need(p.p50_us, 'p50_us')))}"
        )
    lines.append(_target_line(label, by, keys))
    return lines + iso_recall_lines(label, _frontier_points(by), _targets(pts))


def _targets(points: Sequence[SweepRecord]) -> list[float]:
    """The recall targets the records name (``--recall-target``), else :data:`DEFAULT_TARGETS`."""
    named = {float(t) for p in points for t in p.recall_targets or []}
    return sorted(named) if named else list(DEFAULT_TARGETS)


def _frontier_points(by: Mapping[str, Sequence[SweepRecord]]) -> dict[str, list[Point]]:
    """Per index, its points as (recall, p50, p99, samples) for :func:`iso_recall_lines`."""
    nan = float("nan")
    return {
        name: [
            Point(
                float(need(p.recall, "recall")),
                float(need(p.p50_us, "p50_us")),
                nan if p.p99_us is None else float(p.p99_us),
                # the samples the intervals resample (None in records without them)
                None if not p.latency_ns else np.asarray(p.latency_ns, dtype=np.float64) / 1e3,
                None if not p.recall_per_query else np.asarray(p.recall_per_query, np.float64),
            )
            for p in ps
        ]
        for name, ps in by.items()
    }


def _cheapest(points: Sequence[SweepRecord], recall: float) -> SweepRecord | None:
    """The lowest-p50 point of ``points`` with recall ≥ ``recall`` (``None`` if none reaches it)."""
    ok = [p for p in points if float(need(p.recall, "recall")) >= recall]
    return min(ok, key=lambda p: float(need(p.p50_us, "p50_us"))) if ok else None


def _target_line(
    label: str, by: Mapping[str, Sequence[SweepRecord]], keys: Mapping[str, set[str]]
) -> str:
    """``cheapest point per index reaching recall ≥ 0.9``: each index's, or how far it got."""
    targets = {float(p.recall_target) for ps in by.values() for p in ps if p.recall_target}
    target = max(targets) if targets else DEFAULT_TARGET
    parts = []
    # reached first, cheapest first; then the indexes that did not reach it
    cheapest = {name: _cheapest(ps, target) for name, ps in by.items()}
    order = sorted(by, key=lambda n: (cheapest[n] is None, _p50(cheapest[n]), n))
    for name in order:
        ps, p = by[name], cheapest[name]
        if p is None:
            top = max(ps, key=lambda q: float(need(q.recall, "recall")))
            parts.append(
                f"{name} not reached (best {float(need(top.recall, 'recall')):.3f} at "
                f"{_point_name(top, keys.get(name))})"
            )
        else:
            parts.append(
                f"{_point_name(p, keys.get(name))} (recall {float(need(p.recall, 'recall')):.3f}, "
                f"p50 {us_text(float(need(p.p50_us, 'p50_us')))})"
            )
    given = "" if targets else ", the default target (records without --recall-target)"
    return f"{label}: cheapest point per index reaching recall ≥ {target:g}{given}: " + "; ".join(
        parts
    )


def _p50(p: SweepRecord | None) -> float:
    return float("inf") if p is None else float(need(p.p50_us, "p50_us"))


def _timing_note(points: Sequence[SweepRecord]) -> str:
    """What the sweep's times are, and how they relate to `compare`'s."""
    warm = all(p.warmup for p in points)
    how = (
        "after an untimed warm-up search per point with its parameters and filter, so one-time "
        "copies and compilations are not in the samples"
        if warm
        else "WITHOUT a warm-up search (records from before it): a point's first query may "
        "carry one-time costs, such as `pre` copying the vectors"
    )
    return (
        "these times are retrieval alone (one search call at a time, back to back, hot caches, "
        f"{how}); in `compare` the index runs between the other stages of each request and "
        "reads slower, and its rerank stage re-scores each index's top k_candidates exactly: "
        "its recall is that of a `--param rescore=<k_candidates>` point here"
    )


#: Wall p50 over CPU p50 above which a point's wall time is not its work (``sweep`` warns).
WALL_OVER_CPU = 1.5


def _cpu_p50(p: SweepRecord) -> float | None:
    """p50 µs of each query's CPU: the calling thread's, plus the server's when recorded."""
    server = p.server_cpu_ns
    if server and p.cpu_ns and len(server) == len(p.cpu_ns):
        both = np.asarray(p.cpu_ns, dtype=np.int64) + np.asarray(server, dtype=np.int64)
        return intervals.point(both, "p50") / 1e3
    return None if p.cpu_p50_us is None else float(p.cpu_p50_us)


def _cpu_warning(points: Sequence[SweepRecord], keys: Mapping[str, set[str]]) -> list[str]:
    """A WARNING naming the points whose wall p50 exceeds :data:`WALL_OVER_CPU` × their CPU p50.

    CPU time is the calling thread's (``cpu_p50_us``) plus, where the record has it, the
    database server's process CPU for the same query (``server_cpu_ns``: pgvector's own
    server), so a query's work in the server is not read as waiting; records without
    CPU time are skipped.
    """
    odd = []
    for p in points:
        cpu, wall = _cpu_p50(p), p.p50_us
        if cpu is not None and wall is not None and cpu > 0 and wall / cpu > WALL_OVER_CPU:
            odd.append((wall / cpu, cpu, p))
    if not odd:
        return []
    odd.sort(key=lambda t: -t[0])
    named = ", ".join(
        f"{_point_name(p, keys.get(need(p.index, 'index')))} {r:.1f}× ({num(need(p.p50_us, 'p50_us'))}"
        f" vs {num(cpu)} µs{' with the server' if p.server_cpu_ns else ''})"
        for r, cpu, p in odd[:3]
    )
    more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
    return [
        f"WARNING: wall time inflated by pre-emption or waiting; compare CPU: wall p50 over the "
        f"calling thread's CPU p50 (plus a database server's, where read) exceeds {WALL_OVER_CPU:g} at {len(odd)} of {len(points)} "
        f"points: {named}{more} (a busy machine, or an engine that searches on its own threads "
        "or in a server, whose work this thread's CPU time does not count)"
    ]


def sweep_reading(records: Sequence[Mapping[str, Any] | SweepRecord]) -> list[str]:
    """Per comparable group (unfiltered; each filter, selectivity and strategy): the verdicts.

    Points are only ever compared within one group: the indexes ranked at the
    best recall all of them reach, and each index's cheapest (lowest p50)
    point reaching the recall target. Then what sweep times. Points of several
    embedders (each on its own vectors) are read per embedder, each line named
    by it, with what its vectors change against MiniLM on torch.
    """
    if not records:
        return []
    groups = by_embedder(records)
    if len(groups) > 1:
        lines = []
        for label, recs in groups:
            own = _one_embedder_reading(recs)[:-1]  # the timing note once, at the end
            agreement = agreement_text(read_struct(recs[0], SweepRecord).embed_agreement)
            lines += [f"{label}: {agreement}"] if agreement else []
            lines += [f"{label}: {line}" for line in own]
        return lines + [_timing_note([read_struct(r, SweepRecord) for r in records])]
    label, _ = groups[0]
    agreement = agreement_text(read_struct(records[0], SweepRecord).embed_agreement)
    return ([f"{label}: {agreement}"] if agreement else []) + _one_embedder_reading(records)


def _one_embedder_reading(records: Sequence[Mapping[str, Any] | SweepRecord]) -> list[str]:
    """:func:`sweep_reading` of points on one set of vectors; its last line is the timing note."""
    points = [read_struct(rec, SweepRecord) for rec in records]
    groups: dict[Group, list[SweepRecord]] = {}
    for r in points:
        groups.setdefault(_group_of(r), []).append(r)
    keys = _build_keys(points)
    # unfiltered first, then by strategy and selectivity, largest first
    order = sorted(groups, key=lambda g: (bool(g), g[3] if g else "", -g[2] if g else 0.0, g))
    lines = [line for g in order for line in _group_lines(g, groups[g], keys)]
    lines += judged_reading([(_judged_label(p), p.judged) for p in points if p.strategy is None])
    return lines + _cpu_warning(points, keys) + [_timing_note(points)]


def _judged_label(p: SweepRecord) -> str:
    """``hnsw ef=64``: a sweep point named for the answer-quality reading."""
    return f"{p.index} {params_text(p)}".strip()


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

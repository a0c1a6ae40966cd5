"""The reading of run records: the dominant stage, each varied axis ranked, the total, notes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ... import intervals
from ...rerankers import TEXT_RERANKERS
from ..schema import RunRecord, need, read_struct
from .common import (
    DOMINANT_SHARE,
    SUGGESTED_REPEAT,
    pct_text,
    ranking,
    span_text,
    stat_name,
    step_text,
    us_text,
    within_noise,
)
from .embedders import embedder_key, embedder_lines
from .judged import judged_reading
from .points import WALL_OVER_CPU

__all__ = [
    "AXES",
    "CODEC_NOTE",
    "SAME_RECALL",
    "candidates_note",
    "cpu_warning",
    "recall_gap_note",
    "dominant_stage",
    "order_note",
    "run_reading",
]


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
            f"{name} {verb} {span_text(shares, pct_text)} of the time before first token{rows}; "
            f"the other {n_other} stages share {span_text([1 - s for s in shares], pct_text)}"
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
                line += ", most of it " + ", ".join(f"{s} {pct_text(v)}" for s, v in rest)
        return line
    parts = [f"{r.label}: {t} {pct_text(s)}" for r, (t, s) in zip(records, tops, strict=True)]
    return "the largest stage differs between rows: " + "; ".join(parts)


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
        f"{what} ({' + '.join(stages)} {stat_name(stat)}{over}): "
        + ", ".join(step_text(*step) for step in steps)
    ]
    values = [intervals.point(x, stat_name(stat)) for x, _ in levels.values()]
    # the spread as a share of the slowest choice's whole request (over the mean of every row,
    # a choice that is most of the request read as more than 100 %)
    slowest = by[steps[-1][1]] if steps else records
    total = float(np.mean([need(r.total, "total").get("p50_us") or np.nan for r in slowest])) * 1e3
    if total == total and total > 0:
        spread = max(values) - min(values)
        lines[0] += (
            f"; fastest to slowest {what}: {us_text(spread / 1e3)}, "
            f"{pct_text(spread / total)} of the time before first token (the slowest {what}'s)"
        )
    if all(within_noise(iv) for _, _, iv in steps):
        reps = max(int(r.repeats or 1) for r in records)
        how = (
            f"run with --repeat {SUGGESTED_REPEAT}"
            if reps < SUGGESTED_REPEAT
            else "run with more --queries"
        )
        lines.append(f"WARNING: the {plural}' differences are within noise; {how}")
    if what == "codec":
        lines.append(CODEC_NOTE)
        lines += _library_line(by)
    return lines


#: What a codec ranking measures (the reading says it under every codec ranking).
CODEC_NOTE = (
    "codec: the line above is ragbench's serialize + deserialize stages, as a pipeline runs "
    "them (building its payload objects, its checks, and the library call: work every codec "
    "shares), so its ratios are the stages', not the libraries' own round trips"
)


def _library_line(by: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """The codecs ranked on their library calls alone (each record's ``codec_library_ns``),
    when every record has them."""
    levels = {}
    for name, rs in by.items():
        got = [(r.info or {}).get("codec_library_ns") for r in rs]
        if not all(got):
            return []
        levels[name] = (np.concatenate([np.asarray(g, dtype=np.float64) for g in got]), None)
    steps = ranking(levels, "p50")
    return [
        "codec, the library calls alone (its own encode + decode of one request's payload on "
        "native objects built beforehand, back to back, outside the requests; "
        "`bench/test_bench_codecs.py` times the same as its floor): "
        + ", ".join(step_text(*step) for step in steps)
    ]


def _varied(
    records: Sequence[RunRecord],
) -> list[tuple[str, str, Callable[..., Any], tuple[str, ...]]]:
    return [a for a in AXES if len({repr(a[2](r)) for r in records}) > 1]


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
        f"{span_text(counts, lambda v: f'{v:.0f}')} times in each of the {n} positions "
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
        parts = [f"{name} {us_text(float(np.median(v)))}" for name, v in by_index.items()]
        example = f" (retrieve p50 here: {', '.join(parts)})"
    return (
        f"note: the embed stage ({', '.join(embedders)}) runs a model's forward pass before every "
        "retrieval, and a search right after other work reads slower than back to back (its "
        "caches cold, or its core paused: bench/test_bench_search_after.py)"
        f"{example}; `ragbench sweep` times search calls alone, back to back, with hot caches, "
        "and reads lower"
    )


#: Rows' mean recalls at most this far apart read as "the same recall" (one hit in 100).
SAME_RECALL = 0.01


def candidates_note(records: Sequence[RunRecord]) -> str:
    """When the rerank stage re-scores every index's candidates exactly: recall is the depth's.

    Exact re-scoring of ``k_candidates > k`` candidates makes recall@k the
    share of the true top k among each index's candidates, whatever order the
    index gave them in; when every index then reads the same recall, the
    candidate depth decided it, not the index ("" when it does not apply).
    """
    get_index, get_rerank = _cfg("retrieve", "backend"), _cfg("rerank", "backend")
    if len(records) < 2 or len({repr(get_index(r)) for r in records}) < 2:
        return ""
    rerankers = {str(get_rerank(r)) for r in records}
    if rerankers & {"none", "None", *TEXT_RERANKERS}:
        return ""  # no re-scoring, or a model's scores: recall is not the candidates'
    k = {int(r.k or _cfg("run", "k")(r) or 0) for r in records}
    depth = {int(_cfg("run", "k_candidates")(r) or 0) for r in records}
    if len(k) != 1 or len(depth) != 1 or min(depth) <= min(k):
        return ""  # candidates == k: re-scoring only reorders the index's own top k
    (kk,), (dd,) = k, depth
    recalls = {str(r.label): float(r.recall_at_k or float("nan")) for r in records}
    line = (
        f"recall@{kk} is after the rerank stage ({', '.join(sorted(rerankers))}) re-scored each "
        f"index's top {dd} candidates exactly: the share of the true top {kk} among the {dd}, "
        "not the index's own ranking ("
        + ", ".join(f"{label} {v:.3f}" for label, v in recalls.items())
        + ")"
    )
    values = list(recalls.values())
    if max(values) - min(values) <= SAME_RECALL:
        line += (
            f"; every index reads the same recall (within {SAME_RECALL:g}): the candidate depth "
            f"k_candidates={dd}, not the index, decides it -- for each index's own recall run "
            f"with --k-candidates {kk}, or `ragbench sweep` (recall before rescore)"
        )
    return line


def recall_gap_note(records: Sequence[RunRecord]) -> str:
    """A warning when rows retrieving differently reach recalls more than :data:`SAME_RECALL` apart.

    Their latencies are then not at equal recall: a faster index that
    finds fewer neighbours is not simply faster. "" when the rows retrieve
    alike (same backend and settings) or their recalls are within the tolerance.
    """
    retrieve = _cfg("retrieve")
    if len({repr(retrieve(r)) for r in records}) < 2:
        return ""
    recalls = {str(r.label): float(r.recall_at_k) for r in records if r.recall_at_k is not None}
    recalls = {label: v for label, v in recalls.items() if v == v}
    if len(recalls) < 2:
        return ""
    low = min(recalls, key=lambda n: recalls[n])
    high = max(recalls, key=lambda n: recalls[n])
    gap = recalls[high] - recalls[low]
    if gap <= SAME_RECALL:
        return ""
    return (
        f"WARNING: the rows are not at equal recall: {low} {recalls[low]:.3f} vs {high} "
        f"{recalls[high]:.3f}, a gap of {gap:.3f} (more than {SAME_RECALL:g}); their latencies "
        "compare indexes at different accuracy -- `ragbench sweep` reads each index's p50 at "
        "the same recall (interpolated on its frontier)"
    )


def _retrieve_cpu(run: RunRecord) -> tuple[float, float, bool] | None:
    """(retrieve wall p50 µs, CPU p50 µs, server read) of ``run``; ``None`` without CPU samples.

    CPU per request is the retrieve stage's thread CPU (``cpu_samples_ns``, with
    ``--cpu-time``) plus, where the record has it, the index's database server's
    CPU for the same request (``server_cpu_ns``: pgvector's own server).
    """
    cpu, wall = run.cpu_samples_ns, run.samples_ns
    if not cpu or not wall or "retrieve" not in cpu or "retrieve" not in wall:
        return None
    spent = np.asarray(cpu["retrieve"], dtype=np.int64)
    server = run.server_cpu_ns
    both = server is not None and len(server) == len(spent)
    if both:
        spent = spent + np.asarray(server, dtype=np.int64)
    return (
        intervals.point(np.asarray(wall["retrieve"]), "p50") / 1e3,
        intervals.point(spent, "p50") / 1e3,
        both,
    )


def cpu_warning(records: Sequence[RunRecord]) -> str:
    """A WARNING naming the rows whose retrieve wall p50 exceeds :data:`WALL_OVER_CPU` × its CPU p50.

    The retrieve stage's CPU is the request thread's plus, where read, the
    database server's for the same request (:func:`_retrieve_cpu`), so a
    search's work in pgvector's server is not taken for waiting. "" when no
    row recorded CPU time (``--cpu-time``) or none is over the factor.
    """
    odd = []
    for run in records:
        read = _retrieve_cpu(run)
        if read is not None and read[1] > 0 and read[0] / read[1] > WALL_OVER_CPU:
            odd.append((read[0] / read[1], run, read))
    if not odd:
        return ""
    odd.sort(key=lambda t: -t[0])
    named = ", ".join(
        f"{run.label} {r:.1f}× ({us_text(wall)} vs {us_text(cpu)}"
        f"{' with the server' if server else ''})"
        for r, run, (wall, cpu, server) in odd[:3]
    )
    more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
    return (
        "WARNING: retrieve wall time inflated by pre-emption or waiting; compare CPU: its wall "
        "p50 over its CPU p50 (the request thread's, plus the database server's where read) "
        f"exceeds {WALL_OVER_CPU:g} in {len(odd)} of {len(records)} rows: {named}{more} (a busy "
        "machine, or an engine that searches on its own threads, whose work this thread's CPU "
        "time does not count)"
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
    if all(within_noise(iv) for iv in ivs):
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
    notes = (
        recall_gap_note(runs),
        candidates_note(runs),
        _model_note(runs),
        order_note(runs),
        cpu_warning(runs),
    )
    for note in notes:
        if note:
            lines.append(note)
    lines += embedder_lines(runs)  # each embedder configuration against torch's
    lines += [line for line in map(_embed_parts_line, runs) if line]
    lines += _agreement_lines(runs)
    lines += judged_reading([(str(r.label), r.judged) for r in runs])  # nDCG@10 apart or not
    return lines


def _agreement_lines(runs: Sequence[RunRecord]) -> list[str]:
    """:func:`_agreement_line` once per embedder configuration: rows sharing one (the same
    query vectors under several indexes or codecs) are named by it, not repeated."""
    by: dict[str, list[RunRecord]] = {}
    for r in runs:
        if (r.info or {}).get("embed_agreement"):
            by.setdefault(embedder_key(r), []).append(r)
    out = []
    for key, rows in by.items():
        line = _agreement_line(rows[0])
        if line and len(rows) > 1:
            line = key + line[len(rows[0].label or "run") :]
        out += [line] if line else []
    return out


def _agreement_line(run: RunRecord) -> str | None:
    """``label: against minilm torch: top-10 agreement 0.93 (min 0.60 over queries), query
    cosine mean 0.9941, p1 0.9880`` for an embedder compared with a reference."""
    got = (run.info or {}).get("embed_agreement")
    if not got:
        return None
    head = (
        f"{run.label or 'run'}: against {got['reference']}: top-{got['k']} agreement "
        f"{got['top_k_mean']:.2f} (min {got['top_k_min']:.2f} over queries)"
    )
    if got.get("cosine_mean") is None:  # vectors in another space (a static model's PCA basis)
        why = got.get("cosine_note") or "not recorded"
        return f"{head}; query cosine: {why}"
    return f"{head}, query cosine mean {got['cosine_mean']:.4f}, p1 {got['cosine_p1']:.4f}"


def _embed_parts_line(run: RunRecord) -> str | None:
    """``label: embed p50 split: tokenize 90 µs, forward 2,200 µs, pool 90 µs; forward
    dominates (92 % of the parts)`` for a run whose embedder split its stage (MiniLM)."""
    parts = (run.info or {}).get("embed_parts")
    if not parts:
        return None
    p50 = {name: float(parts[name]["p50_ns"]) / 1e3 for name in parts}
    top = max(p50, key=lambda name: p50[name])
    share = 100.0 * p50[top] / (sum(p50.values()) or 1.0)
    text = ", ".join(f"{name} {us:,.1f} µs" for name, us in p50.items())
    return (
        f"{run.label or 'run'}: embed p50 split: {text}; {top} dominates "
        f"({share:.0f} % of the parts)"
    )

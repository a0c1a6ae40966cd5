"""Sweep and scale points: recall against latency per index, filtered points, growth with n."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..records import growth_exponents, pareto
from ..schema import IndexPoint, ScaleRecord, SweepRecord, need, read_struct
from .cache_state import cache_state_text
from .cells import num, text_table, with_ci, zero_cell
from .judged import JUDGED_HEADS, judged_cells, judged_note
from .notes import build_note, hardware_note
from .search_threads import search_threads_text

__all__ = [
    "filtered_sweep_table",
    "params_text",
    "scale_table",
    "sweep_table",
]


Point = Mapping[str, Any] | IndexPoint


def plain(rec: Mapping[str, Any] | msgspec.Struct) -> Mapping[str, Any]:
    """A record as the mapping the set-wide helpers of :mod:`ragbench.results.records` take."""
    return msgspec.structs.asdict(rec) if isinstance(rec, msgspec.Struct) else rec


def params_text(rec: Point, build_keys: Iterable[str] | None = None) -> str:
    """``M=16 ef=8→10 rescore=100``: the build params (all, or those named) then the query params.

    The build params named are ``build_keys`` and, for a sweep point, those
    ``--build`` set (``build_given``); a query parameter the index ran at
    another value (``effective_query``: an ``ef`` under the candidates asked
    for) reads ``asked→ran``, ``name→ran`` for a default raised.
    """
    p = read_struct(rec, IndexPoint)
    ran = p.effective_query if isinstance(p, SweepRecord) else None
    given = p.build_given if isinstance(p, SweepRecord) else None
    if build_keys is not None and given:
        build_keys = {*build_keys, *given}
    return params_of(p.build, p.query, p.rescore, build_keys, ran)


def params_of(
    build: Mapping[str, Any] | None,
    query: Mapping[str, Any] | None,
    rescore: int | None,
    build_keys: Iterable[str] | None = None,
    ran: Mapping[str, Any] | None = None,
) -> str:
    """:func:`params_text` of a point's build and query parameters and its re-scoring depth."""
    build = build or {}
    keys = list(build) if build_keys is None else [k for k in build if k in set(build_keys)]
    parts = [f"{k}={build[k]}" for k in keys]
    query, ran = query or {}, ran or {}
    for k, v in query.items():
        parts.append(f"{k}={v}→{ran[k]}" if k in ran and ran[k] != v else f"{k}={v}")
    parts += [f"{k}→{v}" for k, v in ran.items() if k not in query]
    if rescore:
        parts.append(f"rescore={rescore}")
    return " ".join(parts)


def query_notes(points: Sequence[SweepRecord]) -> list[str]:
    """What the ef and rescore in the params say, for the points that need it (``[]`` if none)."""
    notes = []
    raised = [p for p in points if p.effective_query]
    if raised:
        k = need(points[0].k, "k")
        example = params_of(None, raised[0].query, None, ran=raised[0].effective_query)
        notes.append(
            f"{example}: an ef under the number of candidates a search asks for (k={k}, or "
            "rescore) runs as that number (hnswlib, usearch, faiss HNSW, Qdrant and pgvector "
            "raise ef to it); with no value before →, the index's default ef was raised"
        )
        if any(p.strategy for p in raised):
            notes[-1] += (
                "; filtered, `pre` uses no ef and `post` asks for more candidates, so its ef "
                "rises with them"
            )
    if any(p.rescore for p in points):
        notes.append(
            "rescore=N: the index returns its top N candidates, re-scored exactly from the "
            "float32 vectors (`before rescore`: recall of the index's own top k); an HNSW "
            "index searches with ef ≥ N then, so an ef under N changes nothing"
        )
    return notes


def _recall_cell(v: float | None) -> str:
    return "—" if v is None or v != v else f"{v:.3f}"


def _bytes_cell(rec: IndexPoint) -> str:
    """Index bytes per vector, ``+ N`` read by re-scoring (``—`` for records without them)."""
    own = rec.bytes_per_vector
    if own is None:
        return "—"
    extra = rec.rescore_bytes_per_vector or 0
    return num(own) + (f" + {extra:,}" if extra else "")


def _recall_ci_cell(rec: IndexPoint) -> str:
    """``0.9805 ±0.0040``: mean recall and half its interval's width (absolute)."""
    text = f"{need(rec.recall, 'recall'):.4f}"
    ci = rec.recall_ci
    if not ci or ci[0] is None or ci[1] is None or ci[0] != ci[0] or ci[1] != ci[1]:
        return text
    return f"{text} ±{(float(ci[1]) - float(ci[0])) / 2:.4f}"


def _row_key(p: SweepRecord, i: int, first: Mapping[str | None, int]) -> tuple[int, str, float]:
    """A sweep row's place: its index's first appearance, then its line, then its knob's value
    (a row of the default grid, ``grid: "refined"``) or its place in the file."""
    if p.grid != "refined" or not p.grid_knob:
        return (first[p.index], "", float(i))
    query = dict(p.query or {})
    value = query.pop(p.grid_knob, 0)
    line = repr((sorted((p.build or {}).items()), sorted(query.items()), p.rescore))
    return (first[p.index], line, float(value))


def _labelled_build_keys(points: Sequence[SweepRecord]) -> dict[str, set[str]]:
    """Per index, the build parameters its rows name: those that vary within its points (the
    rest are in the records) and what ``--build`` set, even to one value (the label says what ran)."""
    by_index: dict[str, list[SweepRecord]] = {}
    for p in points:
        by_index.setdefault(need(p.index, "index"), []).append(p)
    varying: dict[str, set[str]] = {}
    for name, pts in by_index.items():
        keys = {k for p in pts for k in p.build or {}}
        varying[name] = {k for k in keys if len({repr((p.build or {}).get(k)) for p in pts}) > 1}
        varying[name] |= {k for p in pts for k in p.build_given or {}}
    return varying


def sweep_table(records: Sequence[Mapping[str, Any] | SweepRecord], *, width: int = 400) -> str:
    """Sweep points, ★ on the Pareto-optimal ones (recall vs one-thread QPS).

    Recall as mean and 10th percentile over the queries; for re-scored
    points also before re-scoring (the index's own top k). Bytes per
    vector: the index's own, ``+`` what re-scoring reads per candidate.
    """
    typed = [(read_struct(r, SweepRecord), r) for r in records]
    # one index's rows together, in the order indexes first appear: a sweep measures the
    # engines round by round, so its records alternate between them; the default grid's
    # rows (refined after its doublings) in the order of their knob's values
    first = {name: i for i, name in reversed(list(enumerate(p.index for p, _ in typed)))}
    order = {id(r): _row_key(p, i, first) for i, (p, r) in enumerate(typed)}
    typed.sort(key=lambda pr: order[id(pr[1])])
    filtered = [p for p, _ in typed if p.strategy is not None]
    points = [p for p, _ in typed if p.strategy is None]
    if not points:
        return filtered_sweep_table(filtered, width=width)
    r0 = points[0]
    flags = pareto([plain(r) for p, r in typed if p.strategy is None])
    varying = _labelled_build_keys(points)
    title = (
        f"sweep — {need(r0.dataset, 'dataset')} n={need(r0.n, 'n')} dim={need(r0.dim, 'dim')} "
        f"{need(r0.metric, 'metric')} k={need(r0.k, 'k')}; "
        "★ = Pareto-optimal (recall vs 1-thread QPS = 1e6 / p50)"
    )
    threads = {  # None: an engine not limited; records from before the field are left out
        need(p.index, "index"): p.search_threads
        for p, r in typed
        if p.strategy is None
        and (p.search_threads is not None or (isinstance(r, Mapping) and "search_threads" in r))
    }
    title += f"; {search_threads_text(threads)}" if threads else ""
    cache = cache_state_text(p for p, _ in typed)
    title += f"; {cache}" if cache else ""
    cols = [("", "left"), ("index", "left"), ("params", "left")] + [
        (c, "right")
        for c in (
            "recall", "recall p10", "recall 0", "before rescore", "p50 µs", "CPU p50 µs",
            "p95 µs", "p99 µs",
            "QPS 1 thread", "QPS batch", "build s", "memory MB", "B/vector",
        )
    ]  # fmt: skip
    rows = [_sweep_row(p, star, varying) for p, star in zip(points, flags, strict=True)]
    table = text_table(title, *_with_judged(cols, rows, points), width=width)
    if filtered:
        table += "\n" + filtered_sweep_table(filtered, varying, width=width)
    if any(p.p50_us_ci for p in points):
        reps = max(int(p.repeats or 1) for p in points)
        over = f"{reps} passes over the queries, then queries" if reps > 1 else "queries"
        table += f"\np50/p99 ±: 95 % bootstrap intervals over {over}"
    table += (
        "\nCPU p50: the searching thread's CPU time per query (time.thread_time_ns), beside its "
        "wall p50; work an engine does on its own threads is not in it; + N srv: the database "
        "server's process CPU per query, read from the operating system (pgvector's own server)"
    )
    table += "\n" + memory_note(points)
    table += (
        "\nrecall: mean over queries; recall p10: the worst tenth's; recall 0: queries that found "
        "none of the true top k, of all\n"
        + judged_note([p.judged for p in points], str(r0.dataset))
    )
    if any(p.bytes_per_vector is not None for p in points):
        table += (
            "\nB/vector: memory MB per vector (codes, ids, graph, centroids, engine overhead) "
            "+ the float bytes re-scoring reads per candidate"
        )
    notes = query_notes([p for p, _ in typed])
    table += "".join("\n" + note for note in notes)
    built = build_note(points)
    table += "\n" + built if built else ""
    hardware = hardware_note(points)
    return table + ("\n" + hardware if hardware else "")


def _with_judged(
    cols: list[tuple[str, str]], rows: list[list[str]], points: Sequence[SweepRecord]
) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """The sweep table's columns and rows with nDCG@10, MRR@10, R@100 after recall 0, when judged."""
    if all(p.judged is None for p in points):
        return cols, rows
    at = 6  # after recall 0
    heads = [*cols[:at], *((c, "right") for c in JUDGED_HEADS), *cols[at:]]
    cells = [[*r[:at], *judged_cells(p.judged), *r[at:]] for r, p in zip(rows, points, strict=True)]
    return heads, cells


def build_cell(p: IndexPoint) -> str:
    """``1.84`` (seconds of this run's build) or ``reused`` for an index loaded from the index
    cache: no seconds, since those were another run's build."""
    if (p.build_info or {}).get("cached"):
        return "reused"
    return f"{need(p.build_s, 'build_s'):.2f}"


def _sweep_row(p: SweepRecord, star: bool, varying: Mapping[str, set[str]]) -> list[str]:
    index = need(p.index, "index")
    return [
        "★" if star else "",
        index,
        params_text(p, varying[index]) or "(defaults)",
        _recall_ci_cell(p),
        _recall_cell(p.recall_p10),
        zero_cell(p.recall_zero, p.recall_per_query),
        _recall_cell(p.recall_before_rescore),
        with_ci(need(p.p50_us, "p50_us"), p.p50_us_ci),
        _cpu_cell(p),
        num(need(p.p95_us, "p95_us")),
        with_ci(need(p.p99_us, "p99_us"), p.p99_us_ci),
        num(need(p.qps_single, "qps_single")),
        num(need(p.qps_batch, "qps_batch")),
        build_cell(p),
        memory_cell(p),
        _bytes_cell(p),
    ]


def _cpu_cell(p: SweepRecord) -> str:
    """The calling thread's CPU p50, ``+ N srv`` for a database server's CPU p50 (pgvector)."""
    if p.cpu_p50_us is None:
        return "—"
    server = p.server_cpu_p50_us
    return num(p.cpu_p50_us) + ("" if server is None else f" + {num(server)} srv")


def memory_cell(p: IndexPoint) -> str:
    """``memory_bytes`` in MB, ``+ N`` MB of float vectors re-scoring reads (``—`` unmeasured)."""
    if p.memory_bytes is None:
        return "—"
    text = f"{p.memory_bytes / 1e6:.1f}"
    return text + (f" + {p.rescore_bytes / 1e6:.1f}" if p.rescore_bytes else "")


def memory_note(points: Sequence[IndexPoint]) -> str:
    """What ``memory MB`` is: one method for every row, or which rows are the engines' own."""
    from ...procstat import METHOD, METHOD_COLD, METHOD_TEXT, OLD_METHOD_TEXT, OLD_METHODS

    methods = {p.memory_method for p in points}
    for known, text, cold_name in (
        ({METHOD, METHOD_COLD}, METHOD_TEXT, METHOD_COLD),
        (OLD_METHODS, OLD_METHOD_TEXT, "pss-delta-cold"),
    ):
        if methods <= known:
            cold = sorted({str(p.index) for p in points if p.memory_method == cold_name})
            also = (
                f" ({', '.join(cold)}: no throw-away build on 2000 rows, so its library's "
                "one-time memory is counted too)"
                if cold
                else ""
            )
            return f"memory MB: {text}{also}; + the float vectors re-scoring reads, where it does"
    if None in methods and len(methods) == 1:
        return (
            "memory MB: each engine's own accounting (records from before one method: serialized "
            "size, a folder, server relations: do not compare rows)"
        )
    return "memory MB: MIXED methods (older records): do not compare rows"


def filtered_sweep_table(
    records: Sequence[Mapping[str, Any] | SweepRecord],
    varying: Mapping[str, set[str]] | None = None,
    *,
    width: int = 400,
) -> str:
    """Filtered sweep points: recall (mean, p10) and p50 per strategy and selectivity, cliffs marked."""
    points = [read_struct(r, SweepRecord) for r in records]
    r0 = points[0]
    f0 = r0.filter or {}
    corr = "correlated" if f0.get("correlated") else "random"
    title = (
        f"filtered sweep — {need(r0.dataset, 'dataset')} n={need(r0.n, 'n')} k={need(r0.k, 'k')}; "
        f"filter on {f0.get('attribute')} ({corr}); ◀ = filter cliff (recall under target or "
        "p50 > 3×)"
    )
    cols = [("index", "left"), ("params", "left"), ("strategy", "left")] + [
        (c, "right")
        for c in (
            "selectivity",
            "achieved",
            "recall",
            "recall p10",
            "recall 0",
            "p50 µs",
            "p99 µs",
            "cliff",
        )  # fmt: skip
    ]
    ordered = sorted(
        points,
        key=lambda p: (
            need(p.index, "index"),
            params_text(p, set()),
            str(need(p.strategy, "strategy")),
            -float(need(p.selectivity, "selectivity")),
        ),
    )
    rows = []
    cliffs: dict[str, str] = {}
    for p in ordered:
        cliff = p.filter_cliff or {}
        here = cliff.get("selectivity") is not None and cliff["selectivity"] == p.selectivity
        params = params_text(p, (varying or {}).get(need(p.index, "index"), set())) or "(defaults)"
        rows.append(
            [
                need(p.index, "index"),
                params,
                str(p.strategy),
                f"{need(p.selectivity, 'selectivity'):g}",
                f"{(p.filter or {}).get('achieved_mean', float('nan')):.4g}",
                f"{need(p.recall, 'recall'):.4f}",
                f"{float('nan') if p.recall_p10 is None else p.recall_p10:.3f}",
                zero_cell(p.recall_zero, p.recall_per_query),
                with_ci(need(p.p50_us, "p50_us"), p.p50_us_ci),
                num(need(p.p99_us, "p99_us")),
                f"◀ {cliff.get('reason', '')}" if here else "",
            ]
        )
        line = f"{p.index} {params} {p.strategy}"
        if cliff.get("selectivity") is None:
            cliffs[line] = "no cliff down to the smallest selectivity measured"
        else:
            cliffs[line] = f"cliff at selectivity {cliff['selectivity']:g} ({cliff['reason']})"
    table = text_table(title, cols, rows, width=width)
    table += "\n" + "\n".join(f"filter cliff: {k}: {v}" for k, v in cliffs.items())
    notes = [] if varying is not None else query_notes(points)  # else under the sweep table
    return table + "".join("\n" + note for note in notes)


def scale_table(records: Sequence[Mapping[str, Any] | ScaleRecord], *, width: int = 400) -> str:
    """Scale points sorted by index and n, then the growth exponent of p50 per index."""
    points = [read_struct(r, ScaleRecord) for r in records]
    r0 = points[0]
    title = f"scale — p50 per query at recall@{need(r0.k, 'k')} ≥ {need(r0.target_recall, 'target_recall')}"
    cols = [("index", "left"), ("n", "right"), ("query param used", "left")] + [
        (c, "right")
        for c in (
            "recall",
            "recall p10",
            "recall 0",
            "p50 µs",
            "p99 µs",
            "build s",
            "memory MB",
            "B/vector",
        )  # fmt: skip
    ]
    rows = []
    for p in sorted(points, key=lambda p: (need(p.index, "index"), need(p.n, "n"))):
        used = params_of(None, p.query, p.rescore) or "(exact)"
        if p.reached is False:
            used += " (target not reached)"
        rows.append(
            [
                need(p.index, "index"),
                f"{need(p.n, 'n'):,}",
                used,
                _recall_ci_cell(p),
                _recall_cell(p.recall_p10),
                zero_cell(p.recall_zero, p.recall_per_query),
                with_ci(need(p.p50_us, "p50_us"), p.p50_us_ci),
                with_ci(need(p.p99_us, "p99_us"), p.p99_us_ci),
                build_cell(p),
                memory_cell(p),
                _bytes_cell(p),
            ]
        )
    lines = [text_table(title, cols, rows, width=width)]
    exps = growth_exponents([plain(r) for r in records])
    if exps:
        lines.append(
            "growth of p50 latency with n (log-log slope; 1.0 = linear scan): "
            + ", ".join(f"{k} {v:.2f}" for k, v in exps.items())
        )
    built = build_note(points)
    lines += [built] if built else []
    lines.append(memory_note(points))
    hardware = hardware_note(points)
    return "\n".join(lines + ([hardware] if hardware else []))

"""Sweep and scale points: recall against latency per index, filtered points, growth with n."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..records import growth_exponents, pareto
from .cells import num, text_table, with_ci
from .notes import build_note, hardware_note

__all__ = [
    "filtered_sweep_table",
    "params_text",
    "scale_table",
    "sweep_table",
]


def params_text(rec: Mapping[str, Any], build_keys: Iterable[str] | None = None) -> str:
    """``M=16 ef=64 rescore=100``: the build params (all, or those named) then the query params."""
    build = rec.get("build") or {}
    keys = list(build) if build_keys is None else [k for k in build if k in set(build_keys)]
    parts = [f"{k}={build[k]}" for k in keys]
    parts += [f"{k}={v}" for k, v in (rec.get("query") or {}).items()]
    if rec.get("rescore"):
        parts.append(f"rescore={rec['rescore']}")
    return " ".join(parts)


def _recall_cell(rec: Mapping[str, Any], key: str) -> str:
    v = rec.get(key)
    return "—" if v is None or v != v else f"{v:.3f}"


def _bytes_cell(rec: Mapping[str, Any]) -> str:
    """Index bytes per vector, ``+ N`` read by re-scoring (``—`` for records without them)."""
    own = rec.get("bytes_per_vector")
    if own is None:
        return "—"
    extra = rec.get("rescore_bytes_per_vector") or 0
    return num(own) + (f" + {extra:,}" if extra else "")


def _recall_ci_cell(rec: Mapping[str, Any]) -> str:
    """``0.9805 ±0.0040``: mean recall and half its interval's width (absolute)."""
    text = f"{rec['recall']:.4f}"
    ci = rec.get("recall_ci")
    if not ci or ci[0] is None or ci[1] is None or ci[0] != ci[0] or ci[1] != ci[1]:
        return text
    return f"{text} ±{(float(ci[1]) - float(ci[0])) / 2:.4f}"


def sweep_table(records: Sequence[Mapping[str, Any]], *, width: int = 400) -> str:
    """Sweep points, ★ on the Pareto-optimal ones (recall vs one-thread QPS).

    Recall as mean and 10th percentile over the queries; for re-scored
    points also before re-scoring (the index's own top k). Bytes per
    vector: the index's own, ``+`` what re-scoring reads per candidate.
    """
    filtered = [r for r in records if r.get("strategy") is not None]
    records = [r for r in records if r.get("strategy") is None]
    if not records:
        return filtered_sweep_table(filtered, width=width)
    r0 = records[0]
    flags = pareto(records)
    # name the build parameters that vary within an index's points; the rest are in the records
    by_index: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_index.setdefault(r["index"], []).append(r)
    varying: dict[str, set[str]] = {}
    for name, pts in by_index.items():
        keys = {k for r in pts for k in r.get("build", {})}
        varying[name] = {k for k in keys if len({repr(r.get("build", {}).get(k)) for r in pts}) > 1}
    title = (
        f"sweep — {r0['dataset']} n={r0['n']} dim={r0['dim']} {r0['metric']} k={r0['k']}; "
        "★ = Pareto-optimal (recall vs 1-thread QPS = 1e6 / p50)"
    )
    cols = [("", "left"), ("index", "left"), ("params", "left")] + [
        (c, "right")
        for c in (
            "recall",
            "recall p10",
            "before rescore",
            "p50 µs",
            "p95 µs",
            "p99 µs",
            "QPS 1 thread",
            "QPS batch",
            "build s",
            "memory MB",
            "B/vector",
        )
    ]
    rows = [
        [
            "★" if star else "",
            rec["index"],
            params_text(rec, varying[rec["index"]]) or "(defaults)",
            _recall_ci_cell(rec),
            _recall_cell(rec, "recall_p10"),
            _recall_cell(rec, "recall_before_rescore"),
            with_ci(rec["p50_us"], rec.get("p50_us_ci")),
            num(rec["p95_us"]),
            with_ci(rec["p99_us"], rec.get("p99_us_ci")),
            num(rec["qps_single"]),
            num(rec["qps_batch"]),
            f"{rec['build_s']:.2f}",
            f"{rec['memory_bytes'] / 1e6:.1f}",
            _bytes_cell(rec),
        ]
        for rec, star in zip(records, flags, strict=True)
    ]
    table = text_table(title, cols, rows, width=width)
    if filtered:
        table += "\n" + filtered_sweep_table(filtered, varying, width=width)
    if any(r.get("p50_us_ci") for r in records):
        reps = max(int(r.get("repeats") or 1) for r in records)
        over = f"{reps} passes over the queries, then queries" if reps > 1 else "queries"
        table += f"\np50/p99 ±: 95 % bootstrap intervals over {over}"
    if any(r.get("bytes_per_vector") is not None for r in records):
        table += (
            "\nB/vector: the index's own bytes per vector (serialized size / n: codes, ids, "
            "graph, centroids) + the float bytes re-scoring reads per candidate"
        )
    built = build_note(records)
    table += "\n" + built if built else ""
    hardware = hardware_note(records)
    return table + ("\n" + hardware if hardware else "")


def filtered_sweep_table(
    records: Sequence[Mapping[str, Any]],
    varying: Mapping[str, set[str]] | None = None,
    *,
    width: int = 400,
) -> str:
    """Filtered sweep points: recall (mean, p10) and p50 per strategy and selectivity, cliffs marked."""
    r0 = records[0]
    f0 = r0.get("filter") or {}
    corr = "correlated" if f0.get("correlated") else "random"
    title = (
        f"filtered sweep — {r0['dataset']} n={r0['n']} k={r0['k']}; filter on "
        f"{f0.get('attribute')} ({corr}); ◀ = filter cliff (recall under target or p50 > 3×)"
    )
    cols = [("index", "left"), ("params", "left"), ("strategy", "left")] + [
        (c, "right")
        for c in ("selectivity", "achieved", "recall", "recall p10", "p50 µs", "p99 µs", "cliff")
    ]
    ordered = sorted(
        records,
        key=lambda r: (
            r["index"],
            params_text(r, set()),
            str(r["strategy"]),
            -float(r["selectivity"]),
        ),
    )
    rows = []
    cliffs: dict[str, str] = {}
    for rec in ordered:
        cliff = rec.get("filter_cliff") or {}
        here = cliff.get("selectivity") is not None and cliff["selectivity"] == rec["selectivity"]
        params = params_text(rec, (varying or {}).get(rec["index"], set())) or "(defaults)"
        rows.append(
            [
                rec["index"],
                params,
                str(rec["strategy"]),
                f"{rec['selectivity']:g}",
                f"{(rec.get('filter') or {}).get('achieved_mean', float('nan')):.4g}",
                f"{rec['recall']:.4f}",
                f"{rec.get('recall_p10', float('nan')):.3f}",
                with_ci(rec["p50_us"], rec.get("p50_us_ci")),
                num(rec["p99_us"]),
                f"◀ {cliff.get('reason', '')}" if here else "",
            ]
        )
        line = f"{rec['index']} {params} {rec['strategy']}"
        if cliff.get("selectivity") is None:
            cliffs[line] = "no cliff down to the smallest selectivity measured"
        else:
            cliffs[line] = f"cliff at selectivity {cliff['selectivity']:g} ({cliff['reason']})"
    table = text_table(title, cols, rows, width=width)
    return table + "\n" + "\n".join(f"filter cliff: {k}: {v}" for k, v in cliffs.items())


def scale_table(records: Sequence[Mapping[str, Any]], *, width: int = 400) -> str:
    """Scale points sorted by index and n, then the growth exponent of p50 per index."""
    r0 = records[0]
    title = f"scale — p50 per query at recall@{r0['k']} ≥ {r0['target_recall']}"
    cols = [("index", "left"), ("n", "right"), ("query param used", "left")] + [
        (c, "right")
        for c in ("recall", "recall p10", "p50 µs", "p99 µs", "build s", "memory MB", "B/vector")
    ]
    rows = []
    for rec in sorted(records, key=lambda r: (r["index"], r["n"])):
        used = params_text({"query": rec.get("query"), "rescore": rec.get("rescore")}) or "(exact)"
        if not rec.get("reached", True):
            used += " (target not reached)"
        rows.append(
            [
                rec["index"],
                f"{rec['n']:,}",
                used,
                _recall_ci_cell(rec),
                _recall_cell(rec, "recall_p10"),
                with_ci(rec["p50_us"], rec.get("p50_us_ci")),
                with_ci(rec["p99_us"], rec.get("p99_us_ci")),
                f"{rec['build_s']:.2f}",
                f"{rec['memory_bytes'] / 1e6:.1f}",
                _bytes_cell(rec),
            ]
        )
    lines = [text_table(title, cols, rows, width=width)]
    exps = growth_exponents(records)
    if exps:
        lines.append(
            "growth of p50 latency with n (log-log slope; 1.0 = linear scan): "
            + ", ".join(f"{k} {v:.2f}" for k, v in exps.items())
        )
    built = build_note(records)
    lines += [built] if built else []
    hardware = hardware_note(records)
    return "\n".join(lines + ([hardware] if hardware else []))

"""Run records: one run's table, runs side by side, and what a comparison shares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import intervals
from ..errors import ConfigError
from .cells import cpu_cells, event_text, num, stat_cells, text_table, with_ci
from .notes import (
    SETUP_LABELS,
    build_note,
    connection_note,
    filter_note,
    hardware_note,
    llm_note,
    retrieve_parts_note,
    simulated_note,
    stage_label,
)

__all__ = [
    "STATS",
    "compare_table",
    "fixed_line",
    "run_table",
    "setup_summary",
    "stopped_line",
]


STATS = ("mean", "p50", "p90", "p95", "p99", "max")


def run_table(rec: Mapping[str, Any], *, width: int = 110) -> str:
    """One run record: mean/p50/p90/p99/max µs and share per stage, the total, then notes."""
    ds = rec.get("dataset") or {}
    title = f"{rec['label']}  —  {ds.get('name', '?')}, {rec['requests']} requests"
    title += simulated_note([rec])
    cpu = "cpu_total" in rec
    heads = ["mean µs", "p50 µs", "p90 µs", "p99 µs", "max µs", "share"]
    heads += ["cpu µs", "cpu %", "cpu share"] if cpu else []
    cols = [("stage", "left")] + [(c, "right") for c in heads]
    stats = ("mean", "p50", "p90", "p99", "max")
    rows = []
    for name in rec["stages"]:
        s = rec["summary"][name]
        label = stage_label(name, [rec])
        row = [label, *stat_cells(s, stats), f"{100 * s['share']:.1f}%"]
        rows.append(row + (cpu_cells(s) if cpu else []))
    total = ["before first token", *stat_cells(rec["total"], stats), "100%"]
    rows.append(total + ([num(rec["cpu_total"]["mean_us"]), "", "100%"] if cpu else []))
    lines = [text_table(title, cols, rows, width=width)]
    if rec.get("intervals"):
        lines.append(f"p50 and p99 with {rec['intervals']}")
    if cpu:
        lines.append(
            "cpu µs: mean thread CPU time per request; cpu %: CPU time / wall time of the stage "
            "(~100 % CPU-bound, ~0 % waiting); cpu share: of all CPU time before first token"
        )
    extra = [
        f"recall@{rec['k']} {num(rec['recall_at_k'])} (tie-aware, vs exact search)",
        f"payload {num(rec.get('payload_bytes_p50'))} B p50",
    ]
    if rec.get("wire_bytes_p50"):
        extra.append(f"on the wire {num(rec['wire_bytes_p50'])} B p50")
    filt = (rec.get("info") or {}).get("filter")
    if filt:
        extra[0] = (
            f"recall@{rec['k']} mean {num(rec['recall_at_k'])}, p10 {num(rec.get('recall_p10'))} "
            f"(vs exact filtered search)"
        )
        extra.append(filter_note(filt))
    if rec.get("cache_hit_rate") is not None:
        extra.append(f"cache hit rate {100 * rec['cache_hit_rate']:.1f}%")
    lines.append("  ".join(extra))
    note = llm_note(rec)
    if note:
        lines.append(note)
    split = retrieve_parts_note(rec)
    if split:
        lines.append(split)
    if rec.get("connection"):
        lines.append(connection_note(rec["connection"]))
    lines.append(
        "setup (not in request latency): "
        + ", ".join(f"{SETUP_LABELS.get(k, k)} {v:.3f}s" for k, v in rec["setup_s"].items())
    )
    lines.extend(f"cache: {event_text(ev)}" for ev in rec.get("cache_events") or [])
    if rec.get("error"):
        lines.append(f"STOPPED EARLY: {rec['error']}")
    return "\n".join(lines)


def compare_table(
    records: Sequence[Mapping[str, Any]],
    *,
    stat: str = "p50",
    stages: Iterable[str] | None = None,
    width: int = 400,
) -> str:
    """One row per run record: ``stat`` of each stage, total p50/p99, ratio to the fastest, recall, bytes."""
    if stat not in STATS:
        raise ConfigError(f"unknown statistic {stat!r}; use one of {', '.join(STATS)}")
    if not records:
        return "(no runs)"
    names: list[str] = []
    for r in records:
        names += [n for n in r["stages"] if n not in names]
    if stages is not None:
        keep = set(stages)
        names = [n for n in names if n in keep]
    sim = simulated_note(records)
    how = (
        "interleaved"
        if all(r.get("interleaved", True) for r in records)
        else "each configuration in its own task, not interleaved"
    )
    title = (
        f"side by side, {how}, {stat} µs per stage — {records[0]['dataset'].get('name', '?')}{sim}"
    )
    wire = any(r.get("wire_bytes_p50") for r in records)
    filters = [(r.get("info") or {}).get("filter") for r in records]
    recall_cols = ("recall@k", "recall p10") if any(filters) else ("recall@k",)
    cols = [("run", "left")]
    cols += [(stage_label(n, records, True), "right") for n in names]
    cols += [(c, "right") for c in ("total p50", "total p99", "× best", *recall_cols, "bytes")]
    cols += [("wire B", "right")] if wire else []
    live = [r for r in records if r["requests"]]
    best = min(live, key=lambda r: r["total"]["p50_us"]) if live else None
    rows = []
    for r in records:
        cells = [_stage_cell(r, n, stat) if n in r["summary"] else "—" for n in names]
        row = [r["label"] + (" [stopped early]" if r.get("error") else ""), *cells]
        row += stat_cells(r["total"], ("p50", "p99"))
        row += [_ratio_cell(r, best), f"{r['recall_at_k']:.3f}"]
        row += [num(r.get("recall_p10"))] if any(filters) else []
        row += [num(r.get("payload_bytes_p50"))]
        row += [num(r.get("wire_bytes_p50"))] if wire else []
        rows.append(row)
    table = text_table(title, cols, rows, width=width)
    notes = sorted({filter_note(f) for f in filters if f})
    if notes:
        table += "\n" + "\n".join(notes)
    what = {str(r["intervals"]) for r in records if r.get("intervals")}
    if what:
        table += f"\n±: {'; '.join(sorted(what))}; × best: total p50 ratio to the fastest run, [95 % interval]"
    table += "".join(f"\n{stopped_line(r)}" for r in records if r.get("error"))
    hardware = hardware_note(records)
    return table + ("\n" + hardware if hardware else "")


def stopped_line(rec: Mapping[str, Any]) -> str:
    """``label: STOPPED EARLY after 48 of 4,000 requests: TransportError: ...`` for a run that stopped."""
    run = (rec.get("config") or {}).get("run") or {}
    planned = run.get("queries")
    if isinstance(planned, int) and isinstance(run.get("repeat", 1), int):
        planned *= run.get("repeat", 1)
        of = f" of {planned:,}"
    else:
        of = ""
    return f"{rec['label']}: STOPPED EARLY after {rec['requests']:,}{of} requests: {rec['error']}"


def _samples(rec: Mapping[str, Any], stage: str | None) -> tuple[Any, Any]:
    """A run record's raw ns samples of one stage (or the total) and their repetition labels."""
    import numpy as np

    cols = rec.get("samples_ns") or {}
    if stage is None:
        x = np.sum([np.asarray(cols[n], dtype=np.float64) for n in rec["stages"]], axis=0)
    else:
        x = np.asarray(cols.get(stage, []), dtype=np.float64)
    reps = rec.get("repetition")
    return x, (np.asarray(reps) if reps is not None else None)


def _stage_cell(rec: Mapping[str, Any], stage: str, stat: str) -> str:
    summary = rec["summary"][stage]
    ci = summary.get(f"{stat}_us_ci")
    if ci is None and stat in intervals.STATS and rec.get("samples_ns"):
        x, reps = _samples(rec, stage)
        iv = intervals.bootstrap(x, stat, groups=reps)
        ci = [iv.low / 1e3, iv.high / 1e3]
    return with_ci(summary.get(f"{stat}_us"), ci)


def _ratio_cell(rec: Mapping[str, Any], best: Mapping[str, Any] | None) -> str:
    if best is None or not rec["requests"]:
        return "—"
    ratio = rec["total"]["p50_us"] / best["total"]["p50_us"]
    if rec is best or not (rec.get("samples_ns") and best.get("samples_ns")):
        return f"{ratio:.2f}"
    (a, ga), (b, gb) = _samples(best, None), _samples(rec, None)
    iv = intervals.ratio(a, b, "p50", base_groups=ga, other_groups=gb)
    return f"{ratio:.2f} [{iv.low:.2f}–{iv.high:.2f}]"


def fixed_line(records: Sequence[Mapping[str, Any]], varying: Iterable[str]) -> str:
    """What every row of a comparison shares, so row labels can name only what differs."""
    if not records:
        return ""
    fixed = _shared_settings(records[0])
    # and whatever differs between the records although no axis named it (--payload-k sets k)
    skip = set(varying) | {
        key for r in records[1:] for key, v in _shared_settings(r).items() if fixed.get(key) != v
    }
    return "same in every row: " + ", ".join(
        f"{key}={value}" for key, value in fixed.items() if key not in skip
    )


def _shared_settings(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The settings :func:`fixed_line` names, of one record."""
    cfg, info = rec["config"], rec.get("info") or {}
    fixed = {
        "embed": info.get("embedder", cfg["embed"]["backend"]),
        "retrieve": cfg["retrieve"]["backend"],
        "rerank": cfg["rerank"]["backend"],
        "serialize": cfg["serialize"]["backend"],
        "transport": cfg["transport"]["backend"],
        "generate": cfg["generate"]["backend"],
        "k": cfg["run"]["k"],
        "k_candidates": cfg["run"]["k_candidates"],
        "threads": cfg["run"]["threads"],
    }
    if cfg["serialize"].get("with_embeddings"):
        fixed["with_embeddings"] = True
    if cfg["serialize"].get("shape") is not None:  # the codecs' payload shape, when chosen
        fixed["payload_shape"] = cfg["serialize"]["shape"]
    return fixed


def setup_summary(records: Sequence[Mapping[str, Any]]) -> str:
    """Cache events (each once), set-up seconds summed over runs, and how to read the table."""
    lines: list[str] = [n for n in map(retrieve_parts_note, records) if n]
    for r in records:
        for ev in r.get("cache_events") or []:
            text = f"cache: {event_text(ev)}"
            if text not in lines:
                lines.append(text)
    totals: dict[str, float] = {}
    for r in records:
        for key, secs in r["setup_s"].items():
            totals[key] = totals.get(key, 0.0) + secs
    lines.append(
        "setup, not in request latency (summed over runs): "
        + ", ".join(f"{SETUP_LABELS.get(k, k)} {v:.2f}s" for k, v in totals.items())
    )
    if records:
        lines.append(
            f"recall measured against exact search at k={records[0]['k']}; "
            "per-stage p50s do not add up to the total p50"
        )
    built = build_note(records)
    return "\n".join(lines + ([built] if built else []))

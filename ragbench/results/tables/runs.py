"""Run records: one run's table, runs side by side, and what a comparison shares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ... import intervals
from ...errors import ConfigError
from ..schema import RunRecord, need, read_struct
from .cache_state import cache_state_text
from .cells import cpu_cells, event_text, num, stat_cells, text_table, with_ci, zero_cell
from .judged import JUDGED_HEADS, judged_cells, judged_line, judged_note
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
from .search_threads import search_threads_text

__all__ = [
    "STATS",
    "compare_table",
    "fixed_line",
    "run_table",
    "setup_summary",
    "stopped_line",
]


STATS = ("mean", "p50", "p90", "p95", "p99", "max")


Run = Mapping[str, Any] | RunRecord


def runs_of(records: Sequence[Run]) -> list[RunRecord]:
    """Run records as :class:`RunRecord` Structs (older versions read, newer ones refused)."""
    return [read_struct(r, RunRecord) for r in records]


def run_table(rec: Run, *, width: int = 110) -> str:
    """One run record: mean/p50/p90/p99/max µs and share per stage, the total, then notes."""
    run = read_struct(rec, RunRecord)
    ds = run.dataset or {}
    title = f"{need(run.label, 'label')}  —  {ds.get('name', '?')}, {need(run.requests, 'requests')} requests"
    title += simulated_note([run])
    cpu = run.cpu_total is not None
    heads = ["mean µs", "p50 µs", "p90 µs", "p99 µs", "max µs", "share"]
    heads += ["cpu µs", "cpu %", "cpu share"] if cpu else []
    cols = [("stage", "left")] + [(c, "right") for c in heads]
    stats = ("mean", "p50", "p90", "p99", "max")
    rows = []
    summary = need(run.summary, "summary")
    for name in need(run.stages, "stages"):
        s = summary[name]
        label = stage_label(name, [run])
        row = [label, *stat_cells(s, stats), f"{100 * s['share']:.1f}%"]
        rows.append(row + (cpu_cells(s) if cpu else []))
    total = ["before first token", *stat_cells(need(run.total, "total"), stats), "100%"]
    rows.append(
        total + ([num(need(run.cpu_total, "cpu_total")["mean_us"]), "", "100%"] if cpu else [])
    )
    lines = [text_table(title, cols, rows, width=width)]
    if run.intervals:
        lines.append(f"p50 and p99 with {run.intervals}")
    if cpu:
        lines.append(
            "cpu µs: mean thread CPU time per request; cpu %: CPU time / wall time of the stage "
            "(~100 % CPU-bound, ~0 % waiting); cpu share: of all CPU time before first token"
        )
    lines.append("  ".join(_run_extras(run)))
    lines.append(judged_line(run.judged, str(ds.get("name", "?"))))
    note = llm_note(run)
    if note:
        lines.append(note)
    split = retrieve_parts_note(run)
    if split:
        lines.append(split)
    if run.connection:
        lines.append(connection_note(run.connection))
    lines.append(
        "setup (not in request latency): "
        + ", ".join(
            f"{SETUP_LABELS.get(k, k)} {v:.3f}s" for k, v in need(run.setup_s, "setup_s").items()
        )
    )
    lines.extend(f"cache: {event_text(ev)}" for ev in run.cache_events or [])
    if run.error:
        lines.append(f"STOPPED EARLY: {run.error}")
    return "\n".join(lines)


def _run_extras(run: RunRecord) -> list[str]:
    """The line under a run's table: recall, payload and wire bytes, the filter, the cache."""
    k, recall = need(run.k, "k"), need(run.recall_at_k, "recall_at_k")
    zero = zero_cell(run.recall_zero, run.recall)
    extra = [
        f"recall@{k} mean {num(recall)}, p10 {num(run.recall_p10)}, at 0: {zero} requests "
        "(tie-aware, vs exact search)",
        f"payload {num(run.payload_bytes_p50)} B p50",
    ]
    if run.wire_bytes_p50:
        extra.append(f"on the wire {num(run.wire_bytes_p50)} B p50")
    filt = (run.info or {}).get("filter")
    if filt:
        extra[0] = (
            f"recall@{k} mean {num(recall)}, p10 {num(run.recall_p10)}, at 0: {zero} requests "
            "(vs exact filtered search)"
        )
        extra.append(filter_note(filt))
    if run.cache_hit_rate is not None:
        extra.append(f"cache hit rate {100 * run.cache_hit_rate:.1f}%")
    return extra


def compare_table(
    records: Sequence[Run],
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
    runs = runs_of(records)
    names: list[str] = []
    for r in runs:
        names += [n for n in need(r.stages, "stages") if n not in names]
    if stages is not None:
        keep = set(stages)
        names = [n for n in names if n in keep]
    sim = simulated_note(runs)
    how = (
        "interleaved"
        if all(r.interleaved is not False for r in runs)
        else "each configuration in its own task, not interleaved"
    )
    name = need(runs[0].dataset, "dataset").get("name", "?")
    title = f"side by side, {how}, {stat} µs per stage — {name}{sim}"
    threads = _search_threads(runs)
    title += f"; {threads}" if threads else ""
    cache = cache_state_text(runs)
    title += f"; {cache}" if cache else ""
    wire = any(r.wire_bytes_p50 for r in runs)
    filters = [(r.info or {}).get("filter") for r in runs]
    recall_cols = ("recall@k", "recall p10", "recall 0")
    cols = [("run", "left")]
    cols += [(stage_label(n, runs, True), "right") for n in names]
    cols += [(c, "right") for c in ("total p50", "total p99", "× best", *recall_cols)]
    judged = any(r.judged is not None for r in runs)
    cols += [(c, "right") for c in JUDGED_HEADS] if judged else []
    cols += [("bytes", "right")]
    cols += [("wire B", "right")] if wire else []
    live = [r for r in runs if need(r.requests, "requests")]
    best = min(live, key=lambda r: need(r.total, "total")["p50_us"]) if live else None
    rows = []
    for r in runs:
        summary = need(r.summary, "summary")
        cells = [_stage_cell(r, n, stat) if n in summary else "—" for n in names]
        row = [need(r.label, "label") + (" [stopped early]" if r.error else ""), *cells]
        row += stat_cells(need(r.total, "total"), ("p50", "p99"))
        row += [_ratio_cell(r, best), _recall_cell(r)]
        row += [num(r.recall_p10), zero_cell(r.recall_zero, r.recall)]
        row += judged_cells(r.judged) if judged else []
        row += [num(r.payload_bytes_p50)]
        row += [num(r.wire_bytes_p50)] if wire else []
        rows.append(row)
    table = text_table(title, cols, rows, width=width)
    notes = sorted({filter_note(f) for f in filters if f})
    if notes:
        table += "\n" + "\n".join(notes)
    what = {str(r.intervals) for r in runs if r.intervals}
    if what:
        table += f"\n±: {'; '.join(sorted(what))}; × best: total p50 ratio to the fastest run, [95 % interval]"
    table += (
        "\nrecall@k: mean over requests; recall p10: the worst tenth's; recall 0: requests that "
        "found none of the true top k, of all"
    )
    table += "\n" + judged_note([r.judged for r in runs], str(name))
    table += "".join(f"\n{stopped_line(r)}" for r in runs if r.error)
    hardware = hardware_note(runs)
    return table + ("\n" + hardware if hardware else "")


def _search_threads(runs: Sequence[RunRecord]) -> str:
    """The header's ``search threads per query`` of the rows' indexes (records that carry it)."""
    by: dict[str, Any] = {}
    for r in runs:
        index = (r.info or {}).get("index") or {}
        if "search_threads" in index:
            by.setdefault(str(index.get("backend")), index["search_threads"])
    return search_threads_text(by)


def stopped_line(rec: Run) -> str:
    """``label: STOPPED EARLY after 48 of 4,000 requests: TransportError: ...`` for a run that stopped."""
    run = read_struct(rec, RunRecord)
    plan = (run.config or {}).get("run") or {}
    planned = plan.get("queries")
    if isinstance(planned, int) and isinstance(plan.get("repeat", 1), int):
        planned *= plan.get("repeat", 1)
        of = f" of {planned:,}"
    else:
        of = ""
    requests = need(run.requests, "requests")
    return f"{need(run.label, 'label')}: STOPPED EARLY after {requests:,}{of} requests: {need(run.error, 'error')}"


def _samples(run: RunRecord, stage: str | None) -> tuple[Any, Any]:
    """A run record's raw ns samples of one stage (or the total) and their repetition labels."""
    import numpy as np

    cols = run.samples_ns or {}
    if stage is None:
        x = np.sum(
            [np.asarray(cols[n], dtype=np.float64) for n in need(run.stages, "stages")], axis=0
        )
    else:
        x = np.asarray(cols.get(stage, []), dtype=np.float64)
    reps = run.repetition
    return x, (np.asarray(reps) if reps is not None else None)


def _stage_cell(run: RunRecord, stage: str, stat: str) -> str:
    summary = need(run.summary, "summary")[stage]
    ci = summary.get(f"{stat}_us_ci")
    if ci is None and stat in intervals.STATS and run.samples_ns:
        x, reps = _samples(run, stage)
        iv = intervals.bootstrap(x, stat, groups=reps)
        ci = [iv.low / 1e3, iv.high / 1e3]
    return with_ci(summary.get(f"{stat}_us"), ci)


def _ratio_cell(run: RunRecord, best: RunRecord | None) -> str:
    if best is None or not run.requests:
        return "—"
    ratio = need(run.total, "total")["p50_us"] / need(best.total, "total")["p50_us"]
    if run is best or not (run.samples_ns and best.samples_ns):
        return f"{ratio:.2f}"
    (a, ga), (b, gb) = _samples(best, None), _samples(run, None)
    iv = intervals.ratio(a, b, "p50", base_groups=ga, other_groups=gb)
    return f"{ratio:.2f} [{iv.low:.2f}–{iv.high:.2f}]"


def fixed_line(records: Sequence[Run], varying: Iterable[str]) -> str:
    """What every row of a comparison shares, so row labels can name only what differs."""
    if not records:
        return ""
    runs = runs_of(records)
    fixed = _shared_settings(runs[0])
    # and whatever differs between the records although no axis named it (--payload-k sets k)
    skip = set(varying) | {
        key for r in runs[1:] for key, v in _shared_settings(r).items() if fixed.get(key) != v
    }
    return "same in every row: " + ", ".join(
        f"{key}={value}" for key, value in fixed.items() if key not in skip
    )


def _shared_settings(run: RunRecord) -> dict[str, Any]:
    """The settings :func:`fixed_line` names, of one record."""
    cfg, info = need(run.config, "config"), run.info or {}
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


def setup_summary(records: Sequence[Run]) -> str:
    """Cache events (each once), set-up seconds summed over runs, and how to read the table."""
    runs = runs_of(records)
    lines: list[str] = [n for n in map(retrieve_parts_note, runs) if n]
    for r in runs:
        for ev in r.cache_events or []:
            text = f"cache: {event_text(ev)}"
            if text not in lines:
                lines.append(text)
    totals: dict[str, float] = {}
    for r in runs:
        for key, secs in need(r.setup_s, "setup_s").items():
            totals[key] = totals.get(key, 0.0) + secs
    lines.append(
        "setup, not in request latency (summed over runs): "
        + ", ".join(f"{SETUP_LABELS.get(k, k)} {v:.2f}s" for k, v in totals.items())
    )
    if runs:
        lines.append(
            f"recall measured against exact search at k={need(runs[0].k, 'k')}; "
            "per-stage p50s do not add up to the total p50"
        )
    built = build_note(runs)
    return "\n".join(lines + ([built] if built else []))


def _recall_cell(run: RunRecord) -> str:
    """recall@k; over --rebuilds builds, with the envelope of the builds' intervals."""
    cell = f"{need(run.recall_at_k, 'recall_at_k'):.3f}"
    if (run.rebuilds or 1) > 1 and run.recall_ci:
        low, high = run.recall_ci
        cell += f" [{low:.3f}–{high:.3f}]"
    return cell

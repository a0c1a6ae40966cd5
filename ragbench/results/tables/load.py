"""Load levels: throughput, outcomes, response and service times, per-stage times under load."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..records import generator_kept_up, knee_walks, load_level
from ..schema import LoadRecord, need, read_struct
from .cells import ms, ms_with_ci, num, pct_cell, text_table
from .judged import JUDGED_HEADS, judged_cells, judged_note
from .notes import hardware_note, simulated_note
from .points import plain

__all__ = [
    "INVALID_MARK",
    "load_table",
]


Level = Mapping[str, Any] | LoadRecord


def _load_title(levels: Sequence[LoadRecord]) -> str:
    r0 = levels[0]
    workers = 1 if r0.workers is None else r0.workers
    kind = f"{workers} {r0.worker_kind or 'thread'} worker(s)"
    if r0.worker_kind == "asyncio":
        offloads = ",".join(dict.fromkeys(str(r.offload) for r in levels))
        kind += f" ({r0.tasks_per_worker} at once each, offload {offloads})"
    if r0.actors:
        kind += f" in {r0.actors} Ray actor(s)"
    if r0.mode == "closed":
        head = f"closed-loop load — {kind}, {num(r0.duration_s)} s per client count"
    else:
        how = r0.arrivals or "poisson"
        if how == "gamma":
            how += f" (burstiness {num(r0.burstiness)})"
        head = f"open-loop load — {how} arrivals, {kind}, {num(r0.duration_s)} s per rate"
    return head + simulated_note(levels)


#: Load-table columns shown when some record has them: heading → the field (µs) they show.
_LOAD_EXTRA: dict[str, Callable[[LoadRecord], float | None]] = {
    "TTFT p50 ms": lambda r: r.ttft_p50_us,
    "TTFT p99 ms": lambda r: r.ttft_p99_us,
    "loop lag p50 ms": lambda r: r.loop_lag_p50_us,
    "loop lag p99 ms": lambda r: r.loop_lag_p99_us,
}


def load_table(records: Sequence[Level], *, width: int = 400) -> str:
    """Per (configuration, load level): throughput, outcomes, response and service times, recall."""
    levels = [read_struct(r, LoadRecord) for r in records]
    closed = levels[0].mode == "closed"
    failed = any(r.failed for r in levels)
    heads = [
        "clients" if closed else "offered QPS",
        "achieved QPS",
        "completed",
        "timed out",
        "rejected",
    ]
    heads += ["failed"] if failed else []
    heads += [
        "resp p50 ms",
        "resp p99 ms",
        "p99 ms all",
        "service p50 ms",
        "dispatch p99 µs",
    ]
    # the LLM call's own TTFT, and beside it how late the asyncio workers' loops ran
    extra = [h for h, get in _LOAD_EXTRA.items() if any(get(r) is not None for r in levels)]
    heads += extra + ["recall@k", "recall p10"]
    judged = any(r.judged is not None for r in levels)
    heads += list(JUDGED_HEADS) if judged else []
    cols = [("configuration", "left")] + [(h, "right") for h in heads]
    rows = [_load_row(r, closed, failed, extra) for r in levels]
    rows = (
        [row + judged_cells(r.judged) for row, r in zip(rows, levels, strict=True)]
        if judged
        else rows
    )
    lines = [text_table(_load_title(levels), cols, rows, width=width)]
    reps = max(int(r.repeats or 1) for r in levels)
    over = f"{reps} repetitions, then requests within each" if reps > 1 else "requests"
    lines.append(
        "response time counts from the scheduled arrival; 'p99 ms all' counts every timed-out, "
        f"rejected or failed request at the timeout; service = a worker's own time; "
        f"±: 95 % bootstrap intervals over {over}"
        + (
            "; TTFT = the generate stage (LLM call to first token, on the client)"
            if "TTFT p50 ms" in extra
            else ""
        )
        + (
            "; loop lag = how late an asyncio worker's 1 ms heartbeat woke"
            if "loop lag p50 ms" in extra
            else ""
        )
    )
    lines += _load_notes(levels)
    data = (levels[0].config or {}).get("dataset") or {}
    lines.append(
        judged_note([r.judged for r in levels], str(data.get("name") or data.get("path", "?")))
    )
    hardware = hardware_note(levels)
    lines += [hardware] if hardware else []
    lines.append(_stage_table(levels, width))
    return "\n".join(lines)


def _load_row(r: LoadRecord, closed: bool, failed: bool, extra: Sequence[str]) -> list[str]:
    level = r.concurrency if closed else r.offered_qps
    mark = "" if generator_kept_up(r) else f" {INVALID_MARK}"
    row = [need(r.label, "label"), num(level) + mark, num(need(r.achieved_qps, "achieved_qps"))]
    row += [str(need(r.completed, "completed")), str(need(r.timed_out, "timed_out"))]
    row += [str(need(r.rejected, "rejected"))] + ([str(r.failed or 0)] if failed else [])
    row += [ms_with_ci(r.response_p50_us, r.response_p50_us_ci)]
    row += [ms_with_ci(r.response_p99_us, r.response_p99_us_ci)]
    row += [ms(need(r.response_all_p99_us, "response_all_p99_us"))]
    row += [ms(need(r.service_p50_us, "service_p50_us"))]
    row += [num(need(r.dispatch_delay_p99_us, "dispatch_delay_p99_us"))]
    row += [ms(_LOAD_EXTRA[h](r)) for h in extra]
    return row + [num(need(r.recall_at_k, "recall_at_k")), num(r.recall_p10)]


def _load_notes(levels: Sequence[LoadRecord]) -> list[str]:
    notes = []
    slo = next((r.slo_ms for r in levels if r.slo_ms), None)
    if slo is not None:
        unit = "clients" if levels[0].mode == "closed" else "QPS"
        at_level: dict[tuple[Any, float | None], LoadRecord] = {
            (r.label, load_level(r)): r for r in reversed(levels)
        }
        for label, (knee, unsure) in knee_walks([plain(r) for r in levels], slo).items():
            at = at_level.get((label, knee))
            good = (
                f", goodput there {num(at.goodput_qps)} QPS"
                if at is not None and at.goodput_qps is not None
                else ""
            )
            where = f"{num(knee)} {unit}" if knee is not None else "below the lowest level offered"
            if unsure:
                good += "; " + "; ".join(_unsure(at_level[(label, u)], unit) for u in unsure)
            notes.append(f"knee of {label} (p99 ≤ {num(slo)} ms, failures included): {where}{good}")
    for r in levels:
        if not generator_kept_up(r):
            why = r.generator_note or (
                f"{num(need(r.idle_dispatch_delay_p99_us, 'idle_dispatch_delay_p99_us'))} µs "
                "dispatch delay p99 with a worker idle"
            )
            notes.append(
                f"{INVALID_MARK} INVALID: at {num(load_level(r))} the load generator did "
                f"not keep up ({why}): the {r.label} row measures the client, not the system"
            )
    return notes


def _unsure(r: LoadRecord, unit: str) -> str:
    """A level under the knee whose p99 was over the objective within its own interval."""
    lo, hi = need(r.response_p99_us_ci, "response_p99_us_ci")
    return (
        f"over it at {num(load_level(r))} {unit} only within the noise "
        f"(p99 {ms(need(r.response_all_p99_us, 'response_all_p99_us'))} ms, "
        f"95 % interval {ms(lo)}–{ms(hi)} ms)"
    )


#: Marks a load level whose load generator did not keep up (tables).
INVALID_MARK = "✗"


def _stage_table(levels: Sequence[LoadRecord], width: int) -> str:
    """Per-stage p50 µs under load, with each stage's share of CPU time (or of wall time)."""
    cpu = all(r.cpu_share is not None for r in levels)
    stages: list[str] = []
    for r in levels:
        stages += [s for s in r.stages or [] if s not in stages]
    what = "CPU time" if cpu else "wall time (record CPU time with --cpu-time)"
    title = f"per-stage p50 µs under load (share of {what} in brackets)"
    cols = [("configuration", "left"), ("load", "right")] + [(s, "right") for s in stages]
    cols += [("CPU µs/request", "right")] if cpu else []
    parts = retrieve_parts_of(levels)  # an index behind a client: send, server, decode
    cols += [(f"retrieve {name} µs", "right") for name in parts]
    rows = []
    for r in levels:
        p50 = r.stage_p50_us or {}
        share = (r.cpu_share if cpu else r.stage_share) or {}
        cells = [
            f"{num(p50.get(s))} ({pct_cell(share.get(s))})" if s in p50 else "—" for s in stages
        ]
        rows.append(
            [need(r.label, "label"), num(load_level(r)), *cells]
            + ([num(need(r.cpu_per_request_us, "cpu_per_request_us"))] if cpu else [])
            + [retrieve_part_cell(r, name) for name in parts]
        )
    table = text_table(title, cols, rows, width=width)
    if parts:
        table += (
            f"\nretrieve {'/'.join(parts)}: the split of the retrieve stage the index's client "
            "reports (p50 µs of each part under load; — for a level without it)"
        )
    return table


def retrieve_parts_of(records: Sequence[Level]) -> list[str]:
    """The parts of ``retrieve`` (send, server, decode) any of the load records split it into."""
    names: list[str] = []
    for r in records:
        names += [n for n in read_struct(r, LoadRecord).retrieve_parts or {} if n not in names]
    return names


def retrieve_part_cell(rec: Level, name: str) -> str:
    """One part's p50 µs of a load level's retrieve split (``—`` when the level lacks it)."""
    part = (read_struct(rec, LoadRecord).retrieve_parts or {}).get(name)
    return "—" if part is None else num(part["p50_ns"] / 1e3)

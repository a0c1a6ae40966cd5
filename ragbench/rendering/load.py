"""Load levels: throughput, outcomes, response and service times, per-stage times under load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..records import generator_kept_up, knees, load_level
from .cells import ms, ms_ci, num, pct_cell, text_table
from .notes import hardware_note, simulated_note

__all__ = [
    "INVALID_MARK",
    "load_table",
]


def _load_title(records: Sequence[Mapping[str, Any]]) -> str:
    r0 = records[0]
    kind = f"{r0.get('workers', 1)} {r0.get('worker_kind', 'thread')} worker(s)"
    if r0.get("worker_kind") == "asyncio":
        offloads = ",".join(dict.fromkeys(str(r.get("offload")) for r in records))
        kind += f" ({r0.get('tasks_per_worker')} at once each, offload {offloads})"
    if r0.get("actors"):
        kind += f" in {r0['actors']} Ray actor(s)"
    if r0.get("mode") == "closed":
        head = f"closed-loop load — {kind}, {num(r0.get('duration_s'))} s per client count"
    else:
        how = r0.get("arrivals", "poisson")
        if how == "gamma":
            how += f" (burstiness {num(r0.get('burstiness'))})"
        head = f"open-loop load — {how} arrivals, {kind}, {num(r0.get('duration_s'))} s per rate"
    return head + simulated_note(records)


#: Load-table columns shown when some record has them: record key (without ``_us``) → heading.
_LOAD_EXTRA = {
    "ttft_p50": "TTFT p50 ms",
    "ttft_p99": "TTFT p99 ms",
    "loop_lag_p50": "loop lag p50 ms",
    "loop_lag_p99": "loop lag p99 ms",
}


def load_table(records: Sequence[Mapping[str, Any]], *, width: int = 400) -> str:
    """Per (configuration, load level): throughput, outcomes, response and service times, recall."""
    closed = records[0].get("mode") == "closed"
    failed = any(r.get("failed") for r in records)
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
    extra = [k for k in _LOAD_EXTRA if any(r.get(f"{k}_us") is not None for r in records)]
    heads += [_LOAD_EXTRA[k] for k in extra] + ["recall@k", "recall p10"]
    cols = [("configuration", "left")] + [(h, "right") for h in heads]
    rows = []
    for r in records:
        level = r.get("concurrency") if closed else r.get("offered_qps")
        mark = "" if generator_kept_up(r) else f" {INVALID_MARK}"
        row = [r["label"], num(level) + mark, num(r["achieved_qps"]), str(r["completed"])]
        row += [str(r["timed_out"]), str(r["rejected"])] + (
            [str(r.get("failed", 0))] if failed else []
        )
        row += [ms_ci(r, "response_p50"), ms_ci(r, "response_p99"), ms(r["response_all_p99_us"])]
        row += [ms(r["service_p50_us"]), num(r["dispatch_delay_p99_us"])]
        row += [ms(r.get(f"{k}_us")) for k in extra] + [num(r["recall_at_k"])]
        row.append(num(r.get("recall_p10")))
        rows.append(row)
    lines = [text_table(_load_title(records), cols, rows, width=width)]
    reps = max(int(r.get("repeats") or 1) for r in records)
    over = f"{reps} repetitions, then requests within each" if reps > 1 else "requests"
    lines.append(
        "response time counts from the scheduled arrival; 'p99 ms all' counts every timed-out, "
        f"rejected or failed request at the timeout; service = a worker's own time; "
        f"±: 95 % bootstrap intervals over {over}"
        + (
            "; TTFT = the generate stage (LLM call to first token, on the client)"
            if "ttft_p50" in extra
            else ""
        )
        + (
            "; loop lag = how late an asyncio worker's 1 ms heartbeat woke"
            if "loop_lag_p50" in extra
            else ""
        )
    )
    lines += _load_notes(records)
    hardware = hardware_note(records)
    lines += [hardware] if hardware else []
    lines.append(_stage_table(records, width))
    return "\n".join(lines)


def _load_notes(records: Sequence[Mapping[str, Any]]) -> list[str]:
    notes = []
    slo = next((r["slo_ms"] for r in records if r.get("slo_ms")), None)
    if slo is not None:
        unit = "clients" if records[0].get("mode") == "closed" else "QPS"
        at_level: dict[tuple[Any, float | None], Mapping[str, Any]] = {
            (r["label"], load_level(r)): r for r in reversed(records)
        }
        for label, knee in knees(records, slo).items():
            at = [at_level[label, knee]] if (label, knee) in at_level else []
            good = (
                f", goodput there {num(at[0]['goodput_qps'])} QPS"
                if at and "goodput_qps" in at[0]
                else ""
            )
            where = f"{num(knee)} {unit}" if knee is not None else "below the lowest level offered"
            notes.append(f"knee of {label} (p99 ≤ {num(slo)} ms, failures included): {where}{good}")
    for r in records:
        if not generator_kept_up(r):
            why = r.get("generator_note") or (
                f"{num(r['idle_dispatch_delay_p99_us'])} µs dispatch delay p99 with a worker idle"
            )
            notes.append(
                f"{INVALID_MARK} INVALID: at {num(load_level(r))} the load generator did not keep "
                f"up ({why}): the {r['label']} row measures the client, not the system"
            )
    return notes


#: Marks a load level whose load generator did not keep up (tables).
INVALID_MARK = "✗"


def _stage_table(records: Sequence[Mapping[str, Any]], width: int) -> str:
    """Per-stage p50 µs under load, with each stage's share of CPU time (or of wall time)."""
    cpu = all("cpu_share" in r for r in records)
    stages: list[str] = []
    for r in records:
        stages += [s for s in r.get("stages", []) if s not in stages]
    share_key = "cpu_share" if cpu else "stage_share"
    what = "CPU time" if cpu else "wall time (record CPU time with --cpu-time)"
    title = f"per-stage p50 µs under load (share of {what} in brackets)"
    cols = [("configuration", "left"), ("load", "right")] + [(s, "right") for s in stages]
    cols += [("CPU µs/request", "right")] if cpu else []
    parts = retrieve_parts_of(records)  # an index behind a client: send, server, decode
    cols += [(f"retrieve {name} µs", "right") for name in parts]
    rows = []
    for r in records:
        p50, share = r.get("stage_p50_us", {}), r.get(share_key, {})
        cells = [
            f"{num(p50.get(s))} ({pct_cell(share.get(s))})" if s in p50 else "—" for s in stages
        ]
        rows.append(
            [r["label"], num(load_level(r)), *cells]
            + ([num(r["cpu_per_request_us"])] if cpu else [])
            + [retrieve_part_cell(r, name) for name in parts]
        )
    table = text_table(title, cols, rows, width=width)
    if parts:
        table += (
            f"\nretrieve {'/'.join(parts)}: the split of the retrieve stage the index's client "
            "reports (p50 µs of each part under load; — for a level without it)"
        )
    return table


def retrieve_parts_of(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The parts of ``retrieve`` (send, server, decode) any of the load records split it into."""
    names: list[str] = []
    for r in records:
        names += [n for n in r.get("retrieve_parts") or {} if n not in names]
    return names


def retrieve_part_cell(rec: Mapping[str, Any], name: str) -> str:
    """One part's p50 µs of a load level's retrieve split (``—`` when the level lacks it)."""
    part = (rec.get("retrieve_parts") or {}).get(name)
    return "—" if part is None else num(part["p50_ns"] / 1e3)

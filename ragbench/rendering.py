"""Tables of result records: text tables, Markdown, CSV and JSON.

Everything here reads records (the dicts of :mod:`ragbench.records`), never a
live pipeline or index, so a saved results file renders exactly like the run
that wrote it. :func:`render` is the one entry point: it dispatches on each
record's ``kind`` (run, sweep, scale, load) and on the format (``table``,
``md``, ``csv``, ``json``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import intervals
from .errors import ConfigError, DatasetError
from .records import (
    caveats_of,
    generator_kept_up,
    growth_exponents,
    knees,
    load_level,
    pareto,
    records_of,
)
from .rerankers import CAVEAT_PREFIX

__all__ = [
    "FORMATS",
    "benchmark_table",
    "SETUP_LABELS",
    "STATS",
    "caveats_of",
    "compare_table",
    "datasets_table",
    "event_text",
    "fixed_line",
    "hardware_note",
    "llm_note",
    "load_table",
    "num",
    "params_text",
    "render",
    "render_checked",
    "run_table",
    "scale_table",
    "setup_summary",
    "stats_table",
    "stopped_line",
    "sweep_table",
    "text_table",
]

FORMATS = ("table", "md", "csv", "json")
STATS = ("mean", "p50", "p90", "p95", "p99", "max")

SETUP_LABELS = {
    "dataset_load": "dataset load",
    "model_load": "model load",
    "corpus_vectors": "corpus vectors",
    "query_vectors": "query vectors",
    "index_build": "index build",
    "exact_neighbors": "exact neighbours",
    "query_filters": "query filters",
    "jit_compile": "JIT compile",
    "transport_start": "transport start",
    "generator_start": "LLM start",
    "warmup": "warm-up",
}

NAN = float("nan")


# ---------------------------------------------------------------- cells


def num(v: Any) -> str:
    """A number for a table cell: 3 significant-ish digits, thousands separated, ``—`` for NaN/None."""
    if v is None:
        return "—"
    v = float(v)
    if v != v:  # NaN
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def text_table(
    title: str,
    columns: Sequence[tuple[str, str]],
    rows: Iterable[Sequence[str]],
    *,
    width: int = 400,
) -> str:
    """A rich-style table rendered to plain text (no colour, trailing spaces stripped).

    ``columns`` are ``(header, "left" | "right")``. Every string (title,
    headers, cells) is plain text, never rich markup: a label such as
    ``test_encode[json]`` prints as it is. A table that fits ``width`` with
    one-line cells is drawn here directly, in time linear in its cells (rich
    takes ~1 ms a row); any other is drawn by rich, which wraps cells.
    """
    body = [["" if cell is None else str(cell) for cell in row] for row in rows]
    fast = _plain_table(title, columns, body, width)
    return fast if fast is not None else _rich_table(title, columns, body, width)


def _rich_table(
    title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]], width: int
) -> str:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title), title_justify="left")
    for header, justify in columns:
        t.add_column(Text(header), justify=justify)  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*(Text(cell) for cell in row))
    return _printed(t, width)


def _printed(renderable: Any, width: int) -> str:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


def _plain_table(
    title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]], width: int
) -> str | None:
    """The table rich draws (heavy head box, one space of padding), or None when rich must wrap it."""
    from rich.cells import cell_len
    from rich.text import Text

    heads = [h for h, _ in columns]
    cells = [heads, *rows]
    if any("\n" in c or "\r" in c for row in cells for c in row):
        return None
    widths = [max(cell_len(row[j]) for row in cells) for j in range(len(columns))]
    total = sum(widths) + 3 * len(widths) + 1
    if total > width or any(len(row) != len(columns) for row in rows):
        return None

    def line(row: Sequence[str], edge: str, sep: str) -> str:
        parts = []
        for (_, justify), w, c in zip(columns, widths, row, strict=True):
            if justify == "right":
                c = c.rstrip()  # as rich justifies
                parts.append(f" {' ' * (w - cell_len(c))}{c} ")
            else:
                parts.append(f" {c}{' ' * (w - cell_len(c))} ")
        return (edge + sep.join(parts) + edge).rstrip()

    def rule(left: str, fill: str, cross: str, right: str) -> str:
        return left + cross.join(fill * (w + 2) for w in widths) + right

    out = [_printed(Text(title, justify="left"), total)] if title else []
    out += [rule("┏", "━", "┳", "┓"), line(heads, "┃", "┃"), rule("┡", "━", "╇", "┩")]
    out += [line(row, "│", "│") for row in rows]
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out)


def event_text(ev: Mapping[str, Any]) -> str:
    """One cache event (``what``, ``hit``, ``seconds``, ``path``) as a phrase."""
    if ev.get("shipped"):
        state = "shipped"
    elif ev.get("hit"):
        state = "hit"
    else:
        state = "miss (computed and stored)"
    out = f"{ev.get('what', '?')}: {state}"
    secs = ev.get("seconds")
    if isinstance(secs, (int, float)):
        out += f" in {secs:.2f}s"
    if ev.get("note"):
        out += f" ({ev['note']})"
    if ev.get("path"):
        out += f" [{ev['path']}]"
    return out


def _simulated_note(records: Iterable[Mapping[str, Any]]) -> str:
    """``  [SIMULATED: ...]`` and each caveat (``  [RANDOM WEIGHTS ...]``) of ``records``, for a title."""
    recs = list(records)
    sim = sorted({s for r in recs for s in r.get("simulated") or []})
    out = f"  [SIMULATED: {', '.join(sim)}]" if sim else ""
    return out + "".join(f"  [{c}]" for c in caveats_of(recs))


def _generate_label(records: Sequence[Mapping[str, Any]], short: bool = False) -> str:
    """``generate``, marked when its timings are simulated or its model has random weights."""
    if any(r.get("simulated") for r in records):
        return "generate (sim)" if short else "generate (simulated)"
    if any(not c.startswith(CAVEAT_PREFIX) for c in caveats_of(records)):
        return "generate (rand. w.)" if short else "generate (random weights)"
    return "generate"


def _stage_label(name: str, records: Sequence[Mapping[str, Any]], short: bool = False) -> str:
    """A stage's column or row name, marked when its timings or its model say so."""
    if name == "generate":
        return _generate_label(records, short)
    if name == "rerank" and any(c.startswith(CAVEAT_PREFIX) for c in caveats_of(records)):
        return "rerank (rand. w.)" if short else "rerank (random weights)"
    return name


def llm_note(rec: Mapping[str, Any]) -> str:
    """The LLM's own prompt token count and the inter-token latency after the first token ("" if none)."""
    parts = []
    if rec.get("model_prompt_tokens_p50") is not None:
        approx = rec.get("prompt_tokens") or []
        approx_p50 = sorted(approx)[len(approx) // 2] if approx else None
        parts.append(
            f"prompt tokens p50: {num(rec['model_prompt_tokens_p50'])} by the model's tokenizer, "
            f"{num(approx_p50)} by the prompt budget's approximate count"
        )
    itl = rec.get("inter_token")
    if itl:
        parts.append(
            f"after the first token (not in the table): {rec.get('next_tokens')} next tokens, "
            f"inter-token p50 {num(itl.get('p50_us'))} µs, p99 {num(itl.get('p99_us'))} µs "
            "(greedy, KV cache)"
        )
    return "\n".join(parts)


def _cpu_cells(stats: Mapping[str, Any]) -> list[str]:
    pct, share = stats.get("cpu_pct"), stats.get("cpu_share")
    return [
        num(stats.get("cpu_mean_us")),
        "—" if pct is None or pct != pct else f"{pct:.0f}%",
        "—" if share is None or share != share else f"{100 * share:.1f}%",
    ]


def with_ci(value: Any, ci: Sequence[float] | None) -> str:
    """``186 ±3%``: a value and half its interval's width relative to it (the value alone without one)."""
    text = num(value)
    if value is None or not ci or ci[0] is None or ci[1] is None:
        return text
    lo, hi, v = float(ci[0]), float(ci[1]), float(value)
    if not v or lo != lo or hi != hi:
        return text
    return f"{text} ±{100 * (hi - lo) / 2 / abs(v):.0f}%"


def _stat_cells(stats: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    return [with_ci(stats.get(f"{n}_us"), stats.get(f"{n}_us_ci")) for n in names]


def hardware_note(records: Sequence[Mapping[str, Any]]) -> str:
    """A line under a table when its rows were measured on different machines ("" when not).

    A machine is a record's ``node`` with its environment's CPU model and
    cores; load records offered from several Ray nodes say so too.
    """
    machines: dict[tuple[str, str, Any], int] = {}
    for r in records:
        env = r.get("env") or {}
        key = (
            str(r.get("node") or env.get("node") or "?"),
            str(env.get("cpu") or "?"),
            env.get("cores"),
        )
        machines[key] = machines.get(key, 0) + 1
    lines = []
    if len(machines) > 1:
        same_cpu = len({(cpu, cores) for _, cpu, cores in machines}) == 1
        what = "different nodes with the same CPU" if same_cpu else "different hardware"
        lines.append(
            f"NOTE: rows measured on {what}: "
            + "; ".join(
                f"{node} ({cpu}, {cores} cores) {n} row(s)"
                for (node, cpu, cores), n in machines.items()
            )
        )
    senders = sorted({str(n) for r in records for n in (r.get("nodes") or [])})
    if len(senders) > 1:
        lines.append(
            f"load offered from {len(senders)} nodes ({', '.join(senders)}); "
            "each request timed on the node that sent it"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- runs


def run_table(rec: Mapping[str, Any], *, width: int = 110) -> str:
    """One run record: mean/p50/p90/p99/max µs and share per stage, the total, then notes."""
    ds = rec.get("dataset") or {}
    title = f"{rec['label']}  —  {ds.get('name', '?')}, {rec['requests']} requests"
    title += _simulated_note([rec])
    cpu = "cpu_total" in rec
    heads = ["mean µs", "p50 µs", "p90 µs", "p99 µs", "max µs", "share"]
    heads += ["cpu µs", "cpu %", "cpu share"] if cpu else []
    cols = [("stage", "left")] + [(c, "right") for c in heads]
    stats = ("mean", "p50", "p90", "p99", "max")
    rows = []
    for name in rec["stages"]:
        s = rec["summary"][name]
        label = _stage_label(name, [rec])
        row = [label, *_stat_cells(s, stats), f"{100 * s['share']:.1f}%"]
        rows.append(row + (_cpu_cells(s) if cpu else []))
    total = ["before first token", *_stat_cells(rec["total"], stats), "100%"]
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


def connection_note(parts: Mapping[str, Mapping[str, Any]]) -> str:
    """One line on a transport's per-request connection set-up (``keep_alive = false``)."""
    cells = ", ".join(f"{name} {num(s.get('p50_us'))} µs" for name, s in parts.items())
    return f"transport, new connection per request (p50, inside the transport stage): {cells}"


def filter_note(filt: Mapping[str, Any]) -> str:
    """One line on a run's filter: what was asked, the selectivity reached, the strategy."""
    if filt.get("from") == "queries":
        asked = "filters from the queries file"
    else:
        corr = "correlated" if filt.get("correlated") else "random"
        asked = (
            f"filter on {filt.get('attribute')} at selectivity {filt.get('selectivity')} ({corr})"
        )
    return (
        f"{asked}: achieved mean {filt['achieved_mean']:.4g} "
        f"[{filt['achieved_min']:.4g}–{filt['achieved_max']:.4g}], strategy {filt.get('strategy')}"
    )


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
    sim = _simulated_note(records)
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
    cols += [(_stage_label(n, records, True), "right") for n in names]
    cols += [(c, "right") for c in ("total p50", "total p99", "× best", *recall_cols, "bytes")]
    cols += [("wire B", "right")] if wire else []
    live = [r for r in records if r["requests"]]
    best = min(live, key=lambda r: r["total"]["p50_us"]) if live else None
    rows = []
    for r in records:
        cells = [_stage_cell(r, n, stat) if n in r["summary"] else "—" for n in names]
        row = [r["label"] + (" [stopped early]" if r.get("error") else ""), *cells]
        row += _stat_cells(r["total"], ("p50", "p99"))
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


def retrieve_parts_note(rec: Mapping[str, Any]) -> str | None:
    """``retrieve p50 split: send 12 µs, server 480 µs, decode 9 µs`` for an index behind a client."""
    parts = (rec.get("info") or {}).get("retrieve_parts")
    if not parts:
        return None
    text = ", ".join(f"{name} {parts[name]['p50_ns'] / 1e3:,.1f} µs" for name in parts)
    return f"{rec.get('label') or 'run'}: retrieve p50 split (the index's client): {text}"


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


def _run_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rec in records:
        row = {
            "kind": "run",
            "label": rec.get("label"),
            "dataset": (rec.get("dataset") or {}).get("name"),
            "requests": rec.get("requests"),
            "total_p50_us": rec["total"].get("p50_us"),
            "total_p50_us_ci": rec["total"].get("p50_us_ci"),
            "total_p99_us": rec["total"].get("p99_us"),
            "total_p99_us_ci": rec["total"].get("p99_us_ci"),
            "recall_at_k": rec.get("recall_at_k"),
            "payload_bytes_p50": rec.get("payload_bytes_p50"),
        }
        for stage, stats in rec["summary"].items():
            row[f"{stage}_p50_us"] = stats.get("p50_us")
            row[f"{stage}_p50_us_ci"] = stats.get("p50_us_ci")
            row[f"{stage}_share"] = stats.get("share")
        row["simulated"] = ",".join(rec.get("simulated") or [])
        row["caveats"] = "; ".join(rec.get("caveats") or [])
        rows.append(row)
    return rows


# ---------------------------------------------------------------- sweeps and scale


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


def _build_of(rec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """How a record's index was built: ``build_info`` (sweep, scale) or ``info.index.build`` (run)."""
    got = rec.get("build_info")
    if got is None:
        got = (((rec.get("info") or {}).get("index")) or {}).get("build")
    return got if isinstance(got, Mapping) else None


def _recall_ci_cell(rec: Mapping[str, Any]) -> str:
    """``0.9805 ±0.0040``: mean recall and half its interval's width (absolute)."""
    text = f"{rec['recall']:.4f}"
    ci = rec.get("recall_ci")
    if not ci or ci[0] is None or ci[1] is None or ci[0] != ci[0] or ci[1] != ci[1]:
        return text
    return f"{text} ±{(float(ci[1]) - float(ci[0])) / 2:.4f}"


def build_note(records: Sequence[Mapping[str, Any]]) -> str:
    """One line on how the indexes were built: deterministic or not, cached, rebuilt ("" if unknown)."""
    known = [b for b in (_build_of(r) for r in records) if b is not None]
    if not known:
        return ""
    fast = sum(1 for b in known if not b.get("deterministic"))
    if not fast:
        text = "builds: deterministic (one build thread, seeded: the same index every run)"
    elif fast == len(known):
        text = "builds: NOT deterministic (--fast-build: every core; recall varies build to build)"
    else:
        text = f"builds: {fast} of {len(known)} NOT deterministic (--fast-build), the rest deterministic"
    cached = sum(1 for b in known if b.get("cached"))
    if cached:
        text += f"; {cached} loaded from the index cache (build s: the original build's)"
    reps = max(int(r.get("rebuilds") or 1) for r in records)
    if reps > 1:
        text += (
            f"; {reps} builds per point (seed + i): recall = their mean, recall ± = the envelope "
            "of the builds' 95 % intervals over queries"
        )
    elif any(r.get("recall_ci") for r in records):
        text += "; recall ±: 95 % bootstrap interval over queries"
    return text


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


def stream_table(records: Sequence[Mapping[str, Any]], *, width: int = 400) -> str:
    """One row per stream checkpoint: live rows, recall, search/insert/delete latency, freshness."""
    r0 = records[0]
    title = (
        f"stream — {r0['dataset']} {r0['index']} n={r0['n']} k={r0['k']}, built on "
        f"{r0['initial']} rows; µs per call, freshness in s"
    )
    cols = [("checkpoint", "right")] + [
        (c, "right")
        for c in (
            "elapsed s", "live", "recall", "recall p10", "search p50", "search p99",
            "insert p50", "insert p99", "delete p50", "delete p99", "fresh p50", "fresh p99",
            "searches ok/failed", "writes ok/failed", "deleted returned",
        )
    ]  # fmt: skip
    rows = []
    for r in records:
        s, i, d, f = r["search"], r["insert"], r["delete"], r["freshness"]
        rows.append(
            [
                str(r["checkpoint"]),
                f"{r['elapsed_s']:.1f}",
                num(r["live"]),
                f"{r['recall']:.4f}",
                f"{r['recall_p10']:.3f}",
                num(s["p50_us"]),
                num(s["p99_us"]),
                num(i["p50_us"]),
                num(i["p99_us"]),
                num(d["p50_us"]),
                num(d["p99_us"]),
                "—" if f["p50_s"] is None else f"{f['p50_s']:.3f}",
                "—" if f["p99_s"] is None else f"{f['p99_s']:.3f}",
                f"{s['completed']}/{s['failed']}",
                f"{i['completed'] + d['completed']}/{i['failed'] + d['failed']}",
                str(r["deleted_returned"]),
            ]
        )
    return text_table(title, cols, rows, width=width)


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


def _point_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    flags = pareto(records_of(records, "sweep"))
    it = iter(flags)
    rows = []
    for r in records:
        row = {
            k: v
            for k, v in r.items()
            if k not in ("env", "schema", "time", "latency_ns", "repetition", "recall_per_query")
        }
        row["params"] = params_text(r)
        if r["kind"] == "sweep":
            row["pareto"] = next(it)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- load


def _ms(us: Any) -> str:
    return "—" if us is None else num(float(us) / 1e3)


def _ms_ci(rec: Mapping[str, Any], key: str) -> str:
    us, ci = rec.get(f"{key}_us"), rec.get(f"{key}_us_ci")
    if us is None:
        return "—"
    return with_ci(float(us) / 1e3, [c / 1e3 for c in ci] if ci else None)


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
    return head + _simulated_note(records)


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
        row += [_ms_ci(r, "response_p50"), _ms_ci(r, "response_p99"), _ms(r["response_all_p99_us"])]
        row += [_ms(r["service_p50_us"]), num(r["dispatch_delay_p99_us"])]
        row += [_ms(r.get(f"{k}_us")) for k in extra] + [num(r["recall_at_k"])]
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
    rows = []
    for r in records:
        p50, share = r.get("stage_p50_us", {}), r.get(share_key, {})
        cells = [f"{num(p50.get(s))} ({_pct(share.get(s))})" if s in p50 else "—" for s in stages]
        rows.append(
            [r["label"], num(load_level(r)), *cells]
            + ([num(r["cpu_per_request_us"])] if cpu else [])
        )
    return text_table(title, cols, rows, width=width)


def _pct(share: Any) -> str:
    return "—" if share is None or share != share else f"{100 * share:.0f}%"


def _load_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k not in ("env", "config", "schema", "time")}
        for r in records
    ]


# ---------------------------------------------------------------- pytest-benchmark files


def _bench_us(stats: Mapping[str, Any], key: str) -> str:
    value = stats.get(key)
    return num(float(value) * 1e6) if isinstance(value, (int, float)) else "—"


def benchmark_table(doc: Mapping[str, Any], source: str, *, width: int = 400) -> str:
    """A pytest-benchmark JSON document (``--benchmark-json``): one row per benchmark, in µs.

    Per-stage p50s appear when the benchmark used the ``rb_bench`` fixture.
    """
    machine = doc.get("machine_info") or {}
    cpu = (machine.get("cpu") or {}).get("brand_raw") or "?"
    title = f"pytest-benchmark file {source} — {cpu}, Python {machine.get('python_version', '?')}"
    heads = ["median µs", "mean µs", "min µs", "max µs", "stddev µs", "rounds"]
    cols = [("benchmark", "left")] + [(h, "right") for h in heads] + [("stage p50 µs", "left")]
    rows = []
    for entry in doc.get("benchmarks") or []:
        entry = entry if isinstance(entry, Mapping) else {}
        raw = entry.get("stats")
        stats: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        rag = (entry.get("extra_info") or {}).get("ragbench") or {}
        stages = rag.get("p50_us") if isinstance(rag, Mapping) else None
        stage_text = (
            ", ".join(
                f"{k} {num(v) if isinstance(v, (int, float)) else '?'}" for k, v in stages.items()
            )
            if isinstance(stages, Mapping)
            else ""
        )
        row = [str(entry.get("fullname") or entry.get("name") or "?")]
        row += [_bench_us(stats, k) for k in ("median", "mean", "min", "max", "stddev")]
        row += [str(stats.get("rounds", "—")), stage_text]
        rows.append(row)
    table = text_table(title, cols, rows, width=width)
    if not rows:
        table += "\n(no benchmarks in the file)"
    return table


# ---------------------------------------------------------------- datasets


def datasets_table(described: Sequence[Mapping[str, Any]], remembered: Sequence[str]) -> str:
    """Bundled and cached datasets (``datasets.describe()``), then names only remembered by path."""
    rows = [
        [
            str(d.get("name")),
            str(d.get("size", "")),
            str(d.get("description", "")),
            str(d.get("source", "")),
        ]
        for d in described
    ]
    known = {str(d.get("name")) for d in described}
    rows += [
        [name, "", "loaded from a path before", "remembered in the ragbench cache"]
        for name in remembered
        if name not in known
    ]
    return text_table(
        "datasets", [(c, "left") for c in ("name", "size", "what", "source")], rows, width=160
    )


def stats_table(stats: Sequence[Mapping[str, Any]], meanings: Mapping[str, str]) -> str:
    """Datasets' statistics side by side (``ragbench datasets --stats``): one row per statistic.

    ``stats`` are ``DataStats.as_dict()`` dicts; ``meanings`` says what each statistic is
    (its keys, in order, are the rows; a statistic a dataset lacks shows ``—``).
    """
    head = ("embedder", "n", "dim", "sample", "hub points")
    names = [str(s.get("name")) for s in stats]
    rows = [[key, *(str(s.get(key, "—")) for s in stats), ""] for key in head]
    for key, what in meanings.items():
        cells = [f"{float(s[key]):.3g}" if key in s else "—" for s in stats]
        rows.append([key, *cells, what])
    columns = [("statistic", "left"), *((name, "right") for name in names), ("what", "left")]
    return text_table("dataset statistics", columns, rows, width=200)


# ---------------------------------------------------------------- one entry point


def _flat_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = _run_rows(records_of(records, "run"))
    rows += _point_rows([r for r in records if r.get("kind") in ("sweep", "scale")])
    rows += _load_rows(records_of(records, "load"))
    rows += _stream_rows(records_of(records, "stream"))
    return rows


def _stream_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per stream checkpoint: the columns of :func:`stream_table`, unrounded."""
    rows = []
    for r in records:
        row: dict[str, Any] = {
            k: r[k]
            for k in ("kind", "dataset", "index", "n", "k", "initial", "checkpoint", "elapsed_s")
        }
        row.update(live=r["live"], recall=r["recall"], recall_p10=r["recall_p10"])
        for op in ("search", "insert", "delete"):
            row.update({f"{op}_{q}": r[op][q] for q in ("p50_us", "p99_us")})
            row[f"{op}_completed"], row[f"{op}_failed"] = r[op]["completed"], r[op]["failed"]
        row["fresh_p50_s"], row["fresh_p99_s"] = r["freshness"]["p50_s"], r["freshness"]["p99_s"]
        row["deleted_returned"] = r["deleted_returned"]
        rows.append(row)
    return rows


def _cell(value: Any, *, exact: bool = False) -> str:
    if isinstance(value, float) and not exact:
        return num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def _problem(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"lacks field {exc.args[0]!r}"
    return f"has a field of the wrong type or value ({type(exc).__name__}: {exc})"


def render_checked(
    records: Sequence[Mapping[str, Any]],
    where: Sequence[str],
    fmt: str = "table",
    *,
    stat: str = "p50",
) -> str:
    """:func:`render`, but a record missing a field or holding one of the wrong type is a
    :class:`DatasetError` naming it (``where[i]``: ``file:line`` of ``records[i]``) and the field.

    Records are rendered together first; only when that fails is each rendered
    alone to find the culprit, so the common case costs nothing extra.
    """
    try:
        return render(records, fmt, stat=stat)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        if isinstance(exc, ConfigError):
            raise
        first = exc
    for rec, place in zip(records, where, strict=True):
        try:
            render([rec], fmt, stat=stat)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise DatasetError(f"{place}: {rec.get('kind')} record {_problem(exc)}") from None
    raise DatasetError(f"the records cannot be shown together: {_problem(first)}") from None


def render(records: Sequence[Mapping[str, Any]], fmt: str = "table", *, stat: str = "p50") -> str:
    """Render records of any kinds: one table per kind (``table``), or rows as ``md``/``csv``/``json``."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "table":
        parts = []
        for kind, draw in (
            ("run", lambda rs: compare_table(rs, stat=stat)),
            ("sweep", sweep_table),
            ("scale", scale_table),
            ("load", load_table),
            ("stream", stream_table),
        ):
            of_kind = records_of(records, kind)
            if of_kind:
                parts.append(draw(of_kind))
        return "\n".join(parts)
    rows = _flat_rows(records)
    if fmt == "json":
        return json.dumps(rows, indent=2, default=str)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_cell(row.get(c), exact=True) for c in columns] for row in rows])
        return buf.getvalue().rstrip("\n")
    head = "| " + " | ".join(columns) + " |"
    sep = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join([head, sep, *body])

"""Charts of result records (matplotlib, imported only when a chart is drawn).

:func:`figure` draws the panels of each record kind present — run bars,
sweep frontiers, scale growth, load curves (SLO line, knees) beside each
stage's share of CPU time per load level, and for runs that vary the payload
(``compare --payload-k``) the transport's time against payload bytes per
transport setting — and returns the matplotlib figure;
:func:`plot_records` writes it as a PNG. Like :mod:`ragbench.results.tables`, it
reads records only.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ..errors import ConfigError, MissingDependencyError
from ..files import replace_bytes
from ..rerankers import CAVEAT_PREFIX
from .reading.runs import dominant_stage
from .records import (
    caveats_of,
    generator_kept_up,
    growth_exponents,
    knees,
    load_level,
    pareto,
    records_of,
)
from .schema import (
    FrontierRecord,
    IndexPoint,
    LoadRecord,
    PipelineRecord,
    Record,
    RunRecord,
    ScaleRecord,
    StreamRecord,
    SweepRecord,
    need,
    read_struct,
)

__all__ = [
    "chart_path",
    "figure",
    "payload_figure",
    "plot_records",
    "pyplot",
    "transport_setting",
    "varies_payload",
]

Records = Sequence[Mapping[str, Any]]

R = TypeVar("R", bound=Record)

#: The Struct each kind's records are drawn from.
_STRUCTS: dict[str, type[Record]] = {
    "run": RunRecord,
    "sweep": SweepRecord,
    "scale": ScaleRecord,
    "load": LoadRecord,
    "stream": StreamRecord,
}


def _plain(rec: Record) -> dict[str, Any]:
    """A typed record as the mapping the set-wide helpers of :mod:`ragbench.results.records` take."""
    return msgspec.structs.asdict(rec)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or an install hint."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _runs(ax: Any, records: Sequence[RunRecord], skip: str | None = None) -> None:
    """Stacked horizontal bars: each run's per-stage p50 (µs), simulated parts marked.

    ``skip`` leaves one stage out (its colour kept), so the others get the scale.
    """
    stages: list[str] = []
    for r in records:
        stages += [s for s in need(r.stages, "stages") if s not in stages]
    cmap = pyplot().get_cmap("tab10")
    for row, r in enumerate(records):
        left = 0.0
        summary = need(r.summary, "summary")
        for j, s in enumerate(stages):
            if s == skip:
                continue
            v = summary[s]["p50_us"] if s in summary else 0.0
            ax.barh(row, v, left=left, color=cmap(j % 10), label=s if row == 0 else None)
            left += v
    labels = [need(r.label, "label") + _llm_mark(r) for r in records]
    ax.set_yticks(range(len(records)), labels)
    ax.invert_yaxis()
    if skip is not None:
        ax.set_xlabel(f"p50 µs per stage, stacked, without {skip}")
        ax.legend(
            ncols=min(len(stages) - 1, 4),
            fontsize="small",
            loc="upper center",
            bbox_to_anchor=(0.5, -0.18),
            frameon=False,
        )
        ax.set_title(f"the other stages on their own scale ({skip} dominates)", fontsize="medium")
        return
    ax.set_xlabel("p50 µs per stage, stacked (before first token)")
    ax.legend(
        ncols=min(len(stages), 5),
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        frameon=False,
    )
    ax.set_title(
        "ragbench: where the time goes before the first token" + _caveat_text(records),
        fontsize="medium",
    )


def _llm_mark(rec: RunRecord) -> str:
    if rec.simulated:
        return " (simulated LLM)"
    caveats = rec.caveats or []
    llm = any(not c.startswith(CAVEAT_PREFIX) for c in caveats)
    rerank = any(c.startswith(CAVEAT_PREFIX) for c in caveats)
    return (" (LLM random weights)" if llm else "") + (" (rerank random weights)" if rerank else "")


def _caveat_text(records: Sequence[PipelineRecord]) -> str:
    """Each caveat of ``records`` on a line of its own, for a chart title ("" without any)."""
    caveats = caveats_of(records)
    # wrapped: a long run label leaves the axes (and so the centred title) narrow
    return "".join("\n" + textwrap.fill(f"[{c}]", 40) for c in caveats)


def _by(records: Sequence[R], key: Callable[[R], Any]) -> dict[str, list[R]]:
    out: dict[str, list[R]] = {}
    for r in records:
        out.setdefault(str(key(r)), []).append(r)
    return out


def _index(rec: IndexPoint | StreamRecord) -> str:
    return need(rec.index, "index")


def _filter_lines(
    ax: Any, records: Sequence[SweepRecord], key: Callable[[SweepRecord], Any], label: str
) -> None:
    """``key`` against requested selectivity (log x), one line per (index, params, strategy)."""
    lines: dict[str, list[SweepRecord]] = {}
    for r in records:
        if r.strategy is not None:
            query = ",".join(f"{k}={v}" for k, v in sorted((r.query or {}).items()))
            lines.setdefault(f"{r.index} {query} {r.strategy}".replace("  ", " "), []).append(r)
    for name, pts in lines.items():
        pts = sorted(pts, key=lambda p: need(p.selectivity, "selectivity"))
        (line,) = ax.plot([p.selectivity for p in pts], [key(p) for p in pts], marker="o")
        line.set_label(name)
        cliff = (pts[0].filter_cliff or {}).get("selectivity")
        for p in pts:
            if cliff is not None and p.selectivity == cliff:
                ax.plot([cliff], [key(p)], marker="x", markersize=12, color=line.get_color())
    r0 = records[0]
    ax.set_xscale("log")
    ax.set_xlabel("filter selectivity (fraction of the corpus allowed, log); x = filter cliff")
    ax.set_ylabel(label)
    ax.set_title(f"{label} vs selectivity — {need(r0.dataset, 'dataset')} n={need(r0.n, 'n')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _filter_recall(ax: Any, records: Sequence[SweepRecord]) -> None:
    label = f"recall@{need(records[0].k, 'k')} (mean)"
    _filter_lines(ax, records, lambda p: need(p.recall, "recall"), label)


def _filter_p50(ax: Any, records: Sequence[SweepRecord]) -> None:
    _filter_lines(ax, records, lambda p: need(p.p50_us, "p50_us"), "p50 µs per query")
    ax.set_yscale("log")


def _streams(ax: Any, records: Sequence[StreamRecord]) -> None:
    """Recall (left axis) and search p50 (right axis) at each checkpoint of a stream run."""
    for name, pts in _by(records, _index).items():
        pts = sorted(pts, key=lambda p: need(p.elapsed_s, "elapsed_s"))
        t = [p.elapsed_s for p in pts]
        ax.plot(t, [need(p.recall, "recall") for p in pts], marker="o", label=f"{name} recall")
    right = ax.twinx()
    for name, pts in _by(records, _index).items():
        pts = sorted(pts, key=lambda p: need(p.elapsed_s, "elapsed_s"))
        t = [p.elapsed_s for p in pts]
        p50 = [need(p.search, "search")["p50_us"] for p in pts]
        right.plot(t, p50, ls="--", label=f"{name} search p50")
    r0 = records[0]
    ax.set_xlabel("seconds into the stream (checkpoints)")
    ax.set_ylabel(f"recall@{need(r0.k, 'k')} over the live rows")
    right.set_ylabel("search p50 µs")
    ax.set_title(f"stream — {need(r0.dataset, 'dataset')} n={need(r0.n, 'n')}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left")
    right.legend(loc="lower right")


def _sweeps(ax: Any, records: Sequence[SweepRecord]) -> None:
    """Every point faintly, each index's own Pareto frontier as a line (like ann-benchmarks)."""
    records = [r for r in records if r.strategy is None] or list(records)
    for name, pts in _by(records, _index).items():
        sc = ax.scatter([p.recall for p in pts], [p.qps_single for p in pts], s=12, alpha=0.35)
        flags = pareto([_plain(p) for p in pts])
        front = sorted(
            (p for p, f in zip(pts, flags, strict=True) if f),
            key=lambda r: need(r.recall, "recall"),
        )
        ax.plot(
            [p.recall for p in front],
            [p.qps_single for p in front],
            marker="o",
            color=tuple(sc.get_facecolor()[0][:3]),
            label=name,
        )
    r0 = records[0]
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{need(r0.k, 'k')}")
    ax.set_ylabel("queries per second, one query per call, 1 thread (log)")
    ax.set_title(f"recall vs QPS — {need(r0.dataset, 'dataset')} n={need(r0.n, 'n')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _sweep_memory(ax: Any, records: Sequence[SweepRecord]) -> None:
    """Recall against the index's bytes per vector (log x), each index's frontier as a line.

    The frontier keeps the points no other point of the index beats on both
    recall (higher) and bytes (fewer). Re-scored points are hollow: they also
    read ``dim × 4`` bytes per candidate from the float32 vectors (kept on
    disk or elsewhere), which the x axis does not count.
    """
    pts_all = [r for r in records if r.bytes_per_vector]
    for name, pts in _by(pts_all, _index).items():
        neg = [{"recall": p.recall, "fewer": -float(need(p.bytes_per_vector, "b"))} for p in pts]
        front = sorted(
            (p for p, f in zip(pts, pareto(neg, y="fewer"), strict=True) if f),
            key=lambda r: need(r.bytes_per_vector, "bytes_per_vector"),
        )
        (line,) = ax.plot(
            [p.bytes_per_vector for p in front],
            [p.recall for p in front],
            label=name,
        )
        for hollow in (False, True):
            sel = [p for p in pts if bool(p.rescore) is hollow]
            ax.scatter(
                [p.bytes_per_vector for p in sel],
                [p.recall for p in sel],
                s=30,
                alpha=0.85,
                facecolors="none" if hollow else line.get_color(),
                edgecolors=line.get_color(),
            )
    r0 = records[0]
    ax.set_xscale("log")
    ax.set_xlabel("index bytes per vector (serialized size / n, log)")
    ax.set_ylabel(f"recall@{need(r0.k, 'k')}")
    title = f"recall vs memory — {need(r0.dataset, 'dataset')} n={need(r0.n, 'n')}"
    if any(p.rescore for p in pts_all):
        title += "\nhollow: re-scored, also reading dim×4 B per candidate"
    if not pts_all:
        title += "\n(no bytes per vector in these records)"
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    if pts_all:
        ax.legend()


def _scales(ax: Any, records: Sequence[ScaleRecord]) -> None:
    exps = growth_exponents([_plain(r) for r in records])
    for name, pts in _by(records, _index).items():
        pts = sorted(pts, key=lambda r: need(r.n, "n"))
        ax.plot(
            [p.n for p in pts],
            [p.p50_us for p in pts],
            marker="o",
            label=f"{name} (slope {exps.get(name, float('nan')):.2f})",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("corpus size n")
    ax.set_ylabel(f"p50 µs per query at recall ≥ {need(records[0].target_recall, 'target_recall')}")
    ax.set_title("cost as the corpus grows")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _loads(ax: Any, records: Sequence[LoadRecord]) -> None:
    """Response time p50 (solid) and p99 (dashed, failures at the timeout) against offered load."""
    closed = records[0].mode == "closed"
    slo = next((r.slo_ms for r in records if r.slo_ms), None)
    knee_at = knees([_plain(r) for r in records], slo) if slo is not None else {}
    invalid = 0
    for name, pts in _by(records, lambda r: need(r.label, "label")).items():
        pts = sorted(pts, key=load_level)
        xs = [load_level(p) for p in pts]
        p50 = [need(p.response_p50_us, "response_p50_us") / 1e3 for p in pts]
        (line,) = ax.plot(xs, p50, marker="o", label=f"{name} p50")
        p99 = [need(p.response_all_p99_us, "response_all_p99_us") / 1e3 for p in pts]
        ax.plot(xs, p99, marker="^", linestyle="--", color=line.get_color(), label=f"{name} p99")
        invalid += _hollow(ax, pts, xs, p99, line.get_color())
        lags = [p.loop_lag_p99_us for p in pts]
        if all(v is not None for v in lags):  # asyncio workers
            lag = [max(v or 0.0, 1.0) / 1e3 for v in lags]
            ax.plot(
                xs,
                lag,
                marker="x",
                linestyle=":",
                color=line.get_color(),
                label=f"{name} loop lag p99",
            )
        knee = knee_at.get(name)
        if knee is not None:
            y = p99[xs.index(knee)]
            ax.plot(
                [knee], [y], marker="*", markersize=16, color=line.get_color(), linestyle="none"
            )
            ax.annotate(
                f"knee {knee:g}",
                (knee, y),
                textcoords="offset points",
                xytext=(6, -12),
                fontsize="small",
            )
    if slo is not None:
        ax.axhline(slo, color="black", linewidth=0.8, linestyle=":", label=f"SLO p99 {slo:g} ms")
    if invalid:  # one legend entry saying what the hollow markers mean
        ax.plot(
            [],
            [],
            marker="o",
            markerfacecolor="white",
            color="gray",
            linestyle="none",
            label="hollow: load generator did not keep up (invalid)",
        )
    sim = sorted({s for r in records for s in r.simulated or []})
    r0 = records[0]
    how = "closed loop" if closed else "open loop"
    ax.set_yscale("log")
    ax.set_xlabel("concurrent clients (closed loop)" if closed else "offered QPS (open loop)")
    ax.set_ylabel("response time ms (from scheduled arrival, log)")
    workers = 1 if r0.workers is None else r0.workers
    title = f"response time under load — {how}, {workers} {r0.worker_kind or ''} workers"
    title += f" [SIMULATED: {', '.join(sim)}]" if sim else ""
    ax.set_title(title + _caveat_text(records), fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _hollow(
    ax: Any, pts: Sequence[LoadRecord], xs: list[float], p99: list[float], color: Any
) -> int:
    """Hollow markers over the levels whose load generator did not keep up; how many."""
    bad = [i for i, p in enumerate(pts) if not generator_kept_up(p)]
    if bad:
        p50 = [need(pts[i].response_p50_us, "response_p50_us") / 1e3 for i in bad]
        for ys, marker in ((p50, "o"), ([p99[i] for i in bad], "^")):
            ax.plot(
                [xs[i] for i in bad],
                ys,
                marker=marker,
                markersize=9,
                linestyle="none",
                markerfacecolor="white",
                markeredgecolor=color,
                label="_invalid",
            )
    return len(bad)


def _load_shares(ax: Any, records: Sequence[LoadRecord]) -> None:
    """Per (configuration, load level): each stage's share of CPU time (or wall time), stacked."""
    cpu = all(r.cpu_share is not None for r in records)
    stages: list[str] = []
    for r in records:
        stages += [s for s in r.stages or [] if s not in stages]
    rows = sorted(records, key=lambda r: (str(r.label), load_level(r)))
    cmap = pyplot().get_cmap("tab10")
    for row, r in enumerate(rows):
        left = 0.0
        shares = (r.cpu_share if cpu else r.stage_share) or {}
        for j, s in enumerate(stages):
            v = float(shares.get(s) or 0.0) * 100
            ax.barh(row, v, left=left, color=cmap(j % 10), label=s if row == 0 else None)
            left += v
    ax.set_yticks(range(len(rows)), [f"{r.label} @ {load_level(r):g}" for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"% of {'CPU' if cpu else 'wall'} time per request, by stage")
    ax.set_title(
        "where the CPU goes" if cpu else "where the time goes (no CPU time recorded)",
        fontsize="medium",
    )
    ax.legend(
        ncols=min(len(stages), 5),
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        frameon=False,
    )


def _frontier(ax: Any, rec: FrontierRecord, stat: str) -> None:
    """Total ``stat`` before the first token (ms) against nDCG@10, both intervals; Pareto set marked.

    Cost-only points (random-weight rerankers, failed or unjudged runs) sit on the latency axis as
    crosses: their cost is real, their nDCG is not ranked.
    """
    points = rec.points or []
    ranked = [p for p in points if p.cost_only is None and p.ndcg_at_10 is not None]
    for p in ranked:
        x, ci = need(getattr(p, f"{stat}_us"), stat) / 1e3, getattr(p, f"{stat}_us_ci")
        y, yci = need(p.ndcg_at_10, "ndcg_at_10"), p.ndcg_at_10_ci
        # a percentile bootstrap of a tail can leave the estimate outside its interval: clamp at 0
        xerr = [[max(0.0, x - ci[0] / 1e3)], [max(0.0, ci[1] / 1e3 - x)]] if ci else None
        lo, hi = (float(yci[0] or 0.0), float(yci[1] or 0.0)) if yci else (y, y)
        yerr = [[max(0.0, y - lo)], [max(0.0, hi - y)]]
        color = "tab:red" if p.pareto else "tab:blue"
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", color=color, capsize=3, alpha=0.8)
        if (
            p.pareto or len(ranked) <= 6
        ):  # a large grid labels only its Pareto set: the table names the rest
            ax.annotate(
                p.label, (x, y), fontsize="x-small", xytext=(4, 4), textcoords="offset points"
            )
    on = sorted((p for p in ranked if p.pareto), key=lambda p: need(getattr(p, f"{stat}_us"), stat))
    if on:
        xs = [need(getattr(p, f"{stat}_us"), stat) / 1e3 for p in on]
        ax.step(xs, [need(p.ndcg_at_10, "ndcg") for p in on], where="post", color="tab:red", lw=1)
    for p in points:
        if p not in ranked and getattr(p, f"{stat}_us") is not None:
            x = need(getattr(p, f"{stat}_us"), stat) / 1e3
            ax.plot([x], [0.0], marker="x", color="grey", ms=9, clip_on=False)
            ax.annotate(
                f"{p.label}\n({p.cost_only})",
                (x, 0.0),
                fontsize="x-small",
                xytext=(4, 6),
                textcoords="offset points",
                color="grey",
            )
    if stat == "p99" and rec.p99_budget_ms is not None:
        ax.axvline(rec.p99_budget_ms, color="grey", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel(f"total {stat} before the first token, ms (log; bars: 95 % interval)")
    ax.set_ylabel("nDCG@10 (bars: 95 % interval over judged queries)")
    ax.set_title(
        f"{rec.dataset}: {stat} against nDCG@10 — red, labelled: Pareto set (p50, point estimates)",
        fontsize="medium",
    )


def _frontier_figure(records: Sequence[FrontierRecord]) -> Any:
    """Two panels per frontier record: p50 and p99 against nDCG@10."""
    plt = pyplot()
    fig, axes = plt.subplots(len(records), 2, figsize=(16, 6 * len(records)), squeeze=False)
    for row, rec in zip(axes, records, strict=True):
        _frontier(row[0], rec, "p50")
        _frontier(row[1], rec, "p99")
    fig.tight_layout()
    return fig


PANELS: dict[str, list[Callable[[Any, Any], None]]] = {
    "run": [_runs],
    "sweep": [_sweeps, _sweep_memory, _filter_recall, _filter_p50],
    "scale": [_scales],
    "load": [_loads, _load_shares],
    "stream": [_streams],
}


def transport_setting(rec: Mapping[str, Any] | RunRecord) -> str:
    """A run's transport with the settings its config gives: ``grpc compression=gzip``."""
    table = dict((read_struct(rec, RunRecord).config or {}).get("transport") or {})
    name = str(table.pop("backend", "?"))
    return " ".join([name, *(f"{k}={v}" for k, v in sorted(table.items()))])


def varies_payload(records: Sequence[Mapping[str, Any] | RunRecord]) -> bool:
    """True when runs differ in the hits or embeddings their payloads carry (``--payload-k``)."""
    runs = [read_struct(r, RunRecord) for r in records]
    shapes = {
        (
            (r.config or {}).get("run", {}).get("k"),
            (r.config or {}).get("serialize", {}).get("with_embeddings"),
        )
        for r in runs
    }
    return len(shapes) > 1 and all("transport" in (r.summary or {}) for r in runs)


def _payload_transport(ax: Any, records: Sequence[RunRecord]) -> None:
    """Transport p50 µs against payload bytes (log-log), one colour per transport setting.

    Solid lines join the payloads without embeddings, dashed ones those with them.
    """
    groups: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for r in records:
        transport = need(r.summary, "summary")["transport"]
        if r.payload_bytes_p50 and transport.get("p50_us"):
            point = (float(r.payload_bytes_p50), float(transport["p50_us"]))
            emb = bool((r.config or {}).get("serialize", {}).get("with_embeddings"))
            groups.setdefault((transport_setting(r), emb), []).append(point)
    markers = "osD^v<>ph*"
    settings = sorted({name for name, _ in groups})
    cmap = pyplot().get_cmap("tab10")
    for (name, emb), points in sorted(groups.items()):
        i = settings.index(name)
        points.sort()
        ax.plot(
            *zip(*points, strict=True),
            marker=markers[i % len(markers)],
            color=cmap(i % 10),
            linestyle="--" if emb else "-",
            label=None if emb else name,
        )
    if any(emb for _, emb in groups):
        ax.plot([], [], color="grey", linestyle="--", label="(dashed: with embeddings)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(65536, color="grey", linestyle=":", linewidth=1)
    ax.text(65536, ax.get_ylim()[1], " 64 KiB", va="top", fontsize="small", color="grey")
    ax.set_xlabel("payload bytes (p50)")
    ax.set_ylabel("transport p50 µs (round trip minus the far side's decode and prompt)")
    ax.set_title("transport time as the payload grows, per setting", fontsize="medium")
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)


def payload_figure(records: Records) -> Any:
    """Only the transport-vs-payload panel of the run records (``compare --payload-k``)."""
    runs = [r for r in _typed(records, "run") if isinstance(r, RunRecord) and r.requests]
    if not runs or not varies_payload(runs):
        raise ConfigError("nothing to plot: no runs varying the payload (compare --payload-k)")
    fig, ax = pyplot().subplots(figsize=(9, 6))
    _payload_transport(ax, runs)
    fig.tight_layout()
    return fig


def _without_dominant(stage: str) -> Callable[[Any, Sequence[RunRecord]], None]:
    def draw(ax: Any, records: Sequence[RunRecord]) -> None:
        _runs(ax, records, skip=stage)

    return draw


def figure(records: Records) -> Any:
    """A matplotlib figure with one panel per record kind present (run, sweep, scale, load).

    Records holding a frontier (``ragbench frontier``) are drawn as that frontier only.

    When one stage dominates every run (:func:`ragbench.results.reading.dominant_stage`:
    a model's embed is ~97 % of a pydocs request), the runs get a second panel
    without it, so the differences between the varied stages can be seen.
    """
    frontiers = [read_struct(r, FrontierRecord) for r in records_of(records, "frontier")]
    if frontiers:  # a frontier's runs are its points: drawn as the frontier, not as bars
        return _frontier_figure(frontiers)
    typed = {kind: _typed(records, kind) for kind in PANELS}
    filtered = any(isinstance(r, SweepRecord) and r.strategy is not None for r in typed["sweep"])
    panels: list[tuple[str, Callable[[Any, Any], None]]] = [
        (k, draw)
        for k in PANELS
        if typed[k]
        for draw in PANELS[k]
        if filtered or draw not in (_filter_recall, _filter_p50)
    ]
    runs = [r for r in typed["run"] if isinstance(r, RunRecord) and r.requests]
    dominant = dominant_stage(runs) if runs else None
    if dominant is not None:
        at = [k for k, _ in panels].index("run") + 1
        panels.insert(at, ("run", _without_dominant(dominant)))
    if runs and varies_payload(runs):
        panels.insert([k for k, _ in panels].index("run") + 1, ("run", _payload_transport))
    if not panels:
        raise ConfigError("nothing to plot: no run, sweep, scale, load or stream records")
    plt = pyplot()
    rows = max(len(typed["run"]), len(typed["load"]))
    height = max(5.0, 2.2 + 0.4 * rows)
    fig, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), height), squeeze=False)
    for ax, (kind, draw) in zip(axes[0], panels, strict=True):
        draw(ax, typed[kind])
    fig.tight_layout()
    return fig


def _typed(records: Records, kind: str) -> list[Record]:
    """The records of one kind as that kind's Struct (older versions read, newer ones refused)."""
    return [read_struct(r, _STRUCTS[kind]) for r in records_of(records, kind)]


def chart_path(path: str | PathLike[str]) -> Path:
    """Where :func:`plot_records` writes a chart asked for at ``path``.

    ``.png`` is added unless the name ends so, or names an existing file that
    is not a regular one (``/dev/stdout``).
    """
    p = Path(path)
    if p.suffix.lower() == ".png" or (p.exists() and not p.is_file()):
        return p
    return p.with_name(p.name + ".png")


def plot_records(records: Records, path: str | PathLike[str]) -> Path:
    """Write :func:`figure` of ``records`` as a PNG at :func:`chart_path` of ``path``; that path."""
    target = chart_path(path)
    fig = figure(records)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=110, format="png")
    finally:
        pyplot().close(fig)
    replace_bytes(target, buf.getvalue())  # all or nothing: a failed write leaves no torn PNG
    return target

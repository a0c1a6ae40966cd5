"""Charts of result records (matplotlib, imported only when a chart is drawn).

:func:`figure` draws the panels of each record kind present — run bars,
sweep frontiers, scale growth, load curves (SLO line, knees) beside each
stage's share of CPU time per load level, and for runs that vary the payload
(``compare --payload-k``) the transport's time against payload bytes per
transport setting — and returns the matplotlib figure;
:func:`plot_records` writes it as a PNG. Like :mod:`ragbench.rendering`, it
reads records only.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from .errors import ConfigError, MissingDependencyError
from .files import replace_bytes
from .reading import dominant_stage
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
    "chart_path",
    "figure",
    "payload_figure",
    "plot_records",
    "pyplot",
    "transport_setting",
    "varies_payload",
]

Records = Sequence[Mapping[str, Any]]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or an install hint."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _runs(ax: Any, records: Records, skip: str | None = None) -> None:
    """Stacked horizontal bars: each run's per-stage p50 (µs), simulated parts marked.

    ``skip`` leaves one stage out (its colour kept), so the others get the scale.
    """
    stages: list[str] = []
    for r in records:
        stages += [s for s in r["stages"] if s not in stages]
    cmap = pyplot().get_cmap("tab10")
    for row, r in enumerate(records):
        left = 0.0
        for j, s in enumerate(stages):
            if s == skip:
                continue
            v = r["summary"][s]["p50_us"] if s in r["summary"] else 0.0
            ax.barh(row, v, left=left, color=cmap(j % 10), label=s if row == 0 else None)
            left += v
    labels = [r["label"] + _llm_mark(r) for r in records]
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


def _llm_mark(rec: Mapping[str, Any]) -> str:
    if rec.get("simulated"):
        return " (simulated LLM)"
    caveats = rec.get("caveats") or []
    llm = any(not c.startswith(CAVEAT_PREFIX) for c in caveats)
    rerank = any(c.startswith(CAVEAT_PREFIX) for c in caveats)
    return (" (LLM random weights)" if llm else "") + (" (rerank random weights)" if rerank else "")


def _caveat_text(records: Records) -> str:
    """Each caveat of ``records`` on a line of its own, for a chart title ("" without any)."""
    caveats = caveats_of(records)
    # wrapped: a long run label leaves the axes (and so the centred title) narrow
    return "".join("\n" + textwrap.fill(f"[{c}]", 40) for c in caveats)


def _by(records: Records, key: str) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        out.setdefault(str(r[key]), []).append(r)
    return out


def _filter_lines(ax: Any, records: Records, key: str, label: str) -> None:
    """``key`` against requested selectivity (log x), one line per (index, params, strategy)."""
    lines: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("strategy") is not None:
            query = ",".join(f"{k}={v}" for k, v in sorted((r.get("query") or {}).items()))
            lines.setdefault(f"{r['index']} {query} {r['strategy']}".replace("  ", " "), []).append(
                r
            )
    for name, pts in lines.items():
        pts = sorted(pts, key=lambda p: p["selectivity"])
        (line,) = ax.plot([p["selectivity"] for p in pts], [p[key] for p in pts], marker="o")
        line.set_label(name)
        cliff = (pts[0].get("filter_cliff") or {}).get("selectivity")
        for p in pts:
            if cliff is not None and p["selectivity"] == cliff:
                ax.plot([cliff], [p[key]], marker="x", markersize=12, color=line.get_color())
    r0 = records[0]
    ax.set_xscale("log")
    ax.set_xlabel("filter selectivity (fraction of the corpus allowed, log); x = filter cliff")
    ax.set_ylabel(label)
    ax.set_title(f"{label} vs selectivity — {r0['dataset']} n={r0['n']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _filter_recall(ax: Any, records: Records) -> None:
    _filter_lines(ax, records, "recall", f"recall@{records[0]['k']} (mean)")


def _filter_p50(ax: Any, records: Records) -> None:
    _filter_lines(ax, records, "p50_us", "p50 µs per query")
    ax.set_yscale("log")


def _streams(ax: Any, records: Records) -> None:
    """Recall (left axis) and search p50 (right axis) at each checkpoint of a stream run."""
    for name, pts in _by(records, "index").items():
        pts = sorted(pts, key=lambda p: p["elapsed_s"])
        t = [p["elapsed_s"] for p in pts]
        ax.plot(t, [p["recall"] for p in pts], marker="o", label=f"{name} recall")
    right = ax.twinx()
    for name, pts in _by(records, "index").items():
        pts = sorted(pts, key=lambda p: p["elapsed_s"])
        t = [p["elapsed_s"] for p in pts]
        right.plot(t, [p["search"]["p50_us"] for p in pts], ls="--", label=f"{name} search p50")
    r0 = records[0]
    ax.set_xlabel("seconds into the stream (checkpoints)")
    ax.set_ylabel(f"recall@{r0['k']} over the live rows")
    right.set_ylabel("search p50 µs")
    ax.set_title(f"stream — {r0['dataset']} n={r0['n']}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left")
    right.legend(loc="lower right")


def _sweeps(ax: Any, records: Records) -> None:
    """Every point faintly, each index's own Pareto frontier as a line (like ann-benchmarks)."""
    records = [r for r in records if r.get("strategy") is None] or list(records)
    for name, pts in _by(records, "index").items():
        sc = ax.scatter(
            [p["recall"] for p in pts], [p["qps_single"] for p in pts], s=12, alpha=0.35
        )
        front = sorted(
            (p for p, f in zip(pts, pareto(pts), strict=True) if f), key=lambda r: r["recall"]
        )
        ax.plot(
            [p["recall"] for p in front],
            [p["qps_single"] for p in front],
            marker="o",
            color=tuple(sc.get_facecolor()[0][:3]),
            label=name,
        )
    r0 = records[0]
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{r0['k']}")
    ax.set_ylabel("queries per second, one query per call, 1 thread (log)")
    ax.set_title(f"recall vs QPS — {r0['dataset']} n={r0['n']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _sweep_memory(ax: Any, records: Records) -> None:
    """Recall against the index's bytes per vector (log x), each index's frontier as a line.

    The frontier keeps the points no other point of the index beats on both
    recall (higher) and bytes (fewer). Re-scored points are hollow: they also
    read ``dim × 4`` bytes per candidate from the float32 vectors (kept on
    disk or elsewhere), which the x axis does not count.
    """
    pts_all = [r for r in records if r.get("bytes_per_vector")]
    for name, pts in _by(pts_all, "index").items():
        neg = [{"recall": p["recall"], "fewer": -float(p["bytes_per_vector"])} for p in pts]
        front = sorted(
            (p for p, f in zip(pts, pareto(neg, y="fewer"), strict=True) if f),
            key=lambda r: r["bytes_per_vector"],
        )
        (line,) = ax.plot(
            [p["bytes_per_vector"] for p in front],
            [p["recall"] for p in front],
            label=name,
        )
        for hollow in (False, True):
            sel = [p for p in pts if bool(p.get("rescore")) is hollow]
            ax.scatter(
                [p["bytes_per_vector"] for p in sel],
                [p["recall"] for p in sel],
                s=30,
                alpha=0.85,
                facecolors="none" if hollow else line.get_color(),
                edgecolors=line.get_color(),
            )
    r0 = records[0]
    ax.set_xscale("log")
    ax.set_xlabel("index bytes per vector (serialized size / n, log)")
    ax.set_ylabel(f"recall@{r0['k']}")
    title = f"recall vs memory — {r0['dataset']} n={r0['n']}"
    if any(p.get("rescore") for p in pts_all):
        title += "\nhollow: re-scored, also reading dim×4 B per candidate"
    if not pts_all:
        title += "\n(no bytes per vector in these records)"
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    if pts_all:
        ax.legend()


def _scales(ax: Any, records: Records) -> None:
    exps = growth_exponents(records)
    for name, pts in _by(records, "index").items():
        pts = sorted(pts, key=lambda r: r["n"])
        ax.plot(
            [p["n"] for p in pts],
            [p["p50_us"] for p in pts],
            marker="o",
            label=f"{name} (slope {exps.get(name, float('nan')):.2f})",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("corpus size n")
    ax.set_ylabel(f"p50 µs per query at recall ≥ {records[0]['target_recall']}")
    ax.set_title("cost as the corpus grows")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _loads(ax: Any, records: Records) -> None:
    """Response time p50 (solid) and p99 (dashed, failures at the timeout) against offered load."""
    closed = records[0].get("mode") == "closed"
    slo = next((r["slo_ms"] for r in records if r.get("slo_ms")), None)
    knee_at = knees(records, slo) if slo is not None else {}
    invalid = 0
    for name, pts in _by(records, "label").items():
        pts = sorted(pts, key=load_level)
        xs = [load_level(p) for p in pts]
        (line,) = ax.plot(
            xs, [p["response_p50_us"] / 1e3 for p in pts], marker="o", label=f"{name} p50"
        )
        p99 = [p["response_all_p99_us"] / 1e3 for p in pts]
        ax.plot(xs, p99, marker="^", linestyle="--", color=line.get_color(), label=f"{name} p99")
        invalid += _hollow(ax, pts, xs, p99, line.get_color())
        if all(p.get("loop_lag_p99_us") is not None for p in pts):  # asyncio workers
            lag = [max(p["loop_lag_p99_us"], 1.0) / 1e3 for p in pts]
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
    sim = sorted({s for r in records for s in r.get("simulated") or []})
    r0 = records[0]
    how = "closed loop" if closed else "open loop"
    ax.set_yscale("log")
    ax.set_xlabel("concurrent clients (closed loop)" if closed else "offered QPS (open loop)")
    ax.set_ylabel("response time ms (from scheduled arrival, log)")
    title = f"response time under load — {how}, {r0.get('workers', 1)} {r0.get('worker_kind', '')} workers"
    title += f" [SIMULATED: {', '.join(sim)}]" if sim else ""
    ax.set_title(title + _caveat_text(records), fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _hollow(ax: Any, pts: Records, xs: list[float], p99: list[float], color: Any) -> int:
    """Hollow markers over the levels whose load generator did not keep up; how many."""
    bad = [i for i, p in enumerate(pts) if not generator_kept_up(p)]
    if bad:
        p50 = [pts[i]["response_p50_us"] / 1e3 for i in bad]
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


def _load_shares(ax: Any, records: Records) -> None:
    """Per (configuration, load level): each stage's share of CPU time (or wall time), stacked."""
    cpu = all("cpu_share" in r for r in records)
    key = "cpu_share" if cpu else "stage_share"
    stages: list[str] = []
    for r in records:
        stages += [s for s in r.get("stages", []) if s not in stages]
    rows = sorted(records, key=lambda r: (str(r["label"]), load_level(r)))
    cmap = pyplot().get_cmap("tab10")
    for row, r in enumerate(rows):
        left = 0.0
        for j, s in enumerate(stages):
            v = float((r.get(key) or {}).get(s) or 0.0) * 100
            ax.barh(row, v, left=left, color=cmap(j % 10), label=s if row == 0 else None)
            left += v
    ax.set_yticks(range(len(rows)), [f"{r['label']} @ {load_level(r):g}" for r in rows])
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


PANELS: dict[str, list[Callable[[Any, Records], None]]] = {
    "run": [_runs],
    "sweep": [_sweeps, _sweep_memory, _filter_recall, _filter_p50],
    "scale": [_scales],
    "load": [_loads, _load_shares],
    "stream": [_streams],
}


def transport_setting(rec: Mapping[str, Any]) -> str:
    """A run's transport with the settings its config gives: ``grpc compression=gzip``."""
    table = dict((rec.get("config") or {}).get("transport") or {})
    name = str(table.pop("backend", "?"))
    return " ".join([name, *(f"{k}={v}" for k, v in sorted(table.items()))])


def varies_payload(records: Records) -> bool:
    """True when runs differ in the hits or embeddings their payloads carry (``--payload-k``)."""
    shapes = {
        (
            (r.get("config") or {}).get("run", {}).get("k"),
            (r.get("config") or {}).get("serialize", {}).get("with_embeddings"),
        )
        for r in records
    }
    return len(shapes) > 1 and all("transport" in r.get("summary", {}) for r in records)


def _payload_transport(ax: Any, records: Records) -> None:
    """Transport p50 µs against payload bytes (log-log), one colour per transport setting.

    Solid lines join the payloads without embeddings, dashed ones those with them.
    """
    groups: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for r in records:
        if r.get("payload_bytes_p50") and r["summary"]["transport"].get("p50_us"):
            point = (float(r["payload_bytes_p50"]), float(r["summary"]["transport"]["p50_us"]))
            emb = bool((r.get("config") or {}).get("serialize", {}).get("with_embeddings"))
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
    runs = [r for r in records_of(records, "run") if r.get("requests")]
    if not runs or not varies_payload(runs):
        raise ConfigError("nothing to plot: no runs varying the payload (compare --payload-k)")
    fig, ax = pyplot().subplots(figsize=(9, 6))
    _payload_transport(ax, runs)
    fig.tight_layout()
    return fig


def _without_dominant(stage: str) -> Callable[[Any, Records], None]:
    def draw(ax: Any, records: Records) -> None:
        _runs(ax, records, skip=stage)

    return draw


def figure(records: Records) -> Any:
    """A matplotlib figure with one panel per record kind present (run, sweep, scale, load).

    When one stage dominates every run (:func:`ragbench.reading.dominant_stage`:
    a model's embed is ~97 % of a pydocs request), the runs get a second panel
    without it, so the differences between the varied stages can be seen.
    """
    filtered = any(r.get("strategy") is not None for r in records_of(records, "sweep"))
    panels = [
        (k, draw)
        for k in PANELS
        if records_of(records, k)
        for draw in PANELS[k]
        if filtered or draw not in (_filter_recall, _filter_p50)
    ]
    runs = [r for r in records_of(records, "run") if r.get("requests")]
    dominant = dominant_stage(runs) if runs else None
    if dominant is not None:
        at = [k for k, _ in panels].index("run") + 1
        panels.insert(at, ("run", _without_dominant(dominant)))
    if runs and varies_payload(runs):
        panels.insert([k for k, _ in panels].index("run") + 1, ("run", _payload_transport))
    if not panels:
        raise ConfigError("nothing to plot: no run, sweep, scale, load or stream records")
    plt = pyplot()
    rows = max(len(records_of(records, "run")), len(records_of(records, "load")))
    height = max(5.0, 2.2 + 0.4 * rows)
    fig, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), height), squeeze=False)
    for ax, (kind, draw) in zip(axes[0], panels, strict=True):
        draw(ax, records_of(records, kind))
    fig.tight_layout()
    return fig


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

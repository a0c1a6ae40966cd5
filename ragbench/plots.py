"""PNG plots of saved records (matplotlib, imported only here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

from .errors import MissingDependencyError

__all__ = ["plot_records"]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_records(records: Sequence[Mapping[str, Any]], path: str | PathLike[str]) -> None:
    """Draw what the records hold: per-stage p50 bars for runs, frontiers for sweeps, growth for scale."""
    kinds = {r.get("kind") for r in records}
    if kinds & {"sweep", "scale", "load"} and "run" not in kinds:
        from .sweeps import plot_sweep_records

        plot_sweep_records(records, path)
        return
    plot_runs([r for r in records if r.get("kind") == "run"], path)


def plot_runs(records: Sequence[Mapping[str, Any]], path: str | PathLike[str]) -> None:
    """Stacked horizontal bars: each run's per-stage p50 (µs), labelled, simulated parts marked."""
    plt = _pyplot()
    labels = []
    stages: list[str] = []
    for r in records:
        for s in r["stages"]:
            if s not in stages:
                stages.append(s)
    fig, ax = plt.subplots(figsize=(10, 2.2 + 0.5 * len(records)))
    cmap = plt.get_cmap("tab10")
    for row, r in enumerate(records):
        left = 0.0
        for j, s in enumerate(stages):
            v = r["summary"].get(s, {}).get("p50_us", 0.0) if s in r["summary"] else 0.0
            ax.barh(row, v, left=left, color=cmap(j % 10), label=s if row == 0 else None)
            left += v
        labels.append(r["label"] + (" (simulated LLM)" if r.get("simulated") else ""))
    ax.set_yticks(range(len(records)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("p50 µs per stage, stacked (before first token)")
    ax.legend(
        ncols=min(len(stages), 5),
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        frameon=False,
    )
    ax.set_title("ragbench: where the time goes before the first token")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

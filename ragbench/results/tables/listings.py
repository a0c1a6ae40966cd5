"""Tables that are not of records: pytest-benchmark files, datasets and their statistics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .cells import num, text_table

__all__ = [
    "benchmark_table",
    "datasets_table",
    "stats_table",
]


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


_HEAD_WHAT = {
    "judged queries": "queries with judged answers (qrels), of all",
    "judgments per query": "judged passages per judged query: min / median / max",
}


def stats_table(stats: Sequence[Mapping[str, Any]], meanings: Mapping[str, str]) -> str:
    """Datasets' statistics side by side (``ragbench datasets --stats``): one row per statistic.

    ``stats`` are ``DataStats.as_dict()`` dicts; ``meanings`` says what each statistic is
    (its keys, in order, are the rows; a statistic a dataset lacks shows ``—``).
    """
    head = ("embedder", "n", "dim", "sample", "hub points", "judged queries", "judgments per query")
    names = [str(s.get("name")) for s in stats]
    rows = [[key, *(str(s.get(key, "—")) for s in stats), _HEAD_WHAT.get(key, "")] for key in head]
    for key, what in meanings.items():
        cells = [f"{float(s[key]):.3g}" if key in s else "—" for s in stats]
        rows.append([key, *cells, what])
    columns = [("statistic", "left"), *((name, "right") for name in names), ("what", "left")]
    return text_table("dataset statistics", columns, rows, width=200)

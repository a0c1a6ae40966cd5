"""Recall–latency frontiers (``sweep``) and cost as the corpus grows (``scale``).

Build parameters go to ``create``, query parameters to each ``search`` call;
a sweep is the cartesian product of both per index, skipping parameters an
index does not take. Every point is measured the same way:

- recall@k against exact search (tie-aware);
- latency per query from one query per call on one thread (never a batch
  time divided by N), reported as p50/p95/p99;
- batch throughput with all pinned threads;
- build time and index memory.

``rescore`` is a query parameter every index accepts here: ask the index for
``rescore`` candidates and re-score them exactly with the numba reranker, as
the pipeline's rerank stage would (LSH and MinHash LSH need it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from time import perf_counter_ns
from typing import Any

import numpy as np

from . import indexes, threads
from .errors import ConfigError
from .metrics import recall_at_k, rerank_metric

__all__ = ["SweepData", "pareto", "scale_points", "sweep_points"]

SWEEP_SCHEMA = "ragbench.sweep/1"
SCALE_SCHEMA = "ragbench.scale/1"

#: Values tried, in order, to reach a recall target in ``scale``.
TUNING = {
    "ef": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024],
    "nprobe": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    "rescore": [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
}


@dataclass
class SweepData:
    """Vectors, texts and exact neighbours one sweep measures against."""

    name: str
    vectors: np.ndarray
    queries: np.ndarray
    texts: list[str]
    query_texts: list[str]
    truth: np.ndarray
    metric: str

    @classmethod
    def from_dataset(
        cls,
        ds: Any,
        *,
        k: int,
        n_queries: int | None = None,
        embedder: str | None = None,
        metric: str | None = None,
    ) -> SweepData:
        emb = embedder or ds.default_embedder
        if emb == "precomputed":
            X, Q = ds.vectors, ds.query_vectors_precomputed
            truth = ds.exact_neighbors(k, metric=metric or ds.metric)
        else:
            from . import embedders

            e = embedders.create(emb)
            X, Q = ds.corpus_vectors(e), ds.query_vectors(e)
            truth = ds.exact_neighbors(k, embedder=e, metric=metric or ds.metric)
        nq = len(Q) if n_queries is None else min(n_queries, len(Q))
        return cls(
            ds.name,
            X,
            Q[:nq],
            list(ds.corpus.texts),
            list(ds.queries.texts[:nq]),
            truth[:nq],
            metric or ds.metric,
        )


def _factory_defaults(name: str, dim: int, metric: str) -> tuple[set[str], set[str]]:
    """(build param names, query param names) an index accepts."""
    probe = indexes.create_for(name, dim=dim, metric=metric)
    return set(probe.build_params), set(probe.query_params)


def measure(
    index: Any,
    data: SweepData,
    k: int,
    params: Mapping[str, Any],
    *,
    rescore: int | None = None,
    reranker: Any = None,
) -> dict[str, Any]:
    """Recall, per-query latency (one query per call, one thread) and batch QPS of one point."""
    texts = index.input_kind == "texts"
    Q = data.queries
    nq = len(Q)
    kk = min(rescore or k, index.ntotal)
    if kk < k:
        raise ConfigError(f"rescore={rescore} must be >= k={k}")
    search = index.search
    X = data.vectors
    rr = reranker.rerank if (rescore and reranker is not None) else None
    found = np.full((nq, k), -1, dtype=np.int64)
    lat = np.empty(nq, dtype=np.int64)
    batch_threads = threads.get_threads()
    threads.set_threads(1)
    try:
        for i in range(nq):
            q = [data.query_texts[i]] if texts else Q[i : i + 1]
            t0 = perf_counter_ns()
            ids, _ = search(q, kk, **params)
            if rr is not None:
                ids2, _ = rr(Q[i], ids[0], X, k)
                lat[i] = perf_counter_ns() - t0
                found[i] = ids2
            else:
                lat[i] = perf_counter_ns() - t0
                found[i] = ids[0][:k]
    finally:
        threads.set_threads(batch_threads)
    qs: Any = data.query_texts if texts else Q
    t0 = perf_counter_ns()
    ids, _ = search(qs, kk, **params)
    if rr is not None:
        reranker.rerank_batch(Q, ids, X, k)
    batch_s = (perf_counter_ns() - t0) / 1e9
    recall = recall_at_k(found, data.truth, X, Q, k, data.metric)
    pct = np.percentile(lat, [50, 95, 99], method="inverted_cdf") / 1e3
    return {
        "recall": float(recall.mean()),
        "p50_us": float(pct[0]),
        "p95_us": float(pct[1]),
        "p99_us": float(pct[2]),
        "mean_us": float(lat.mean() / 1e3),
        "qps_single": float(1e6 / pct[0]) if pct[0] > 0 else float("inf"),
        "qps_batch": float(nq / batch_s) if batch_s > 0 else float("inf"),
        "batch_threads": batch_threads,
        "queries": nq,
    }


def sweep_points(
    data: SweepData,
    index_names: Sequence[str],
    *,
    k: int,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
    on_point: Callable[[dict[str, Any]], None],
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Measure every (index, build params, query params) point; ``on_point`` gets each record at once."""
    from . import rerankers

    dim = int(data.vectors.shape[1])
    reranker = None
    out = []
    for name in index_names:
        build_names, query_names = _factory_defaults(name, dim, data.metric)
        b_axes = [(p, list(v)) for p, v in build_grid.items() if p in build_names]
        q_axes = [(p, list(v)) for p, v in query_grid.items() if p in query_names or p == "rescore"]
        for b_combo in itertools.product(*[v for _, v in b_axes]):
            build = dict(zip([p for p, _ in b_axes], b_combo, strict=True))
            index = indexes.create_for(name, dim=dim, metric=data.metric, **build)
            build_ns, _ = indexes.build_timed(
                index, data.texts if index.input_kind == "texts" else data.vectors
            )
            build_s = build_ns / 1e9
            memory = int(index.memory_bytes())
            for q_combo in itertools.product(*[v for _, v in q_axes]):
                params = dict(zip([p for p, _ in q_axes], q_combo, strict=True))
                rescore = params.pop("rescore", None)
                if rescore is not None and reranker is None:
                    reranker = rerankers.create("numba", metric=rerank_metric(data.metric))
                    reranker.warmup(dim)
                point = measure(index, data, k, params, rescore=rescore, reranker=reranker)
                rec = {
                    "schema": SWEEP_SCHEMA,
                    "kind": "sweep",
                    "dataset": data.name,
                    "n": int(data.vectors.shape[0]),
                    "dim": dim,
                    "metric": data.metric,
                    "k": k,
                    "index": name,
                    "build": dict(index.build_params),
                    "query": params,
                    "rescore": rescore,
                    "build_s": build_s,
                    "memory_bytes": memory,
                    **point,
                }
                on_point(rec)
                out.append(rec)
                if progress is not None:
                    progress(1)
    return out


def count_points(
    index_names: Sequence[str],
    dim: int,
    metric: str,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
) -> int:
    total = 0
    for name in index_names:
        b, q = _factory_defaults(name, dim, metric)
        nb = math.prod(len(v) for p, v in build_grid.items() if p in b)
        nqp = math.prod(len(v) for p, v in query_grid.items() if p in q or p == "rescore")
        total += nb * nqp
    return total


def pareto(
    points: Sequence[Mapping[str, Any]], *, x: str = "recall", y: str = "qps_single"
) -> list[bool]:
    """True for points no other point beats on both ``x`` and ``y`` (higher is better)."""
    flags = []
    for p in points:
        dominated = any(
            (o[x] >= p[x] and o[y] >= p[y]) and (o[x] > p[x] or o[y] > p[y]) for o in points
        )
        flags.append(not dominated)
    return flags


# ---------------------------------------------------------------- scale


def tune(
    index: Any, data: SweepData, k: int, target: float, reranker: Any
) -> tuple[dict[str, Any], int | None, dict[str, Any], bool]:
    """Smallest query parameter reaching ``target`` recall: (params, rescore, point, reached)."""
    qp = set(index.query_params)
    values: list[Any]
    if "ef" in qp:
        axis, values = "ef", TUNING["ef"]
    elif "nprobe" in qp:
        nlist = int(index.build_params.get("nlist", 1024))
        axis, values = "nprobe", [v for v in TUNING["nprobe"] if v <= nlist] or [nlist]
    elif index.name in ("lsh", "minhash-lsh"):
        axis, values = (
            "rescore",
            [v for v in TUNING["rescore"] if k <= v <= index.ntotal] or [index.ntotal],
        )
    else:
        axis, values = "", [None]
    best: tuple[dict[str, Any], int | None, dict[str, Any]] | None = None
    for v in values:
        params: dict[str, Any] = {} if axis in ("", "rescore") else {axis: v}
        rescore = v if axis == "rescore" else None
        point = measure(index, data, k, params, rescore=rescore, reranker=reranker)
        best = (params, rescore, point)
        if point["recall"] >= target:
            return params, rescore, point, True
    assert best is not None  # noqa: S101 - values is never empty
    return best[0], best[1], best[2], False


def scale_points(
    datasets_by_n: Iterable[tuple[int, Callable[[], SweepData]]],
    index_names: Sequence[str],
    *,
    k: int,
    target: float,
    build: Mapping[str, Mapping[str, Any]],
    on_point: Callable[[dict[str, Any]], None],
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    from . import rerankers

    out = []
    reranker = None
    for n, make in datasets_by_n:
        data = make()
        dim = int(data.vectors.shape[1])
        if reranker is None:
            reranker = rerankers.create("numba", metric=rerank_metric(data.metric))
            reranker.warmup(dim)
        for name in index_names:
            index = indexes.create_for(name, dim=dim, metric=data.metric, **build.get(name, {}))
            build_ns, _ = indexes.build_timed(
                index, data.texts if index.input_kind == "texts" else data.vectors
            )
            build_s = build_ns / 1e9
            params, rescore, point, reached = tune(index, data, k, target, reranker)
            rec = {
                "schema": SCALE_SCHEMA,
                "kind": "scale",
                "dataset": data.name,
                "n": n,
                "dim": dim,
                "metric": data.metric,
                "k": k,
                "index": name,
                "build": dict(index.build_params),
                "query": params,
                "rescore": rescore,
                "target_recall": target,
                "reached": reached,
                "build_s": build_s,
                "memory_bytes": int(index.memory_bytes()),
                **point,
            }
            on_point(rec)
            out.append(rec)
            del index
            if progress is not None:
                progress(1)
    return out


def growth_exponents(records: Sequence[Mapping[str, Any]], key: str = "p50_us") -> dict[str, float]:
    """Least-squares slope of log(latency) vs log(n) per index (1.0 = linear, ~0 = flat)."""
    out = {}
    by: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        if r.get("kind") == "scale" and r.get(key, 0) > 0:
            by.setdefault(r["index"], []).append((math.log(r["n"]), math.log(r[key])))
    for name, pts in by.items():
        if len({p[0] for p in pts}) < 2:
            out[name] = float("nan")
            continue
        xs, ys = np.array(pts).T
        out[name] = float(np.polyfit(xs, ys, 1)[0])
    return out


# ---------------------------------------------------------------- rendering


def _params_text(rec: Mapping[str, Any], build_keys: Iterable[str] | None = None) -> str:
    build = rec.get("build", {})
    keys = list(build) if build_keys is None else [k for k in build if k in set(build_keys)]
    parts = [f"{k}={build[k]}" for k in keys]
    parts += [f"{k}={v}" for k, v in rec.get("query", {}).items()]
    if rec.get("rescore"):
        parts.append(f"rescore={rec['rescore']}")
    return " ".join(parts)


def sweep_table(records: Sequence[Mapping[str, Any]], *, width: int = 400) -> str:
    from rich.table import Table

    from .report import _num, _render

    flags = pareto(records)
    r0 = records[0]
    # show the build parameters that vary within an index's points; the rest are in the records
    varying: dict[str, set[str]] = {}
    for name in {r["index"] for r in records}:
        pts = [r for r in records if r["index"] == name]
        keys = {k for r in pts for k in r.get("build", {})}
        varying[name] = {k for k in keys if len({repr(r.get("build", {}).get(k)) for r in pts}) > 1}
    t = Table(
        title=f"sweep — {r0['dataset']} n={r0['n']} dim={r0['dim']} {r0['metric']} k={r0['k']}; "
        "★ = Pareto-optimal (recall vs 1-thread QPS = 1e6 / p50)",
        title_justify="left",
    )
    for col, just in (
        ("", "left"),
        ("index", "left"),
        ("params", "left"),
        ("recall", "right"),
        ("p50 µs", "right"),
        ("p95 µs", "right"),
        ("p99 µs", "right"),
        ("QPS 1 thread", "right"),
        ("QPS batch", "right"),
        ("build s", "right"),
        ("memory MB", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for rec, star in zip(records, flags, strict=True):
        t.add_row(
            "★" if star else "",
            rec["index"],
            _params_text(rec, varying[rec["index"]]) or "(defaults)",
            f"{rec['recall']:.4f}",
            _num(rec["p50_us"]),
            _num(rec["p95_us"]),
            _num(rec["p99_us"]),
            _num(rec["qps_single"]),
            _num(rec["qps_batch"]),
            f"{rec['build_s']:.2f}",
            f"{rec['memory_bytes'] / 1e6:.1f}",
        )
    return _render(t, width)


def scale_table(records: Sequence[Mapping[str, Any]], *, width: int = 400) -> str:
    from rich.table import Table

    from .report import _num, _render

    r0 = records[0]
    t = Table(
        title=f"scale — p50 per query at recall@{r0['k']} ≥ {r0['target_recall']}",
        title_justify="left",
    )
    for col in (
        "index",
        "n",
        "query param used",
        "recall",
        "p50 µs",
        "p99 µs",
        "build s",
        "memory MB",
    ):
        t.add_column(col, justify="left" if col in ("index", "query param used") else "right")
    for rec in sorted(records, key=lambda r: (r["index"], r["n"])):
        used = (
            _params_text({"query": rec.get("query", {}), "rescore": rec.get("rescore")})
            or "(exact)"
        )
        if not rec.get("reached", True):
            used += " (target not reached)"
        t.add_row(
            rec["index"],
            f"{rec['n']:,}",
            used,
            f"{rec['recall']:.4f}",
            _num(rec["p50_us"]),
            _num(rec["p99_us"]),
            f"{rec['build_s']:.2f}",
            f"{rec['memory_bytes'] / 1e6:.1f}",
        )
    lines = [_render(t, width)]
    exps = growth_exponents(records)
    if exps:
        lines.append(
            "growth of p50 latency with n (log-log slope; 1.0 = linear scan): "
            + ", ".join(f"{k} {v:.2f}" for k, v in exps.items())
        )
    return "\n".join(lines)


def render_sweep_records(records: Sequence[Mapping[str, Any]], fmt: str = "table") -> str:
    import json

    sweeps = [r for r in records if r.get("kind") == "sweep"]
    scales = [r for r in records if r.get("kind") == "scale"]
    loads = [r for r in records if r.get("kind") == "load"]
    if loads:
        from .load import load_table

        rest = [r for r in records if r.get("kind") != "load"]
        if fmt == "json":
            rows = [{k: v for k, v in r.items() if k not in ("env", "config")} for r in loads]
            head = json.dumps(rows, indent=2)
        else:
            head = load_table(loads)
        return head + ("\n" + render_sweep_records(rest, fmt) if rest else "")
    if fmt == "json":
        flags = pareto(sweeps) if sweeps else []
        rows = [
            {**{k: v for k, v in r.items() if k != "env"}, "pareto": f}
            for r, f in zip(sweeps, flags, strict=True)
        ]
        rows += [{k: v for k, v in r.items() if k != "env"} for r in scales]
        return json.dumps(rows, indent=2)
    if fmt in ("md", "csv"):
        cols = [
            "kind",
            "index",
            "n",
            "params",
            "recall",
            "p50_us",
            "p95_us",
            "p99_us",
            "qps_batch",
            "build_s",
            "memory_bytes",
        ]
        cells = [
            [
                str(r.get("kind")),
                str(r.get("index")),
                str(r.get("n")),
                _params_text(r),
                f"{r['recall']:.4f}",
                f"{r['p50_us']:.1f}",
                f"{r['p95_us']:.1f}",
                f"{r['p99_us']:.1f}",
                f"{r['qps_batch']:.0f}",
                f"{r['build_s']:.2f}",
                str(r["memory_bytes"]),
            ]
            for r in sweeps + scales
        ]
        if fmt == "csv":
            import csv
            import io

            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerow(cols)
            w.writerows(cells)
            return buf.getvalue().rstrip("\n")
        return "\n".join(
            [
                "| " + " | ".join(cols) + " |",
                "| " + " | ".join("---" for _ in cols) + " |",
                *["| " + " | ".join(r) + " |" for r in cells],
            ]
        )
    parts = []
    if sweeps:
        parts.append(sweep_table(sweeps))
    if scales:
        parts.append(scale_table(scales))
    return "\n".join(parts)


def plot_sweep_records(records: Sequence[Mapping[str, Any]], path: str | PathLike[str]) -> None:
    from .plots import _pyplot

    plt = _pyplot()
    sweeps = [r for r in records if r.get("kind") == "sweep"]
    scales = [r for r in records if r.get("kind") == "scale"]
    panels = int(bool(sweeps)) + int(bool(scales))
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 5), squeeze=False)
    ax_i = 0
    if sweeps:
        ax = axes[0][ax_i]
        ax_i += 1
        by: dict[str, list[Mapping[str, Any]]] = {}
        for r in sweeps:
            by.setdefault(r["index"], []).append(r)
        for name, pts in by.items():
            # every point faintly, the index's own Pareto frontier as a line (like ann-benchmarks)
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
        ax.set_yscale("log")
        ax.set_xlabel(f"recall@{sweeps[0]['k']}")
        ax.set_ylabel("queries per second, one query per call, 1 thread (log)")
        ax.set_title(f"recall vs QPS — {sweeps[0]['dataset']} n={sweeps[0]['n']}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    if scales:
        ax = axes[0][ax_i]
        by = {}
        for r in scales:
            by.setdefault(r["index"], []).append(r)
        exps = growth_exponents(scales)
        for name, pts in by.items():
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
        ax.set_ylabel(f"p50 µs per query at recall ≥ {scales[0]['target_recall']}")
        ax.set_title("cost as the corpus grows")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

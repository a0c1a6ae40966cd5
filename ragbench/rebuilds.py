"""One sweep or scale point measured on several builds of the same index (``--rebuilds N``).

A build of an approximate index is itself a draw: another seed (hnswlib's
level assignment, faiss's k-means or level generator, the training sample)
gives another graph or other lists and so another recall. With
``--rebuilds N`` a point is measured on N builds, the i-th with build
``seed + i`` (indexes without a seed build the same index N times and show no
spread), and the N measurements are merged into one record here:

- ``recall`` is the mean of the builds' mean recalls, ``recall_builds`` lists
  each build's, ``recall_build_spread`` is their max - min;
  ``recall_per_query`` is each query's mean over the builds and ``recall_p10``
  the 10th percentile over every (build, query) pair.
- ``recall_ci`` is the **envelope** of the builds' own intervals (each a 95 %
  bootstrap over the queries of that build): from the lowest low to the
  highest high. It contains every single build's interval, so it is never
  narrower than a one-build run of the same command (whose build is this
  one's first), and the build-to-build spread widens it. (A hierarchical
  bootstrap over builds then queries would estimate the *mean over builds*
  more precisely the more builds there are, i.e. get narrower; the question
  a reader asks is where the recall of *one* build lands.)
- latency: every build's per-query latencies together, the intervals a
  two-level bootstrap over (build × repetition) groups, then queries;
  ``build_s`` is the mean build time (``build_s_builds`` each).

A one-build point gets ``recall_ci`` from :func:`recall_interval` alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import intervals
from .timing import Stats

__all__ = ["merge_builds", "recall_interval"]


def recall_interval(per_query: Sequence[float] | np.ndarray) -> list[float]:
    """``[low, high]``: 95 % bootstrap interval of the mean of per-query recalls (seeded)."""
    ci = intervals.bootstrap(np.asarray(per_query, dtype=np.float64), "mean")
    return [ci.low, ci.high]


def _latency_fields(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    lat = np.concatenate([np.asarray(p["latency_ns"], dtype=np.int64) for p in points])
    labels = []
    for b, p in enumerate(points):
        n = len(p["latency_ns"])
        reps = np.asarray(p.get("repetition") or np.zeros(n, dtype=np.int64))
        labels.append(b * (int(p.get("repeats") or 1)) + reps)
    groups = np.concatenate(labels)
    stats = Stats.from_samples(lat)
    cis = {s: intervals.bootstrap(lat, s, groups=groups) for s in ("p50", "p99")}
    return {
        "p50_us": stats.p50_ns / 1e3,
        "p95_us": stats.p95_ns / 1e3,
        "p99_us": stats.p99_ns / 1e3,
        "mean_us": stats.mean_ns / 1e3,
        "qps_single": 1e9 / stats.p50_ns if stats.p50_ns > 0 else float("inf"),
        "latency_ns": lat.tolist(),
        "repetition": groups.tolist(),
        "p50_us_ci": [cis["p50"].low / 1e3, cis["p50"].high / 1e3],
        "p99_us_ci": [cis["p99"].low / 1e3, cis["p99"].high / 1e3],
    }


def _median_of(points: Sequence[Mapping[str, Any]], key: str) -> Any:
    values = [p[key] for p in points if p.get(key) is not None]
    return float(np.median(values)) if values else None


def merge_builds(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One record of the same point measured on each build in ``points`` (build order)."""
    first = dict(points[0])
    if len(points) == 1:
        return first
    recalls = [float(p["recall"]) for p in points]
    per_query = np.asarray([p["recall_per_query"] for p in points], dtype=np.float64)
    cis = [p.get("recall_ci") or recall_interval(p["recall_per_query"]) for p in points]
    out = first
    out.update(_latency_fields(points))
    out.update(
        recall=float(np.mean(recalls)),
        recall_builds=recalls,
        recall_build_spread=max(recalls) - min(recalls),
        recall_per_query=[round(float(v), 6) for v in per_query.mean(axis=0)],
        recall_p10=float(np.percentile(per_query, 10)) if per_query.size else float("nan"),
        recall_ci=[min(c[0] for c in cis), max(c[1] for c in cis)],
        rebuilds=len(points),
        build_s=float(np.mean([p["build_s"] for p in points])),
        build_s_builds=[p["build_s"] for p in points],
        build_info={
            **(first.get("build_info") or {}),
            "seeds": [(p.get("build_info") or {}).get("seed") for p in points],
            "cached_builds": sum(bool((p.get("build_info") or {}).get("cached")) for p in points),
        },
    )
    for key in ("qps_batch", "search_p50_us", "rescore_p50_us"):
        if key in first:
            out[key] = _median_of(points, key)
    if "recall_before_rescore" in first:
        out["recall_before_rescore"] = float(np.mean([p["recall_before_rescore"] for p in points]))
    return out

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

A one-build point gets ``recall_ci`` from :func:`recall_interval` alone. Judged
answers (``judged``: nDCG@10, MRR@10, recall@100) merge the same way
(:func:`ragbench.judged.merge_builds`): the mean of the builds' means, the
envelope of their intervals, each build's mean in ``<measure>_builds``.

``ragbench compare --rebuilds N`` runs every configuration side by side once
per build (build ``i``'s ``[retrieve.build]`` with ``seed + i``,
:func:`seeded_build`) and merges each configuration's N run records into one
(:func:`merge_runs`) with the same meaning: ``recall_at_k`` the mean of the
builds' mean recalls, ``recall_builds``, ``recall_build_spread``,
``recall_ci`` the envelope of the builds' intervals, ``rebuilds``; every
build's requests pooled for the stage statistics (``requests`` is N × the
requests of one build, ``repetition`` labels each (build × repetition)
group, so latency intervals resample builds, then requests), set-up times
summed over the builds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from .. import indexes, intervals, judged
from ..timing import Stats
from .report import Report

__all__ = ["merge_builds", "merge_runs", "recall_interval", "seeded_build"]


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


def _over_builds(recalls: Sequence[float], cis: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Each build's recall, their spread, and the envelope of their intervals."""
    return {
        "recall_builds": list(recalls),
        "recall_build_spread": max(recalls) - min(recalls),
        "recall_ci": [min(c[0] for c in cis), max(c[1] for c in cis)],
    }


def _seeds_of(builds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The builds' seeds, and how many were loaded from the index cache."""
    return {
        "seeds": [b.get("seed") for b in builds],
        "cached_builds": sum(bool(b.get("cached")) for b in builds),
    }


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
    spread = _over_builds(recalls, cis)
    out.update(
        recall=float(np.mean(recalls)),
        recall_builds=spread["recall_builds"],
        recall_build_spread=spread["recall_build_spread"],
        recall_per_query=[round(float(v), 6) for v in per_query.mean(axis=0)],
        recall_p10=float(np.percentile(per_query, 10)) if per_query.size else float("nan"),
        # queries at recall 0 in every build (their mean over the builds is 0)
        recall_zero=int(np.count_nonzero(per_query.mean(axis=0) == 0)) if per_query.size else 0,
        recall_ci=spread["recall_ci"],
        **_judged_over_builds(points, "mean"),
        rebuilds=len(points),
        build_s=float(np.mean([p["build_s"] for p in points])),
        build_s_builds=[p["build_s"] for p in points],
        build_info={
            **(first.get("build_info") or {}),
            **_seeds_of([p.get("build_info") or {} for p in points]),
        },
    )
    for key in ("qps_batch", "search_p50_us", "rescore_p50_us"):
        if key in first:
            out[key] = _median_of(points, key)
    if "recall_before_rescore" in first:
        out["recall_before_rescore"] = float(np.mean([p["recall_before_rescore"] for p in points]))
    if all(p.get("cpu_ns") is not None for p in points):  # every build's queries, as latency_ns
        cpu = np.concatenate([np.asarray(p["cpu_ns"], dtype=np.int64) for p in points])
        out.update(cpu_ns=cpu.tolist(), cpu_p50_us=Stats.from_samples(cpu).p50_ns / 1e3)
    return out


def seeded_build(backend: str | None, build: Any, i: int) -> Any:
    """``[retrieve.build]`` of build ``i``: its ``seed`` (given, else the backend's default) + ``i``.

    ``build`` is a mapping or the backend's typed build parameters (a
    ``msgspec`` Struct, :mod:`ragbench.settings.params`); the same kind comes back. A
    backend without a ``seed`` build parameter (flat, LSH, ...) gets ``build``
    unchanged: its N builds are the same index.
    """
    if not i or backend is None:
        return build
    given = build if isinstance(build, Mapping) else msgspec.to_builtins(build)
    defaults = getattr(indexes.registry.factory(backend), "build_defaults", {})
    if "seed" not in given and "seed" not in defaults:
        return build
    seed = int(given.get("seed", defaults.get("seed", 0))) + i
    if isinstance(build, Mapping):
        return {**build, "seed": seed}
    if "seed" in getattr(build, "__struct_fields__", ()):
        return msgspec.structs.replace(build, seed=seed)
    return build


def _stack(parts: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """The builds' arrays one after the other; ``None`` if a build has none (or widths differ)."""
    if any(p is None for p in parts):
        return None
    arrays = [np.asarray(p) for p in parts]
    if len({a.shape[1:] for a in arrays}) > 1:
        return None
    return np.concatenate(arrays)


def _groups(reports: Sequence[Report]) -> np.ndarray:
    """int ``(requests,)``: one label per (build, repetition) over the pooled requests."""
    labels, offset = [], 0
    for r in reports:
        rep = np.zeros(r.requests, np.int64) if r.repetition is None else np.asarray(r.repetition)
        _, inverse = np.unique(rep, return_inverse=True)
        labels.append(offset + inverse.astype(np.int64))
        offset += int(inverse.max()) + 1 if inverse.size else 1
    return np.concatenate(labels) if labels else np.zeros(0, np.int64)


def _connection(reports: Sequence[Report]) -> dict[str, np.ndarray] | None:
    parts = [r.connection_ns for r in reports]
    if any(p is None for p in parts) or len({tuple(sorted(p or {})) for p in parts}) > 1:
        return None
    first: dict[str, np.ndarray] = parts[0] or {}
    return {k: np.concatenate([(p or {})[k] for p in parts]) for k in first}


def _pooled(reports: Sequence[Report]) -> Report:
    """One report holding every build's requests (see the module docstring)."""
    first = reports[0]
    setup: dict[str, int] = {}
    for r in reports:
        for key, ns in r.setup_ns.items():
            setup[key] = setup.get(key, 0) + ns
    hits = [r.cache_hits for r in reports]
    lookups = [r.cache_lookups for r in reports]
    return dataclasses.replace(
        first,
        samples_ns=np.concatenate([r.samples_ns for r in reports]),
        recall=np.concatenate([r.recall for r in reports]),
        payload_bytes=np.concatenate([r.payload_bytes for r in reports]),
        wire_bytes=np.concatenate([r.wire_bytes for r in reports]),
        prompt_tokens=np.concatenate([r.prompt_tokens for r in reports]),
        setup_ns=setup,
        cache_hits=None if None in hits else sum(h or 0 for h in hits),
        cache_lookups=None if None in lookups else sum(n or 0 for n in lookups),
        cache_events=[ev for r in reports for ev in r.cache_events],
        error=next((r.error for r in reports if r.error), None),
        cpu_samples_ns=_stack([r.cpu_samples_ns for r in reports]),
        server_cpu_ns=_stack([r.server_cpu_ns for r in reports]),
        repetition=_groups(reports),
        model_prompt_tokens=_stack([r.model_prompt_tokens for r in reports]),
        inter_token_ns=_stack([r.inter_token_ns for r in reports]),
        connection_ns=_connection(reports),
    )


def _judged_over_builds(records: Sequence[Mapping[str, Any]], pool: str) -> dict[str, Any]:
    """``{"judged": ...}`` merged over the builds (:func:`ragbench.judged.merge_builds`), or ``{}``."""
    merged = judged.merge_builds([rec.get("judged") for rec in records], pool=pool)
    return {} if merged is None else {"judged": merged}


def merge_runs(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One ``run`` record of the same configuration run on each build in ``records`` (build order).

    One record is returned as it is (``compare`` without ``--rebuilds``).
    """
    if len(records) == 1:
        return dict(records[0])
    reports = [Report.from_record(rec) for rec in records]
    out = _pooled(reports).to_record()
    recalls = [r.mean_recall for r in reports]
    cis = [recall_interval(r.recall) for r in reports]
    out.update(
        recall_at_k=float(np.mean(recalls)),
        **_over_builds(recalls, cis),
        **_judged_over_builds(records, "concat"),
        rebuilds=len(records),
        # --repeat of each build, as in sweep records; the intervals resample builds × repetitions
        repeats=records[0].get("repeats", 1),
        intervals=str(out["intervals"]).replace("repetitions", "(build × repetition) groups"),
    )
    built = [((rec.get("info") or {}).get("index") or {}).get("build") or {} for rec in records]
    info = dict(out.get("info") or {})
    index = info.get("index")
    if isinstance(index, Mapping) and isinstance(index.get("build"), Mapping):
        build = {**index["build"], **_seeds_of(built)}
        out["info"] = {**info, "index": {**index, "build": build}}
    return out

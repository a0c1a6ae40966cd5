"""Statistics of a vector set that drive how hard approximate nearest-neighbour search is on it.

::

    stats = rb.datastats.compute(X, queries=Q, seed=0)   # X float32 (n, d); Q optional (nq, d)
    stats.as_dict()                                      # {"lid@10": 14.2, ...}
    stats.rows()                                         # (key, value, meaning) for tables

Geometry: Euclidean distance on the vectors as given (L2-normalized first for
``metric="cosine"``); for unit vectors, as the bundled datasets' are, its
neighbour order is the inner-product order. Neighbours are exact (faiss
``IndexFlatL2``). "Similarity" below is the cosine of two vectors.

Sample points: ``sample`` corpus points (default 1 000, all when ``n`` is
smaller) chosen uniformly without replacement from ``seed``, each searched
against the whole set with itself excluded. A neighbour at distance 0 (an
exact duplicate) is dropped too, so that no statistic divides by 0 or takes
``log 0``; the next neighbour takes its place.

Definitions, for a sample point ``x`` with neighbour distances ``r_1 <= ... <= r_K``:

- ``lid@k`` (local intrinsic dimensionality, maximum-likelihood estimator of
  Levina & Bickel 2004, as used by Amsaleg et al. 2015):
  ``m_k(x) = ((1/(k-1)) * sum_{j<k} ln(r_k / r_j))^-1``; the table gives the
  mean of ``m_k(x)`` over the sample points, for ``k`` in ``lid_ks``
  (default 10, 20, 100). Points on a ``d``-dimensional linear subspace give
  ``~d`` whatever the ambient dimension.
- ``contrast`` (relative contrast, He, Kumar & Chang 2012): ``mean_y ||x - y|| / r_1``,
  the mean distance from ``x`` to every other point over its nearest
  neighbour's distance; the mean over the sample points. Near 1: every
  point is about as far as the nearest (hard); large: the nearest stands out.
- ``gap 10-100``: ``s_10 - s_100``, the similarity of ``x`` to its 10th
  neighbour minus that to its 100th; the mean over the sample points. Small:
  the 100 candidates an index re-scores are nearly as close as the true top 10.
- ``hubness`` (Radovanović et al. 2010): the skewness
  ``E[(N - k)^3] / std(N)^3`` of the k-occurrence ``N_k(y)`` (how many points
  have ``y`` among their ``k = hub_k`` (10) nearest, self excluded) over all
  points ``y`` of the hub set. The hub set is the whole set when
  ``n <= hub_max`` (30 000), else a seeded uniform subsample of ``hub_max``
  points treated as a dataset on its own: a sample of query points alone
  cannot give ``N_k`` (whether ``y`` is among ``x``'s neighbours needs ``x``'s
  k-th distance, for every ``x``). Hubness grows slowly with ``n``, so above
  ``hub_max`` the figure understates it a little. ``hub points`` says which.
- ``norm mean``, ``norm std``: of ``||x||`` over all points.
- ``common``: ``||mean_x x|| / mean_x ||x||``, the share of the vectors' length
  that is one shared direction (0 for isotropic data, ~0.4 for MiniLM
  sentence embeddings, 1 for a single point).
- ``var top j``: the share of the total variance (the trace of the covariance
  of all points, centred) in its ``j`` largest eigenvalues, ``j`` in 1, 10, 50.
- ``eff rank``: the effective rank of the covariance (Roy & Vetterli 2007),
  ``exp(-sum p_i ln p_i)`` with ``p_i = lambda_i / sum lambda``; ``d`` for
  isotropic data, 1 for a line.
- with ``queries``: ``query sim1``, the mean similarity of each query to its
  nearest corpus point, and ``query contrast``, the relative contrast of the
  queries against the corpus (each query's mean distance to all points over
  its nearest distance, averaged). How close questions sit to passages.

Cost on two busy shared cores: ~1.5 s at 3 274 x 384; ~20-35 s at 30k-100k x 384,
most of it the exact 10 nearest of each of the 30 000 hub points (an all-pairs
search, 30 000^2 x 384 multiply-adds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import InputError
from .metrics import unit_rows
from .validate import as_matrix, check_metric, positive_int

__all__ = ["STAT_KEYS", "DataStats", "compute", "meaning"]

#: the statistics ``DataStats.as_dict`` holds beside ``n``, ``dim``, ``sample`` and ``hub points``
STAT_KEYS = (
    "lid@10",
    "lid@20",
    "lid@100",
    "contrast",
    "gap 10-100",
    "hubness",
    "norm mean",
    "norm std",
    "common",
    "var top 1",
    "var top 10",
    "var top 50",
    "eff rank",
)
_MEANINGS = {
    "lid": "local intrinsic dimensionality, MLE over the k nearest",
    "contrast": "mean distance / nearest-neighbour distance",
    "gap 10-100": "similarity of the 10th neighbour minus that of the 100th",
    "hubness": "skewness of the k-occurrence N_{k}",
    "norm mean": "mean vector norm",
    "norm std": "standard deviation of the vector norm",
    "common": "|mean vector| / mean norm (shared direction)",
    "var top": "share of variance in the top {j} principal components",
    "eff rank": "effective rank of the covariance",
    "query sim1": "mean similarity of a query to its nearest passage",
    "query contrast": "relative contrast of the queries against the corpus",
}
_BLOCK = 256  # sample rows per distance block: 256 x 100k float32 = 100 MB


@dataclass(frozen=True, slots=True)
class DataStats:
    """The statistics of one vector set (see the module docstring for each definition)."""

    name: str
    n: int
    dim: int
    sample: int
    hub_points: int
    values: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """``name``, ``n``, ``dim``, ``sample``, ``hub points``, then every statistic by key."""
        head: dict[str, Any] = {
            "name": self.name,
            "n": self.n,
            "dim": self.dim,
            "sample": self.sample,
            "hub points": self.hub_points,
        }
        return {**head, **self.values}

    def rows(self) -> list[tuple[str, float, str]]:
        """``(key, value, meaning)`` per statistic, in table order."""
        return [(key, value, meaning(key)) for key, value in self.values.items()]


def meaning(key: str) -> str:
    """One line saying what statistic ``key`` is."""
    if key.startswith("lid@"):
        return f"{_MEANINGS['lid']} (k={key[4:]})"
    if key.startswith("var top "):
        return _MEANINGS["var top"].format(j=key[8:])
    if key == "hubness":
        return _MEANINGS["hubness"].format(k=10)
    return _MEANINGS.get(key, key)


def compute(
    vectors: Any,
    *,
    queries: Any = None,
    metric: str = "ip",
    sample: int = 1000,
    lid_ks: Sequence[int] = (10, 20, 100),
    hub_k: int = 10,
    hub_max: int = 30_000,
    seed: int = 0,
    name: str = "",
) -> DataStats:
    """The statistics of ``vectors`` (float32-convertible ``(n, d)``), optionally with ``queries``.

    Needs ``n > max(lid_ks, 100)`` points. Deterministic from ``seed``.
    Raises :class:`~ragbench.errors.InputError` for too few points or a
    non-finite value.
    """
    metric = check_metric("datastats", metric)
    X = as_matrix(vectors, name="vectors")
    if metric == "cosine":
        X = unit_rows(X)
    sample = positive_int("datastats", "sample", sample)
    ks = sorted({positive_int("datastats", "lid k", k, lo=2) for k in lid_ks})
    hub_k = positive_int("datastats", "hub_k", hub_k)
    hub_max = positive_int("datastats", "hub_max", hub_max, lo=2)
    k_max = max([*ks, 100, hub_k])
    n, dim = X.shape
    if n <= k_max:
        raise InputError(f"datastats: need more than {k_max} vectors, got {n}")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(sample, n), replace=False))
    dist, nbr = _neighbors(X, X[rows], k_max, exclude=rows)
    values: dict[str, float] = {}
    for k in ks:
        values[f"lid@{k}"] = _lid(dist[:, :k])
    values["contrast"] = _contrast(X, X[rows], dist[:, 0], exclude=rows)
    sims = _cosines(X[rows], X, nbr[:, [9, 99]])
    values["gap 10-100"] = float(np.mean(sims[:, 0] - sims[:, 1]))
    hub_rows = np.arange(n) if n <= hub_max else np.sort(rng.choice(n, hub_max, replace=False))
    values["hubness"] = _hubness(X[hub_rows], hub_k)
    values.update(_norms_and_spectrum(X))
    if queries is not None:
        values.update(_query_stats(X, as_matrix(queries, name="queries", dim=dim), metric))
    return DataStats(name, n, dim, int(rows.size), int(hub_rows.size), values)


def _neighbors(
    X: np.ndarray, Q: np.ndarray, k: int, exclude: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Euclidean distances float64 ``(nq, k)`` and ids of each query's ``k`` nearest.

    ``exclude[i]`` (the query's own row) and exact duplicates (distance 0) are dropped.
    """
    import faiss

    index = faiss.IndexFlatL2(X.shape[1])
    index.add(X)
    extra = 1 if exclude is not None else 0
    want = k + extra + 4  # room for the self match and a few exact duplicates
    d2, ids = index.search(Q, min(want, X.shape[0]))
    # faiss's |q|^2 + |x|^2 - 2 q.x loses the small distances: recompute exactly
    diff = X[ids] - Q[:, None, :]
    d = np.sqrt(np.einsum("qkd,qkd->qk", diff, diff, dtype=np.float64))
    drop = d <= 0.0
    if exclude is not None:
        drop |= ids == exclude[:, None]
    order = np.argsort(np.where(drop, np.inf, d), axis=1, kind="stable")[:, :k]
    out_d = np.take_along_axis(d, order, axis=1)
    if not np.isfinite(np.take_along_axis(np.where(drop, np.inf, d), order, axis=1)).all():
        raise InputError("datastats: too many exact duplicates to find distinct neighbours")
    return out_d, np.take_along_axis(ids, order, axis=1)


def _lid(dist: np.ndarray) -> float:
    """Mean over rows of the Levina–Bickel MLE from the sorted distances ``dist (m, k)``."""
    k = dist.shape[1]
    logs = np.log(dist[:, -1:] / dist[:, :-1]).sum(axis=1) / (k - 1)
    with np.errstate(divide="ignore"):
        per_point = np.where(logs > 0, 1.0 / logs, np.nan)
    finite = per_point[np.isfinite(per_point)]
    # equidistant neighbours (all ratios 1) say nothing about the dimension
    return float(finite.mean()) if finite.size else math.nan


def _contrast(
    X: np.ndarray, Q: np.ndarray, nearest: np.ndarray, exclude: np.ndarray | None
) -> float:
    """Mean over queries of (mean distance to every point except itself) / nearest distance."""
    sq_x = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    n = X.shape[0]
    ratios = np.empty(Q.shape[0])
    for s in range(0, Q.shape[0], _BLOCK):
        q = Q[s : s + _BLOCK]
        sq_q = np.einsum("ij,ij->i", q, q, dtype=np.float64)
        d2 = sq_q[:, None] + sq_x[None, :] - 2.0 * (q @ X.T).astype(np.float64)
        total = np.sqrt(np.maximum(d2, 0.0)).sum(axis=1)
        others = n - (1 if exclude is not None else 0)
        ratios[s : s + q.shape[0]] = total / others / nearest[s : s + q.shape[0]]
    return float(ratios.mean())


def _cosines(Q: np.ndarray, X: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Cosine of each query row with the rows ``ids (nq, j)`` of ``X``: float64 ``(nq, j)``."""
    q = unit_rows(Q.astype(np.float64))
    x = unit_rows(X[ids.ravel()].astype(np.float64)).reshape(*ids.shape, -1)
    out: np.ndarray = np.einsum("qd,qjd->qj", q, x)
    return out


def _hubness(H: np.ndarray, k: int) -> float:
    """Skewness of the k-occurrence counts of the rows of ``H`` among themselves (self excluded)."""
    import faiss

    index = faiss.IndexFlatL2(H.shape[1])
    index.add(H)
    _, ids = index.search(H, k + 1)
    own = np.arange(H.shape[0])[:, None]
    # drop the self match; when a duplicate came first, the last neighbour goes instead
    keep = np.where((ids == own).any(axis=1, keepdims=True), ids != own, np.arange(k + 1) < k)
    counts = np.bincount(ids[keep].ravel(), minlength=H.shape[0]).astype(np.float64)
    centred = counts - counts.mean()
    sd = math.sqrt(float(np.mean(centred**2)))
    return float(np.mean(centred**3) / sd**3) if sd > 0 else 0.0


def _norms_and_spectrum(X: np.ndarray) -> dict[str, float]:
    norms = np.linalg.norm(X.astype(np.float64), axis=1)
    mean = X.mean(axis=0, dtype=np.float64)
    cov = np.zeros((X.shape[1], X.shape[1]))
    for s in range(0, X.shape[0], 65_536):
        blk = X[s : s + 65_536].astype(np.float64) - mean
        cov += blk.T @ blk
    eig = np.clip(np.linalg.eigvalsh(cov)[::-1], 0.0, None)
    total = float(eig.sum())
    out = {
        "norm mean": float(norms.mean()),
        "norm std": float(norms.std()),
        "common": float(np.linalg.norm(mean) / norms.mean()) if norms.mean() > 0 else 0.0,
    }
    for j in (1, 10, 50):
        out[f"var top {j}"] = float(eig[:j].sum() / total) if total > 0 else 0.0
    p = eig[eig > 0] / total if total > 0 else np.ones(1)
    out["eff rank"] = float(np.exp(-(p * np.log(p)).sum()))
    return out


def _query_stats(X: np.ndarray, Q: np.ndarray, metric: str) -> dict[str, float]:
    if metric == "cosine":
        Q = unit_rows(Q)
    dist, ids = _neighbors(X, Q, 1, exclude=None)
    return {
        "query sim1": float(_cosines(Q, X, ids).mean()),
        "query contrast": _contrast(X, Q, dist[:, 0], exclude=None),
    }

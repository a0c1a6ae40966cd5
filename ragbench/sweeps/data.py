"""The data a sweep measures against (:class:`SweepData`, :class:`FilterCase`) and its parameter grid."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import datasets, embedders, indexes
from ..attributes import QueryFilters
from ..errors import ConfigError
from ..judged import Judgments

__all__ = ["FilterCase", "SweepData", "check_grid", "index_param_names", "synthetic_data"]


@dataclass(frozen=True)
class FilterCase:
    """One requested selectivity: a filter per sweep query and the exact filtered top k.

    ``filters.masks`` bool ``(nq, n)``; ``truth`` int64 ``(nq, k)``, -1 padded.
    """

    selectivity: float
    filters: QueryFilters
    truth: np.ndarray


@dataclass
class SweepData:
    """Vectors, texts and exact neighbours one sweep measures against (and filter cases)."""

    name: str
    vectors: np.ndarray
    queries: np.ndarray
    texts: list[str]
    query_texts: list[str]
    truth: np.ndarray
    metric: str
    filter_cases: list[FilterCase] = field(default_factory=list)
    #: the corpus's attribute columns (filtered sweeps): a database index stores them
    attributes: dict[str, np.ndarray] = field(default_factory=dict)
    #: the dataset's judged answers for the sweep's queries (nDCG@10 ...); None without qrels
    judgments: Judgments | None = None

    @classmethod
    def from_dataset(
        cls,
        ds: Any,
        *,
        k: int,
        n_queries: int | None = None,
        embedder: str | None = None,
        metric: str | None = None,
        re_embed: bool = False,
        filter_selectivities: Sequence[float] = (),
        filter_table: Mapping[str, Any] | None = None,
    ) -> SweepData:
        """Vectors and exact neighbours of ``ds``; ``re_embed`` as in ``Dataset.corpus_vectors``.

        ``filter_selectivities``: one :class:`FilterCase` each, drawn as
        ``filter_table`` says (``attribute``, ``correlated``, ``seed``; see
        :meth:`ragbench.datasets.Dataset.query_filters`) at that selectivity.
        """
        emb = embedder or ds.default_embedder
        metric = metric or ds.metric
        e: Any = "precomputed" if emb == "precomputed" else embedders.create(emb)
        if emb == "precomputed":
            X, Q = ds.vectors, ds.query_vectors_precomputed
        else:
            X = ds.corpus_vectors(e, re_embed=re_embed)
            Q = ds.query_vectors(e, re_embed=re_embed)
        truth = ds.exact_neighbors(k, embedder=e, metric=metric, re_embed=re_embed)
        nq = len(Q) if n_queries is None else min(n_queries, len(Q))
        cases = []
        for sel in filter_selectivities:
            table = {**(filter_table or {}), "selectivity": sel}
            qf = ds.query_filters(table, embedder=e, metric=metric)
            ftruth = ds.exact_neighbors(k, embedder=e, metric=metric, filters=qf)
            cases.append(FilterCase(float(sel), qf.subset(nq), ftruth[:nq]))
        judged = ds.judgments()
        return cls(
            ds.name,
            X,
            Q[:nq],
            list(ds.corpus.texts),
            list(ds.queries.texts[:nq]),
            truth[:nq],
            metric,
            cases,
            dict(ds.corpus.attributes) if cases else {},
            None if judged is None else judged.subset(nq),
        )


def index_param_names(name: str, dim: int, metric: str) -> tuple[set[str], set[str]]:
    """(build parameter names, query parameter names) the index ``name`` accepts.

    ``rescore`` is a query parameter of every index here (see the module docstring).
    """
    probe = indexes.create(name, dim=dim, metric=metric)
    return set(probe.build_params), set(probe.query_params) | {"rescore"}


def check_grid(
    index_names: Sequence[str],
    dim: int,
    metric: str,
    build_grid: Mapping[str, Any],
    query_grid: Mapping[str, Any],
) -> None:
    """Raise :class:`ConfigError` for a grid parameter that none of the indexes takes."""
    b_all: set[str] = set()
    q_all: set[str] = set()
    for name in index_names:
        b, q = index_param_names(name, dim, metric)
        b_all |= b
        q_all |= q
    for given, valid, what in ((build_grid, b_all, "build"), (query_grid, q_all, "query")):
        bad = sorted(set(given) - valid)
        if bad:
            raise ConfigError(
                f"{what} parameter {bad[0]!r} applies to none of {', '.join(index_names)}; "
                f"valid: {', '.join(sorted(valid))}"
            )


def synthetic_data(n: int, *, dim: int, n_queries: int, seed: int, k: int) -> SweepData:
    """The synthetic corpus of size ``n`` (deterministic: the same on every machine) as sweep data."""
    return SweepData.from_dataset(
        datasets.load("synthetic", n=n, dim=dim, n_queries=n_queries, seed=seed), k=k
    )

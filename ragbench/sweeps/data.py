"""The data a sweep measures against (:class:`SweepData`, :class:`FilterCase`) and its parameter grid."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import datasets, embedders, indexes
from ..attributes import QueryFilters
from ..datasets.neighbors import brute_force_neighbors, top_k_agreement
from ..embedders.labels import config_label
from ..errors import ConfigError
from ..judged import Judgments
from ..pipeline.capabilities import Describes, EmbedsCorpusApart, HasReferenceEmbedder

__all__ = [
    "FilterCase",
    "SweepData",
    "check_grid",
    "grid_of",
    "index_param_names",
    "split_scope",
    "synthetic_data",
]


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
    #: what embedded the vectors (``minilm:onnx-int8+query-only``, :func:`config_label`);
    #: None for vectors that came with the dataset (synthetic, ``precomputed``)
    embedder: str | None = None
    #: the embedder's vectors against its reference's (MiniLM on torch) over the sweep's
    #: queries (:func:`~ragbench.datasets.neighbors.top_k_agreement`); None for the reference
    embed_agreement: dict[str, Any] | None = None

    @property
    def dim(self) -> int:
        """The vectors' width."""
        return int(self.vectors.shape[1])

    @classmethod
    def from_dataset(
        cls,
        ds: Any,
        *,
        k: int,
        n_queries: int | None = None,
        embedder: str | None = None,
        embedder_params: Mapping[str, Any] | None = None,
        metric: str | None = None,
        re_embed: bool = False,
        filter_selectivities: Sequence[float] = (),
        filter_table: Mapping[str, Any] | None = None,
    ) -> SweepData:
        """Vectors and exact neighbours of ``ds``; ``re_embed`` as in ``Dataset.corpus_vectors``.

        ``embedder_params``: the embedder's own keys (``runtime``, ``query_only``:
        the corpus from the torch runtime, the queries from ``runtime``, and the
        exact neighbours over exactly those vectors). ``filter_selectivities``: one
        :class:`FilterCase` each, drawn as ``filter_table`` says (``attribute``,
        ``correlated``, ``seed``; see :meth:`ragbench.datasets.Dataset.query_filters`)
        at that selectivity.
        """
        emb = embedder or ds.default_embedder
        metric = metric or ds.metric
        vectors = _Vectors.of(ds, emb, embedder_params or {}, k, metric, re_embed)
        X, Q, e = vectors.corpus, vectors.queries, vectors.embedder
        nq = len(Q) if n_queries is None else min(n_queries, len(Q))
        cases = []
        for sel in filter_selectivities:
            table = {**(filter_table or {}), "selectivity": sel}
            qf = ds.query_filters(table, embedder=e, metric=metric)
            ftruth = vectors.truth_of(ds, k, metric, qf)
            cases.append(FilterCase(float(sel), qf.subset(nq), ftruth[:nq]))
        judged = ds.judgments()
        return cls(
            ds.name,
            X,
            Q[:nq],
            list(ds.corpus.texts),
            list(ds.queries.texts[:nq]),
            vectors.truth_of(ds, k, metric)[:nq],
            metric,
            cases,
            dict(ds.corpus.attributes) if cases else {},
            None if judged is None else judged.subset(nq),
            vectors.label,
            vectors.agreement(ds, nq, metric),
        )


@dataclass
class _Vectors:
    """One embedder configuration's corpus and query vectors of a dataset."""

    embedder: Any  # an Embedder, or "precomputed" (the dataset's own query vectors)
    corpus: np.ndarray
    queries: np.ndarray
    #: the corpus comes from another embedder than the queries (MiniLM's ``query_only``)
    mixed: bool
    label: str | None
    re_embed: bool = False

    @classmethod
    def of(
        cls, ds: Any, name: str, params: Mapping[str, Any], k: int, metric: str, re_embed: bool
    ) -> _Vectors:
        if name == "precomputed":
            if params:
                raise ConfigError(
                    "embedder 'precomputed' takes no parameters: it reads the "
                    "dataset's own query vectors"
                )
            return cls("precomputed", ds.vectors, ds.query_vectors_precomputed, False, None)
        e = embedders.create(name, **params)
        of_corpus = e.corpus_embedder if isinstance(e, EmbedsCorpusApart) else e
        X = ds.corpus_vectors(of_corpus, re_embed=re_embed)
        Q = ds.query_vectors(e, re_embed=re_embed)
        about = e.describe() if isinstance(e, Describes) else None
        return cls(e, X, Q, of_corpus is not e, config_label(name, about), re_embed)

    def truth_of(self, ds: Any, k: int, metric: str, filters: QueryFilters | None = None) -> Any:
        """The exact top ``k`` of every query (under ``filters``): over these very vectors when
        the corpus and the queries come from two embedders, else the dataset's cached one."""
        if self.mixed:
            allowed = None if filters is None else filters.masks
            return brute_force_neighbors(self.queries, self.corpus, k, metric, allowed=allowed)
        if filters is not None:
            return ds.exact_neighbors(k, embedder=self.embedder, metric=metric, filters=filters)
        return ds.exact_neighbors(k, embedder=self.embedder, metric=metric, re_embed=self.re_embed)

    def agreement(self, ds: Any, nq: int, metric: str) -> dict[str, Any] | None:
        """:func:`top_k_agreement` of the first ``nq`` queries with the reference embedder's."""
        e = self.embedder
        ref = e.reference_embedder if isinstance(e, HasReferenceEmbedder) else None
        if ref is None:
            return None
        theirs = (ds.query_vectors(ref)[:nq], ds.corpus_vectors(ref))
        got = top_k_agreement((self.queries[:nq], self.corpus), theirs, metric)
        return {"reference": "minilm torch", **got}


def index_param_names(name: str, dim: int, metric: str) -> tuple[set[str], set[str]]:
    """(build parameter names, query parameter names) the index ``name`` accepts.

    ``rescore`` is a query parameter of every index here (see the module docstring).
    """
    probe = indexes.create(name, dim=dim, metric=metric)
    return set(probe.build_params), set(probe.query_params) | {"rescore"}


def split_scope(key: str) -> tuple[str | None, str]:
    """A grid key's (index it is scoped to, parameter name): ``lancedb.ef`` → ``("lancedb", "ef")``,
    ``ef`` → ``(None, "ef")`` (every index that takes ``ef``)."""
    index, dot, name = key.partition(".")
    return (index, name) if dot else (None, key)


def grid_of(index: str, takes: set[str], grid: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``grid`` the index ``index`` (which takes the parameters ``takes``) measures.

    An unscoped key (``ef``) applies to every index that takes it; a key scoped to
    one index (``lancedb.ef``) to that index only, in place of the unscoped one of
    the same name. Keys keep the order they were given in.
    """
    out: dict[str, Any] = {}
    for key, values in grid.items():
        scope, name = split_scope(key)
        if scope == index or (scope is None and name in takes and f"{index}.{name}" not in grid):
            out[name] = values
    return out


def check_grid(
    index_names: Sequence[str],
    dim: int,
    metric: str,
    build_grid: Mapping[str, Any],
    query_grid: Mapping[str, Any],
) -> None:
    """Raise :class:`ConfigError` for a grid parameter no index it names takes.

    An unscoped parameter (``ef``) must be taken by at least one of the indexes (the
    others skip it); one scoped to an index (``lancedb.ef``, :func:`grid_of`) by that
    index, which must be one of ``index_names``.
    """
    takes = {name: index_param_names(name, dim, metric) for name in index_names}
    for i, (given, what) in enumerate(((build_grid, "build"), (query_grid, "query"))):
        every = set().union(*(t[i] for t in takes.values()))
        for key in given:
            scope, name = split_scope(key)
            if scope is None and name not in every:
                raise ConfigError(
                    f"{what} parameter {name!r} applies to none of {', '.join(index_names)}; "
                    f"valid: {', '.join(sorted(every))}"
                )
            if scope is None:
                continue
            if not scope or not name:
                raise ConfigError(f"{what} parameter {key!r}: expected NAME or INDEX.NAME")
            if scope not in takes:
                raise ConfigError(
                    f"{what} parameter {key!r} is scoped to {scope!r}, which is not among "
                    f"the indexes ({', '.join(index_names)})"
                )
            if name not in takes[scope][i]:
                raise ConfigError(
                    f"{what} parameter {key!r}: {scope} has no {what} parameter {name!r}; "
                    f"valid: {', '.join(sorted(takes[scope][i]))}"
                )


def synthetic_data(n: int, *, dim: int, n_queries: int, seed: int, k: int) -> SweepData:
    """The synthetic corpus of size ``n`` (deterministic: the same on every machine) as sweep data."""
    return SweepData.from_dataset(
        datasets.load("synthetic", n=n, dim=dim, n_queries=n_queries, seed=seed), k=k
    )

"""The parts of a pipeline: its backends (:class:`Components`) and what pipelines share.

:class:`Components` creates every backend a config names when the pipeline
is created, typed with each stage package's Protocol, so a bad name or
parameter fails before any expensive set-up. :class:`SharedParts` lets
pipelines set up together (``ragbench compare``) reuse datasets, vectors,
built indexes and exact neighbours.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import codecs, embedders, generators, indexes, rerankers, transports
from .._registry import check_params
from ..codecs import Codec
from ..datasets import Dataset
from ..embedders import Embedder
from ..generators import Generator
from ..indexes import Index
from ..metrics import rerank_metric
from ..rerankers import Reranker
from ..settings import Config
from ..transports import Transport
from .capabilities import ChecksQueryParams

__all__ = ["Components", "Embedding", "SharedParts", "freeze"]


def freeze(value: Any) -> Hashable:
    """A hashable, order-independent key for nested config values."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value if isinstance(value, Hashable) else repr(value)


@dataclass
class SharedParts:
    """Parts that pipelines set up together can share (``ragbench compare``).

    Each table is keyed by what determines its part, so two pipelines share
    a built index only when dataset, embedder and build parameters all match.
    """

    datasets: dict[Hashable, Dataset] = field(default_factory=dict)
    embedders: dict[Hashable, Embedder] = field(default_factory=dict)
    vectors: dict[Hashable, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    indexes: dict[Hashable, Index] = field(default_factory=dict)
    truth: dict[Hashable, np.ndarray] = field(default_factory=dict)
    #: (dataset, index width, ``[retrieve]`` table) whose early index check passed
    #: (:func:`ragbench.pipeline.build.check_first`), so it runs once for each
    checked: set[Hashable] = field(default_factory=set)


@dataclass
class Embedding:
    """The query-time embedder and the corpus and query vectors it implies.

    ``corpus``: float32 ``(n, d)``; ``queries``: float32 ``(n_queries, d)``.
    """

    name: str
    params: dict[str, Any]
    embedder: Embedder
    corpus: np.ndarray
    queries: np.ndarray
    #: the corpus vectors come from another embedder (``query_only``): exact search is
    #: over these arrays, not the dataset's cache for one embedder
    mixed: bool = False

    @property
    def key(self) -> Hashable:
        return (self.name, freeze(self.params))


@dataclass
class Components:
    """Every backend of a config, created (not started) when the pipeline is.

    Creating them checks each backend name and parameter, so a bad config
    fails before any expensive set-up step.
    """

    embedder: Embedder | None  # None: the dataset's default, or "precomputed" (made at set-up)
    reranker: Reranker | None  # None: rerank = "none", the retriever's own top k
    codec: Codec
    transport: Transport
    generator: Generator

    @classmethod
    def create(cls, cfg: Config) -> Components:
        emb = cfg.embed.backend
        embedder = None
        if emb is not None and emb != "precomputed":
            embedder = embedders.create(emb, **cfg.embed.params())
        elif emb == "precomputed":
            embedders.registry.factory(emb)
        r = cfg.retrieve
        backend = str(r.backend)
        build = indexes.with_dsn(backend, r.build_params(), r.dsn)
        probe = indexes.create(backend, dim=indexes.PROBE_DIM, metric=r.metric or "ip", **build)
        search = r.search_params()
        if isinstance(probe, ChecksQueryParams):
            probe.check_query_params(search)  # names and values
        else:  # a third-party index: names only
            check_params(f"index {backend!r} search", search, probe.query_params)
        reranker = None
        if cfg.rerank.backend != "none":
            metric = rerank_metric(r.metric or "ip")
            reranker = rerankers.create(
                str(cfg.rerank.backend), metric=metric, **cfg.rerank.params()
            )
        return cls(
            embedder=embedder,
            reranker=reranker,
            codec=codecs.create(str(cfg.serialize.backend), **cfg.serialize.params()),
            transport=transports.create(str(cfg.transport.backend), **cfg.transport.params()),
            generator=generators.create(str(cfg.generate.backend), **cfg.generate.params()),
        )

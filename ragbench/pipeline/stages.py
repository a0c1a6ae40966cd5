"""The stage objects of the request path, one class per stage (see :data:`STAGES` for the order).

A stage has ``name`` and ``__call__(ctx)``; it reads and writes fields of the
request's :class:`~ragbench.pipeline.context.RequestContext` and nothing
else, so stages of concurrent requests never share state. The transport and
generate stages also have ``acall(ctx)`` for a backend with an async client
(``awaitable`` says whether they do).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from ..codecs import Codec
from ..datasets import Dataset
from ..embedders import Embedder
from ..errors import ConfigError, InputError
from ..generators import FirstToken, Generator
from ..indexes import Index
from ..rerankers import Reranker
from ..rerankers.numpy_reranker import NumpyReranker
from ..rerankers.texts import exact_hit_scores
from ..timing import Parts
from ..transports import FarSide, Transport
from ..types import Hit, RetrievalResult
from .cache import LruTtlCache
from .capabilities import (
    RanksTexts,
    SplitsEmbed,
    SplitsSearch,
    SupportsAsyncFirstToken,
    SupportsAsyncSend,
)
from .context import RequestContext

__all__ = [
    "parts_tuple",
    "EmbedStage",
    "FilteredRetrieveStage",
    "GenerateStage",
    "RerankStage",
    "RetrieveStage",
    "SerializeStage",
    "TextRerankStage",
    "Stage",
    "TransportStage",
    "TruncateStage",
]


def parts_tuple(parts: Parts | None) -> tuple[int, int, int] | None:
    """An index's or an embedder's ``last_parts()`` (a :class:`~ragbench.timing.Parts`) as its
    three times in order, ns: what a request record keeps (the names are in the index's info;
    an embedder's are tokenize, forward, pool)."""
    if parts is None:
        return None
    if isinstance(parts, Parts):
        return parts.ns
    return _legacy_parts(parts)


def _legacy_parts(parts: Any) -> tuple[int, int, int]:
    """A ``(send, server, decode)`` tuple or a mapping of three parts, as ``last_parts()``
    returned before :class:`~ragbench.timing.Parts` (accepted, with a warning, for one release)."""
    warnings.warn(
        f"{type(parts).__name__} from last_parts() is deprecated: return a "
        "ragbench.timing.Parts (names and ns); the old shapes are refused in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    values = list(parts.values()) if isinstance(parts, Mapping) else list(parts)
    if len(values) != 3:
        raise InputError(f"last_parts() gave {len(values)} parts, not three: {parts!r}")
    return (int(values[0]), int(values[1]), int(values[2]))


def _query_of(kind: str) -> Any:
    """``ctx -> the query an index of input_kind kind searches with``: its text (in a list) or
    a :class:`~ragbench.indexes.hybrid_index.Pair` of vector and text (``hybrid``); ``None``
    for an index of vectors (the stage reads ``ctx.query_vector`` itself)."""
    if kind == "texts":
        return lambda ctx: [ctx.query]
    if kind == "both":
        from ..indexes.hybrid_index import Pair

        return lambda ctx: Pair(ctx.query_vector, [ctx.query])
    return None  # the query vector, read inline (the dense path pays no call)


class Stage(Protocol):
    """One step of the request path: reads and writes the request's context."""

    name: str

    def __call__(self, ctx: RequestContext) -> None: ...


class EmbedStage:
    """The query's vector; an embedder that times its parts (MiniLM) leaves
    ``ctx.embed_parts`` = (tokenize, forward, pool) ns."""

    name = "embed"

    def __init__(self, embedder: Embedder) -> None:
        self._embed = embedder.embed
        self._parts = embedder.last_parts if isinstance(embedder, SplitsEmbed) else None

    def __call__(self, ctx: RequestContext) -> None:
        ctx.query_vector = self._embed([ctx.query])
        if self._parts is not None:
            ctx.embed_parts = parts_tuple(self._parts())


class RetrieveStage:
    name = "retrieve"

    def __init__(self, index: Index, k_candidates: int, search_params: Mapping[str, Any]) -> None:
        self._search = index.search
        self._query = _query_of(index.input_kind)
        self._k = k_candidates
        self._params = dict(search_params)
        # an index behind a client (pgvector): its (send, server, decode) split of the search
        self._parts = index.last_parts if isinstance(index, SplitsSearch) else None

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        query = ctx.query_vector if self._query is None else self._query(ctx)
        ids, scores = self._search(query, self._k, **self._params)
        ctx.candidate_ids = ids[0]
        ctx.candidate_scores = scores[0]
        if self._parts is not None:
            ctx.retrieve_parts = parts_tuple(self._parts())


class FilteredRetrieveStage:
    """The retrieve stage with a filter per query: ``search(..., filter=mask, strategy=...)``.

    ``masks``: bool ``(nq, n)``, row ``ctx.index`` is the request's allowed
    corpus rows. Whatever the index returns outside it (or ``-1`` padding) is
    dropped here, so no later stage can return a row the filter excludes. A
    query whose row allows nothing is not searched: its candidates are empty.
    """

    name = "retrieve"

    def __init__(
        self,
        index: Index,
        k_candidates: int,
        search_params: Mapping[str, Any],
        masks: np.ndarray,
        strategy: str | None,
        specs: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self._search = index.search
        self._specs = specs  # the filters as specs: ``where=`` for a database index
        self._query = _query_of(index.input_kind)
        self._k = k_candidates
        self._params = dict(search_params)
        if strategy is not None:
            self._params["strategy"] = strategy
        self._masks = masks
        # (nq,) bool: whether each query's filter allows any row
        self._any: np.ndarray = np.any(masks, axis=1)
        self._parts = index.last_parts if isinstance(index, SplitsSearch) else None

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        query = ctx.query_vector if self._query is None else self._query(ctx)
        allowed = self._masks[ctx.index]
        if not self._any[ctx.index]:
            # A filter that matches no row: the answer is empty, not an aborted run (its exact
            # truth is all pads too; the run's filter note counts these queries).
            ctx.candidate_ids = np.zeros(0, dtype=np.int64)
            ctx.candidate_scores = np.zeros(0, dtype=np.float32)
            return
        if self._specs is None:
            ids, scores = self._search(query, self._k, filter=allowed, **self._params)
        else:
            where = self._specs[ctx.index]
            ids, scores = self._search(query, self._k, filter=allowed, where=where, **self._params)
        if self._parts is not None:
            ctx.retrieve_parts = parts_tuple(self._parts())
        ids, scores = ids[0], scores[0]
        keep = ids >= 0
        keep[keep] = allowed[ids[keep]]
        ctx.candidate_ids = ids[keep]
        ctx.candidate_scores = scores[keep]


class RerankStage:
    name = "rerank"

    def __init__(
        self, reranker: Reranker, vectors: np.ndarray, k: int, cache: LruTtlCache | None
    ) -> None:
        self._rerank = reranker.rerank
        self._vectors = vectors
        self._k = k
        self._cache = cache

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        ctx.hit_ids, ctx.hit_scores = self._rerank(
            ctx.query_vector[0], ctx.candidate_ids, self._vectors, self._k
        )
        if self._cache is not None:
            self._cache.put(ctx.cache_key, ctx.hit_ids, ctx.hit_scores)


class TextRerankStage:
    """``rerank`` by a reranker of texts (a cross-encoder): the query and the candidates' passages.

    The final k are in the reranker's order, each hit with its exact score
    (the metric's); the exact top k of the same candidates is computed after
    the request's stamps (``ctx.exact_top``), and recall is of it, so recall
    stays the retriever's whatever the reranker's weights.
    """

    name = "rerank"

    def __init__(
        self,
        reranker: RanksTexts,
        exact: NumpyReranker,
        texts: Sequence[str],
        vectors: np.ndarray,
        k: int,
        cache: LruTtlCache | None,
    ) -> None:
        self._rerank = reranker.rerank_texts
        self._exact = exact.rerank
        self._metric = exact.metric
        self._texts, self._vectors, self._k, self._cache = texts, vectors, k, cache

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        ids, _ = self._rerank(ctx.query, ctx.candidate_ids, self._texts, self._k)
        query = ctx.query_vector[0]
        ctx.hit_ids = ids
        ctx.hit_scores = exact_hit_scores(query, ids, self._vectors, self._metric)
        ctx.exact_top = partial(self._exact, query, ctx.candidate_ids, self._vectors, self._k)
        if self._cache is not None:
            self._cache.put(ctx.cache_key, ctx.hit_ids, ctx.hit_scores)


class TruncateStage:
    """``rerank = "none"``: keep the retriever's own top k and its scores."""

    name = "rerank"

    def __init__(self, k: int, cache: LruTtlCache | None) -> None:
        self._k = k
        self._cache = cache

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        ctx.hit_ids = ctx.candidate_ids[: self._k]
        ctx.hit_scores = ctx.candidate_scores[: self._k]
        if self._cache is not None:
            self._cache.put(ctx.cache_key, ctx.hit_ids, ctx.hit_scores)


class SerializeStage:
    """Builds the :class:`RetrievalResult` from hit ids and encodes it (both are serialize cost)."""

    name = "serialize"

    def __init__(
        self,
        codec: Codec,
        dataset: Dataset,
        vectors: np.ndarray,
        with_embeddings: bool,
        with_metadata: bool,
    ) -> None:
        self._encode = codec.encode
        self._ids = dataset.corpus.ids
        self._texts = dataset.corpus.texts
        self._meta = dataset.corpus.metadata if with_metadata else None
        self._vectors = vectors if with_embeddings else None

    def __call__(self, ctx: RequestContext) -> None:
        ctx.payload = self._encode(
            self.result(ctx.query_id, ctx.query, ctx.hit_ids, ctx.hit_scores)
        )

    def result(
        self, query_id: str, query: str, rows: np.ndarray, scores: np.ndarray
    ) -> RetrievalResult:
        """The :class:`RetrievalResult` this stage encodes for the corpus ``rows`` found with
        ``scores`` (a negative row is no hit): ids, texts, metadata and vectors as configured.

        The measured fast path of issue 27's "trim ragbench's own per-hit object work": the
        fields come from the loaded dataset (checked when it was read) and the index's float
        scores, so each hit is made by :meth:`Hit.unchecked` (no frozen ``__init__``, no
        ``__post_init__``). ``tests/pipeline/test_serialize_result.py`` holds it, by
        property-based tests, to exactly what :meth:`result_plain` makes."""
        ids, texts, meta, vectors = self._ids, self._texts, self._meta, self._vectors
        hit = Hit.unchecked
        hits: list[Hit] = []
        append = hits.append
        for i, s in zip(rows.tolist(), scores.tolist(), strict=True):
            if i >= 0:
                append(
                    hit(
                        ids[i],
                        s,
                        texts[i],
                        meta[i] if meta is not None else {},
                        vectors[i].tobytes() if vectors is not None else None,
                    )
                )
        return RetrievalResult.unchecked(query_id, query, hits)

    def result_plain(
        self, query_id: str, query: str, rows: np.ndarray, scores: np.ndarray
    ) -> RetrievalResult:
        """:meth:`result` through the dataclasses' own constructors (the reference path)."""
        ids, texts, meta, vectors = self._ids, self._texts, self._meta, self._vectors
        hits = [
            Hit(
                ids[i],
                s,
                texts[i],
                meta[i] if meta is not None else {},
                vectors[i].tobytes() if vectors is not None else None,
            )
            for i, s in zip(rows.tolist(), scores.tolist(), strict=True)
            if i >= 0
        ]
        return RetrievalResult(query_id, query, hits)


class TransportStage:
    """Sends the payload; the far side decodes it and builds the prompt (split out later)."""

    name = "transport"

    def __init__(self, transport: Transport) -> None:
        self._send = transport.send
        self._kind = type(transport).__name__
        # a transport with an async client (``asend``) is awaited on an event loop
        self._asend = transport.asend if isinstance(transport, SupportsAsyncSend) else None
        self.awaitable = self._asend is not None

    def __call__(self, ctx: RequestContext) -> None:
        self._keep(ctx, self._send(ctx.payload, ctx.query))

    async def acall(self, ctx: RequestContext) -> None:
        """The same, sent with the transport's async client (``asend``), on the running loop."""
        if self._asend is None:
            raise ConfigError(f"transport {self._kind} has no async client")
        self._keep(ctx, await self._asend(ctx.payload, ctx.query))

    @staticmethod
    def _keep(ctx: RequestContext, far: FarSide) -> None:
        ctx.far = far
        ctx.prompt = far.prompt
        ctx.prompt_tokens = far.prompt_tokens


class GenerateStage:
    name = "generate"

    def __init__(self, generator: Generator) -> None:
        self._first = generator.first_token
        self._kind = type(generator).__name__
        # a generator with an async streaming client (``afirst_token``) is awaited on a loop
        self._afirst = (
            generator.afirst_token if isinstance(generator, SupportsAsyncFirstToken) else None
        )
        self.awaitable = self._afirst is not None
        #: no LLM call at all: nothing worth moving off an event loop
        self.instant = generator.name == "none"

    def __call__(self, ctx: RequestContext) -> None:
        self._keep(ctx, self._first(ctx.prompt, ctx.prompt_tokens))

    async def acall(self, ctx: RequestContext) -> None:
        """The same, streamed with the generator's async client (``afirst_token``)."""
        if self._afirst is None:
            raise ConfigError(f"generator {self._kind} has no async client")
        self._keep(ctx, await self._afirst(ctx.prompt, ctx.prompt_tokens))

    @staticmethod
    def _keep(ctx: RequestContext, first: FirstToken) -> None:
        ctx.first_token = first.text
        if first.prompt_tokens is not None:
            ctx.model_prompt_tokens = first.prompt_tokens
        ctx.decode_rest = first.decode_rest

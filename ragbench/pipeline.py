"""The request path, in order, and the loop that times it.

One request flows through these stages (the only place their order lives)::

    embed → cache → retrieve → rerank → serialize → transport → deserialize → prompt → generate

Each stage is an object with ``name`` and ``__call__(ctx)`` reading and
writing one :class:`RequestContext`. The loop stamps ``perf_counter_ns``
between stages (see :func:`ragbench.timing.run_stages`). ``deserialize`` and
``prompt`` run on the far side of the transport; their times come back in
the transport's reply and are split out of the transport stage afterwards,
so per-stage times still add up to the request total exactly.

Model loading, corpus embedding, index build, JIT compilation, server
start-up and warm-up requests are timed as setup, never as request latency.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from time import perf_counter_ns
from typing import Any, NamedTuple

import numpy as np

from . import codecs, embedders, generators, indexes, orders, rerankers, threads, transports
from . import otel as tracing
from ._registry import check_params
from .attributes import QueryFilters
from .config import ConfigSource, backend_params, load_config
from .datasets import Dataset
from .errors import (
    ConfigError,
    GeneratorError,
    IndexFileError,
    KTooLargeError,
    NotBuiltError,
    RagbenchError,
    TransportError,
)
from .files import check_writable
from .indexes import builds
from .metrics import recall_at_k, rerank_metric
from .report import Report
from .rerankers.texts import exact_hit_scores, start_text_reranker
from .timing import SetupTimes, run_stages, run_stages_cpu
from .types import Hit, RetrievalResult
from .validate import check_memory

__all__ = [
    "STAGES",
    "Components",
    "Pipeline",
    "RequestContext",
    "RequestRecord",
    "SharedParts",
    "far_fields",
    "interleave",
]

#: Every stage in request order. A pipeline runs these, minus ``cache`` when it is off.
STAGES = (
    "embed",
    "cache",
    "retrieve",
    "rerank",
    "serialize",
    "transport",
    "deserialize",
    "prompt",
    "generate",
)


#: Exported requests between flushes when exporting in bulk (a batch span
#: processor holds 2048 spans by default and drops what overflows).
TRACE_FLUSH_EVERY = 100

NO_IDS = np.empty(0, dtype=np.int64)
NO_IDS.flags.writeable = False


class RequestContext:
    """Everything one request reads and writes on its way through the stages."""

    # written by the stage that owns each field before any later stage reads it
    query_vector: np.ndarray
    candidate_ids: np.ndarray
    candidate_scores: np.ndarray
    hit_ids: np.ndarray
    hit_scores: np.ndarray
    prompt: str
    first_token: str

    __slots__ = (
        "index",
        "query_id",
        "query",
        "cache_key",
        "query_vector",
        "cached",
        "candidate_ids",
        "candidate_scores",
        "hit_ids",
        "hit_scores",
        "payload",
        "far",
        "prompt",
        "prompt_tokens",
        "first_token",
        "model_prompt_tokens",
        "decode_rest",
        "retrieve_parts",
        "exact_top",
    )

    def __init__(self, index: int, query_id: str, query: str) -> None:
        # Only what a later stage may read before an earlier one writes it is
        # set here; the rest is written by the stage that owns it.
        self.index = index
        self.query_id = query_id
        self.query = query
        self.cache_key = query  # the query and, when filtered, its filter
        self.cached = False
        self.hit_ids = NO_IDS
        self.payload = b""
        self.far: transports.FarSide | None = None
        self.prompt_tokens = 0
        self.model_prompt_tokens = -1  # the LLM's own count, when its generator reports one
        self.decode_rest: Callable[[], tuple[int, ...]] | None = None
        self.retrieve_parts: tuple[int, int, int] | None = None  # (send, server, decode) ns
        # a text reranker's exact top k of the candidates, computed after the stamps (recall)
        self.exact_top: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None


# ---------------------------------------------------------------- stages


class EmbedStage:
    name = "embed"

    def __init__(self, embedder: Any) -> None:
        self._embed = embedder.embed

    def __call__(self, ctx: RequestContext) -> None:
        ctx.query_vector = self._embed([ctx.query])


class LruTtlCache:
    """Query text → final (ids, scores), least recently used evicted, entries expire after ``ttl_s``.

    Safe to share between request threads (one lock around each lookup and insert).
    """

    def __init__(self, size: int, ttl_s: float) -> None:
        self.size = size
        self.ttl_ns = int(ttl_s * 1e9)
        self._data: OrderedDict[str, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is None or perf_counter_ns() - entry[0] > self.ttl_ns:
                if entry is not None:
                    del self._data[key]
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[1], entry[2]

    def clear(self) -> None:
        """Forget every entry (the hit and miss counts stay)."""
        with self._lock:
            self._data.clear()

    def put(self, key: str, ids: np.ndarray, scores: np.ndarray) -> None:
        with self._lock:
            self._data[key] = (perf_counter_ns(), ids, scores)
            self._data.move_to_end(key)
            if len(self._data) > self.size:
                self._data.popitem(last=False)


class CacheStage:
    name = "cache"

    def __init__(self, cache: LruTtlCache) -> None:
        self.cache = cache

    def __call__(self, ctx: RequestContext) -> None:
        found = self.cache.get(ctx.cache_key)
        if found is not None:
            ctx.cached = True
            ctx.hit_ids, ctx.hit_scores = found


class RetrieveStage:
    name = "retrieve"

    def __init__(self, index: Any, k_candidates: int, search_params: Mapping[str, Any]) -> None:
        self._search = index.search
        self._texts = index.input_kind == "texts"
        self._k = k_candidates
        self._params = dict(search_params)
        # an index behind a client (pgvector): its (send, server, decode) split of the search
        self._parts = getattr(index, "last_parts", None)

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        query = [ctx.query] if self._texts else ctx.query_vector
        ids, scores = self._search(query, self._k, **self._params)
        ctx.candidate_ids = ids[0]
        ctx.candidate_scores = scores[0]
        if self._parts is not None:
            ctx.retrieve_parts = parts_tuple(self._parts())


class FilteredRetrieveStage:
    """The retrieve stage with a filter per query: ``search(..., filter=mask, strategy=...)``.

    ``masks``: bool ``(nq, n)``, row ``ctx.index`` is the request's allowed
    corpus rows. Whatever the index returns outside it (or ``-1`` padding) is
    dropped here, so no later stage can return a row the filter excludes.
    """

    name = "retrieve"

    def __init__(
        self,
        index: Any,
        k_candidates: int,
        search_params: Mapping[str, Any],
        masks: np.ndarray,
        strategy: str | None,
    ) -> None:
        self._search = index.search
        self._texts = index.input_kind == "texts"
        self._k = k_candidates
        self._params = dict(search_params)
        if strategy is not None:
            self._params["strategy"] = strategy
        self._masks = masks
        self._parts = getattr(index, "last_parts", None)

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        query = [ctx.query] if self._texts else ctx.query_vector
        allowed = self._masks[ctx.index]
        ids, scores = self._search(query, self._k, filter=allowed, **self._params)
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
        self, reranker: Any, vectors: np.ndarray, k: int, cache: LruTtlCache | None
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
        reranker: Any,
        exact: Any,
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
        codec: Any,
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
        ids, texts, meta, vectors = self._ids, self._texts, self._meta, self._vectors
        hits = []
        for i, s in zip(ctx.hit_ids.tolist(), ctx.hit_scores.tolist(), strict=True):
            if i < 0:
                continue
            hits.append(
                Hit(
                    ids[i],
                    s,
                    texts[i],
                    meta[i] if meta is not None else {},
                    vectors[i].tobytes() if vectors is not None else None,
                )
            )
        ctx.payload = self._encode(RetrievalResult(ctx.query_id, ctx.query, hits))


class TransportStage:
    """Sends the payload; the far side decodes it and builds the prompt (split out later)."""

    name = "transport"

    def __init__(self, transport: Any) -> None:
        self._send = transport.send
        # a transport with an async client (``asend``) is awaited on an event loop
        self._asend = getattr(transport, "asend", None)
        self.awaitable = self._asend is not None

    def __call__(self, ctx: RequestContext) -> None:
        self._keep(ctx, self._send(ctx.payload, ctx.query))

    async def acall(self, ctx: RequestContext) -> None:
        """The same, sent with the transport's async client (``asend``), on the running loop."""
        if self._asend is None:
            raise ConfigError(f"transport {type(self._send.__self__).__name__} has no async client")
        self._keep(ctx, await self._asend(ctx.payload, ctx.query))

    @staticmethod
    def _keep(ctx: RequestContext, far: transports.FarSide) -> None:
        ctx.far = far
        ctx.prompt = far.prompt
        ctx.prompt_tokens = far.prompt_tokens


class GenerateStage:
    name = "generate"

    def __init__(self, generator: Any) -> None:
        self._first = generator.first_token
        # a generator with an async streaming client (``afirst_token``) is awaited on a loop
        self._afirst = getattr(generator, "afirst_token", None)
        self.awaitable = self._afirst is not None
        #: no LLM call at all: nothing worth moving off an event loop
        self.instant = getattr(generator, "name", "") == "none"

    def __call__(self, ctx: RequestContext) -> None:
        self._keep(ctx, self._first(ctx.prompt, ctx.prompt_tokens))

    async def acall(self, ctx: RequestContext) -> None:
        """The same, streamed with the generator's async client (``afirst_token``)."""
        if self._afirst is None:
            raise ConfigError(
                f"generator {type(self._first.__self__).__name__} has no async client"
            )
        self._keep(ctx, await self._afirst(ctx.prompt, ctx.prompt_tokens))

    @staticmethod
    def _keep(ctx: RequestContext, first: Any) -> None:
        ctx.first_token = first.text
        if first.prompt_tokens is not None:
            ctx.model_prompt_tokens = first.prompt_tokens
        ctx.decode_rest = first.decode_rest


# ---------------------------------------------------------------- parts


class RequestRecord(NamedTuple):
    """What one measured request leaves behind; everything else is derived in :meth:`Pipeline.report`."""

    stamps: list[int]  # len(loop stages) + 1 perf_counter_ns stamps
    cpu_stamps: list[int] | None  # the same in thread_time_ns, with [run] cpu_time
    far: Any  # transports.FarSide (or the same fields) from the far side, or None
    hit_ids: np.ndarray  # the final hits (recall is computed from them)
    payload_bytes: int
    prompt_tokens: int
    query_row: int  # row of the query in the dataset
    model_prompt_tokens: int = -1  # the LLM's own prompt token count (-1: not reported)
    inter_token_ns: tuple[int, ...] = ()  # each next token's latency, decoded after the stamps
    retrieve_parts: tuple[int, int, int] | None = None  # the index's (send, server, decode) ns
    exact_ids: np.ndarray | None = None  # a text reranker's exact top k of the candidates (recall)


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
    embedders: dict[Hashable, Any] = field(default_factory=dict)
    vectors: dict[Hashable, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    indexes: dict[Hashable, Any] = field(default_factory=dict)
    truth: dict[Hashable, np.ndarray] = field(default_factory=dict)


@dataclass
class Embedding:
    """The query-time embedder and the corpus and query vectors it implies."""

    name: str
    params: dict[str, Any]
    embedder: Any
    corpus: np.ndarray
    queries: np.ndarray

    @property
    def key(self) -> Hashable:
        return (self.name, freeze(self.params))


@dataclass
class Components:
    """Every backend of a config, created (not started) when the pipeline is.

    Creating them checks each backend name and parameter, so a bad config
    fails before any expensive set-up step.
    """

    embedder: Any  # None: the dataset's default, or "precomputed" (made at set-up)
    reranker: Any  # None: rerank = "none", the retriever's own top k
    codec: Any
    transport: Any
    generator: Any

    @classmethod
    def create(cls, cfg: Mapping[str, Any]) -> Components:
        emb = cfg["embed"]["backend"]
        embedder = None
        if emb is not None and emb != "precomputed":
            embedder = embedders.create(emb, **backend_params(cfg, "embed"))
        elif emb == "precomputed":
            embedders.registry.factory(emb)
        r = cfg["retrieve"]
        build = indexes.with_dsn(r["backend"], r["build"], r["dsn"])
        probe = indexes.create(
            r["backend"], dim=indexes.PROBE_DIM, metric=r["metric"] or "ip", **build
        )
        check_search = getattr(probe, "check_query_params", None)
        if check_search is not None:
            check_search(r["search"])  # names and values
        else:  # a third-party index: names only
            check_params(f"index {r['backend']!r} search", r["search"], probe.query_params)
        rr = cfg["rerank"]["backend"]
        reranker = None
        if rr != "none":
            metric = rerank_metric(r["metric"] or "ip")
            reranker = rerankers.create(rr, metric=metric, **backend_params(cfg, "rerank"))
        return cls(
            embedder=embedder,
            reranker=reranker,
            codec=codecs.create(cfg["serialize"]["backend"], **backend_params(cfg, "serialize")),
            transport=transports.create(
                cfg["transport"]["backend"], **backend_params(cfg, "transport")
            ),
            generator=generators.create(
                cfg["generate"]["backend"], **backend_params(cfg, "generate")
            ),
        )


# ---------------------------------------------------------------- pipeline


class Pipeline:
    """A configured request path: ``Pipeline.from_config(cfg).run()``.

    Build it from a TOML path, a shipped config name (``"default"``, see
    :mod:`ragbench.configs`) or a dict;
    every backend name and parameter is checked then, before anything runs.
    ``run(dataset=None, queries=None, warmup=None)`` sets everything up
    (timed as set-up), runs warm-up requests, then the measured requests one
    by one, and returns a :class:`ragbench.report.Report` of that run only.
    Use it as a context manager, or call :meth:`close`, to stop transport and
    LLM servers and restore the process-wide thread setting. With ``[run]
    otel = true`` or an ``otel=`` :class:`ragbench.otel.TraceExporter`, every
    measured request is also exported as an OpenTelemetry trace once it has
    been timed (:meth:`export_traces`).
    """

    def __init__(
        self,
        config: ConfigSource,
        *,
        label: str | None = None,
        otel: tracing.TraceExporter | None = None,
    ) -> None:
        self.config = load_config(config)
        self.components = Components.create(self.config)
        self.label = label or self.config["run"]["label"] or self.describe()
        self.dataset: Dataset | None = None
        self.setup_times = SetupTimes()
        self.simulated: list[str] = []
        self.caveats: list[str] = []  # what every report must say (random-weight LLM, ...)
        self.stage_names: list[str] = []
        self.cache_events: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {}
        self.error: str | None = None
        self.request_threads = self.config["run"]["threads"] or 1
        self.cpu_time: bool = self.config["run"]["cpu_time"]
        # taken now, so pipelines created together (compare) all build with it
        self.build_threads = threads.get_threads()
        self._threads_before: int | None = None
        self._stages: list[Callable[[RequestContext], None]] = []
        self._loop_names: list[str] = []
        self._closers: list[Callable[[], None]] = []
        self._records: list[RequestRecord] = []
        self._repetition_starts: list[int] = []
        self._cache: LruTtlCache | None = None
        self._filters: QueryFilters | None = None
        self._ready = False
        self._check_index_file()
        run = self.config["run"]
        _check_record_memory(run["queries"], run["repeat"])
        self._otel = otel
        self._traced = 0  # this run's records already exported as traces
        self._trace_parts: dict[str, dict[str, Any]] | None = None
        if otel is None and self.config["run"]["otel"]:
            tracing.check_available()  # a missing extra fails now, like any bad config

    def _check_index_file(self) -> None:
        """A ``[retrieve] index_file`` to write must be writable, one to read a regular file.

        Checked when the pipeline is created, before any data is loaded or
        embedded, so a bad path fails in a second, not after the build.
        """
        path = self.config["retrieve"]["index_file"]
        if path is None:
            return
        if Path(path).exists():
            if not Path(path).is_file():
                raise ConfigError(f"[retrieve] index_file {path}: not a regular file")
        else:
            check_writable(path, "[retrieve] index_file")

    @classmethod
    def from_config(cls, config: ConfigSource, **kw: Any) -> Pipeline:
        return cls(config, **kw)

    @property
    def setup_ns(self) -> dict[str, int]:
        """Nanoseconds per set-up step (dataset load, corpus vectors, index build, ...)."""
        return self.setup_times.ns

    # ---- description

    def backends(self) -> dict[str, str]:
        cfg = self.config
        out = {
            t: str(cfg[t]["backend"])
            for t in ("embed", "retrieve", "rerank", "serialize", "transport", "generate")
        }
        if cfg["embed"]["backend"] is None:
            out["embed"] = "default"
        return out

    def describe(self) -> str:
        b = self.backends()
        shape = self.config["serialize"].get("shape")  # the payload shape, when chosen
        codec = b["serialize"] if shape is None else f"{b['serialize']}/{shape}"
        return f"{b['retrieve']}/{b['rerank']}/{codec}/{b['transport']}" + (
            f"/{b['generate']}" if b["generate"] != "none" else ""
        )

    # ---- set-up: one builder per part

    def load_dataset(self) -> Dataset:
        """The dataset the config's ``[dataset]`` table names."""
        from . import datasets

        return datasets.from_table(self.config["dataset"])

    def setup(self, dataset: Dataset | None = None, *, shared: SharedParts | None = None) -> None:
        """Load, embed, build, compile and start everything; each step timed as set-up.

        ``shared`` lets several pipelines (``ragbench compare``) reuse the
        dataset, vectors and built indexes instead of rebuilding them. Set-up
        uses the build thread count; requests then run on ``[run] threads``.
        """
        if self._ready:
            self._check_same_dataset(dataset)
            return
        self._threads_before = threads.get_threads()
        threads.set_threads(self.build_threads)
        parts = shared if shared is not None else SharedParts()
        try:
            self._build(dataset, parts)
            if shared is None:  # indexes of ours holding a server or files (pgvector) stop with us
                self._closers.extend(i.close for i in parts.indexes.values() if hasattr(i, "close"))
        except BaseException:
            self.close()
            raise
        threads.set_threads(self.request_threads)
        self._ready = True

    def _check_same_dataset(self, dataset: Dataset | None) -> None:
        if dataset is None or self.dataset is None or dataset is self.dataset:
            return
        if dataset.content_hash != self.dataset.content_hash:
            raise ConfigError(
                f"this pipeline is set up for dataset {self.dataset.name!r}; "
                f"create another Pipeline to run {dataset.name!r}"
            )

    def _build(self, dataset: Dataset | None, shared: SharedParts) -> None:
        cfg = self.config
        ds = self.dataset = self._dataset(dataset, shared)
        run = cfg["run"]
        if run["k"] > len(ds.corpus.ids):
            raise KTooLargeError(
                f"[run] k={run['k']} is larger than the corpus ({len(ds.corpus.ids)} items)"
            )
        emb = self._embedding(ds, shared)
        metric = cfg["retrieve"]["metric"] or ds.metric
        index = self._index(ds, emb, metric, shared)
        self._filters = self._query_filters(ds, emb, metric)
        self._truth = self._exact_neighbors(ds, emb, metric, shared)
        self._embedding_used, self._metric = emb, metric
        c = cfg["cache"]
        self._cache = LruTtlCache(c["size"], c["ttl_s"]) if c["backend"] == "lru" else None
        k_cand = min(run["k_candidates"], len(ds.corpus.ids))
        stages: list[Any] = [EmbedStage(emb.embedder)]
        if self._cache is not None:
            stages.append(CacheStage(self._cache))
        stages += [
            self._retrieve_stage(index, k_cand),
            self._rerank_stage(metric, emb.corpus),
            self._serialize_stage(ds, emb.corpus),
            TransportStage(self._start_transport()),
            GenerateStage(self._start_generator()),
        ]
        self._stages = stages
        self._loop_names = [st.name for st in stages]
        self.stage_names = [
            n for n in STAGES if n in self._loop_names or n in ("deserialize", "prompt")
        ]
        self.info = self._describe_parts(index, emb, metric, k_cand)

    def _dataset(self, dataset: Dataset | None, shared: SharedParts) -> Dataset:
        if dataset is not None:
            return dataset
        key = freeze(self.config["dataset"])
        if key not in shared.datasets:
            shared.datasets[key] = self.setup_times.time("dataset_load", self.load_dataset)
        return shared.datasets[key]

    def _embedding(self, ds: Dataset, shared: SharedParts) -> Embedding:
        cfg = self.config
        name = cfg["embed"]["backend"] or ds.default_embedder
        params = backend_params(cfg, "embed")
        if name == "precomputed":
            if ds.vectors is None or ds.query_vectors_precomputed is None:
                raise ConfigError(
                    f"[embed] backend 'precomputed' needs a dataset with vectors; {ds.name!r} has "
                    "texts only: use 'minilm' or 'hashing'"
                )
            embedder = embedders.create(
                "precomputed",
                texts=ds.queries.texts,
                vectors=ds.query_vectors_precomputed,
                **params,
            )
            return Embedding(name, params, embedder, ds.vectors, ds.query_vectors_precomputed)
        ekey = (name, freeze(params))
        if ekey not in shared.embedders:
            made = self.components.embedder
            shared.embedders[ekey] = made if made is not None else embedders.create(name, **params)
        embedder = shared.embedders[ekey]
        self.setup_times.time("model_load", embedder.load)
        vkey = (ds.content_hash, ekey)
        if vkey not in shared.vectors:
            n_events = len(ds.cache_events)
            re_embed = cfg["embed"]["re_embed"]
            corpus = self.setup_times.time(
                "corpus_vectors", ds.corpus_vectors, embedder, re_embed=re_embed
            )
            queries = self.setup_times.time(
                "query_vectors", ds.query_vectors, embedder, re_embed=re_embed
            )
            shared.vectors[vkey] = (corpus, queries)
            self.cache_events.extend(_event_dict(e) for e in ds.cache_events[n_events:])
        corpus, queries = shared.vectors[vkey]
        return Embedding(name, params, embedder, corpus, queries)

    def _index(self, ds: Dataset, emb: Embedding, metric: str, shared: SharedParts) -> Any:
        r = self.config["retrieve"]
        key = (r["backend"], metric, freeze(r["build"]), ds.content_hash, emb.key, r["fast_build"])
        if key not in shared.indexes:
            dim = int(emb.corpus.shape[1])
            build = indexes.with_dsn(r["backend"], r["build"], r["dsn"])
            index = indexes.create(r["backend"], dim=dim, metric=metric, **build)
            data = ds.corpus.texts if index.input_kind == "texts" else emb.corpus
            source = _data_source(ds, emb, index.input_kind)
            path = r["index_file"]
            if path is not None and Path(path).exists():
                index = self.setup_times.time(
                    "index_load", self._load_index, path, index, data, source
                )
            else:
                # deterministic unless [retrieve] fast_build; slow builds cached
                built = builds.build(index, data, fast=r["fast_build"], source=source)
                index = built.index
                step = "index_load" if built.load_ns else "index_build"
                self.setup_times.add(step, built.load_ns or built.build_ns)
                self.setup_times.add("jit_compile", built.compile_ns)
                if path is not None:
                    self.setup_times.time("index_save", index.save, path, data=data, source=source)
            shared.indexes[key] = index
        return shared.indexes[key]

    @staticmethod
    def _load_index(path: str, like: Any, data: Any, source: str) -> Any:
        """The index saved at ``path``, checked to be the one this config builds of ``data``.

        Same backend, metric, dim, build parameters and item count, and the
        fingerprint of the data it was built on equal to that of ``data``
        (the corpus vectors, or texts); a file without a fingerprint (older
        ragbench, or ``Index.save`` without ``data=``) is refused too.
        """
        index = indexes.load(path)
        want = (like.name, like.metric, like.dim, dict(like.build_params), len(data))
        got = (
            index.name,
            index.metric,
            getattr(index, "dim", None),
            dict(index.build_params),
            index.ntotal,
        )
        if got != want:
            raise IndexFileError(
                f"[retrieve] index_file {path}: holds (backend, metric, dim, build params, "
                f"items) {got}, but this config builds {want}; delete the file or point "
                "index_file elsewhere"
            )
        saved = getattr(index, "saved_data", None)
        if not saved:
            raise IndexFileError(
                f"[retrieve] index_file {path}: the file does not record which data it was "
                "built on (written by an older ragbench, or by Index.save() without data=); "
                "delete it so it is rebuilt"
            )
        fingerprint = indexes.data_fingerprint(data)
        if saved["fingerprint"] != fingerprint:
            raise IndexFileError(
                f"[retrieve] index_file {path}: built for {saved.get('source') or 'other data'} "
                f"(data {saved['fingerprint'][:12]}), but used with {source} (data "
                f"{fingerprint[:12]}); delete the file or point index_file elsewhere"
            )
        return index

    def _retrieve_stage(self, index: Any, k_cand: int) -> Callable[[RequestContext], None]:
        r = self.config["retrieve"]
        if self._filters is None:
            return RetrieveStage(index, k_cand, r["search"])
        strategy = r["filter_strategy"]
        can = tuple(getattr(index, "filter_strategies", ()))
        if not can or (strategy not in (None, "auto") and strategy not in can):
            raise ConfigError(
                f"[retrieve] index {index.name!r} has no filter strategy {strategy or 'at all'}; "
                f"it has: {', '.join(can) or 'none (filtered search is for dense indexes)'}"
            )
        masks = self._filters.masks
        return FilteredRetrieveStage(index, k_cand, r["search"], masks, strategy)

    def _query_filters(self, ds: Dataset, emb: Embedding, metric: str) -> QueryFilters | None:
        """The filter of every query when ``[retrieve] filter`` asks for them (timed as set-up)."""
        table = self.config["retrieve"]["filter"]
        if table is None:
            return None
        embedder = None if emb.name == "precomputed" else emb.embedder
        filters: QueryFilters = self.setup_times.time(
            "query_filters", ds.query_filters, table, embedder=embedder, metric=metric
        )
        return filters

    def _exact_neighbors(
        self, ds: Dataset, emb: Embedding, metric: str, shared: SharedParts
    ) -> np.ndarray:
        k = self.config["run"]["k"]
        filters = self._filters
        key = (ds.content_hash, emb.key, k, metric, None if filters is None else filters.key)
        if key not in shared.truth:
            embedder = None if emb.name == "precomputed" else emb.embedder
            shared.truth[key] = self.setup_times.time(
                "exact_neighbors",
                ds.exact_neighbors,
                k,
                embedder=embedder,
                metric=metric,
                re_embed=self.config["embed"]["re_embed"] and embedder is not None,
                filters=filters,
            )
        return shared.truth[key]

    def _rerank_stage(self, metric: str, corpus: np.ndarray) -> Callable[[RequestContext], None]:
        k = self.config["run"]["k"]
        reranker = self.components.reranker
        if reranker is None:
            return TruncateStage(k, self._cache)
        if reranker.metric != rerank_metric(metric):
            params = backend_params(self.config, "rerank")
            reranker = rerankers.create(reranker.name, metric=rerank_metric(metric), **params)
        if getattr(reranker, "input_kind", "vectors") == "texts" and self.dataset is not None:
            self._closers.append(reranker.close)
            exact = start_text_reranker(reranker, self.setup_times.add, self.caveats)
            return TextRerankStage(
                reranker, exact, self.dataset.corpus.texts, corpus, k, self._cache
            )
        self.setup_times.add("jit_compile", reranker.warmup(int(corpus.shape[1])))
        return RerankStage(reranker, corpus, k, self._cache)

    def _serialize_stage(self, ds: Dataset, corpus: np.ndarray) -> SerializeStage:
        s = self.config["serialize"]
        return SerializeStage(
            self.components.codec, ds, corpus, bool(s["with_embeddings"]), bool(s["with_metadata"])
        )

    def _start_transport(self) -> Any:
        cfg = self.config
        transport = self.transport = self.components.transport
        prompt_params = {k: v for k, v in cfg["prompt"].items() if v is not None}
        self._closers.append(transport.close)
        args = (cfg["serialize"]["backend"], backend_params(cfg, "serialize"), prompt_params)
        # the far side measures its own CPU time only when asked (it costs inside the transport)
        started = transport.start(*args, cpu_time=True) if self.cpu_time else transport.start(*args)
        self.setup_times.add("transport_start", started)
        return transport

    def _start_generator(self) -> Any:
        generator = self.components.generator
        self._closers.append(generator.close)
        self.setup_times.add("generator_start", generator.start())
        if generator.simulated and not self.simulated:
            self.simulated.append(f"generate={self.config['generate']['backend']}")
        caveat = getattr(generator, "caveat", None)
        if isinstance(caveat, str) and caveat not in self.caveats:
            self.caveats.append(caveat)
        return generator

    def _describe_parts(
        self, index: Any, emb: Embedding, metric: str, k_cand: int
    ) -> dict[str, Any]:
        cfg = self.config
        return {
            "index": _index_info(index),
            "embedder": emb.name,
            "metric": metric,
            "k": cfg["run"]["k"],
            "k_candidates": k_cand,
            "codec": cfg["serialize"]["backend"],
            # row or columnar for the built-in codecs; None for codecs without shapes
            "payload_shape": getattr(self.components.codec, "shape", None),
            "transport": cfg["transport"]["backend"],
            "generator": cfg["generate"]["backend"],
            "rerank": cfg["rerank"]["backend"],
            "request_threads": self.request_threads,
            "build_threads": self.build_threads,
            **_described("reranker_info", self.components.reranker),
            **_described("generator_info", self.components.generator),
            **_described("transport_info", self.components.transport),
            **self._filter_info(),
        }

    def _filter_info(self) -> dict[str, Any]:
        """``filter``: the request, achieved selectivity (mean/min/max) and strategy; or nothing."""
        if self._filters is None:
            return {}
        strategy = self.config["retrieve"]["filter_strategy"]
        return {"filter": {**self._filters.summary(), "strategy": strategy or "auto"}}

    # ---- requests

    def _context(self, i: int) -> RequestContext:
        if self.dataset is None:
            raise NotBuiltError("call setup() before sending requests")
        q = self.dataset.queries
        j = i % len(q.ids)
        ctx = RequestContext(j, q.ids[j], q.texts[j])
        if self._filters is not None:
            ctx.cache_key = f"{ctx.query}\0{json.dumps(self._filters.specs[j], sort_keys=True)}"
        return ctx

    def warm(self, n: int) -> None:
        """Run ``n`` warm-up requests (timed as set-up ``warmup``, not kept as samples)."""
        if not self._ready:
            raise NotBuiltError("call setup() before warm()")
        stamps = [0] * (len(self._stages) + 1)
        t0 = perf_counter_ns()
        for i in range(n):
            run_stages(self._stages, self._context(i), stamps)
        self.setup_times.add("warmup", perf_counter_ns() - t0)

    @property
    def stages(self) -> tuple[Callable[[RequestContext], None], ...]:
        """The stage objects one request runs through, in order (after :meth:`setup`).

        For a caller that runs them itself (an event loop awaiting the stages
        with an ``acall``): make the context with :meth:`context`, stamp
        ``perf_counter_ns`` around each stage, and finish with :meth:`record_of`.
        """
        return tuple(self._stages)

    def context(self, i: int) -> RequestContext:
        """A fresh context for request ``i`` (query ``i mod n_queries``)."""
        return self._context(i)

    def record_of(
        self, ctx: RequestContext, stamps: list[int], cpu: list[int] | None = None
    ) -> RequestRecord:
        """The record of a request whose stages ran on ``ctx``, stamped in ``stamps``.

        Decodes the tokens after the first (when the generator streams them)
        now, after the stamps were taken.
        """
        rest, exact = ctx.decode_rest, ctx.exact_top
        return RequestRecord(
            stamps,
            cpu,
            ctx.far,
            ctx.hit_ids,
            len(ctx.payload),
            ctx.prompt_tokens,
            ctx.index,
            ctx.model_prompt_tokens,
            rest() if rest is not None else (),
            ctx.retrieve_parts,
            exact()[0] if exact is not None else None,
        )

    def serve(self, i: int) -> RequestRecord:
        """Run request ``i`` (query ``i mod n_queries``) and return its record without keeping it.

        Safe to call from several threads at once on one set-up pipeline:
        everything a request writes is its own (each worker thread should
        call :func:`ragbench.threads.pin_thread` once first).
        """
        ctx = self._context(i)
        stamps = [0] * (len(self._stages) + 1)
        if self.cpu_time:
            cpu = [0] * len(stamps)
            run_stages_cpu(self._stages, ctx, stamps, cpu)
        else:
            cpu = None
            run_stages(self._stages, ctx, stamps)
        # tokens after the first: decoded once the request's stamps are taken
        return self.record_of(ctx, stamps, cpu)

    def request(self, i: int) -> None:
        """Run request ``i`` and keep its record for :meth:`report`."""
        self._records.append(self.serve(i))

    def begin(self) -> None:
        """Start a new measured run: forget earlier requests, errors and cache counts."""
        self._records = []
        self._traced = 0
        self._repetition_starts = []
        self.error = None
        if self._cache is not None:
            self._cache.hits = self._cache.misses = 0

    def start_repetition(self, warmup: int) -> None:
        """Begin a repetition of the measured run: an empty cache, ``warmup`` requests, then a mark.

        Every repetition starts from the same state -- built parts reused,
        the cache emptied and warmed the same way -- so the variation between
        repetitions is what a fresh run would see.
        """
        cache = self._cache
        counts = (cache.hits, cache.misses) if cache is not None else (0, 0)
        if cache is not None:
            cache.clear()
        self.warm(warmup)
        if cache is not None:
            cache.hits, cache.misses = counts  # warm-up lookups are not measured ones
        self._repetition_starts.append(len(self._records))

    def repetitions(self) -> np.ndarray | None:
        """The repetition of each measured request, or ``None`` for a single repetition."""
        starts = self._repetition_starts
        if len(starts) < 2:
            return None
        reps = np.zeros(len(self._records), dtype=np.int64)
        for r, start in enumerate(starts[1:], 1):
            reps[start:] = r
        return reps

    def run(
        self,
        dataset: Dataset | None = None,
        *,
        queries: int | None = None,
        warmup: int | None = None,
        repeat: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Report:
        """Set up, then ``repeat`` times: warm up and run ``queries`` measured requests one by one.

        Each call reports its own requests only; with several repetitions the
        report keeps which one each request ran in, and its intervals resample
        repetitions too. A :class:`TransportError` or :class:`GeneratorError`
        stops the run; the report keeps every request finished before it and
        says why.
        """
        run = self.config["run"]
        queries = run["queries"] if queries is None else queries
        warmup = run["warmup"] if warmup is None else warmup
        repeat = run["repeat"] if repeat is None else repeat
        _check_record_memory(queries, repeat)
        self.setup(dataset)
        self.begin()
        for _ in range(repeat):
            self.start_repetition(warmup)
            if not self._measure(queries, progress):
                break
        return self.report()

    def _measure(self, queries: int, progress: Callable[[int], None] | None) -> bool:
        """``queries`` measured requests; False when a failing far side or LLM stopped them."""
        for i in range(queries):
            try:
                self.request(i)
            except (TransportError, GeneratorError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                return False
            if progress is not None:
                progress(1)
        return True

    # ---- results

    def stage_samples(
        self, records: Sequence[RequestRecord] | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Per-stage wall and CPU nanoseconds of ``records`` (default: this run's), int64 ``(requests, stages)``.

        Columns follow :attr:`stage_names`: the far side's decode and prompt
        times are split out of the transport's round trip, so each row adds up
        to the request's total. The CPU matrix is ``None`` without ``[run] cpu_time``.
        """
        recs = self._records if records is None else records
        width = len(self.stage_names)
        if not recs:
            empty = np.zeros((0, width), np.int64)
            return empty, (empty.copy() if self.cpu_time else None)
        far = _far_columns(recs)
        wall = self._split(
            np.asarray([r.stamps for r in recs], dtype=np.int64), far[:, 0], far[:, 1], True
        )
        if not self.cpu_time:
            return wall, None
        cpu_stamps = np.asarray([r.cpu_stamps for r in recs], dtype=np.int64)
        # inproc decodes and builds the prompt in this thread, inside the transport
        # stage; a far side in another process used its own CPU, not this thread's
        in_thread = bool(
            getattr(self.transport, "in_process", self.config["transport"]["backend"] == "inproc")
        )
        return wall, self._split(cpu_stamps, far[:, 4], far[:, 5], in_thread)

    def _split(
        self, stamps: np.ndarray, decode: np.ndarray, prompt: np.ndarray, subtract: bool
    ) -> np.ndarray:
        loop = np.diff(stamps.reshape(len(stamps), -1), axis=1)
        columns: dict[str, np.ndarray] = {}
        for j, name in enumerate(self._loop_names):
            if name == "transport":
                columns["transport"] = loop[:, j] - decode - prompt if subtract else loop[:, j]
                columns["deserialize"] = decode
                columns["prompt"] = prompt
            else:
                columns[name] = loop[:, j]
        return np.stack([columns[n] for n in self.stage_names], axis=1)

    def report(self) -> Report:
        """The report of the requests measured since the last :meth:`begin` (or :meth:`run`)."""
        if not self._ready or self.dataset is None:
            raise NotBuiltError("the pipeline has not run")
        self.export_traces()
        recs = self._records
        far = _far_columns(recs)
        ds = self.dataset
        cache = self._cache
        wall, cpu = self.stage_samples(recs)
        return Report(
            label=self.label,
            config=self.config,
            stage_names=list(self.stage_names),
            samples_ns=wall,
            cpu_samples_ns=cpu,
            recall=self.recall(recs),
            payload_bytes=np.asarray([r.payload_bytes for r in recs], dtype=np.int64),
            wire_bytes=far[:, 2] + far[:, 3],
            prompt_tokens=np.asarray([r.prompt_tokens for r in recs], dtype=np.int64),
            setup_ns=dict(self.setup_ns),
            cache_hits=cache.hits if cache else None,
            cache_lookups=(cache.hits + cache.misses) if cache else None,
            simulated=list(self.simulated),
            caveats=list(self.caveats),
            model_prompt_tokens=_model_prompt_tokens(recs),
            inter_token_ns=_inter_token_ns(recs),
            connection_ns=_connection_ns(recs),
            dataset={
                "name": ds.name,
                "n": len(ds.corpus.ids),
                "dim": int(self._embedding_used.corpus.shape[1]),
                "n_queries": len(ds.queries.ids),
                "content_hash": ds.content_hash,
            },
            info={**with_retrieve_parts(self.info, recs), **self._rerank_recall(recs)},
            cache_events=list(self.cache_events),
            error=self.error,
            repetition=self.repetitions(),
        )

    def recall(
        self, records: Sequence[RequestRecord] | None = None, *, final: bool = False
    ) -> np.ndarray:
        """Tie-aware recall@k of each record's final hits against exact search (default: this run's).

        After a reranker of texts (a cross-encoder) it is the recall of the
        exact top k of the same candidates (the retriever's), unless ``final``:
        then of the reranker's own k.
        """
        recs = self._records if records is None else records
        k = self.config["run"]["k"]
        if not recs:
            return np.zeros(0)
        found = np.full((len(recs), k), -1, dtype=np.int64)
        for r, rec in enumerate(recs):
            ids = rec.hit_ids if final or rec.exact_ids is None else rec.exact_ids
            n = min(k, len(ids))
            found[r, :n] = ids[:n]
        rows = np.asarray([rec.query_row for rec in recs], dtype=np.int64)
        emb = self._embedding_used
        return recall_at_k(
            found, self._truth, emb.corpus, emb.queries, k, self._metric, query_rows=rows
        )

    def _rerank_recall(self, recs: Sequence[RequestRecord]) -> dict[str, Any]:
        """``rerank_recall``: mean recall of a text reranker's own final k (``{}`` otherwise)."""
        if not any(rec.exact_ids is not None for rec in recs):
            return {}
        return {"rerank_recall": float(self.recall(recs, final=True).mean())}

    # ---- OpenTelemetry: after timing, never inside serve()

    def trace_exporter(self) -> tracing.TraceExporter | None:
        """Where this pipeline's traces go: the ``otel=`` exporter, else with ``[run] otel`` one
        made from the ``OTEL_*`` environment on first use (closed with the pipeline), else ``None``."""
        if self._otel is None and self.config["run"]["otel"]:
            self._otel = tracing.TraceExporter()
            self._closers.append(self._otel.close)
        return self._otel

    def export_traces(self, records: Sequence[RequestRecord] | None = None) -> int:
        """Export requests as OpenTelemetry traces (see :mod:`ragbench.otel`); return how many.

        Default: this run's requests not exported yet. Nothing happens without
        ``[run] otel`` or an ``otel=`` exporter. :meth:`report` calls it, and
        ``ragbench load`` after each load level: always after the requests
        were timed, from their recorded stamps, so it changes no stage time.
        The spans are flushed before it returns.
        """
        exporter = self.trace_exporter() if self._ready else None
        if exporter is None or exporter.spans_failed:
            return 0  # off, or its collector failed already (said once, by flush)
        if records is None:
            recs: Sequence[RequestRecord] = self._records[self._traced :]
            self._traced = len(self._records)
        else:
            recs = records
        if not recs:
            return 0
        wall, _ = self.stage_samples(recs)
        recall = self.recall(recs)
        first_token = self.config["generate"]["backend"] != "none"
        for r, rec in enumerate(recs):
            exporter.export(
                self._loop_names,
                rec.stamps,
                first_token=first_token,
                **self._trace_of(rec, wall[r], float(recall[r]), first_token),
            )
            # a batch processor's queue drops what overflows; a dead collector, found with
            # the first request's spans, stops the rest
            if (r == 0 or (r + 1) % TRACE_FLUSH_EVERY == 0) and not exporter.flush():
                return r + 1
        exporter.flush()
        return len(recs)

    def _trace_of(
        self, rec: RequestRecord, row: np.ndarray, recall: float, llm: bool
    ) -> dict[str, Any]:
        """The attributes and nested spans of one request's trace."""
        static = self._trace_static()
        stage_ns = {name: int(row[j]) for j, name in enumerate(self.stage_names)}
        far = rec.far
        # the LLM's own count where its generator gave one, else the prompt builder's
        tokens = rec.model_prompt_tokens if rec.model_prompt_tokens >= 0 else rec.prompt_tokens
        own = tracing.request_stage_attributes(
            stage_ns,
            payload_bytes=rec.payload_bytes,
            wire_bytes=None if far is None else (far.wire_bytes_sent, far.wire_bytes_received),
            prompt_tokens=tokens,
            llm_stage="generate" if llm else None,
        )
        stages = {name: {**static.get(name, {}), **own[name]} for name in stage_ns}
        inner = None
        if far is not None and "transport" in self._loop_names:
            j = self._loop_names.index("transport")
            parts = [
                ("deserialize", far.decode_ns, stages["deserialize"]),
                ("prompt", far.prompt_ns, stages["prompt"]),
            ]
            spans = tracing.centered_spans(rec.stamps[j], rec.stamps[j + 1], parts)
            # keep_alive = false: the connection's set-up, from the transport's start
            setup = [(f"transport.{n}", ns, None) for n, ns in getattr(far, "connection_ns", ())]
            inner = {"transport": tracing.leading_spans(rec.stamps[j], setup) + spans}
        if rec.retrieve_parts is not None and "retrieve" in self._loop_names:
            j = self._loop_names.index("retrieve")
            split = [
                (f"retrieve.{n}", ns, None)
                for n, ns in zip(_PARTS, rec.retrieve_parts, strict=True)
            ]
            spans = tracing.centered_spans(rec.stamps[j], rec.stamps[j + 1], split)
            inner = {**(inner or {}), "retrieve": spans}
        ds = self.dataset
        attributes = tracing.request_attributes(
            label=self.label,
            query_id=ds.queries.ids[rec.query_row] if ds is not None else None,
            k=self.config["run"]["k"],
            k_candidates=self.info.get("k_candidates"),
            payload_bytes=rec.payload_bytes,
            prompt_tokens=tokens,
            recall=recall,
            simulated=bool(self.simulated),
            caveats=self.caveats,
        )
        return {"attributes": attributes, "stage_attributes": stages, "inner": inner}

    def _trace_static(self) -> dict[str, dict[str, Any]]:
        """Stage-span attributes every request of this pipeline shares (made once)."""
        if self._trace_parts is None:
            cfg, b = self.config, self.backends()
            backends: dict[str, str | None] = {
                "embed": self._embedding_used.name,
                "cache": cfg["cache"]["backend"],
                "retrieve": b["retrieve"],
                "rerank": b["rerank"],
                "serialize": b["serialize"],
                "transport": b["transport"],
                "deserialize": b["serialize"],
                "prompt": None,
                "generate": b["generate"],
            }
            self._trace_parts = tracing.stage_attributes(
                {stage: v for stage, v in backends.items() if stage in self.stage_names},
                k=cfg["run"]["k"],
                k_candidates=self.info.get("k_candidates"),
                dimension=int(self._embedding_used.corpus.shape[1]),
                data_source=self.dataset.name if self.dataset is not None else None,
                generator=_llm_info(self.components.generator),
            )
        return self._trace_parts

    def close(self) -> None:
        """Stop every server this pipeline started and restore the thread setting (idempotent)."""
        while self._closers:
            closer = self._closers.pop()
            with contextlib.suppress(RagbenchError):
                closer()
        if self._threads_before is not None:
            threads.set_threads(self._threads_before)
            self._threads_before = None

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_PARTS = ("send", "server", "decode")  # an index's split of its search (last_parts)


def parts_tuple(parts: Any) -> tuple[int, int, int] | None:
    """An index's ``last_parts()`` as ``(send, server, decode)`` ns.

    pgvector gives the tuple; an embedded engine a mapping of three parts in that
    order (LanceDB: ``prepare``, ``query``, ``decode`` = before, inside, after the engine).
    """
    if isinstance(parts, Mapping):
        values = tuple(int(v) for v in parts.values())
        return values if len(values) == 3 else None
    return parts  # type: ignore[no-any-return]


def with_retrieve_parts(info: Mapping[str, Any], recs: Sequence[RequestRecord]) -> dict[str, Any]:
    """``info`` plus ``retrieve_parts`` (p50/mean ns of send, server, decode) when the index split them."""
    out = dict(info)
    parts = [r.retrieve_parts for r in recs if r.retrieve_parts is not None]
    if parts:
        a = np.asarray(parts, dtype=np.int64)
        out["retrieve_parts"] = {
            name: {"p50_ns": int(np.median(a[:, j])), "mean_ns": int(a[:, j].mean())}
            for j, name in enumerate(_PARTS)
        }
    return out


def far_fields(far: Any) -> tuple[int, int, int, int, int, int]:
    """A far side's report as numbers: decode ns, prompt ns, wire bytes sent and received,
    decode and prompt CPU ns (zeros for no far side)."""
    if far is None:
        return (0, 0, 0, 0, 0, 0)
    return (
        far.decode_ns,
        far.prompt_ns,
        far.wire_bytes_sent,
        far.wire_bytes_received,
        getattr(far, "decode_cpu_ns", 0),
        getattr(far, "prompt_cpu_ns", 0),
    )


def _far_columns(records: Sequence[RequestRecord]) -> np.ndarray:
    """int64 (requests, 6): :func:`far_fields` of each record."""
    rows = [far_fields(r.far) for r in records]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 6)


def _connection_ns(records: Sequence[RequestRecord]) -> dict[str, np.ndarray] | None:
    """:func:`transports.connection_columns` of the records, as int64 arrays."""
    columns = transports.connection_columns([r.far for r in records])
    return None if columns is None else {k: np.asarray(v, np.int64) for k, v in columns.items()}


def _described(key: str, component: Any) -> dict[str, Any]:
    """``{key: component.describe()}`` for a part that describes itself (asgi's server, ...), or nothing."""
    describe = getattr(component, "describe", None)
    return {key: dict(describe())} if callable(describe) else {}


def _model_prompt_tokens(records: Sequence[RequestRecord]) -> np.ndarray | None:
    """The LLM's own prompt token count per request, or ``None`` when its generator reports none."""
    counts = np.asarray([r.model_prompt_tokens for r in records], dtype=np.int64)
    return counts if counts.size and (counts >= 0).all() else None


def _inter_token_ns(records: Sequence[RequestRecord]) -> np.ndarray | None:
    """int64 ``(requests, next tokens)`` inter-token latencies, or ``None`` when none were decoded."""
    widths = {len(r.inter_token_ns) for r in records}
    if len(widths) != 1 or 0 in widths:  # none, mixed, or no next tokens decoded
        return None
    return np.asarray([r.inter_token_ns for r in records], dtype=np.int64)


def _llm_info(generator: Any) -> dict[str, Any]:
    """What the GenAI span attributes say about the LLM client (nothing for ``none``)."""
    name = getattr(generator, "name", "none")
    if name == "none":
        return {}
    model = getattr(generator, "model", None)
    if name == "stub":
        from .generators.stub_server import MODEL_ID

        model = MODEL_ID
    max_tokens = getattr(generator, "max_tokens", None)
    return {
        "operation": "chat" if getattr(generator, "chat", True) else "text_completion",
        "provider": "openai" if name == "openai" else f"ragbench.{name}",
        "model": model if isinstance(model, str) else None,
        "max_tokens": max_tokens if isinstance(max_tokens, int) else None,
    }


#: Bytes a run keeps per measured request (its record and its share of the
#: report): 2.8 kB measured with tracemalloc over 5000 requests of a flat/inproc run.
RECORD_BYTES = 3000


def _check_record_memory(queries: Any, repeat: Any) -> None:
    """Refuse (ConfigError) a run whose records alone would not fit in the available memory."""
    if isinstance(queries, int) and isinstance(repeat, int):
        check_memory(
            queries * repeat * RECORD_BYTES, f"[run] queries x repeat = {queries * repeat} requests"
        )


def _data_source(ds: Dataset, emb: Embedding, kind: str) -> str:
    """What an index is built on, for index-file messages: dataset, content, embedder."""
    what = f"dataset {ds.name!r} (content {ds.content_hash[:12]})"
    if kind == "texts":
        return f"the texts of {what}"
    params = ", ".join(f"{k}={v!r}" for k, v in sorted(emb.params.items()))
    return f"{what} embedded with {emb.name}" + (f"({params})" if params else "")


def _index_info(index: Any) -> dict[str, Any]:
    info = getattr(index, "info", None)
    if callable(info):
        try:
            return dict(info())
        except RagbenchError:
            pass
    return {
        "backend": getattr(index, "name", type(index).__name__),
        "params": getattr(index, "build_params", {}),
    }


def _event_dict(event: Any) -> dict[str, Any]:
    if isinstance(event, Mapping):
        return dict(event)
    fields = getattr(event, "__dataclass_fields__", None)
    if fields:
        return {f: getattr(event, f) for f in fields}
    if isinstance(event, Sequence):
        return {"event": list(event)}
    return {"event": str(event)}


def interleave(
    pipelines: Sequence[Pipeline],
    queries: int,
    *,
    warmup: int = 0,
    repeat: int = 1,
    progress: Callable[[int], None] | None = None,
    order: str = "balanced",
    seed: int = 0,
) -> orders.Schedule:
    """Run ``queries`` requests on every pipeline, interleaved request by request, ``repeat`` times.

    Each pipeline starts a new measured run (:meth:`Pipeline.begin`), and
    each repetition with ``warmup`` requests on every pipeline. ``order``
    names the design of the rounds (:mod:`ragbench.orders`): ``balanced``
    (default; positions balanced by a Williams design drawn with ``seed``,
    each configuration on a different query in a round) or ``same-query``
    (a rotation, every configuration on the same query in turn). Every
    pipeline serves requests ``0 .. queries-1`` once per repetition either
    way. Each pipeline's ``info["order"]`` records the design, the seed, its
    query offset and how often it ran in each position. A failing pipeline is
    dropped from later rounds with its error kept. Returns the schedule.
    """
    n_queries = min(
        (len(p.dataset.queries.ids) for p in pipelines if p.dataset is not None), default=None
    )
    plan = orders.schedule(
        order, len(pipelines), queries, repeat=repeat, n_queries=n_queries, seed=seed
    )
    for p in pipelines:
        p.begin()
    live = set(range(len(pipelines)))
    positions = [[0] * len(pipelines) for _ in pipelines]
    for rep in range(repeat):
        for c in sorted(live):
            pipelines[c].start_repetition(warmup)
        rounds = plan.rounds[rep * queries : (rep + 1) * queries]
        live = _interleaved_rounds(pipelines, rounds, live, positions, progress)
    repeats = orders.consecutive_repeats(plan, n_queries or queries)
    for c, p in enumerate(pipelines):
        p.info["order"] = {
            "design": plan.design,
            "seed": plan.seed,
            "configurations": len(pipelines),
            "positions": positions[c],
            "query_offset": plan.offsets[c],
            "consecutive_same_query": repeats,
        }
    return plan


def _interleaved_rounds(
    pipelines: Sequence[Pipeline],
    rounds: Sequence[Sequence[tuple[int, int]]],
    live: set[int],
    positions: list[list[int]],
    progress: Callable[[int], None] | None,
) -> set[int]:
    """Run ``rounds`` of ``(pipeline, request)`` turns, skipping dropped pipelines; the live ones."""
    for turns in rounds:
        if not live:
            return live
        position = 0
        for c, request in turns:
            if c not in live:
                continue
            positions[c][position] += 1
            position += 1
            p = pipelines[c]
            try:
                p.request(request)
            except (TransportError, GeneratorError) as exc:
                p.error = f"{type(exc).__name__}: {exc}"
        live = {c for c in live if pipelines[c].error is None}
        if progress is not None:
            progress(1)
    return live

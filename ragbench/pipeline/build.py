"""Set-up: load, embed, build, compile and start every part; returns a frozen :class:`Built`.

:func:`build` runs the set-up steps of one pipeline in order, each timed as
set-up (never as request latency) in the pipeline's
:class:`~ragbench.timing.SetupTimes`, and reusing what a
:class:`~ragbench.pipeline.parts.SharedParts` already holds. Every server it
starts leaves its ``close`` in the caller's ``closers`` as soon as it is
started, so a failing step stops what came before it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import embedders, indexes, rerankers
from ..attributes import QueryFilters
from ..datasets import Dataset, brute_force_neighbors
from ..datasets.neighbors import top_k_agreement
from ..errors import ConfigError, IndexFileError, KTooLargeError, RagbenchError
from ..files import check_writable
from ..generators import Generator
from ..indexes import Index, builds
from ..metrics import rerank_metric
from ..rerankers.texts import start_text_reranker
from ..settings import Config
from ..timing import SetupTimes
from ..transports import Transport
from .cache import CacheStage, LruTtlCache
from .capabilities import (
    Cautioned,
    Describes,
    EmbedsCorpusApart,
    FilteredSearch,
    FiltersOnAttributes,
    HasDim,
    HasReferenceEmbedder,
    IndexInfo,
    RanksTexts,
    RecordsData,
    Shaped,
    filter_path,
)
from .context import STAGES
from .parts import Components, Embedding, SharedParts, freeze
from .stages import (
    EmbedStage,
    FilteredRetrieveStage,
    GenerateStage,
    RerankStage,
    RetrieveStage,
    SerializeStage,
    Stage,
    TextRerankStage,
    TransportStage,
    TruncateStage,
)

__all__ = ["Built", "build", "check_first", "check_index_file", "load_index"]


@dataclass(frozen=True, slots=True, eq=False)
class Built:
    """Everything set-up made for one pipeline; requests only read it.

    ``truth``: int64 ``(n_queries, k)`` exact neighbours; ``stages`` the
    stage objects in request order, ``loop_names`` their names and
    ``stage_names`` the reported columns (``deserialize`` and ``prompt``
    split out of the transport's round trip).
    """

    dataset: Dataset
    embedding: Embedding
    metric: str
    index: Index
    filters: QueryFilters | None
    truth: np.ndarray
    cache: LruTtlCache | None
    stages: tuple[Stage, ...]
    loop_names: tuple[str, ...]
    stage_names: tuple[str, ...]
    transport: Transport
    generator: Generator
    info: Mapping[str, Any]
    simulated: tuple[str, ...]
    caveats: tuple[str, ...]
    cache_events: tuple[dict[str, Any], ...]


def build(
    config: Config,
    components: Components,
    dataset: Dataset | None,
    shared: SharedParts,
    *,
    setup_times: SetupTimes,
    closers: list[Callable[[], None]],
    load_dataset: Callable[[], Dataset],
    cpu_time: bool,
    threads: tuple[int, int],
) -> Built:
    """Set up the pipeline ``config`` describes on ``dataset`` (``None``: ``load_dataset()``).

    ``threads``: the request and build thread counts, for the record.
    """
    steps = _SetUp(config, components, shared, setup_times, closers)
    ds = dataset if dataset is not None else steps.loaded(load_dataset)
    return steps.run(ds, cpu_time, threads)


def check_first(
    config: Config,
    components: Components,
    dataset: Dataset | None,
    shared: SharedParts,
    *,
    setup_times: SetupTimes,
    load_dataset: Callable[[], Dataset],
) -> None:
    """What :func:`build` would refuse only after loading the model and embedding the corpus,
    checked now, setting nothing up: a database index's refusals (an attribute value or name
    it cannot hold, its ``table``, a ``dsn=`` server's privileges).

    ``compare`` runs it for every configuration of its grid before it sets any up (the set-up
    itself checks each configuration before its own model load, but a grid's later
    configurations come after the first ones' embedding and builds). Loads the dataset
    (into ``shared``, timed as ``dataset_load``) and creates the embedder without loading it.
    """
    steps = _SetUp(config, components, shared, setup_times, [])
    ds = dataset if dataset is not None else steps.loaded(load_dataset)
    steps.check_first(ds)


class _SetUp:
    """The set-up steps of one pipeline, in order; one builder per part."""

    def __init__(
        self,
        config: Config,
        components: Components,
        shared: SharedParts,
        setup_times: SetupTimes,
        closers: list[Callable[[], None]],
    ) -> None:
        self.config = config
        self.components = components
        self.shared = shared
        self.times = setup_times
        self.closers = closers
        self.cache_events: list[dict[str, Any]] = []
        self.caveats: list[str] = []  # a text reranker's (random weights), then the LLM's
        self.corpus_embedding: dict[str, Any] = {}  # set when this set-up embedded the corpus

    def run(self, ds: Dataset, cpu_time: bool, threads: tuple[int, int]) -> Built:
        cfg = self.config
        run = cfg.run
        if run.k > len(ds.corpus.ids):
            raise KTooLargeError(
                f"[run] k={run.k} is larger than the corpus ({len(ds.corpus.ids)} items)"
            )
        emb = self._embedding(ds)
        metric = cfg.retrieve.metric or ds.metric
        index = self._index(ds, emb, metric)
        filters = self._query_filters(ds, emb, metric)
        truth = self._exact_neighbors(ds, emb, metric, filters)
        c = cfg.cache
        cache = LruTtlCache(c.size, c.ttl_s) if c.backend == "lru" else None
        k_cand = min(run.k_candidates, len(ds.corpus.ids))
        stages: list[Stage] = [EmbedStage(emb.embedder)]
        if cache is not None:
            stages.append(CacheStage(cache))
        stages.append(self._retrieve_stage(index, k_cand, filters))
        stages.append(self._rerank_stage(ds, metric, emb.corpus, cache))
        stages.append(self._serialize_stage(ds, emb.corpus))
        transport = self._start_transport(cpu_time)
        stages.append(TransportStage(transport))
        generator = self._start_generator()
        stages.append(GenerateStage(generator))
        loop_names = tuple(st.name for st in stages)
        parts = _Described(index, emb, metric, k_cand, filters, threads)
        return Built(
            dataset=ds,
            embedding=emb,
            metric=metric,
            index=index,
            filters=filters,
            truth=truth,
            cache=cache,
            stages=tuple(stages),
            loop_names=loop_names,
            stage_names=tuple(
                n for n in STAGES if n in loop_names or n in ("deserialize", "prompt")
            ),
            transport=transport,
            generator=generator,
            info={
                **self._describe_parts(parts),
                **self._agreement(ds, emb, metric),
                **self.corpus_embedding,
            },
            simulated=self._simulated(generator),
            caveats=(*self.caveats, *(c for c in _caveats(generator) if c not in self.caveats)),
            cache_events=tuple(self.cache_events),
        )

    def loaded(self, load_dataset: Callable[[], Dataset]) -> Dataset:
        """The config's dataset: a shared one, else loaded (timed as ``dataset_load``)."""
        key = freeze(self.config.dataset.to_dict())
        if key not in self.shared.datasets:
            self.shared.datasets[key] = self.times.time("dataset_load", load_dataset)
        return self.shared.datasets[key]

    def check_first(self, ds: Dataset) -> None:
        """The early index check (:meth:`_check_index_first`) of this configuration's embedder."""
        name = self.config.embed.backend or ds.default_embedder
        if name != "precomputed":
            params = self.config.embed.params()
            self._check_index_first(ds, self._embedder(name, params))

    def _embedder(self, name: str, params: dict[str, Any]) -> Any:
        """The embedder ``name`` with ``params``: a shared one, else created (not loaded)."""
        ekey = (name, freeze(params))
        if ekey not in self.shared.embedders:
            made = self.components.embedder
            self.shared.embedders[ekey] = (
                made if made is not None else embedders.create(name, **params)
            )
        return self.shared.embedders[ekey]

    def _embedding(self, ds: Dataset) -> Embedding:
        cfg, shared = self.config, self.shared
        name = cfg.embed.backend or ds.default_embedder
        params = cfg.embed.params()
        if name == "precomputed":
            return _precomputed(ds, params)
        ekey = (name, freeze(params))
        embedder = self._embedder(name, params)
        vkey = (ds.content_hash, ekey)
        self._check_index_first(ds, embedder)  # every configuration's, once (shared.checked)
        self.times.time("model_load", embedder.load)
        of_corpus = (
            embedder.corpus_embedder if isinstance(embedder, EmbedsCorpusApart) else embedder
        )
        if vkey not in shared.vectors:
            n_events = len(ds.cache_events)
            re_embed = cfg.embed.re_embed
            corpus = self.times.time(
                "corpus_vectors", ds.corpus_vectors, of_corpus, re_embed=re_embed
            )
            queries = self.times.time(
                "query_vectors", ds.query_vectors, embedder, re_embed=re_embed
            )
            shared.vectors[vkey] = (corpus, queries)
            self.cache_events.extend(_event_dict(e) for e in ds.cache_events[n_events:])
            self._corpus_throughput(ds.cache_events[n_events:], len(corpus), of_corpus)
        corpus, queries = shared.vectors[vkey]
        return Embedding(name, params, embedder, corpus, queries, mixed=of_corpus is not embedder)

    def _corpus_throughput(self, events: Sequence[Any], n: int, embedder: Any) -> None:
        """``info.corpus_embedding`` when this set-up embedded the corpus (not shipped, not
        cached): passages, seconds (embedding and writing the cache file), passages per second,
        and the embedder's batch size and threads -- set-up, apart from request latency."""
        made = [
            e
            for e in map(_event_dict, events)
            if str(e.get("what", "")).startswith("corpus_vectors") and not e.get("hit")
        ]
        if not made or not n:
            return
        seconds = float(made[-1].get("seconds") or 0.0)
        batch = getattr(embedder, "batch_size", None)
        call_threads = getattr(embedder, "call_threads", None)  # MiniLM's per-call pin
        self.corpus_embedding = {
            "corpus_embedding": {
                "passages": n,
                "seconds": seconds,
                "passages_per_s": n / seconds if seconds > 0 else None,
                # MiniLM's int8 runtime embeds one text per pass whatever batch_size says
                "batch_size": 1 if getattr(embedder, "runtime", None) == "onnx-int8" else batch,
                "threads": call_threads(n) if callable(call_threads) else None,
            }
        }

    def _check_index_first(self, ds: Dataset, embedder: Any) -> None:
        """What a database index refuses, checked before the model is loaded and the corpus
        embedded (3 min for 3 000 passages with MiniLM on the loaded dev machine): an index
        that stores attribute columns is made, given the dataset's columns (a NUL value, a
        name it reserves) and closed, so its own checks (``table``, a ``dsn=`` server's
        privileges) run too. Skipped when the embedder's width is known only once loaded."""
        r = self.config.retrieve
        backend = str(r.backend)
        if not callable(getattr(indexes.registry.factory(backend), "set_attributes", None)):
            return
        of_corpus = (
            embedder.corpus_embedder if isinstance(embedder, EmbedsCorpusApart) else embedder
        )
        dim = getattr(of_corpus, "dim", None)
        if not isinstance(dim, int) or dim <= 0:
            return
        key = (ds.content_hash, dim, freeze(r.to_dict()))
        if key in self.shared.checked:
            return
        build = indexes.with_dsn(backend, r.build_params(), r.dsn)
        probe = indexes.create(backend, dim=dim, metric=r.metric or ds.metric, **build)
        try:
            if ds.corpus.attributes and isinstance(probe, FiltersOnAttributes):
                probe.set_attributes(ds.corpus.attributes)
        finally:
            close = getattr(probe, "close", None)
            if callable(close):
                close()
        self.shared.checked.add(key)

    def _index(self, ds: Dataset, emb: Embedding, metric: str) -> Index:
        r = self.config.retrieve
        backend, params = str(r.backend), r.build_params()
        key = (backend, metric, freeze(params), ds.content_hash, emb.key, r.fast_build)
        if key not in self.shared.indexes:
            dim = int(emb.corpus.shape[1])
            build = indexes.with_dsn(backend, params, r.dsn)
            index = indexes.create(backend, dim=dim, metric=metric, **build)
            if isinstance(index, FiltersOnAttributes) and ds.corpus.attributes:
                index.set_attributes(ds.corpus.attributes)  # typed columns beside the vectors
            data = _index_data(index.input_kind, ds, emb)
            source = _data_source(ds, emb, index.input_kind)
            path = r.index_file
            if path is not None and Path(path).exists():
                index = self.times.time("index_load", load_index, path, index, data, source)
            else:
                # deterministic unless [retrieve] fast_build; slow builds cached
                built = builds.build(index, data, fast=r.fast_build, source=source)
                index = built.index
                step = "index_load" if built.load_ns else "index_build"
                self.times.add(step, built.load_ns or built.build_ns)
                self.times.add("jit_compile", built.compile_ns)
                if path is not None:
                    self.times.time("index_save", index.save, path, data=data, source=source)
            self.shared.indexes[key] = index
        return self.shared.indexes[key]

    def _retrieve_stage(self, index: Index, k_cand: int, filters: QueryFilters | None) -> Stage:
        r = self.config.retrieve
        if filters is None:
            return RetrieveStage(index, k_cand, r.search_params())
        strategy = r.filter_strategy
        can = tuple(index.filter_strategies) if isinstance(index, FilteredSearch) else ()
        if not can or (strategy not in (None, "auto") and strategy not in can):
            raise ConfigError(
                f"[retrieve] index {index.name!r} has no filter strategy {strategy or 'at all'}; "
                f"it has: {', '.join(can) or 'none (filtered search is for dense indexes)'}"
            )
        specs = filters.specs if isinstance(index, FiltersOnAttributes) else None
        return FilteredRetrieveStage(
            index, k_cand, r.search_params(), filters.masks, strategy, specs
        )

    def _query_filters(self, ds: Dataset, emb: Embedding, metric: str) -> QueryFilters | None:
        """The filter of every query when ``[retrieve] filter`` asks for them (timed as set-up)."""
        if self.config.retrieve.filter is None:
            return None
        table = self.config.retrieve.filter.to_dict()  # what a dataset's query_filters reads
        embedder = None if emb.name == "precomputed" else emb.embedder
        filters: QueryFilters = self.times.time(
            "query_filters", ds.query_filters, table, embedder=embedder, metric=metric
        )
        return filters

    def _agreement(self, ds: Dataset, emb: Embedding, metric: str) -> dict[str, Any]:
        """``embed_agreement`` of an embedder with a reference (MiniLM's non-torch runtimes, the
        static model2vec): :func:`~ragbench.datasets.neighbors.top_k_agreement` of its vectors
        with the reference's. The reference's vectors (torch: the shipped ones where they
        apply) are set-up time, ``reference_vectors``."""
        ref = (
            emb.embedder.reference_embedder
            if isinstance(emb.embedder, HasReferenceEmbedder)
            else None
        )
        if ref is None:
            return {}

        def vectors() -> tuple[np.ndarray, np.ndarray]:
            return ds.corpus_vectors(ref), ds.query_vectors(ref)

        n_events = len(ds.cache_events)
        ref_corpus, ref_queries = self.times.time("reference_vectors", vectors)
        self.cache_events.extend(_event_dict(e) for e in ds.cache_events[n_events:])
        mine = (emb.queries, emb.corpus)
        got = {"reference": "minilm torch"}
        got |= top_k_agreement(mine, (ref_queries, ref_corpus), metric)
        return {"embed_agreement": got}

    def _exact_neighbors(
        self, ds: Dataset, emb: Embedding, metric: str, filters: QueryFilters | None
    ) -> np.ndarray:
        k = self.config.run.k
        key = (ds.content_hash, emb.key, k, metric, None if filters is None else filters.key)
        if key not in self.shared.truth and emb.mixed:  # query_only: the arrays themselves
            allowed = None if filters is None else filters.masks
            self.shared.truth[key] = self.times.time(
                "exact_neighbors",
                brute_force_neighbors,
                emb.queries,
                emb.corpus,
                k,
                metric,
                allowed=allowed,
            )
        if key not in self.shared.truth:
            embedder = None if emb.name == "precomputed" else emb.embedder
            self.shared.truth[key] = self.times.time(
                "exact_neighbors",
                ds.exact_neighbors,
                k,
                embedder=embedder,
                metric=metric,
                re_embed=self.config.embed.re_embed and embedder is not None,
                filters=filters,
            )
        return self.shared.truth[key]

    def _rerank_stage(
        self, ds: Dataset, metric: str, corpus: np.ndarray, cache: LruTtlCache | None
    ) -> Stage:
        k = self.config.run.k
        reranker = self.components.reranker
        if reranker is None:
            return TruncateStage(k, cache)
        if reranker.metric != rerank_metric(metric):
            params = self.config.rerank.params()
            reranker = rerankers.create(reranker.name, metric=rerank_metric(metric), **params)
        if isinstance(reranker, RanksTexts) and reranker.input_kind == "texts":
            self.closers.append(reranker.close)
            exact = start_text_reranker(reranker, self.times.add, self.caveats)
            return TextRerankStage(reranker, exact, ds.corpus.texts, corpus, k, cache)
        self.times.add("jit_compile", reranker.warmup(int(corpus.shape[1])))
        return RerankStage(reranker, corpus, k, cache)

    def _serialize_stage(self, ds: Dataset, corpus: np.ndarray) -> SerializeStage:
        s = self.config.serialize
        return SerializeStage(
            self.components.codec, ds, corpus, bool(s.with_embeddings), bool(s.with_metadata)
        )

    def _start_transport(self, cpu_time: bool) -> Transport:
        cfg = self.config
        transport = self.components.transport
        # what the far side gets (in a child process, for some transports): plain values
        prompt_params = {k: v for k, v in cfg.prompt.to_dict().items() if v is not None}
        self.closers.append(transport.close)
        args = (str(cfg.serialize.backend), cfg.serialize.params(), prompt_params)
        # the far side measures its own CPU time only when asked (it costs inside the transport)
        started = transport.start(*args, cpu_time=True) if cpu_time else transport.start(*args)
        self.times.add("transport_start", started)
        return transport

    def _start_generator(self) -> Generator:
        generator = self.components.generator
        self.closers.append(generator.close)
        self.times.add("generator_start", generator.start())
        return generator

    def _simulated(self, generator: Generator) -> tuple[str, ...]:
        if not generator.simulated:
            return ()
        return (f"generate={self.config.generate.backend}",)

    def _describe_parts(self, parts: _Described) -> dict[str, Any]:
        cfg = self.config
        codec = self.components.codec
        return {
            "index": _index_info(parts.index),
            "embedder": parts.embedding.name,
            "metric": parts.metric,
            "k": cfg.run.k,
            "k_candidates": parts.k_candidates,
            "codec": cfg.serialize.backend,
            # row or columnar for the built-in codecs; None for codecs without shapes
            "payload_shape": codec.shape if isinstance(codec, Shaped) else None,
            "transport": cfg.transport.backend,
            "generator": cfg.generate.backend,
            "rerank": cfg.rerank.backend,
            "request_threads": parts.threads[0],
            "build_threads": parts.threads[1],
            **_described("embedder_info", parts.embedding.embedder),
            **_described("reranker_info", self.components.reranker),
            **_described("generator_info", self.components.generator),
            **_described("transport_info", self.components.transport),
            **self._filter_info(parts.filters, parts.index),
        }

    def _filter_info(self, filters: QueryFilters | None, index: Index) -> dict[str, Any]:
        """``filter``: the request, achieved selectivity (mean/min/max), strategy and, for a
        database index, the SQL path (``where`` on attribute columns or ``ids``); or nothing."""
        if filters is None:
            return {}
        strategy = self.config.retrieve.filter_strategy
        info = {**filters.summary(), "strategy": strategy or "auto"}
        path = filter_path(index, strategy)
        if path is not None:
            info["path"] = path
        return {"filter": info}


@dataclass(frozen=True, slots=True, eq=False)
class _Described:
    """What the ``info`` block of a record says about the built parts."""

    index: Index
    embedding: Embedding
    metric: str
    k_candidates: int
    filters: QueryFilters | None
    threads: tuple[int, int]  # request, build


def _precomputed(ds: Dataset, params: dict[str, Any]) -> Embedding:
    """``[embed] backend = "precomputed"``: the dataset's own corpus and query vectors."""
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
    return Embedding("precomputed", params, embedder, ds.vectors, ds.query_vectors_precomputed)


def check_index_file(path: str | None) -> None:
    """A ``[retrieve] index_file`` to write must be writable, one to read a regular file."""
    if path is None:
        return
    if Path(path).exists():
        if not Path(path).is_file():
            raise ConfigError(f"[retrieve] index_file {path}: not a regular file")
    else:
        check_writable(path, "[retrieve] index_file")


def load_index(path: str, like: Index, data: Any, source: str) -> Index:
    """The index saved at ``path``, checked to be the one this config builds of ``data``.

    Same backend, metric, dim, build parameters and item count, and the
    fingerprint of the data it was built on equal to that of ``data``
    (the corpus vectors, or texts); a file without a fingerprint (older
    ragbench, or ``Index.save`` without ``data=``) is refused too.
    """
    index = indexes.load(path)
    want = (like.name, like.metric, _dim(like), dict(like.build_params), len(data))
    got = (index.name, index.metric, _dim(index), dict(index.build_params), index.ntotal)
    if got != want:
        raise IndexFileError(
            f"[retrieve] index_file {path}: holds (backend, metric, dim, build params, "
            f"items) {got}, but this config builds {want}; delete the file or point "
            "index_file elsewhere"
        )
    saved = index.saved_data if isinstance(index, RecordsData) else None
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


def _dim(index: Index) -> int | None:
    return index.dim if isinstance(index, HasDim) else None


def _caveats(generator: Generator) -> tuple[str, ...]:
    """What every report of this generator must say (random-weight LLM, ...)."""
    caveat = generator.caveat if isinstance(generator, Cautioned) else None
    return (caveat,) if isinstance(caveat, str) else ()


def _described(key: str, component: object) -> dict[str, Any]:
    """``{key: component.describe()}`` for a part that describes itself (asgi's server, ...), or nothing."""
    return {key: dict(component.describe())} if isinstance(component, Describes) else {}


def _index_data(kind: str, ds: Dataset, emb: Embedding) -> Any:
    """What an index of ``input_kind`` ``kind`` is built on: texts, vectors, or a Pair of both."""
    if kind == "texts":
        return ds.corpus.texts
    if kind == "both":
        from ..indexes.hybrid_index import Pair

        return Pair(emb.corpus, ds.corpus.texts)
    return emb.corpus


def _data_source(ds: Dataset, emb: Embedding, kind: str) -> str:
    """What an index is built on, for index-file messages: dataset, content, embedder."""
    what = f"dataset {ds.name!r} (content {ds.content_hash[:12]})"
    if kind == "texts":
        return f"the texts of {what}"
    if kind == "both":
        what = f"the texts and vectors of {what}"
    params = ", ".join(f"{k}={v!r}" for k, v in sorted(emb.params.items()))
    return f"{what} embedded with {emb.name}" + (f"({params})" if params else "")


def _index_info(index: Index) -> dict[str, Any]:
    if isinstance(index, IndexInfo):
        try:
            return dict(index.info())
        except RagbenchError:
            pass
    return {"backend": index.name, "params": index.build_params}


def _event_dict(event: object) -> dict[str, Any]:
    if isinstance(event, Mapping):
        return dict(event)
    if dataclasses.is_dataclass(event) and not isinstance(event, type):
        return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    if isinstance(event, Sequence):
        return {"event": list(event)}
    return {"event": str(event)}

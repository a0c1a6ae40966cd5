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
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from . import codecs, embedders, generators, indexes, rerankers, threads, transports
from .config import backend_params, load_config
from .errors import ConfigError, GeneratorError, NotBuiltError, RagbenchError, TransportError
from .metrics import rerank_metric
from .timing import run_stages
from .types import Hit, RetrievalResult

if TYPE_CHECKING:
    from .datasets import Dataset
    from .report import Report

__all__ = ["STAGES", "Pipeline", "RequestContext"]

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


class RequestContext:
    """Everything one request reads and writes on its way through the stages."""

    # written by the stage that owns each field before any later stage reads it
    query_vector: np.ndarray
    candidate_ids: np.ndarray
    candidate_scores: np.ndarray
    hit_scores: np.ndarray
    prompt: str
    first_token: str

    __slots__ = (
        "index",
        "query_id",
        "query",
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
    )

    def __init__(self, index: int, query_id: str, query: str) -> None:
        # Only what a later stage may read before an earlier one writes it is
        # set here; the rest is written by the stage that owns it.
        self.index = index
        self.query_id = query_id
        self.query = query
        self.cached = False
        self.hit_ids: np.ndarray | None = None
        self.payload = b""
        self.far: transports.FarSide | None = None
        self.prompt_tokens = 0


# ---------------------------------------------------------------- stages


class EmbedStage:
    name = "embed"

    def __init__(self, embedder: Any) -> None:
        self._embed = embedder.embed

    def __call__(self, ctx: RequestContext) -> None:
        ctx.query_vector = self._embed([ctx.query])


class LruTtlCache:
    """Query text → final (ids, scores), least recently used evicted, entries expire after ``ttl_s``."""

    def __init__(self, size: int, ttl_s: float) -> None:
        self.size = size
        self.ttl_ns = int(ttl_s * 1e9)
        self._data: OrderedDict[str, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        entry = self._data.get(key)
        if entry is None or perf_counter_ns() - entry[0] > self.ttl_ns:
            if entry is not None:
                del self._data[key]
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return entry[1], entry[2]

    def put(self, key: str, ids: np.ndarray, scores: np.ndarray) -> None:
        self._data[key] = (perf_counter_ns(), ids, scores)
        self._data.move_to_end(key)
        if len(self._data) > self.size:
            self._data.popitem(last=False)


class CacheStage:
    name = "cache"

    def __init__(self, cache: LruTtlCache) -> None:
        self.cache = cache

    def __call__(self, ctx: RequestContext) -> None:
        found = self.cache.get(ctx.query)
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

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        query = [ctx.query] if self._texts else ctx.query_vector
        ids, scores = self._search(query, self._k, **self._params)
        ctx.candidate_ids = ids[0]
        ctx.candidate_scores = scores[0]


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
        assert ctx.query_vector is not None and ctx.candidate_ids is not None  # noqa: S101 - set by earlier stages
        ctx.hit_ids, ctx.hit_scores = self._rerank(
            ctx.query_vector[0], ctx.candidate_ids, self._vectors, self._k
        )
        if self._cache is not None:
            self._cache.put(ctx.query, ctx.hit_ids, ctx.hit_scores)


class TruncateStage:
    """``rerank = "none"``: keep the retriever's own top k and its scores."""

    name = "rerank"

    def __init__(self, k: int, cache: LruTtlCache | None) -> None:
        self._k = k
        self._cache = cache

    def __call__(self, ctx: RequestContext) -> None:
        if ctx.cached:
            return
        assert ctx.candidate_ids is not None and ctx.candidate_scores is not None  # noqa: S101
        ctx.hit_ids = ctx.candidate_ids[: self._k]
        ctx.hit_scores = ctx.candidate_scores[: self._k]
        if self._cache is not None:
            self._cache.put(ctx.query, ctx.hit_ids, ctx.hit_scores)


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
        assert ctx.hit_ids is not None and ctx.hit_scores is not None  # noqa: S101
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

    def __call__(self, ctx: RequestContext) -> None:
        far = self._send(ctx.payload, ctx.query)
        ctx.far = far
        ctx.prompt = far.prompt
        ctx.prompt_tokens = far.prompt_tokens


class GenerateStage:
    name = "generate"

    def __init__(self, generator: Any) -> None:
        self._first = generator.first_token

    def __call__(self, ctx: RequestContext) -> None:
        ctx.first_token = self._first(ctx.prompt, ctx.prompt_tokens).text


# ---------------------------------------------------------------- pipeline


def _shared_key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


class Pipeline:
    """A configured request path: ``Pipeline.from_config(cfg).run()``.

    Build it from a TOML path or dict (see ``bench/configs/default.toml``).
    ``run(dataset=None, queries=None, warmup=None)`` sets everything up
    (timed as setup), runs warm-up requests, then the measured requests one
    by one, and returns a :class:`ragbench.report.Report`. Use it as a
    context manager, or call :meth:`close`, to stop transport and LLM servers.
    """

    def __init__(self, config: Mapping[str, Any], *, label: str | None = None) -> None:
        self.config = load_config(config)
        run = self.config["run"]
        self.label = label or run["label"] or self.describe()
        self.dataset: Dataset | None = None
        self.setup_ns: dict[str, int] = {}
        self.simulated: list[str] = []
        self.stage_names: list[str] = []
        self.cache_events: list[dict[str, Any]] = []
        self._stages: list[Callable[[RequestContext], None]] = []
        self._closers: list[Callable[[], None]] = []
        self._records: list[tuple[Any, ...]] = []
        self._cache: LruTtlCache | None = None
        self._ready = False
        # taken now, so pipelines created together (compare) all build with it
        self._build_threads = threads.get_threads()
        self._info: dict[str, Any] = {}
        self.error: str | None = None

    @classmethod
    def from_config(cls, config: str | PathLike[str] | Mapping[str, Any], **kw: Any) -> Pipeline:
        return cls(load_config(config), **kw)

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
        return f"{b['retrieve']}/{b['rerank']}/{b['serialize']}/{b['transport']}" + (
            f"/{b['generate']}" if b["generate"] != "none" else ""
        )

    # ---- setup

    def _timed(self, key: str, fn: Callable[[], Any]) -> Any:
        t0 = perf_counter_ns()
        value = fn()
        self.setup_ns[key] = self.setup_ns.get(key, 0) + (perf_counter_ns() - t0)
        return value

    def load_dataset(self) -> Dataset:
        from . import datasets

        ds_cfg = dict(self.config["dataset"])
        if "path" in ds_cfg:
            path = ds_cfg.pop("path")
            ds_cfg.pop("name", None)
            return datasets.load(path, **ds_cfg)
        name = ds_cfg.pop("name")
        return datasets.load(name, **ds_cfg)

    def setup(
        self, dataset: Dataset | None = None, *, shared: dict[str, Any] | None = None
    ) -> None:
        """Load, embed, build, compile and start everything; each step timed as setup.

        ``shared`` lets several pipelines (``ragbench compare``) reuse the
        dataset vectors and built indexes instead of rebuilding them.
        """
        if self._ready:
            return
        shared = shared if shared is not None else {}
        cfg = self.config
        run = cfg["run"]
        build_threads = self._build_threads
        threads.set_threads(build_threads)
        if dataset is None:
            key = _shared_key("dataset", cfg["dataset"])
            if key not in shared:
                shared[key] = self._timed("dataset_load", self.load_dataset)
            dataset = shared[key]
        self.dataset = ds = dataset
        k, k_cand = run["k"], run["k_candidates"]

        # embed: the query-time embedder, and the corpus/query vectors it implies
        emb_name = cfg["embed"]["backend"] or ds.default_embedder
        emb_params = backend_params(cfg, "embed")
        vec_key = _shared_key("vectors", ds.content_hash, emb_name, emb_params)
        if emb_name == "precomputed":
            if ds.vectors is None or ds.query_vectors_precomputed is None:
                raise ConfigError(
                    f"[embed] backend 'precomputed' needs a dataset with vectors; {ds.name!r} has "
                    "texts only: use 'minilm' or 'hashing'"
                )
            embedder = embedders.create(
                "precomputed",
                texts=ds.queries.texts,
                vectors=ds.query_vectors_precomputed,
                **emb_params,
            )
            corpus_vectors, query_vectors = ds.vectors, ds.query_vectors_precomputed
        else:
            ekey = _shared_key("embedder", emb_name, emb_params)
            if ekey not in shared:
                shared[ekey] = embedders.create(emb_name, **emb_params)
            embedder = shared[ekey]
            self._timed("model_load", embedder.load)
            if vec_key not in shared:
                n_events = len(ds.cache_events)
                shared[vec_key] = (
                    self._timed("corpus_vectors", lambda: ds.corpus_vectors(embedder)),
                    self._timed("query_vectors", lambda: ds.query_vectors(embedder)),
                )
                self.cache_events.extend(_event_dict(e) for e in ds.cache_events[n_events:])
            corpus_vectors, query_vectors = shared[vec_key]
        self._corpus_vectors = corpus_vectors
        self._query_vectors = query_vectors
        self._embedder_name = emb_name
        dim = int(corpus_vectors.shape[1])

        # retrieve: build once per (backend, build params, data)
        r = cfg["retrieve"]
        metric = r["metric"] or ds.metric
        if k > len(ds.corpus.ids):
            from .errors import KTooLargeError

            raise KTooLargeError(
                f"[run] k={k} is larger than the corpus ({len(ds.corpus.ids)} items)"
            )
        k_cand = min(k_cand, len(ds.corpus.ids))
        ikey = _shared_key(
            "index", r["backend"], metric, r["build"], ds.content_hash, emb_name, emb_params
        )
        if ikey not in shared:
            index = indexes.create_for(r["backend"], dim=dim, metric=metric, **r["build"])
            data = ds.corpus.texts if index.input_kind == "texts" else corpus_vectors
            build_ns, compile_ns = indexes.build_timed(index, data)
            self.setup_ns["index_build"] = self.setup_ns.get("index_build", 0) + build_ns
            self.setup_ns["jit_compile"] = self.setup_ns.get("jit_compile", 0) + compile_ns
            shared[ikey] = index
        index = shared[ikey]
        self._index = index

        gkey = _shared_key("truth", ds.content_hash, emb_name, emb_params, k, metric)
        if gkey not in shared:
            shared[gkey] = self._timed(
                "exact_neighbors",
                lambda: ds.exact_neighbors(
                    k, embedder=embedder if emb_name != "precomputed" else None, metric=metric
                ),
            )
        self._truth = shared[gkey]
        self._metric = metric

        # cache
        c = cfg["cache"]
        self._cache = LruTtlCache(c["size"], c["ttl_s"]) if c["backend"] == "lru" else None

        # rerank
        rr_name = cfg["rerank"]["backend"]
        if rr_name == "none":
            rerank_stage: Callable[[RequestContext], None] = TruncateStage(k, self._cache)
        else:
            reranker = rerankers.create(
                rr_name, metric=rerank_metric(metric), **backend_params(cfg, "rerank")
            )
            self.setup_ns["jit_compile"] = self.setup_ns.get("jit_compile", 0) + reranker.warmup(
                dim
            )
            rerank_stage = RerankStage(reranker, corpus_vectors, k, self._cache)

        # serialize / transport (deserialize + prompt on the far side) / generate
        s = cfg["serialize"]
        codec_params = backend_params(cfg, "serialize")
        codec = codecs.create(s["backend"], **codec_params)
        prompt_params = {k_: v for k_, v in cfg["prompt"].items() if v is not None}
        transport = transports.create(
            cfg["transport"]["backend"], **backend_params(cfg, "transport")
        )
        self._closers.append(transport.close)
        self.transport = transport
        self.setup_ns["transport_start"] = transport.start(
            s["backend"], codec_params, prompt_params
        )
        generator = generators.create(cfg["generate"]["backend"], **backend_params(cfg, "generate"))
        self._closers.append(generator.close)
        self.setup_ns["generator_start"] = generator.start()
        if generator.simulated:
            self.simulated.append(f"generate={cfg['generate']['backend']}")
        self._generator = generator

        stages: list[Any] = [EmbedStage(embedder)]
        if self._cache is not None:
            stages.append(CacheStage(self._cache))
        stages += [
            RetrieveStage(index, k_cand, r["search"]),
            rerank_stage,
            SerializeStage(
                codec, ds, corpus_vectors, bool(s["with_embeddings"]), bool(s["with_metadata"])
            ),
            TransportStage(transport),
            GenerateStage(generator),
        ]
        self._stages = stages
        # Set-up (embedding the corpus, building) used every core; each request
        # runs on the pinned request thread count, one query per call, as a
        # service worker would.
        self.request_threads = run["threads"] or 1
        threads.set_threads(self.request_threads)
        self._loop_names = [st.name for st in stages]
        self.stage_names = [
            n for n in STAGES if n in self._loop_names or n in ("deserialize", "prompt")
        ]
        self._stamps = [0] * (len(stages) + 1)
        self._info = {
            "index": _info(index),
            "embedder": emb_name,
            "metric": metric,
            "k": k,
            "k_candidates": k_cand,
            "codec": s["backend"],
            "transport": cfg["transport"]["backend"],
            "generator": cfg["generate"]["backend"],
            "rerank": rr_name,
            "request_threads": self.request_threads,
            "build_threads": build_threads,
        }
        self._ready = True

    # ---- requests

    def _context(self, i: int) -> RequestContext:
        assert self.dataset is not None  # noqa: S101
        q = self.dataset.queries
        j = i % len(q.ids)
        return RequestContext(j, q.ids[j], q.texts[j])

    def warm(self, n: int) -> None:
        """Run ``n`` warm-up requests (timed as setup ``warmup``, not kept as samples)."""
        if not self._ready:
            raise NotBuiltError("call setup() before warm()")
        stamps = list(self._stamps)
        t0 = perf_counter_ns()
        for i in range(n):
            run_stages(self._stages, self._context(i), stamps)
        self.setup_ns["warmup"] = self.setup_ns.get("warmup", 0) + perf_counter_ns() - t0

    def request(self, i: int) -> None:
        """Run and record measured request ``i`` (query ``i mod n_queries``)."""
        ctx = self._context(i)
        stamps = self._stamps
        run_stages(self._stages, ctx, stamps)
        # one append per request; everything else is derived in report()
        self._records.append(
            (stamps.copy(), ctx.far, ctx.hit_ids, len(ctx.payload), ctx.prompt_tokens, ctx.index)
        )

    def run(
        self,
        dataset: Dataset | None = None,
        *,
        queries: int | None = None,
        warmup: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Report:
        """Set up, warm up, run ``queries`` measured requests one by one, and report.

        A :class:`TransportError` or :class:`GeneratorError` stops the run;
        the report keeps every request finished before it and says why.
        """
        run = self.config["run"]
        queries = run["queries"] if queries is None else queries
        warmup = run["warmup"] if warmup is None else warmup
        self.setup(dataset)
        self.warm(warmup)
        for i in range(queries):
            try:
                self.request(i)
            except (TransportError, GeneratorError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                break
            if progress is not None:
                progress(1)
        return self.report()

    # ---- results

    def report(self) -> Report:
        from .report import Report

        if not self._ready or self.dataset is None:
            raise NotBuiltError("the pipeline has not run")
        recs = self._records
        nst = len(self._stages)
        loop = np.diff(
            np.asarray([r[0] for r in recs], dtype=np.int64).reshape(-1, nst + 1), axis=1
        )
        far = np.asarray(
            [
                (f.decode_ns, f.prompt_ns, f.wire_bytes_sent, f.wire_bytes_received)
                if (f := r[1]) is not None
                else (0, 0, 0, 0)
                for r in recs
            ],
            dtype=np.int64,
        ).reshape(-1, 4)
        columns: dict[str, np.ndarray] = {}
        for j, name in enumerate(self._loop_names):
            if name == "transport":
                columns["transport"] = loop[:, j] - far[:, 0] - far[:, 1]
                columns["deserialize"] = far[:, 0]
                columns["prompt"] = far[:, 1]
            else:
                columns[name] = loop[:, j]
        samples = (
            np.stack([columns[n] for n in self.stage_names], axis=1)
            if len(loop)
            else np.zeros((0, len(self.stage_names)), np.int64)
        )
        recall = self._recall()
        ds = self.dataset
        return Report(
            label=self.label,
            config=self.config,
            stage_names=list(self.stage_names),
            samples_ns=samples,
            recall=recall,
            payload_bytes=np.asarray([r[3] for r in recs], dtype=np.int64),
            wire_bytes=far[:, 2] + far[:, 3],
            prompt_tokens=np.asarray([r[4] for r in recs], dtype=np.int64),
            setup_ns=dict(self.setup_ns),
            cache_hits=self._cache.hits if self._cache else None,
            cache_lookups=(self._cache.hits + self._cache.misses) if self._cache else None,
            simulated=list(self.simulated),
            dataset={
                "name": ds.name,
                "n": len(ds.corpus.ids),
                "dim": int(self._corpus_vectors.shape[1]),
                "n_queries": len(ds.queries.ids),
                "content_hash": ds.content_hash,
            },
            info=dict(self._info),
            cache_events=list(self.cache_events),
            error=self.error,
        )

    def _recall(self) -> np.ndarray:
        """Tie-aware recall@k of each request's final hits against exact search."""
        from .metrics import recall_at_k

        k = self.config["run"]["k"]
        if not self._records:
            return np.zeros(0)
        found = np.full((len(self._records), k), -1, dtype=np.int64)
        for r, rec in enumerate(self._records):
            ids = rec[2]
            if ids is not None:
                n = min(k, len(ids))
                found[r, :n] = ids[:n]
        rows = np.asarray([rec[5] for rec in self._records], dtype=np.int64)
        return recall_at_k(
            found,
            self._truth,
            self._corpus_vectors,
            self._query_vectors,
            k,
            self._metric,
            query_rows=rows,
        )

    def close(self) -> None:
        """Stop every server this pipeline started (idempotent)."""
        while self._closers:
            closer = self._closers.pop()
            with contextlib.suppress(RagbenchError):
                closer()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _info(index: Any) -> dict[str, Any]:
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
    pipelines: Sequence[Pipeline], queries: int, *, progress: Callable[[int], None] | None = None
) -> None:
    """Run ``queries`` requests on every pipeline, interleaved request by request.

    The order of pipelines rotates each round so none always runs first
    (caches and turbo states favour no one). A failing pipeline is dropped
    from later rounds with its error kept.
    """
    live = list(pipelines)
    for i in range(queries):
        n = len(live)
        if n == 0:
            return
        for j in range(n):
            p = live[(i + j) % n]
            if p.error is not None:
                continue
            try:
                p.request(i)
            except (TransportError, GeneratorError) as exc:
                p.error = f"{type(exc).__name__}: {exc}"
        live = [p for p in live if p.error is None]
        if progress is not None:
            progress(1)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

"""The request path, in order, and the loop that times it.

One request flows through these stages (the only place their order lives)::

    embed → cache → retrieve → rerank → serialize → transport → deserialize → prompt → generate

Each stage is an object with ``name`` and ``__call__(ctx)`` reading and
writing one :class:`RequestContext`. The loop stamps ``perf_counter_ns``
between stages (see :func:`ragbench.timing.run_stages`). ``deserialize`` and
``prompt`` run on the far side of the transport; their times come back in
the transport's reply and are split out of the transport stage afterwards,
so per-stage times still add up to the request total exactly.

The package, by concern: :mod:`~ragbench.pipeline.context` (the request
context and record), :mod:`~ragbench.pipeline.stages` (one class per stage),
:mod:`~ragbench.pipeline.cache` (the query cache), :mod:`~ragbench.pipeline.parts`
(the backends, typed with each stage package's Protocol, and what pipelines
share), :mod:`~ragbench.pipeline.capabilities` (what a backend can do beyond
its Protocol), :mod:`~ragbench.pipeline.build` (set-up, returning a frozen
:class:`~ragbench.pipeline.build.Built`), :mod:`~ragbench.pipeline.samples`
(sample maths), :mod:`~ragbench.pipeline.tracing` (OpenTelemetry trace
assembly) and :mod:`~ragbench.pipeline.interleaving` (pipelines side by side).
:class:`Pipeline` itself, here, ties them together.

Model loading, corpus embedding, index build, JIT compilation, server
start-up and warm-up requests are timed as setup, never as request latency.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from time import perf_counter_ns
from typing import Any

import numpy as np

from .. import judged, threads
from .._deprecated import moved_names
from ..datasets import Dataset
from ..errors import ConfigError, GeneratorError, NotBuiltError, RagbenchError, TransportError
from ..otel import TraceExporter, check_available
from ..results.report import Report
from ..settings import Config, ConfigSource, parse_config
from ..timing import SetupTimes, run_stages, run_stages_cpu
from ..transports import Transport
from . import samples, tracing
from .build import Built, build, check_first, check_index_file
from .cache import LruTtlCache
from .capabilities import Closes, InProcess
from .context import STAGES, RequestContext, RequestRecord
from .interleaving import interleave
from .parts import Components, SharedParts
from .stages import Stage

#: What users call: the pipeline, the stage order and the request types a custom stage or a
#: driver reads (tests/project/test_public_api.py pins this list). The building blocks live in the
#: package's modules: :mod:`~ragbench.pipeline.stages`, :mod:`~ragbench.pipeline.build`, ...
__all__ = [
    "STAGES",
    "Pipeline",
    "RequestContext",
    "RequestRecord",
    "SharedParts",
    "Stage",
    "interleave",
]

#: Names ``ragbench.pipeline`` exported until its ``__all__`` was trimmed to what users call
#: (issue 30) still import from here for one release, warning where they live now
#: (:data:`ragbench._deprecated.MOVED` lists them).
__getattr__ = moved_names(__name__)


class Pipeline:
    """A configured request path: ``Pipeline.from_config(cfg).run()``.

    Build it from a TOML path, a shipped config name (``"default"``, see
    :func:`ragbench.settings.shipped_names`), a dict or a typed
    :class:`ragbench.settings.Config`;
    every backend name and parameter is checked then, before anything runs.
    ``run(dataset=None, queries=None, warmup=None)`` sets everything up
    (timed as set-up), runs warm-up requests, then the measured requests one
    by one, and returns a :class:`ragbench.results.report.Report` of that run only.
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
        otel: TraceExporter | None = None,
    ) -> None:
        #: the typed configuration, checked (a Config given is taken as it is)
        self.config: Config = parse_config(config)
        self.components = Components.create(self.config)
        self.label = label or self.config.run.label or self.describe()
        self.dataset: Dataset | None = None
        self.setup_times = SetupTimes()
        self.simulated: list[str] = []
        self.caveats: list[str] = []  # what every report must say (random-weight LLM, ...)
        self.stage_names: list[str] = []
        self.cache_events: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {}
        self.error: str | None = None
        self.request_threads = self.config.run.threads or 1
        self.cpu_time: bool = self.config.run.cpu_time
        # taken now, so pipelines created together (compare) all build with it
        self.build_threads = threads.get_threads()
        self._threads_before: int | None = None
        self._built: Built | None = None
        # copies of the built stages and their names: the request loop reads one attribute
        self._stages: list[Stage] = []
        self._loop_names: list[str] = []
        self._closers: list[Callable[[], None]] = []
        self._records: list[RequestRecord] = []
        self._repetition_starts: list[int] = []
        self._cache: LruTtlCache | None = None
        self._filter_specs: Sequence[Any] | None = None
        # the index's database-server CPU clock (ns), read around each request when it has one
        self._server_clock: Callable[[], int | None] | None = None
        self._ready = False
        # checked now, before any data is loaded or embedded: a bad path fails in a second
        check_index_file(self.config.retrieve.index_file)
        samples.check_record_memory(self.config.run.queries, self.config.run.repeat)
        self._otel = otel
        self._traced = 0  # this run's records already exported as traces
        self._judgments: tuple[Dataset, judged.Judgments | None] | None = None  # by dataset
        self._codec_library: dict[str, Any] | None = None  # measured once, at the first report
        self._traces: tracing.RequestTraces | None = None
        if otel is None and self.config.run.otel:
            check_available()  # a missing extra fails now, like any bad config

    @classmethod
    def from_config(cls, config: ConfigSource, **kw: Any) -> Pipeline:
        return cls(config, **kw)

    @property
    def built(self) -> Built:
        """Everything :meth:`setup` made (dataset, vectors, index, stages, ...), frozen."""
        if self._built is None:
            raise NotBuiltError("call setup() first")
        return self._built

    @property
    def transport(self) -> Transport:
        """The transport backend (started by :meth:`setup`)."""
        return self.components.transport

    @property
    def setup_ns(self) -> dict[str, int]:
        """Nanoseconds per set-up step (dataset load, corpus vectors, index build, ...)."""
        return self.setup_times.ns

    # ---- description

    def backends(self) -> dict[str, str]:
        cfg = self.config
        out = {table: str(stage.backend) for table, stage in cfg.stages().items()}
        if cfg.embed.backend is None:
            out["embed"] = "default"
        return out

    def describe(self) -> str:
        b = self.backends()
        shape = self.config.serialize.params().get("shape")  # the payload shape, when chosen
        codec = b["serialize"] if shape is None else f"{b['serialize']}/{shape}"
        return (
            f"{b['retrieve']}/{b['rerank']}/{codec}/{b['transport']}"
            + (f"/{b['generate']}" if b["generate"] != "none" else "")
            + self._embed_label()
        )

    def _embed_label(self) -> str:
        """``/minilm:onnx-int8`` (``+query-only``) for an embedder runtime other than torch."""
        embed = self.config.embed.params()
        runtime = embed.get("runtime")
        if self.config.embed.backend != "minilm" or runtime in (None, "torch"):
            return ""
        return f"/minilm:{runtime}" + ("+query-only" if embed.get("query_only") else "")

    # ---- set-up: one builder per part

    def load_dataset(self) -> Dataset:
        """The dataset the config's ``[dataset]`` table names."""
        from .. import datasets

        return datasets.from_table(self.config.dataset.to_dict())

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
            self._adopt(self._build(dataset, parts))
            if shared is None:  # indexes of ours holding a server or files (pgvector) stop with us
                self._closers.extend(
                    i.close for i in parts.indexes.values() if isinstance(i, Closes)
                )
        except BaseException:
            self.close()
            raise
        threads.set_threads(self.request_threads)
        self._ready = True

    def check(self, dataset: Dataset | None = None, *, shared: SharedParts) -> None:
        """Refuse now what :meth:`setup` would refuse only after loading the embedding model
        and embedding the corpus (a database index's refusals: an attribute value or name,
        its table, a ``dsn=`` server's privileges); nothing is set up. ``ragbench compare``
        calls it for every configuration before setting any up, with the ``shared`` parts
        their set-up then uses (the dataset is loaded into it)."""
        if not self._ready:
            check_first(
                self.config,
                self.components,
                dataset,
                shared,
                setup_times=self.setup_times,
                load_dataset=self.load_dataset,
            )

    def _check_same_dataset(self, dataset: Dataset | None) -> None:
        if dataset is None or self.dataset is None or dataset is self.dataset:
            return
        if dataset.content_hash != self.dataset.content_hash:
            raise ConfigError(
                f"this pipeline is set up for dataset {self.dataset.name!r}; "
                f"create another Pipeline to run {dataset.name!r}"
            )

    def _build(self, dataset: Dataset | None, shared: SharedParts) -> Built:
        return build(
            self.config,
            self.components,
            dataset,
            shared,
            setup_times=self.setup_times,
            closers=self._closers,
            load_dataset=self.load_dataset,
            cpu_time=self.cpu_time,
            threads=(self.request_threads, self.build_threads),
        )

    def _adopt(self, built: Built) -> None:
        """Take what set-up made: the stages, their names and the parts' descriptions."""
        self._built = built
        self.dataset = built.dataset
        self._stages = list(built.stages)
        self._loop_names = list(built.loop_names)
        self.stage_names = list(built.stage_names)
        self._cache = built.cache
        self._filter_specs = built.filters.specs if built.filters is not None else None
        self._server_clock = samples.server_clock(built.index)
        self.info = dict(built.info)
        self.simulated.extend(s for s in built.simulated if s not in self.simulated)
        self.caveats.extend(c for c in built.caveats if c not in self.caveats)
        self.cache_events.extend(built.cache_events)

    # ---- requests

    def _context(self, i: int) -> RequestContext:
        if self.dataset is None:
            raise NotBuiltError("call setup() before sending requests")
        q = self.dataset.queries
        j = i % len(q.ids)
        ctx = RequestContext(j, q.ids[j], q.texts[j])
        if self._filter_specs is not None:
            ctx.cache_key = f"{ctx.query}\0{json.dumps(self._filter_specs[j], sort_keys=True)}"
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
    def stages(self) -> tuple[Stage, ...]:
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
        self,
        ctx: RequestContext,
        stamps: list[int],
        cpu: list[int] | None = None,
        server_cpu_ns: int = -1,
    ) -> RequestRecord:
        """The record of a request whose stages ran on ``ctx``, stamped in ``stamps``.

        Decodes the tokens after the first (when the generator streams them)
        now, after the stamps were taken. ``server_cpu_ns``: the CPU time the
        index's database server spent on the request (-1: not read).
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
            ctx.embed_parts,
            server_cpu_ns,
        )

    def serve(self, i: int) -> RequestRecord:
        """Run request ``i`` (query ``i mod n_queries``) and return its record without keeping it.

        Safe to call from several threads at once on one set-up pipeline:
        everything a request writes is its own (each worker thread should
        call :func:`ragbench.threads.pin_thread` once first). When the index
        has a database server of its own (pgvector), that server's CPU time
        is read before and after the request, outside the stage stamps
        (``server_cpu_ns`` of the record; the clock follows this thread's connection).
        """
        ctx = self._context(i)
        stamps = [0] * (len(self._stages) + 1)
        clock = self._server_clock
        s0 = clock() if clock is not None else None
        if self.cpu_time:
            cpu = [0] * len(stamps)
            run_stages_cpu(self._stages, ctx, stamps, cpu)
        else:
            cpu = None
            run_stages(self._stages, ctx, stamps)
        server = -1
        if s0 is not None and clock is not None:
            server = (clock() or s0) - s0
        # tokens after the first: decoded once the request's stamps are taken
        return self.record_of(ctx, stamps, cpu, server)

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
        return samples.repetitions(self._repetition_starts, len(self._records))

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
        run = self.config.run
        queries = run.queries if queries is None else queries
        warmup = run.warmup if warmup is None else warmup
        repeat = run.repeat if repeat is None else repeat
        samples.check_record_memory(queries, repeat)
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
        # inproc decodes and builds the prompt in this thread, inside the transport
        # stage; a far side in another process used its own CPU, not this thread's
        transport = self.components.transport
        if isinstance(transport, InProcess):
            in_thread = bool(transport.in_process)
        else:
            in_thread = self.config.transport.backend == "inproc"
        return samples.stage_samples(
            recs, self._loop_names, self.stage_names, cpu_time=self.cpu_time, in_thread=in_thread
        )

    def report(self) -> Report:
        """The report of the requests measured since the last :meth:`begin` (or :meth:`run`)."""
        if not self._ready or self.dataset is None:
            raise NotBuiltError("the pipeline has not run")
        self.export_traces()
        recs = self._records
        far = samples.far_columns(recs)
        ds = self.dataset
        cache = self._cache
        wall, cpu = self.stage_samples(recs)
        return Report(
            label=self.label,
            config=self.config.to_dict(),
            stage_names=list(self.stage_names),
            samples_ns=wall,
            cpu_samples_ns=cpu,
            server_cpu_ns=samples.server_cpu_ns(recs),
            recall=self.recall(recs),
            payload_bytes=np.asarray([r.payload_bytes for r in recs], dtype=np.int64),
            wire_bytes=far[:, 2] + far[:, 3],
            prompt_tokens=np.asarray([r.prompt_tokens for r in recs], dtype=np.int64),
            setup_ns=dict(self.setup_ns),
            cache_hits=cache.hits if cache else None,
            cache_lookups=(cache.hits + cache.misses) if cache else None,
            simulated=list(self.simulated),
            caveats=list(self.caveats),
            model_prompt_tokens=samples.model_prompt_tokens(recs),
            inter_token_ns=samples.inter_token_ns(recs),
            connection_ns=samples.connection_ns(recs),
            dataset={
                "name": ds.name,
                "n": len(ds.corpus.ids),
                "dim": int(self.built.embedding.corpus.shape[1]),
                "n_queries": len(ds.queries.ids),
                "content_hash": ds.content_hash,
            },
            info={
                **samples.with_retrieve_parts(self.info, recs),
                **samples.embed_parts(recs),
                **self._rerank_recall(recs),
                **self.codec_library(),
            },
            cache_events=list(self.cache_events),
            error=self.error,
            repetition=self.repetitions(),
            judged=self.judged(recs),
        )

    def codec_library(self) -> dict[str, Any]:
        """``{"codec_library_ns": [...]}``: the codec's library calls alone
        (:meth:`~ragbench.codecs._wire.BaseCodec.library_round_trip`) on the payload of the
        first query's exact top k, as the serialize stage builds it, timed back to back
        (:func:`samples.library_round_trip_ns`), once per pipeline, outside every request;
        ``{}`` for a codec that does not name its library calls."""
        if self._codec_library is None:
            # imported here: ragbench.pipeline.SerializeStage is a moved name that warns
            from .stages import SerializeStage

            self._codec_library = {}
            codec = self.components.codec
            stage = next((s for s in self._stages if isinstance(s, SerializeStage)), None)
            if stage is not None and self.dataset is not None:
                queries, rows = self.dataset.queries, self.built.truth[0]
                scores = np.linspace(1.0, 0.5, rows.size, dtype=np.float32)  # best first
                result = stage.result(queries.ids[0], queries.texts[0], rows, scores)
                try:
                    call = codec.library_round_trip(result)  # type: ignore[attr-defined]
                except (AttributeError, NotImplementedError):  # a codec of another project
                    return self._codec_library
                self._codec_library = {"codec_library_ns": samples.library_round_trip_ns(call)}
        return self._codec_library

    def recall(
        self, records: Sequence[RequestRecord] | None = None, *, final: bool = False
    ) -> np.ndarray:
        """Tie-aware recall@k of each record's final hits against exact search (default: this run's).

        After a reranker of texts (a cross-encoder) it is the recall of the
        exact top k of the same candidates (the retriever's), unless ``final``:
        then of the reranker's own k.
        """
        recs = self._records if records is None else records
        if not recs:
            return np.zeros(0)
        built = self.built
        k = self.config.run.k
        return samples.recall(recs, k, built.truth, built.embedding, built.metric, final=final)

    def judged(self, records: Sequence[RequestRecord] | None = None) -> dict[str, Any] | None:
        """nDCG@10, MRR@10 and recall@100 of each record's final hits against the dataset's qrels.

        The ``judged`` object of a run or load record (:func:`ragbench.judged.summary`):
        the hits that reach the LLM, as returned (``k`` of them, so recall@100
        is on ``min(100, k)`` places); ``None`` when the dataset has no judged
        answers or nothing was measured.
        """
        recs = self._records if records is None else records
        ds = self.dataset
        if ds is None or not recs:
            return None
        if self._judgments is None or self._judgments[0] is not ds:
            self._judgments = (ds, ds.judgments())
        judgments = self._judgments[1]
        if judgments is None:
            return None
        k = self.config.run.k
        ranked = np.full((len(recs), k), -1, dtype=np.int64)
        for r, rec in enumerate(recs):
            n = min(k, len(rec.hit_ids))
            ranked[r, :n] = rec.hit_ids[:n]
        rows = np.asarray([rec.query_row for rec in recs], dtype=np.int64)
        return judged.summary(judged.scores(ranked, rows, judgments), rows, judgments, returned=k)

    def _rerank_recall(self, recs: Sequence[RequestRecord]) -> dict[str, Any]:
        """``rerank_recall``: mean recall of a text reranker's own final k (``{}`` otherwise)."""
        if not any(rec.exact_ids is not None for rec in recs):
            return {}
        return {"rerank_recall": float(self.recall(recs, final=True).mean())}

    # ---- OpenTelemetry: after timing, never inside serve()

    def trace_exporter(self) -> TraceExporter | None:
        """Where this pipeline's traces go: the ``otel=`` exporter, else with ``[run] otel`` one
        made from the ``OTEL_*`` environment on first use (closed with the pipeline), else ``None``."""
        if self._otel is None and self.config.run.otel:
            self._otel = TraceExporter()
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
        first_token = self.config.generate.backend != "none"
        return tracing.export(
            exporter,
            self._request_traces(),
            self._loop_names,
            recs,
            wall,
            self.recall(recs),
            first_token=first_token,
        )

    def trace_of(
        self, rec: RequestRecord, row: np.ndarray, recall: float, llm: bool
    ) -> dict[str, Any]:
        """One request's trace as :meth:`export_traces` sends it: ``attributes``,
        ``stage_attributes`` and the ``inner`` spans nested in a stage (``row``: its int64
        per-stage ns; ``llm``: whether the generate stage is an LLM call)."""
        return self._request_traces().of(rec, row, recall, llm)

    def _request_traces(self) -> tracing.RequestTraces:
        """What every request's trace shares, made once after set-up."""
        if self._traces is None:
            self._traces = tracing.RequestTraces(
                self.config,
                self.backends(),
                self.built,
                label=self.label,
                simulated=self.simulated,
                caveats=self.caveats,
            )
        return self._traces

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

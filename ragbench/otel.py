"""OpenTelemetry traces of timed requests, built from the timer's own stamps.

ragbench times a request with ``perf_counter_ns`` stamps between its stages
(:mod:`ragbench.timing`). :class:`TraceExporter` turns one request's stamps
into one trace: a request span with one child span per stage, in stage
order. No span takes a clock reading of its own: each starts and ends at a
stamp the timer recorded, so a stage span's duration *is* the stage time
ragbench reports, to the nanosecond. Exporting runs after the request's last
stamp -- in a service, when :class:`ragbench.timing.StageTimer` stores the
request; in ``ragbench run``, ``compare`` and ``load``, after the measured
requests -- so it adds nothing to any measured time.

Clocks
    OpenTelemetry wants Unix-epoch nanoseconds; ``perf_counter_ns`` counts
    from an arbitrary origin. An exporter takes ``offset = time.time_ns() -
    time.perf_counter_ns()`` once, when it is created
    (:func:`clock_offset_ns`), and adds it to every stamp. Durations are
    differences of two stamps, so the offset cancels and they are exact;
    absolute times are as right as the wall clock was at that moment and stay
    consistent with one another (a later NTP step moves none of them). On
    Linux ``perf_counter_ns`` is CLOCK_MONOTONIC, one clock for every process,
    so stamps taken in worker processes map with the parent's offset.

Spans
    ``ragbench.request`` is the root (or a child of the caller's current span,
    when a service exports inside one); each stage is a child named after the
    stage -- the columns of ragbench's tables -- rather than the GenAI
    ``{operation} {model}`` form (GenAI-aware backends key on
    ``gen_ai.operation.name``). Work a stage contains can be nested under it
    (:class:`InnerSpan`): the pipeline nests the far side's ``deserialize``
    and ``prompt`` under ``transport``, whose span covers the whole round
    trip. The far side reports durations, not times, so they are placed in
    the middle of the round trip, the wire time split evenly either side;
    their durations are exact, their placement is not. Every span is
    INTERNAL: spans are rebuilt after the fact and no trace context crosses
    the wire, so a CLIENT span would promise a SERVER child that never comes.
    The first token is a ``ragbench.first_token`` event at the end of the
    first-token stage (``generate``), on that stage's span and on the request
    span.

Attributes
    The OpenTelemetry GenAI semantic conventions (development status) where
    they name the thing; ``ragbench.*`` for the rest. :func:`stage_attributes`
    (the same for every request of a pipeline), :func:`request_attributes`
    and :func:`request_stage_attributes` (per request) build them:

    ================  ========================================  =========================================
    span              attribute                                 value
    ================  ========================================  =========================================
    request           ``ragbench.label``                        the pipeline's label
    request           ``ragbench.query.id``                     the query's id
    request           ``ragbench.k``                            hits per query (``[run] k``)
    request           ``ragbench.k_candidates``                 candidates retrieve hands to rerank
    request           ``ragbench.payload.bytes``                serialized retrieval result
    request           ``gen_ai.usage.input_tokens``             prompt tokens
    request           ``ragbench.recall_at_k``                  tie-aware recall@k, when known
    request           ``ragbench.simulated``                    true when the LLM timings are modelled
    request           ``ragbench.caveats``                      what the timings do not mean (e.g. an
                                                                LLM with random weights), when any
    request           ``ragbench.first_token`` event            at the first token, with
                                                                ``ragbench.since_request_start_ns``
    every stage       ``ragbench.backend``                      the stage's backend (``hnsw``, ``orjson``)
    every stage       ``ragbench.stage_ns``                     the stage's time in ragbench's tables
                                                                (``transport``: the round trip minus the
                                                                far side's work nested under it)
    embed             ``gen_ai.operation.name``                 ``embeddings``
    embed             ``gen_ai.embeddings.dimension.count``     vector dimension
    retrieve          ``gen_ai.operation.name``                 ``retrieval``
    retrieve          ``gen_ai.data_source.id``                 the dataset's name
    retrieve          ``gen_ai.request.top_k``                  candidates asked for (a double)
    rerank            ``ragbench.k``                            hits kept
    serialize         ``ragbench.payload.bytes``                payload size
    transport         ``ragbench.wire.bytes_sent``/``_received``  bytes on the wire each way
    deserialize,      ``ragbench.far_side``                     true: timed by the far side
    prompt
    prompt            ``gen_ai.usage.input_tokens``             prompt tokens
    generate          ``gen_ai.operation.name``                 ``chat`` or ``text_completion``
    generate          ``gen_ai.provider.name``                  ``openai`` (the API flavour, whatever
                                                                serves it), ``ragbench.stub``
    generate          ``gen_ai.request.model``                  the model asked for
    generate          ``gen_ai.request.max_tokens``             completion length asked for
    generate          ``gen_ai.request.stream``                 true
    generate          ``gen_ai.usage.input_tokens``             prompt tokens
    generate          ``gen_ai.response.time_to_first_chunk``   the stage time, in seconds
    generate          ``ragbench.first_token`` event            at the end of the stage
    ================  ========================================  =========================================

Export
    :func:`otlp_span_exporter` builds the OTLP exporter the standard
    environment variables describe: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, the default, or
    ``grpc``), ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318`` /
    ``localhost:4317``), and the exporters' other ``OTEL_EXPORTER_OTLP_*``
    settings. The service name is ``OTEL_SERVICE_NAME`` (default
    ``ragbench``). Spans go through a ``BatchSpanProcessor`` (its
    ``OTEL_BSP_*`` settings apply) of the exporter's own tracer provider
    unless one is passed; :meth:`TraceExporter.close` flushes them.

Bounded
    A collector that is down or does not answer must not slow the service:
    :class:`TraceExporter` counts the spans it handed to its batch processor
    that the span exporter has not finished with (queued, or in the batch
    being sent or retried), and while a request's spans would take that past
    ``max_queued`` it drops the whole request before building a single span
    (counted in :attr:`TraceExporter.dropped` and ``spans_dropped``, said
    once by :meth:`TraceExporter.flush`), so a dead collector costs a request
    a lock and a comparison. Sending always runs on the processor's thread.

Nothing here imports OpenTelemetry until an exporter is made
(:func:`check_available` only looks for the packages); without the ``otel``
extra that raises :class:`~ragbench.errors.MissingDependencyError`
naming it (``pip install 'ragbench[otel]'``).
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib.util import find_spec
from typing import Any, NamedTuple

from .errors import ConfigError, InputError, MissingDependencyError

__all__ = [
    "FIRST_TOKEN_EVENT",
    "PROTOCOLS",
    "REQUEST_SPAN",
    "InnerSpan",
    "TraceExporter",
    "check_available",
    "clock_offset_ns",
    "centered_spans",
    "leading_spans",
    "otlp_span_exporter",
    "protocol_from_env",
    "request_attributes",
    "request_stage_attributes",
    "stage_attributes",
]

log = logging.getLogger("ragbench.otel")

#: OTLP protocols ragbench can export with (``OTEL_EXPORTER_OTLP_PROTOCOL``).
PROTOCOLS = ("http/protobuf", "grpc")
#: Name of the span covering a whole request.
REQUEST_SPAN = "ragbench.request"
#: Name of the event marking the first token.
FIRST_TOKEN_EVENT = "ragbench.first_token"
#: The package providing each protocol's exporter (for the install hint).
EXPORTER_PACKAGES = {
    "http/protobuf": (
        "opentelemetry.exporter.otlp.proto.http",
        "opentelemetry-exporter-otlp-proto-http",
    ),
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc", "opentelemetry-exporter-otlp-proto-grpc"),
}
#: The GenAI operation each ragbench stage performs (``gen_ai.operation.name``).
OPERATIONS = {"embed": "embeddings", "retrieve": "retrieval"}

Attributes = Mapping[str, Any]


class InnerSpan(NamedTuple):
    """A span nested in a stage's span; ``start_ns``/``end_ns`` are ``perf_counter_ns`` stamps."""

    name: str
    start_ns: int
    end_ns: int
    attributes: Attributes | None = None


def clock_offset_ns() -> int:
    """Nanoseconds that turn a ``perf_counter_ns`` stamp into Unix-epoch time (``time_ns() - perf_counter_ns()``)."""
    return time.time_ns() - time.perf_counter_ns()


def protocol_from_env() -> str:
    """The OTLP protocol the environment asks for (``http/protobuf`` unless told otherwise)."""
    for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(var, "").strip().lower()
        if value:
            if value not in PROTOCOLS:
                raise ConfigError(
                    f"{var}={value!r} is not supported; use one of: {', '.join(PROTOCOLS)}"
                )
            return value
    return "http/protobuf"


def _protocol(protocol: str | None) -> str:
    proto = protocol or protocol_from_env()
    if proto not in PROTOCOLS:
        raise ConfigError(
            f"OTLP protocol {proto!r} is not supported; use one of: {', '.join(PROTOCOLS)}"
        )
    return proto


def check_available(protocol: str | None = None) -> None:
    """Raise :class:`MissingDependencyError` unless the SDK and the OTLP exporter are installed.

    Cheap: it finds the packages without importing them (a config check).
    """
    proto = _protocol(protocol)
    for module, package in (("opentelemetry.sdk", "opentelemetry-sdk"), EXPORTER_PACKAGES[proto]):
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise MissingDependencyError(package, "otel")


def _sdk() -> Any:
    """The API's trace module and the SDK's trace, Resource and export, or the install hint."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk import trace as sdk_trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import export
    except ImportError:
        raise MissingDependencyError("opentelemetry-sdk", "otel") from None
    return trace, sdk_trace, Resource, export


def otlp_span_exporter(protocol: str | None = None) -> Any:
    """The OTLP span exporter the ``OTEL_EXPORTER_OTLP_*`` environment variables describe.

    ``protocol`` overrides ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``: ``http/protobuf``
    (default) or ``grpc``. Nothing is sent until spans are exported.
    """
    proto = _protocol(protocol)
    _sdk()
    try:
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
                OTLPSpanExporter,
            )
    except ImportError:
        raise MissingDependencyError(EXPORTER_PACKAGES[proto][1], "otel") from None
    return OTLPSpanExporter()


class TraceExporter:
    """Sends timed requests to OpenTelemetry, one trace per request.

    ``span_exporter``
        Where spans go (any SDK ``SpanExporter``); default
        :func:`otlp_span_exporter` (the ``OTEL_EXPORTER_OTLP_*`` variables).
    ``tracer_provider``
        Use this SDK tracer provider (a service's own) instead of making one;
        then ``span_exporter`` and ``batch`` are not used and :meth:`close`
        only flushes it.
    ``service_name``
        ``service.name`` of the provider made here; default
        ``OTEL_SERVICE_NAME``, else ``"ragbench"``.
    ``batch``
        ``BatchSpanProcessor`` (default: spans are queued and sent by a
        background thread) or ``SimpleSpanProcessor`` (sent as each ends).
    ``max_queued``
        With the ``BatchSpanProcessor`` made here: at most this many spans
        wait for the span exporter (queued or being sent); a request whose
        spans would not fit is dropped and counted (:attr:`dropped`,
        :attr:`spans_dropped`), never waited for. Default
        ``OTEL_BSP_MAX_QUEUE_SIZE``, else 2048; the processor's queue is made
        this size and its batches at most half of it (or
        ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``, 512, if smaller), so a batch goes
        out before requests are dropped.
    ``first_token_stage``
        The stage whose end is the first token (``"generate"``).
    ``attributes``, ``stage_attributes``
        Attributes every request span, and every span of a named stage,
        gets (a service's backends, ``k``, ...); per-request ones passed to
        :meth:`export` add to them.

    :meth:`export` is safe to call from several threads at once.
    """

    #: requests dropped because ``max_queued`` spans were already waiting (a slow or dead collector)
    dropped: int
    #: the spans of those requests
    spans_dropped: int

    def __init__(
        self,
        span_exporter: Any = None,
        *,
        tracer_provider: Any = None,
        service_name: str | None = None,
        batch: bool = True,
        first_token_stage: str | None = "generate",
        attributes: Attributes | None = None,
        stage_attributes: Mapping[str, Attributes] | None = None,
        max_queued: int | None = None,
    ) -> None:
        trace, sdk_trace, resource, export = _sdk()
        self._set_parent = trace.set_span_in_context
        self._own = tracer_provider is None
        self.max_queued = _max_queued(max_queued)
        #: the spans handed to the batch processor (``queued`` = this - what the exporter finished)
        self._handed = 0
        self._gate: threading.Lock | None = None
        self._tally: _Tally | None = None
        if tracer_provider is None:
            name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "ragbench"
            tracer_provider = sdk_trace.TracerProvider(
                resource=resource.create({"service.name": name})
            )
            if span_exporter is None:
                span_exporter = otlp_span_exporter()
            self._tally = _Tally(span_exporter)
            if batch:
                size = self.max_queued
                batch_size = min(_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), size // 2 or 1)
                processor = export.BatchSpanProcessor(
                    self._tally, max_queue_size=size, max_export_batch_size=batch_size
                )
                self._gate = threading.Lock()
            else:
                processor = export.SimpleSpanProcessor(self._tally)
            tracer_provider.add_span_processor(processor)
        self.provider = tracer_provider
        self.span_exporter = span_exporter
        self._tracer = tracer_provider.get_tracer("ragbench")
        self.first_token_stage = first_token_stage
        self.attributes = dict(attributes or {})
        self.stage_attributes = {k: dict(v) for k, v in (stage_attributes or {}).items()}
        #: added to every ``perf_counter_ns`` stamp to make it Unix-epoch ns (taken once)
        self.offset_ns = clock_offset_ns()
        self.exported = 0
        self.dropped = 0
        self.spans_dropped = 0
        self._closed = False
        self._warned = False
        self._warned_drops = 0

    @property
    def queued(self) -> int:
        """Spans handed to the batch processor that the span exporter has not finished with."""
        tally = self._tally
        return (
            0 if tally is None or self._gate is None else self._handed - tally.sent - tally.failed
        )

    def _admit(self, spans: int) -> bool:
        """Reserve room for ``spans`` under ``max_queued``; False (counted) when there is none."""
        gate, tally = self._gate, self._tally
        if gate is None or tally is None:
            return True  # no batch processor of ours: nothing of ours to bound
        with gate:
            if self._handed - tally.sent - tally.failed + spans > self.max_queued:
                self.dropped += 1
                self.spans_dropped += spans
                return False
            self._handed += spans
            return True

    @property
    def endpoint(self) -> str | None:
        """Where the OTLP exporter sends to (``None`` for other exporters)."""
        endpoint = getattr(self.span_exporter, "_endpoint", None)
        return endpoint if isinstance(endpoint, str) else None

    def export(
        self,
        names: Sequence[str],
        stamps: Sequence[int],
        *,
        attributes: Attributes | None = None,
        stage_attributes: Mapping[str, Attributes] | None = None,
        inner: Mapping[str, Iterable[InnerSpan]] | None = None,
        first_token: bool = True,
    ) -> None:
        """Export one request: stage ``names[j]`` ran from ``stamps[j]`` to ``stamps[j + 1]``.

        ``stamps`` are the request's ``len(names) + 1`` ``perf_counter_ns``
        stamps; ``attributes`` go on the request span, ``stage_attributes[name]``
        on that stage's span, ``inner[name]`` nest under it. With
        ``first_token`` (and a ``first_token_stage`` among ``names``) the
        end of that stage is marked as the first token. When ``max_queued``
        spans already wait for the span exporter, the request is dropped
        before any span is built and counted in :attr:`dropped`.
        """
        n = len(names)
        if len(stamps) != n + 1:
            raise InputError(f"expected {n + 1} stamps for {n} stages, got {len(stamps)}")
        nested = {name: list(spans) for name, spans in (inner or {}).items()}
        spans = 1 + n + sum(len(nested.get(name, ())) for name in names)
        if not self._admit(spans):
            return
        try:
            self._spans(names, stamps, attributes, stage_attributes, nested, first_token)
        except BaseException:
            if self._gate is not None:
                with self._gate:
                    self._handed -= spans  # not all of them reached the processor
            raise
        self.exported += 1

    def _spans(
        self,
        names: Sequence[str],
        stamps: Sequence[int],
        attributes: Attributes | None,
        stage_attributes: Mapping[str, Attributes] | None,
        nested: Mapping[str, Iterable[InnerSpan]],
        first_token: bool,
    ) -> None:
        """Build and end one request's spans (see :meth:`export`)."""
        n = len(names)
        off = self.offset_ns
        start_span, parent_of = self._tracer.start_span, self._set_parent
        root = start_span(
            REQUEST_SPAN,
            attributes=_merged(self.attributes, attributes),
            start_time=stamps[0] + off,
        )
        parent = parent_of(root)
        per_stage = stage_attributes or {}
        first = self.first_token_stage if first_token else None
        for j, name in enumerate(names):
            span = start_span(
                name,
                context=parent,
                attributes=_merged(self.stage_attributes.get(name), per_stage.get(name)),
                start_time=stamps[j] + off,
            )
            within = nested.get(name)
            if within:
                here = parent_of(span)
                for child in within:
                    sub = start_span(
                        child.name,
                        context=here,
                        attributes=child.attributes,
                        start_time=child.start_ns + off,
                    )
                    sub.end(end_time=child.end_ns + off)
            end = stamps[j + 1] + off
            if name == first:
                since = {"ragbench.since_request_start_ns": stamps[j + 1] - stamps[0]}
                span.add_event(FIRST_TOKEN_EVENT, attributes=since, timestamp=end)
                root.add_event(FIRST_TOKEN_EVENT, attributes=since, timestamp=end)
            span.end(end_time=end)
        root.end(end_time=stamps[n] + off)

    def on_request(
        self, names: Sequence[str], stamps: Sequence[int], attributes: Attributes | None
    ) -> None:
        """The :class:`ragbench.timing.StageTimer` hook: export the request it just stored."""
        self.export(names, stamps, attributes=attributes)

    @property
    def spans_sent(self) -> int:
        """Spans the span exporter accepted so far (0 with a ``tracer_provider`` passed in)."""
        return self._tally.sent if self._tally is not None else 0

    @property
    def spans_failed(self) -> int:
        """Spans the span exporter failed to send so far (a collector down, say)."""
        return self._tally.failed if self._tally is not None else 0

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Send every queued span now; True if that finished in time and no span ever failed.

        Blocks while the exporter retries: an OTLP exporter whose collector is
        down retries each batch until ``OTEL_EXPORTER_OTLP_TIMEOUT`` (10 s).
        """
        done = bool(self.provider.force_flush(int(timeout_s * 1000)))
        if self.dropped > self._warned_drops:
            log.warning(
                "OpenTelemetry: %d requests (%d spans) dropped so far: %d spans were already "
                "waiting for %s (max_queued); is the collector slow or down?",
                self.dropped,
                self.spans_dropped,
                self.max_queued,
                self.endpoint or type(self.span_exporter).__name__,
            )
            self._warned_drops = self.dropped
        failed = self.spans_failed
        if failed and not self._warned:
            self._warned = True
            log.warning(
                "OpenTelemetry: %d spans could not be sent to %s (is a collector listening? "
                "see OTEL_EXPORTER_OTLP_ENDPOINT)",
                failed,
                self.endpoint or type(self.span_exporter).__name__,
            )
        return done and not failed

    def close(self) -> None:
        """Flush, then shut down the provider made here (a provider passed in is only flushed)."""
        if self._closed:
            return
        self._closed = True
        if self._own:
            self.provider.shutdown()
        else:
            self.flush()

    def __enter__(self) -> TraceExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Tally:
    """A span exporter's stand-in that counts the spans it sent and failed to send."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent = 0
        self.failed = 0

    def export(self, spans: Sequence[Any]) -> Any:
        try:
            result = self.inner.export(spans)
        except Exception:
            self.failed += len(spans)
            raise
        if getattr(result, "name", None) == "SUCCESS":
            self.sent += len(spans)
        else:
            self.failed += len(spans)
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000) -> None:
        if "timeout_millis" in inspect.signature(self.inner.shutdown).parameters:
            self.inner.shutdown(timeout_millis=timeout_millis)
        else:
            self.inner.shutdown()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return _max_queued(int(value))
    except ValueError:
        raise ConfigError(f"{name}={value!r} must be a whole number >= 1") from None


def _max_queued(value: int | None) -> int:
    """``max_queued`` checked, or its default (``OTEL_BSP_MAX_QUEUE_SIZE``, else 2048)."""
    if value is None:
        return _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"TraceExporter max_queued must be a whole number >= 1, got {value!r}")
    return value


def _merged(base: Attributes | None, extra: Attributes | None) -> Attributes | None:
    if not extra:
        return base
    if not base:
        return extra
    return {**base, **extra}


# ---------------------------------------------------------------- attribute mapping


def stage_attributes(
    backends: Mapping[str, str | None],
    *,
    k: int | None = None,
    k_candidates: int | None = None,
    dimension: int | None = None,
    data_source: str | None = None,
    generator: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """The attributes of each stage's span that every request shares (see the module docstring).

    ``backends`` maps each stage to its backend name (``None``: a stage
    without one, such as ``prompt``); ``generator`` may give
    ``operation`` (``chat``/``text_completion``), ``provider``, ``model`` and
    ``max_tokens`` of the LLM client.
    """
    out: dict[str, dict[str, Any]] = {
        stage: {} if backend is None else {"ragbench.backend": str(backend)}
        for stage, backend in backends.items()
    }
    for stage, operation in OPERATIONS.items():
        if stage in out:
            out[stage]["gen_ai.operation.name"] = operation
    if dimension is not None and "embed" in out:
        out["embed"]["gen_ai.embeddings.dimension.count"] = int(dimension)
    if "retrieve" in out:
        if data_source is not None:
            out["retrieve"]["gen_ai.data_source.id"] = str(data_source)
        if k_candidates is not None:
            out["retrieve"]["gen_ai.request.top_k"] = float(k_candidates)
    if k is not None and "rerank" in out:
        out["rerank"]["ragbench.k"] = int(k)
    for stage in ("deserialize", "prompt"):
        if stage in out:
            out[stage]["ragbench.far_side"] = True
    gen = generator or {}
    if gen.get("operation") and "generate" in out:
        names = {
            "operation": "gen_ai.operation.name",
            "provider": "gen_ai.provider.name",
            "model": "gen_ai.request.model",
            "max_tokens": "gen_ai.request.max_tokens",
        }
        out["generate"].update({names[key]: v for key, v in gen.items() if v is not None})
        out["generate"]["gen_ai.request.stream"] = True
    return out


def request_attributes(
    *,
    label: str | None = None,
    query_id: str | None = None,
    k: int | None = None,
    k_candidates: int | None = None,
    payload_bytes: int | None = None,
    prompt_tokens: int | None = None,
    recall: float | None = None,
    simulated: bool = False,
    caveats: Sequence[str] = (),
) -> dict[str, Any]:
    """The request span's attributes (see the module docstring); ``None`` values are left out."""
    values: dict[str, Any] = {
        "ragbench.label": label,
        "ragbench.query.id": query_id,
        "ragbench.k": None if k is None else int(k),
        "ragbench.k_candidates": None if k_candidates is None else int(k_candidates),
        "ragbench.payload.bytes": None if payload_bytes is None else int(payload_bytes),
        "gen_ai.usage.input_tokens": None if prompt_tokens is None else int(prompt_tokens),
        "ragbench.recall_at_k": None if recall is None else float(recall),
        "ragbench.simulated": True if simulated else None,
        "ragbench.caveats": list(caveats) if caveats else None,
    }
    return {key: v for key, v in values.items() if v is not None}


def request_stage_attributes(
    stage_ns: Mapping[str, int],
    *,
    payload_bytes: int | None = None,
    wire_bytes: tuple[int, int] | None = None,
    prompt_tokens: int | None = None,
    llm_stage: str | None = "generate",
) -> dict[str, dict[str, Any]]:
    """One request's own stage-span attributes (see the module docstring).

    ``stage_ns`` maps each stage to its time in ragbench's tables;
    ``wire_bytes`` is (sent, received); ``llm_stage`` names the stage that
    waits for the first token (``None``: no LLM).
    """
    out: dict[str, dict[str, Any]] = {
        stage: {"ragbench.stage_ns": int(ns)} for stage, ns in stage_ns.items()
    }
    if payload_bytes is not None and "serialize" in out:
        out["serialize"]["ragbench.payload.bytes"] = int(payload_bytes)
    if wire_bytes is not None and "transport" in out:
        out["transport"]["ragbench.wire.bytes_sent"] = int(wire_bytes[0])
        out["transport"]["ragbench.wire.bytes_received"] = int(wire_bytes[1])
    if prompt_tokens is not None:
        for stage in ("prompt", llm_stage):
            if stage in out:
                out[stage]["gen_ai.usage.input_tokens"] = int(prompt_tokens)
    if llm_stage in out:
        first_chunk_s = int(stage_ns[llm_stage]) / 1e9
        out[llm_stage]["gen_ai.response.time_to_first_chunk"] = first_chunk_s
    return out


def leading_spans(
    start_ns: int, parts: Sequence[tuple[str, int, Attributes | None]]
) -> list[InnerSpan]:
    """Spans of known durations, back to back from ``start_ns`` (a connection's set-up)."""
    out = []
    at = start_ns
    for name, ns, attributes in parts:
        out.append(InnerSpan(name, at, at + int(ns), attributes))
        at += int(ns)
    return out


def centered_spans(
    start_ns: int, end_ns: int, parts: Sequence[tuple[str, int, Attributes | None]]
) -> list[InnerSpan]:
    """Spans of known durations, back to back, centred in ``[start_ns, end_ns]``.

    For work timed elsewhere that reports durations only (the far side of a
    transport): each part is (name, duration ns, attributes); the time left
    over is split evenly before and after them. Durations are kept exactly.
    """
    spare = end_ns - start_ns - sum(int(ns) for _, ns, _ in parts)
    at = start_ns + max(spare, 0) // 2
    out = []
    for name, ns, attributes in parts:
        out.append(InnerSpan(name, at, at + int(ns), attributes))
        at += int(ns)
    return out

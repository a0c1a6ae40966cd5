"""OpenTelemetry export: span trees from the timer's own stamps, the pipeline, OTLP from the environment."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import numpy as np
import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="needs ragbench[otel]")

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

import ragbench as rb  # noqa: E402
from ragbench import otel  # noqa: E402
from ragbench.cli import main  # noqa: E402
from ragbench.errors import ConfigError, InputError, MissingDependencyError  # noqa: E402
from ragbench.generators import FirstToken  # noqa: E402
from ragbench.otel import FIRST_TOKEN_EVENT, REQUEST_SPAN, TraceExporter  # noqa: E402
from ragbench.settings.sources import normalize  # noqa: E402
from ragbench.timing import StageTimer  # noqa: E402
from ragbench.traffic import LoadOptions, load_points  # noqa: E402
from ragbench.workers import ThreadWorkers  # noqa: E402

OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)
SMALL = {"name": "synthetic", "n": 600, "dim": 16, "n_queries": 12, "seed": 5}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in OTEL_VARS:
        monkeypatch.delenv(var, raising=False)


def config(**tables: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "dataset": dict(SMALL),
        "run": {"queries": 6, "warmup": 2, "k": 5, "k_candidates": 20},
        "retrieve": {"backend": "flat"},
        "rerank": {"backend": "numpy"},
        "serialize": {"backend": "json"},
        "transport": {"backend": "inproc"},
    }
    for table, value in tables.items():
        cfg[table] = {**cfg.get(table, {}), **value}
    return cfg


def memory_exporter(**kw: Any) -> tuple[TraceExporter, InMemorySpanExporter]:
    mem = InMemorySpanExporter()
    return TraceExporter(mem, batch=False, **kw), mem


def traces(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> list[list[ReadableSpan]]:
    """Spans grouped by trace, in the order the traces were exported."""
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)
    return list(by_trace.values())


def tree(spans: list[ReadableSpan]) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The one root of a trace and its direct children in start order."""
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 1, [s.name for s in roots]
    root = roots[0]
    children = [
        s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    return root, sorted(children, key=lambda s: s.start_time)


def duration(span: ReadableSpan) -> int:
    assert span.start_time is not None and span.end_time is not None
    return span.end_time - span.start_time


# ---------------------------------------------------------------- the exporter alone

NAMES = ["embed", "retrieve", "rerank", "generate"]
STAMPS = [1_000_000, 1_003_217, 1_050_000, 1_050_001, 1_900_123]


def test_one_request_is_one_root_with_one_child_per_stage_in_order() -> None:
    exporter, mem = memory_exporter()
    exporter.export(NAMES, STAMPS)
    spans = mem.get_finished_spans()
    assert len(spans) == len(NAMES) + 1
    root, children = tree(list(spans))
    assert root.name == REQUEST_SPAN
    assert [c.name for c in children] == NAMES
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    # every start and end is a stamp, mapped by the one offset taken at creation
    off = exporter.offset_ns
    assert root.start_time == STAMPS[0] + off and root.end_time == STAMPS[-1] + off
    for j, child in enumerate(children):
        assert (child.start_time, child.end_time) == (STAMPS[j] + off, STAMPS[j + 1] + off)
        assert duration(child) == STAMPS[j + 1] - STAMPS[j]  # exact, to the nanosecond
    assert all(s.kind.name == "INTERNAL" for s in spans)
    assert exporter.exported == 1


def test_the_offset_maps_perf_counter_to_the_epoch() -> None:
    before = otel.clock_offset_ns()
    exporter, _ = memory_exporter()
    after = otel.clock_offset_ns()
    # the same quantity taken around it: equal but for clock reads and NTP slew (generous bound)
    assert abs(exporter.offset_ns - before) < 10**9 and abs(exporter.offset_ns - after) < 10**9


def test_attributes_merge_and_the_first_token_is_an_event() -> None:
    exporter, mem = memory_exporter(
        attributes={"ragbench.label": "svc", "ragbench.k": 10},
        stage_attributes={"retrieve": {"ragbench.backend": "hnsw"}},
    )
    exporter.export(
        NAMES,
        STAMPS,
        attributes={"ragbench.k": 5, "gen_ai.usage.input_tokens": 321},
        stage_attributes={"retrieve": {"gen_ai.request.top_k": 100.0}},
    )
    root, children = tree(list(mem.get_finished_spans()))
    assert dict(root.attributes or {}) == {
        "ragbench.label": "svc",
        "ragbench.k": 5,
        "gen_ai.usage.input_tokens": 321,
    }
    by_name = {c.name: c for c in children}
    assert dict(by_name["retrieve"].attributes or {}) == {
        "ragbench.backend": "hnsw",
        "gen_ai.request.top_k": 100.0,
    }
    end = STAMPS[-1] + exporter.offset_ns
    for span in (root, by_name["generate"]):
        (event,) = span.events
        assert event.name == FIRST_TOKEN_EVENT and event.timestamp == end
        assert event.attributes is not None
        assert event.attributes["ragbench.since_request_start_ns"] == STAMPS[-1] - STAMPS[0]
    assert not by_name["embed"].events


def test_no_first_token_without_an_llm_stage() -> None:
    exporter, mem = memory_exporter()
    exporter.export(NAMES, STAMPS, first_token=False)
    exporter.export(NAMES[:3], STAMPS[:4])
    assert not any(s.events for s in mem.get_finished_spans())


def test_inner_spans_nest_under_their_stage() -> None:
    exporter, mem = memory_exporter()
    parts = [("deserialize", 300, {"ragbench.far_side": True}), ("prompt", 200, None)]
    inner = otel.centered_spans(STAMPS[1], STAMPS[2], parts)
    assert [(s.end_ns - s.start_ns) for s in inner] == [300, 200]
    assert STAMPS[1] <= inner[0].start_ns and inner[-1].end_ns <= STAMPS[2]
    assert inner[0].end_ns == inner[1].start_ns  # back to back
    # the time around them is split evenly
    assert abs((inner[0].start_ns - STAMPS[1]) - (STAMPS[2] - inner[-1].end_ns)) <= 1
    exporter.export(NAMES, STAMPS, inner={"retrieve": inner})
    spans = list(mem.get_finished_spans())
    _, children = tree(spans)
    retrieve = next(c for c in children if c.name == "retrieve")
    nested = sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == retrieve.context.span_id),
        key=lambda s: s.start_time,
    )
    assert [s.name for s in nested] == ["deserialize", "prompt"]
    assert [duration(s) for s in nested] == [300, 200]
    assert dict(nested[0].attributes or {}) == {"ragbench.far_side": True}


def test_wrong_number_of_stamps_is_an_input_error() -> None:
    exporter, _ = memory_exporter()
    with pytest.raises(InputError, match="expected 5 stamps for 4 stages, got 4"):
        exporter.export(NAMES, STAMPS[:4])


def test_attribute_helpers_use_genai_names_where_they_exist() -> None:
    static = otel.stage_attributes(
        {"embed": "minilm", "retrieve": "hnsw", "rerank": "numba", "generate": "openai"},
        k=10,
        k_candidates=100,
        dimension=384,
        data_source="pydocs",
        generator={"operation": "chat", "provider": "openai", "model": "m", "max_tokens": 16},
    )
    assert static["embed"] == {
        "ragbench.backend": "minilm",
        "gen_ai.operation.name": "embeddings",
        "gen_ai.embeddings.dimension.count": 384,
    }
    assert static["retrieve"]["gen_ai.operation.name"] == "retrieval"
    assert static["retrieve"]["gen_ai.data_source.id"] == "pydocs"
    assert static["retrieve"]["gen_ai.request.top_k"] == 100.0
    assert static["rerank"] == {"ragbench.backend": "numba", "ragbench.k": 10}
    assert static["generate"] == {
        "ragbench.backend": "openai",
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m",
        "gen_ai.request.max_tokens": 16,
        "gen_ai.request.stream": True,
    }
    own = otel.request_stage_attributes(
        {"serialize": 10, "transport": 20, "prompt": 5, "generate": 2_500_000},
        payload_bytes=812,
        wire_bytes=(900, 40),
        prompt_tokens=77,
    )
    assert own["serialize"] == {"ragbench.stage_ns": 10, "ragbench.payload.bytes": 812}
    assert own["transport"]["ragbench.wire.bytes_sent"] == 900
    assert own["prompt"]["gen_ai.usage.input_tokens"] == 77
    assert own["generate"]["gen_ai.usage.input_tokens"] == 77
    assert own["generate"]["gen_ai.response.time_to_first_chunk"] == 0.0025
    assert otel.request_attributes(label="x", recall=None, prompt_tokens=3) == {
        "ragbench.label": "x",
        "gen_ai.usage.input_tokens": 3,
    }


# ---------------------------------------------------------------- StageTimer


def test_stage_timer_exports_each_request_from_its_own_stamps() -> None:
    exporter, mem = memory_exporter(stage_attributes={"retrieve": {"ragbench.backend": "hnsw"}})
    timer = StageTimer(NAMES, otel=exporter)
    for request in range(3):
        timer.start()
        for j, _ in enumerate(NAMES):
            if j == 1:
                timer.annotate({"ragbench.payload.bytes": 100 + request})
            timer.mark()
    samples = timer.samples()
    found = traces(mem.get_finished_spans())
    assert len(found) == len(timer) == 3
    for request, spans in enumerate(found):
        root, children = tree(spans)
        assert [c.name for c in children] == NAMES
        assert [duration(c) for c in children] == samples[request].tolist()
        assert duration(root) == int(samples[request].sum())
        assert dict(root.attributes or {}) == {"ragbench.payload.bytes": 100 + request}
        assert children[1].attributes is not None
        assert children[1].attributes["ragbench.backend"] == "hnsw"


def test_stage_timer_hook_runs_after_the_last_stamp() -> None:
    calls: list[tuple[list[str], list[int], Any, int]] = []

    def hook(names: list[str], stamps: Any, attributes: Any) -> None:
        calls.append((list(names), list(stamps), attributes, perf_counter_ns()))

    timer = StageTimer(["a", "b"], on_request=hook)
    timer.start()
    timer.mark()
    assert not calls  # nothing between stamps
    timer.mark()
    ((names, stamps, attributes, called_at),) = calls
    assert names == ["a", "b"] and attributes is None
    assert stamps[-1] <= called_at
    assert np.diff(stamps).tolist() == timer.samples()[0].tolist()
    timer.add([0, 5, 9])  # stamps taken elsewhere go through the hook too
    assert calls[-1][1] == [0, 5, 9]


def test_stage_timer_options_are_checked() -> None:
    exporter, _ = memory_exporter()
    with pytest.raises(ConfigError, match="on_request or otel"):
        StageTimer(["a"], on_request=lambda *a: None, otel=exporter)
    with pytest.raises(ConfigError, match="callable"):
        StageTimer(["a"], on_request=42)  # type: ignore[arg-type]
    plain = StageTimer(["a"])
    plain.annotate({"x": 1})  # no hook: dropped
    plain.start()
    plain.mark()
    assert len(plain) == 1


# ---------------------------------------------------------------- the pipeline


class FakeLLM:
    """A first token at once, with the fields the GenAI attributes read."""

    name = "test-otel-llm"
    simulated = False
    model = "fake-model"
    max_tokens = 4
    chat = False

    def __init__(self, **params: Any) -> None:
        pass

    def start(self) -> int:
        return 0

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        return FirstToken("x", 0)

    def close(self) -> None:
        pass


@pytest.fixture
def fake_llm() -> Iterator[None]:
    rb.generators.register("test-otel-llm", FakeLLM)
    try:
        yield
    finally:
        rb.generators.registry.unregister("test-otel-llm")


def check_pipeline_traces(report: Any, spans: Any, *, loop: list[str]) -> list[ReadableSpan]:
    """Every request's trace matches its row of the report exactly; the transport spans."""
    found = traces(spans)
    assert len(found) == report.requests
    cols = {n: report.samples_ns[:, j] for j, n in enumerate(report.stage_names)}
    transports = []
    for r, trace in enumerate(found):
        root, children = tree(trace)
        assert [c.name for c in children] == loop
        for child in children:
            attrs = dict(child.attributes or {})
            assert attrs["ragbench.stage_ns"] == cols[child.name][r]
            if child.name == "transport":
                # the span covers the round trip; the far side's work is nested in it
                whole = cols["transport"][r] + cols["deserialize"][r] + cols["prompt"][r]
                assert duration(child) == whole
                nested = sorted(
                    (s for s in trace if s.parent and s.parent.span_id == child.context.span_id),
                    key=lambda s: s.start_time,
                )
                assert [s.name for s in nested] == ["deserialize", "prompt"]
                for span in nested:
                    assert duration(span) == cols[span.name][r]
                    assert child.start_time <= span.start_time
                    assert span.end_time <= child.end_time
                    assert dict(span.attributes or {})["ragbench.far_side"] is True
                transports.append(child)
            else:
                assert duration(child) == cols[child.name][r]
        assert duration(root) == report.totals_ns[r]
        attrs = dict(root.attributes or {})
        assert attrs["ragbench.label"] == report.label
        assert attrs["ragbench.payload.bytes"] == report.payload_bytes[r]
        assert attrs["gen_ai.usage.input_tokens"] == report.prompt_tokens[r]
        assert attrs["ragbench.recall_at_k"] == pytest.approx(report.recall[r])
    return transports


def test_pipeline_exports_each_measured_request_after_timing(
    fake_llm: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter, mem = memory_exporter()
    calls: list[tuple[list[int], int]] = []
    export = exporter.export

    def watched(names: Any, stamps: Any, **kw: Any) -> None:
        calls.append((list(stamps), perf_counter_ns()))
        export(names, stamps, **kw)

    monkeypatch.setattr(exporter, "export", watched)
    cfg = config(generate={"backend": "test-otel-llm"})
    with rb.Pipeline(cfg, otel=exporter) as pipe:
        report = pipe.run()
        assert pipe.export_traces() == 0  # each request once
        pipe.report()
    assert len(calls) == report.requests == 6
    # no export ran while any request was being timed
    assert min(at for _, at in calls) >= max(stamps[-1] for stamps, _ in calls)
    loop = ["embed", "retrieve", "rerank", "serialize", "transport", "generate"]
    spans = mem.get_finished_spans()
    check_pipeline_traces(report, spans, loop=loop)
    root, children = tree(traces(spans)[0])
    by_name = {c.name: dict(c.attributes or {}) for c in children}
    assert by_name["retrieve"]["ragbench.backend"] == "flat"
    assert by_name["retrieve"]["gen_ai.request.top_k"] == 20.0
    assert by_name["rerank"]["ragbench.backend"] == "numpy"
    assert by_name["serialize"]["ragbench.backend"] == "json"
    assert by_name["transport"]["ragbench.backend"] == "inproc"
    gen = by_name["generate"]
    assert gen["gen_ai.operation.name"] == "text_completion"
    assert gen["gen_ai.provider.name"] == "ragbench.test-otel-llm"
    assert gen["gen_ai.request.model"] == "fake-model"
    assert gen["gen_ai.request.max_tokens"] == 4
    attrs = dict(root.attributes or {})
    assert (attrs["ragbench.k"], attrs["ragbench.k_candidates"]) == (5, 20)
    assert attrs["ragbench.query.id"] == "q0000"
    assert [e.name for e in root.events] == [FIRST_TOKEN_EVENT]


def test_pipeline_without_llm_marks_no_first_token() -> None:
    exporter, mem = memory_exporter()
    with rb.Pipeline(config(), otel=exporter) as pipe:
        pipe.run(queries=2)
    assert len(traces(mem.get_finished_spans())) == 2
    assert not any(s.events for s in mem.get_finished_spans())


@pytest.mark.integration
def test_pipeline_export_over_http_nests_the_far_side() -> None:
    exporter, mem = memory_exporter()
    with rb.Pipeline(config(transport={"backend": "http"}), otel=exporter) as pipe:
        report = pipe.run()
    loop = ["embed", "retrieve", "rerank", "serialize", "transport", "generate"]
    transports = check_pipeline_traces(report, mem.get_finished_spans(), loop=loop)
    for span in transports:
        attrs = dict(span.attributes or {})
        assert attrs["ragbench.backend"] == "http"
        assert attrs["ragbench.wire.bytes_sent"] > 0 and attrs["ragbench.wire.bytes_received"] > 0


def test_load_exports_the_completed_requests_of_each_level() -> None:
    exporter, mem = memory_exporter()
    with rb.Pipeline(config(), otel=exporter) as pipe:
        pipe.setup()
        pool = ThreadWorkers(pipe, 1)
        try:
            recs = load_points([pipe], [pool], [100.0, 200.0], options=LoadOptions(duration_s=0.1))
        finally:
            pool.close()
    completed = sum(r["completed"] for r in recs)
    assert completed > 0
    assert len(traces(mem.get_finished_spans())) == completed


class Refusing(SpanExporter):
    """A collector that is down: every batch fails."""

    def __init__(self) -> None:
        self.batches = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.batches += 1
        return SpanExportResult.FAILURE


def test_a_failing_collector_stops_the_export_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusing = Refusing()
    exporter = TraceExporter(refusing, batch=False)
    with (
        caplog.at_level(logging.WARNING, logger="ragbench.otel"),
        rb.Pipeline(config(run={"queries": 250, "warmup": 0}), otel=exporter) as pipe,
    ):
        pipe.run()
        assert pipe.export_traces() == 0
    # found out with the first request's spans: the other 249 are not tried
    assert exporter.exported == 1
    assert exporter.spans_failed > 0 and exporter.spans_sent == 0
    warnings = [r for r in caplog.records if r.name == "ragbench.otel"]
    assert len(warnings) == 1 and "could not be sent" in warnings[0].getMessage()


# ---------------------------------------------------------------- configuration and CLI


def test_run_otel_is_a_checked_bool() -> None:
    assert normalize({})["run"]["otel"] is False
    assert normalize({"run": {"otel": True}})["run"]["otel"] is True
    with pytest.raises(ConfigError, match=r"^run\.otel: expected bool, got str$"):
        normalize({"run": {"otel": "yes"}})


def test_otlp_exporter_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4999")
    http = otel.otlp_span_exporter()
    assert isinstance(http, HttpExporter) and http._endpoint == "http://127.0.0.1:4999/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:5000/t")
    assert otel.otlp_span_exporter()._endpoint == "http://127.0.0.1:5000/t"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    grpc_exporter = otel.otlp_span_exporter()
    assert isinstance(grpc_exporter, GrpcExporter)
    assert grpc_exporter._endpoint == "127.0.0.1:4999"
    grpc_exporter.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")  # wins
    assert isinstance(otel.otlp_span_exporter(), HttpExporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json'"):
        otel.otlp_span_exporter()


def test_service_name_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with TraceExporter(InMemorySpanExporter()) as default:
        assert default.provider.resource.attributes["service.name"] == "ragbench"
        assert isinstance(default.span_exporter, InMemorySpanExporter) and default.endpoint is None
    monkeypatch.setenv("OTEL_SERVICE_NAME", "rag-svc")
    with TraceExporter(InMemorySpanExporter()) as named:
        assert named.provider.resource.attributes["service.name"] == "rag-svc"


def test_a_service_provider_is_used_as_is() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    exporter = TraceExporter(tracer_provider=provider)
    exporter.export(NAMES, STAMPS)
    exporter.close()  # flushed, not shut down: the service owns it
    exporter.export(NAMES, STAMPS)
    assert len(traces(mem.get_finished_spans())) == 2
    provider.shutdown()


def test_inside_a_service_span_the_request_is_its_child() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    exporter, mem = memory_exporter()
    with TracerProvider().get_tracer("svc").start_as_current_span("POST /ask") as handler:
        exporter.export(NAMES, STAMPS)
    root = next(s for s in mem.get_finished_spans() if s.name == REQUEST_SPAN)
    assert root.parent is not None and root.parent.span_id == handler.get_span_context().span_id
    assert root.context.trace_id == handler.get_span_context().trace_id


def test_missing_sdk_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    with pytest.raises(MissingDependencyError) as info:
        TraceExporter(InMemorySpanExporter())
    assert info.value.package == "opentelemetry-sdk" and info.value.extra == "otel"
    assert "pip install 'ragbench[otel]'" in str(info.value)
    with pytest.raises(MissingDependencyError, match="opentelemetry-sdk"):
        otel.check_available()
    # a pipeline asking for traces fails when it is created, like any bad config
    with pytest.raises(MissingDependencyError, match=r"ragbench\[otel\]"):
        rb.Pipeline(config(run={"otel": True}))
    rb.Pipeline(config()).close()  # without traces nothing is needed


def test_missing_exporter_package_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    with pytest.raises(MissingDependencyError, match="opentelemetry-exporter-otlp-proto-grpc"):
        otel.otlp_span_exporter("grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(MissingDependencyError, match="opentelemetry-exporter-otlp-proto-grpc"):
        otel.check_available()
    otel.check_available("http/protobuf")


def test_cli_without_the_extra_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(TOML)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    assert main(["run", "-c", str(cfg_file), "--otel"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'ragbench[otel]'" in err


def test_import_ragbench_imports_no_opentelemetry() -> None:
    code = (
        "import sys, ragbench, ragbench.otel, ragbench.timing, ragbench.settings, ragbench.cli; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- OTLP round trips on 127.0.0.1

TOML = """
[dataset]
name = "synthetic"
n = 600
dim = 16
n_queries = 12
seed = 5
[run]
queries = 5
warmup = 1
k = 5
k_candidates = 20
[retrieve]
backend = "flat"
[rerank]
backend = "numpy"
[serialize]
backend = "json"
"""


class Received:
    """What an OTLP receiver got: service names and spans."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            self.requests.append(request)

    def spans(self) -> list[tuple[str, Any]]:
        """(service.name, span) of every span received."""
        out = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource_spans.scope_spans:
                    out += [(service, span) for span in scope.spans]
        return out


@pytest.fixture
def http_receiver() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.add(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.integration
def test_cli_run_otel_sends_every_request_over_otlp_http(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    http_receiver: tuple[str, Received],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, received = http_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ragbench-test")
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(TOML)
    assert main(["run", "-c", str(cfg_file), "--otel"]) == 0
    capsys.readouterr()
    spans = received.spans()  # flushed when the pipeline closed, before the command returned
    assert {service for service, _ in spans} == {"ragbench-test"}
    roots = [s for _, s in spans if s.name == REQUEST_SPAN]
    assert len(roots) == 5 and all(not s.parent_span_id for s in roots)
    names = [s.name for _, s in spans]
    for stage in ("embed", "retrieve", "rerank", "serialize", "transport", "deserialize", "prompt"):
        assert names.count(stage) == 5, stage


@pytest.mark.integration
def test_otlp_grpc_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    received = Received()

    class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            received.add(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        with TraceExporter() as exporter:
            exporter.export(NAMES, STAMPS)
            exporter.export(NAMES, STAMPS)
            assert exporter.flush(10.0)
            assert exporter.spans_sent == 2 * (len(NAMES) + 1)
    finally:
        server.stop(0)
    spans = received.spans()
    assert len(spans) == 2 * (len(NAMES) + 1)
    assert {service for service, _ in spans} == {"ragbench"}
    first = [s for _, s in spans if s.name == "retrieve"][0]
    assert first.end_time_unix_nano - first.start_time_unix_nano == STAMPS[2] - STAMPS[1]


# ---------------------------------------------------------------- a dead collector


@contextmanager
def blackhole() -> Iterator[tuple[str, list[socket.socket]]]:
    """A collector address on 127.0.0.1 that accepts connections and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])  # kept open, never read, never answered
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces", held
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def test_a_dead_collector_drops_requests_at_a_bounded_queue_off_the_request_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """8 threads x 250 requests, exported as each is stored, to a collector that never answers.

    The old exporter built every request's spans on the request path and handed them to a
    batch processor logging each span it dropped: a dead collector halved a service's
    throughput. Now at most ``max_queued`` spans wait for the collector; every request past
    that is dropped before a span is built, and counted. No clock is read by the asserts.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    sent_from: list[str] = []

    class Recording(OTLPSpanExporter):  # type: ignore[misc]
        def export(self, spans: Any) -> Any:
            sent_from.append(threading.current_thread().name)
            return super().export(spans)

    n_threads, per_thread, max_queued = 8, 250, 60
    with blackhole() as (endpoint, held):
        exporter = TraceExporter(
            Recording(endpoint=endpoint, timeout=1),
            max_queued=max_queued,
            first_token_stage=None,
        )
        timer = StageTimer(["embed", "retrieve"], otel=exporter)
        queued_seen: list[int] = []
        go = threading.Barrier(n_threads)

        def serve() -> None:
            go.wait()
            for _ in range(per_thread):
                with timer.request() as r:
                    r.mark("embed")
                    r.mark("retrieve")
                queued_seen.append(exporter.queued)  # after the hook ran, in this thread

        threads = [threading.Thread(target=serve, name=f"request-{t}") for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        total = n_threads * per_thread
        assert timer.stored == total  # every request was timed and stored, none waited
        assert exporter.exported + exporter.dropped == total
        assert exporter.dropped > 0 and exporter.spans_dropped == 3 * exporter.dropped
        assert 0 < max(queued_seen) <= max_queued  # the bound held all along
        with caplog.at_level(logging.WARNING, logger="ragbench.otel"):
            assert not exporter.flush(timeout_s=5)
        exporter.close()
    assert held, "the exporter never reached the collector address"
    assert sent_from and not any(name.startswith("request-") for name in sent_from)
    assert exporter.spans_sent == 0 and exporter.spans_failed > 0
    assert f"{exporter.dropped} requests ({exporter.spans_dropped} spans) dropped" in caplog.text


def test_max_queued_is_checked_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_BSP_MAX_QUEUE_SIZE", raising=False)
    spans = InMemorySpanExporter()
    assert TraceExporter(spans).max_queued == 2048
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "300")
    assert TraceExporter(spans).max_queued == 300
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "lots")
    with pytest.raises(ConfigError, match="OTEL_BSP_MAX_QUEUE_SIZE='lots'"):
        TraceExporter(spans)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ConfigError, match="max_queued"):
            TraceExporter(spans, max_queued=bad)  # type: ignore[arg-type]

"""TimingMiddleware in a real Starlette service: Server-Timing, stored rows, Prometheus, OpenTelemetry.

The app is served by uvicorn on 127.0.0.1 and called over a real socket with
httpx; the docs' own service example (docs/getting-started/timing-your-service.md) runs as a child ``uvicorn`` process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbench.errors import ConfigError, MissingDependencyError
from ragbench.timing import Background, StageTimer

httpx = pytest.importorskip("httpx", reason="needs ragbench[serve]")
uvicorn = pytest.importorskip("uvicorn", reason="needs ragbench[serve]")
pytest.importorskip("starlette", reason="needs ragbench[serve]")
prometheus_client = pytest.importorskip("prometheus_client", reason="needs ragbench[serve]")
pytest.importorskip("opentelemetry.sdk.trace", reason="needs ragbench[otel]")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from starlette.applications import Starlette  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.requests import Request as HTTPRequest  # noqa: E402
from starlette.responses import JSONResponse, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from ragbench.middleware import StageHistogram, TimingMiddleware, server_timing  # noqa: E402
from ragbench.otel import REQUEST_SPAN, TraceExporter  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["embed", "retrieve", "rerank", "generate"]
SLEEPS = {"embed": 0.003, "retrieve": 0.001, "rerank": 0.002, "generate": 0.005}


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn (lifespan on) on a free 127.0.0.1 port in a thread; stop it after."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # loop="asyncio": with uvloop installed (chromadb's uvicorn[standard] brings it) uvicorn would
    # pick it, and libuv's millisecond loop clock lets an awaited sleep end up to 1 ms early by
    # perf_counter, which the stage lower bounds below would misread
    # timeout_keep_alive: uvicorn's 5 s default closes a pooled connection the client may be
    # reusing at that moment on a loaded host (a CI run read httpx.ReadError); ragbench's own
    # server keeps them an hour (ragbench.transports.asgi_server)
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        loop="asyncio",
        timeout_keep_alive=3600,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()
        assert not thread.is_alive()


HEADER_ITEM = re.compile(r"^([A-Za-z0-9_.\-]+);dur=(\d+)\.(\d{6})$")


def parse_server_timing(value: str | None) -> dict[str, int]:
    """A ``Server-Timing`` header back to nanoseconds per stage (the six decimals are exact)."""
    if not value:
        return {}
    out = {}
    for item in value.split(", "):
        m = HEADER_ITEM.match(item)
        assert m, value
        out[m.group(1)] = int(m.group(2)) * 1_000_000 + int(m.group(3))
    return out


def test_server_timing_format_carries_the_nanoseconds() -> None:
    assert server_timing({"embed": 12_345_678, "retrieve": 5}) == (
        "embed;dur=12.345678, retrieve;dur=0.000005"
    )
    assert server_timing({}) == ""
    assert parse_server_timing(server_timing({"a": 1_000_000_000_001})) == {"a": 1_000_000_000_001}


class Service:
    """A Starlette app with the middleware, every export sink, and endpoints of each shape."""

    def __init__(self, *, sink_gate: threading.Event | None = None) -> None:
        self.timer = StageTimer(STAGES)
        self.registry = prometheus_client.CollectorRegistry()
        self.histogram = StageHistogram(registry=self.registry)
        self.spans = InMemorySpanExporter()
        self.otel = TraceExporter(self.spans, batch=False, first_token_stage=None)
        self.exported: dict[str, tuple[list[str], list[int], dict[str, Any], str]] = {}
        self.gate = sink_gate
        self.export = Background(self.otel.on_request, self.histogram.on_request, self.record)
        self.started = False
        self.app = Starlette(
            routes=[
                Route("/async", self.awaiting),
                Route("/pool", self.pooled),
                Route("/plain", self.plain),
                Route("/stream", self.stream),
                Route("/boom", self.boom),
                Route("/nothing", self.nothing),
            ],
            middleware=[Middleware(TimingMiddleware, timer=self.timer, export=self.export)],
            lifespan=self.lifespan,
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        self.started = True  # lifespan messages pass through the middleware
        yield

    def record(self, names: list[str], stamps: Any, attributes: Any) -> None:
        if self.gate is not None:
            assert self.gate.wait(20)
        thread = threading.current_thread().name
        self.exported[attributes["rid"]] = (list(names), list(stamps), dict(attributes), thread)

    def work(self, name: str) -> None:  # a CPU-ish stage in a worker thread, marked there
        time.sleep(SLEEPS[name])
        self.timer.mark(name)

    async def awaiting(self, request: HTTPRequest) -> JSONResponse:
        r = self.timer.current()
        assert r is not None
        r.annotate({"rid": request.query_params["rid"]})
        await asyncio.to_thread(self.work, "embed")
        for name in STAGES[1:]:
            await asyncio.sleep(SLEEPS[name])
            r.mark(name)
        return JSONResponse({"ok": True})

    async def pooled(self, request: HTTPRequest) -> JSONResponse:
        self.timer.annotate({"rid": request.query_params["rid"]})
        for name in STAGES:
            await run_in_threadpool(self.work, name)
        return JSONResponse({"ok": True})

    def plain(self, request: HTTPRequest) -> JSONResponse:
        self.timer.annotate({"rid": request.query_params["rid"]})
        for name in STAGES:
            self.work(name)
        return JSONResponse({"ok": True})

    async def stream(self, request: HTTPRequest) -> StreamingResponse:
        self.timer.annotate({"rid": request.query_params["rid"]})
        await asyncio.to_thread(self.work, "embed")
        timer = self.timer

        async def body() -> AsyncIterator[bytes]:
            yield b"first "
            await asyncio.sleep(SLEEPS["generate"])
            timer.mark("generate")  # after the headers went out
            yield b"last"

        return StreamingResponse(body())

    async def boom(self, request: HTTPRequest) -> JSONResponse:
        self.timer.mark("embed")
        raise RuntimeError("stage failed")

    async def nothing(self, request: HTTPRequest) -> JSONResponse:
        return JSONResponse({"ok": True})


async def fire(base: str, paths: list[str], concurrency: int = 50) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:

        async def one(i: int, path: str) -> Any:
            async with gate:
                if "?" in path:  # a query of its own (httpx would replace it with params)
                    return await client.get(path)
                return await client.get(path, params={"rid": f"{path}-{i}"})

        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(paths))))


def stored_row_of(timer: StageTimer, start: int) -> dict[str, int]:
    (at,) = np.flatnonzero(timer.starts() == start)
    return {
        name: int(v)
        for name, v, ran in zip(STAGES, timer.samples()[at], timer.ran()[at], strict=True)
        if ran
    }


@pytest.mark.integration
def test_middleware_times_each_request_and_sends_server_timing() -> None:
    service = Service()
    paths = [p for _ in range(50) for p in ("/async", "/pool", "/plain")] + ["/stream"] * 10
    with serving(service.app) as base:
        responses = asyncio.run(fire(base, paths))
        with httpx.Client(base_url=base) as client:
            nothing = client.get("/nothing")
            boom = client.get("/boom")
    assert service.started
    assert [r.status_code for r in responses] == [200] * len(paths)
    assert nothing.status_code == 200 and "server-timing" not in nothing.headers
    assert boom.status_code == 500
    assert service.export.flush(20)
    service.export.close()
    timer = service.timer
    assert len(timer) == len(paths) and timer.failed == 1  # /nothing and /boom are not stored
    assert len(service.exported) == len(paths)
    for response, path in zip(responses, paths, strict=True):
        rid = str(response.request.url.params["rid"])
        names, stamps, attributes, thread = service.exported[rid]
        header = parse_server_timing(response.headers.get("server-timing"))
        row = stored_row_of(timer, stamps[0])
        assert dict(zip(names, np.diff(stamps).tolist(), strict=True)) == row
        assert attributes["url.path"] == path and attributes["http.response.status_code"] == 200
        assert thread == "ragbench-export"
        if path == "/stream":  # the header went out before generate was marked
            assert header == {"embed": row["embed"]} and set(row) == {"embed", "generate"}
        else:
            assert header == row and list(row) == STAGES
        for name, ns in row.items():
            assert ns >= SLEEPS[name] * 1e9 or (path == "/stream" and name == "embed")


@pytest.mark.integration
def test_prometheus_and_opentelemetry_get_every_stored_request() -> None:
    service = Service()
    paths = ["/async", "/pool", "/plain"] * 10 + ["/stream"] * 4
    with serving(service.app) as base:
        responses = asyncio.run(fire(base, paths, concurrency=10))
    assert all(r.status_code == 200 for r in responses)
    service.export.close()
    timer, registry = service.timer, service.registry
    samples, ran = timer.samples(), timer.ran()
    for j, name in enumerate(STAGES):
        labels = {"stage": name}
        count = registry.get_sample_value("ragbench_stage_seconds_count", labels)
        total = registry.get_sample_value("ragbench_stage_seconds_sum", labels)
        assert count == ran[:, j].sum() == (34 if name in ("embed", "generate") else 30)
        assert total == pytest.approx(samples[ran[:, j], j].sum() / 1e9, rel=1e-9)
        below_10us = registry.get_sample_value(
            "ragbench_stage_seconds_bucket", {**labels, "le": "1e-05"}
        )
        assert below_10us == 0  # every stage slept at least a millisecond
    spans = service.spans.get_finished_spans()
    roots = [s for s in spans if s.name == REQUEST_SPAN]
    assert len(roots) == len(timer)
    by_trace: dict[int, list[Any]] = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, []).append(s)
    for root in roots:
        children = sorted(
            (s for s in by_trace[root.context.trace_id] if s is not root),
            key=lambda s: s.start_time,
        )
        row = stored_row_of(timer, root.start_time - service.otel.offset_ns)
        assert [c.name for c in children] == list(row)
        assert [c.end_time - c.start_time for c in children] == list(row.values())
        assert root.attributes is not None and root.attributes["http.request.method"] == "GET"


@pytest.mark.integration
def test_export_runs_after_the_response_not_before_it() -> None:
    gate = threading.Event()
    service = Service(sink_gate=gate)  # every export waits until the test lets it go
    with serving(service.app) as base, httpx.Client(base_url=base, timeout=20) as client:
        for i in range(3):
            response = client.get("/async", params={"rid": f"r{i}"})
            assert response.status_code == 200 and "server-timing" in response.headers
        assert len(service.timer) == 3 and not service.exported  # answered, not yet exported
        gate.set()
        assert service.export.flush(20)
    service.export.close()
    assert sorted(service.exported) == ["r0", "r1", "r2"]


def test_middleware_options_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    with pytest.raises(ConfigError, match="StageTimer"):
        TimingMiddleware(app, timer="embed")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Background"):
        TimingMiddleware(app, timer=StageTimer(["a"]), export=print)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingDependencyError, match=r"ragbench\[serve\]"):
        StageHistogram()


def test_server_timing_can_be_turned_off() -> None:
    timer = StageTimer(["a"])

    async def app(scope: Any, receive: Any, send: Any) -> None:
        timer.mark("a")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x", b"1")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def call(mw: TimingMiddleware) -> list[Any]:
        sent: list[Any] = []

        async def receive() -> Any:
            return {"type": "http.request", "body": b""}

        async def send(message: Any) -> None:
            sent.append(message)

        await mw({"type": "http", "method": "GET", "path": "/"}, receive, send)
        return sent

    on = asyncio.run(call(TimingMiddleware(app, timer=timer)))
    off = asyncio.run(call(TimingMiddleware(app, timer=timer, server_timing=False)))
    assert [k for k, _ in on[0]["headers"]] == [b"x", b"server-timing"]
    assert off[0]["headers"] == [(b"x", b"1")]
    assert len(timer) == 2


# ---------------------------------------------------------------- the docs' service example


def readme_block(title: str) -> str:
    """The first Python block of the docs page whose title is ``title`` (docs/getting-started/timing-your-service.md)."""
    text = (ROOT / "docs" / "getting-started" / "timing-your-service.md").read_text(
        encoding="utf-8"
    )
    assert text.startswith(f"# {title}\n")
    return text.split("```python\n", 1)[1].split("\n```", 1)[0]


@pytest.mark.integration
def test_readme_service_example_runs(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(readme_block("Timing your own service"), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", "0"]
    log = tmp_path / "uvicorn.log"
    with log.open("w") as out:  # a file, not a pipe: a full pipe would block the server
        child = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None:
            assert child.poll() is None and time.monotonic() < deadline, log.read_text()
            m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log.read_text())
            port = int(m.group(1)) if m else time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        responses = asyncio.run(fire(base, ["/ask?q=what+is+a+list"] * 50))
        with httpx.Client(base_url=base) as client:
            stats = client.get("/stats").json()
    finally:
        child.terminate()
        child.wait(20)
    assert "Traceback" not in log.read_text(), log.read_text()
    assert all(r.status_code == 200 for r in responses)
    for r in responses:
        assert list(parse_server_timing(r.headers["server-timing"])) == STAGES
    assert stats["total"]["count"] == 50
    assert {name: s["count"] for name, s in stats.items()} == dict.fromkeys([*STAGES, "total"], 50)
    assert stats["generate"]["p50_ms"] >= 20  # the example's LLM call sleeps 20 ms
    json.dumps(stats)


@pytest.mark.integration
def test_the_middleware_in_a_fastapi_app() -> None:
    """The same middleware added the FastAPI way: async and plain ``def`` endpoints, 50 at a time."""
    fastapi = pytest.importorskip("fastapi", reason="needs ragbench[dev]")
    timer = StageTimer(STAGES)
    app = fastapi.FastAPI()
    app.add_middleware(TimingMiddleware, timer=timer)
    truth: dict[str, dict[str, tuple[int, int]]] = {}

    def stage(rid: str, name: str) -> None:  # ground truth: the stage's own clock around it
        t0 = time.perf_counter_ns()
        time.sleep(SLEEPS[name])
        timer.mark(name)
        truth.setdefault(rid, {})[name] = (t0, time.perf_counter_ns())

    @app.get("/async")
    async def awaiting(rid: str) -> dict[str, bool]:
        timer.annotate({"rid": rid})
        await asyncio.to_thread(stage, rid, "embed")
        for name in STAGES[1:]:
            t0 = time.perf_counter_ns()
            await asyncio.sleep(SLEEPS[name])
            timer.mark(name)
            truth.setdefault(rid, {})[name] = (t0, time.perf_counter_ns())
        return {"ok": True}

    @app.get("/plain")  # FastAPI runs a plain def endpoint in its thread pool
    def plain(rid: str) -> dict[str, bool]:
        timer.annotate({"rid": rid})
        for name in STAGES:
            stage(rid, name)
        return {"ok": True}

    paths = ["/async", "/plain"] * 50
    with serving(app) as base:
        responses = asyncio.run(fire(base, paths))
    assert [r.status_code for r in responses] == [200] * len(paths)
    assert len(timer) == len(paths)
    for response in responses:
        rid = str(response.request.url.params["rid"])
        header = parse_server_timing(response.headers.get("server-timing"))
        assert list(header) == STAGES
        for j, name in enumerate(STAGES):
            lo, hi = truth[rid][name]
            assert header[name] >= SLEEPS[name] * 1e9 and hi - lo >= SLEEPS[name] * 1e9
            if j:  # from the previous mark (after that stage's own start) to this one
                assert header[name] <= hi - truth[rid][STAGES[j - 1]][0]
    rows = timer.samples()
    stored = sorted(tuple(int(v) for v in row) for row in rows)
    sent = sorted(
        tuple(parse_server_timing(r.headers["server-timing"])[n] for n in STAGES) for r in responses
    )
    assert stored == sent  # every stored row is exactly what its response's header said


@pytest.mark.integration
def test_a_def_endpoints_wait_for_a_thread_is_queue_not_its_first_stage() -> None:
    """64 requests at a time to a FastAPI ``def`` endpoint: the thread-pool wait lands in ``queue``.

    anyio's pool has 40 threads and each request holds one for 50 ms, so most requests
    wait for a thread. The handler's own clock brackets each stage: ``queue`` ends between
    the handler's first line and its ``timer.current()``, and ``embed`` (a 1 ms sleep) holds
    nothing from before the handler's first line.
    """
    fastapi = pytest.importorskip("fastapi", reason="needs ragbench[dev]")
    timer = StageTimer(["queue", "embed", "generate"])
    app = fastapi.FastAPI()
    app.add_middleware(TimingMiddleware, timer=timer)
    clocks: dict[str, tuple[int, int, int, int]] = {}

    @app.get("/ask")
    def ask(rid: str) -> dict[str, bool]:
        entered = time.perf_counter_ns()  # this thread runs the handler from here
        r = timer.current()  # the handler's first use of its handle: queue ends here
        began = time.perf_counter_ns()
        assert r is not None
        time.sleep(0.001)  # the embed: 1 ms of the handler's own work
        r.mark("embed")
        embedded = time.perf_counter_ns()
        time.sleep(0.05)  # the LLM call, holding the pool thread
        r.mark("generate")
        clocks[rid] = (r.start_ns, entered, began, embedded)
        return {"ok": True}

    paths = ["/ask"] * 128
    with serving(app) as base:
        responses = asyncio.run(fire(base, paths, concurrency=64))
    assert [r.status_code for r in responses] == [200] * len(paths)
    assert len(timer) == len(paths)
    waits, embeds = [], []
    for response in responses:
        header = parse_server_timing(response.headers.get("server-timing"))
        assert list(header) == ["queue", "embed", "generate"], header
        start, entered, began, embedded = clocks[str(response.request.url.params["rid"])]
        assert entered <= start + header["queue"] <= began
        assert 1_000_000 <= header["embed"] <= embedded - entered
        waits.append(header["queue"])
        embeds.append(header["embed"])
    # the wait the test is about happened (24 of the first 64 requests find no free thread)
    # and none of it is in embed
    assert max(waits) > max(embeds)
    assert sorted(timer.samples("queue").tolist()) == sorted(waits)


def test_the_queue_stage_is_checked_and_optional() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        timer.mark("a")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    timer = StageTimer(["a"])
    assert TimingMiddleware(app, timer=timer).queue is None  # the timer has no queue stage
    with pytest.raises(ConfigError, match="'wait' is not one of the timer's stages"):
        TimingMiddleware(app, timer=timer, queue="wait")
    timer = StageTimer(["wait", "a"])
    assert TimingMiddleware(app, timer=timer, queue="wait").queue == "wait"
    assert TimingMiddleware(app, timer=StageTimer(["queue", "a"]), queue=None).queue is None


@pytest.mark.integration
def test_a_long_running_service_keeps_a_window_of_its_last_requests() -> None:
    """400 requests, 40 at a time, to a real server: the timer keeps the last 50, and reads cost 50.

    The old timer kept a row per request forever (+77 B each, its ``stats()`` on the event loop
    growing with every request served); with ``window=50`` the rows, ``stats()`` and the
    ``queue`` stage cover the 50 latest requests only, and ``stored`` counts them all.
    """
    timer = StageTimer(["queue", "embed"], window=50)
    served: list[int] = []

    async def ask(request: HTTPRequest) -> JSONResponse:
        r = timer.current()  # marks queue
        assert r is not None
        await asyncio.sleep(0.001)
        r.mark("embed")
        served.append(r.start_ns)
        return JSONResponse({"ok": True})

    async def stats(request: HTTPRequest) -> JSONResponse:
        return JSONResponse({k: s.count for k, s in timer.stats().items()})

    app = Starlette(
        routes=[Route("/ask", ask), Route("/stats", stats)],
        middleware=[Middleware(TimingMiddleware, timer=timer)],
    )
    with serving(app) as base:
        responses = asyncio.run(fire(base, ["/ask"] * 400, concurrency=40))
        counts = httpx.get(f"{base}/stats", timeout=30).json()
    assert [r.status_code for r in responses] == [200] * 400
    assert timer.stored == 400
    assert len(timer) == 50 and counts == {"queue": 50, "embed": 50, "total": 50}
    kept = timer.starts().tolist()
    assert set(kept) <= set(served) and kept == sorted(kept)
    # the window holds the latest requests: none older than the 90 latest starts
    # (completion order differs from start order by at most the 40 in flight)
    assert min(kept) >= sorted(served)[-90]


@pytest.mark.parametrize(
    "name", ["embed\u00e9", "résumé", "a b", "a;dur=999", "a,b", "gen\r\nx-forged: 1", "a\tb", ""]
)
def test_a_stage_name_that_would_break_server_timing_is_refused_when_the_timer_is_made(
    name: str,
) -> None:
    """Non-Latin-1 names made every response a 500, CR/LF dropped the connection, ``;``/``,``/
    spaces forged or broke ``Server-Timing`` values: a name must be an RFC 9110 token."""
    with pytest.raises(ConfigError, match=r"is not an HTTP token \(RFC 9110\)") as err:
        StageTimer(["queue", name])
    assert repr(name) in str(err.value)


@pytest.mark.integration
def test_every_token_character_goes_through_server_timing_intact() -> None:
    """The names the rule allows are sent as they are and read back the same, over a real socket."""
    names = ["rag.embed-v2", "retrieve_k10", "a!#$%&'*+^`|~z", "X9"]
    timer = StageTimer(names)

    async def ask(request: HTTPRequest) -> JSONResponse:
        for name in names:
            timer.mark(name)
        return JSONResponse({"ok": True})

    app = Starlette(
        routes=[Route("/ask", ask)], middleware=[Middleware(TimingMiddleware, timer=timer)]
    )
    with serving(app) as base:
        response = httpx.get(f"{base}/ask", timeout=30)
    assert response.status_code == 200
    items = [item.split(";dur=")[0] for item in response.headers["server-timing"].split(", ")]
    assert items == names

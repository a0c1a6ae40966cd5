"""Stage timer in a service: what a per-request handle and the ASGI middleware add (target:
docs/reference/performance-targets.md#timer-handle).

- handle vs ``start()/mark()``: ``with timer.request() as r: r.mark(...)`` x 4
  stages against ``timer.start(); timer.mark()`` x 4 on the same timer class
  (both store into the same per-thread buffers), measured interleaved in one
  process; the median of the per-round differences (each round runs both back
  to back) is what a handle adds per request (target ≤ 200 ns,
  asserted with a 2x margin for the shared machine, reported against the
  target). Marking through the context variable (``timer.mark("embed")``)
  is reported beside it.
- middleware: one request through a bare ASGI app vs the same app wrapped in
  :class:`~ragbench.middleware.TimingMiddleware` (handle, 4 marks,
  ``Server-Timing`` header), and with ``export=Background(...)`` (the
  request path's share of exporting: a queue put), driven by one event loop
  with no server; reported per request.
- the export sinks' own cost, on the export thread: ``StageHistogram`` per
  request of 4 stages, reported.
- a FastAPI ``def`` endpoint, 64 requests at a time: embed and ``queue`` per
  request with and without a ``queue`` stage (where the wait for a pool
  thread lands), reported.
- ``stats()`` with the default window after 10 000 and after 100 000 requests,
  interleaved: the ratio (bounded by the window, asserted ≤ 2x).

Run: ``.venv/bin/pytest bench/test_bench_timer.py -p no:cacheprovider -s``
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from time import perf_counter_ns, thread_time_ns
from typing import Any

from _quick import attempts, judge, need, pick, until_met

from ragbench.timing import Background, StageTimer

STAGES = ["embed", "retrieve", "rerank", "generate"]
HANDLE_TARGET_NS = 200
MARGIN = 2.0
REPEATS = pick(2000, 500)
ROUNDS = pick(31, 11)


def _interleaved(
    fns: list[Callable[[], object]],
    inner: int = REPEATS,
    rounds: int = ROUNDS,
    clock: Callable[[], int] = thread_time_ns,
) -> list[float]:
    """Median ns per call of each fn, measured in alternating rounds.

    ``clock`` is this thread's CPU time by default: on a machine shared with
    other jobs, time spent descheduled is not the code's cost.
    """
    per: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            fn = fns[i]
            t0 = clock()
            for _ in range(inner):
                fn()
            per[i].append((clock() - t0) / inner)
    return [statistics.median(x) for x in per]


def _paired_difference(
    base: Callable[[], object], other: Callable[[], object], inner: int = 200, rounds: int = 301
) -> float:
    """Median over rounds of (CPU ns per call of ``other``) - (of ``base``), run back to back.

    Each round runs the two one right after the other (alternating which goes
    first), so a burst of load from the machine's other users hits both.
    """
    diffs = []
    for r in range(rounds):
        pair = (base, other) if r % 2 == 0 else (other, base)
        took = []
        for fn in pair:
            t0 = thread_time_ns()
            for _ in range(inner):
                fn()
            took.append((thread_time_ns() - t0) / inner)
        diffs.append(took[1] - took[0] if r % 2 == 0 else took[0] - took[1])
    return statistics.median(diffs)


def test_request_handle_vs_start_mark(benchmark: Any) -> None:
    legacy_timer, handle_timer, ctx_timer = (StageTimer(STAGES) for _ in range(3))
    a, b, c, d = STAGES

    def legacy() -> None:
        t = legacy_timer
        t.start()
        t.mark()
        t.mark()
        t.mark()
        t.mark()

    def handle() -> None:
        with handle_timer.request() as r:
            r.mark(a)
            r.mark(b)
            r.mark(c)
            r.mark(d)

    def through_context() -> None:
        t = ctx_timer
        with t.request():
            t.mark(a)
            t.mark(b)
            t.mark(c)
            t.mark(d)

    bound = MARGIN * HANDLE_TARGET_NS

    def measure() -> tuple[float, float, float, float]:
        old, new, ctx = _interleaved([legacy, handle, through_context])
        return old, new, ctx, _paired_difference(legacy, handle)

    def added_of(v: tuple[float, float, float, float]) -> float:
        return v[3]

    runs = attempts(measure, until_met((added_of, bound, False)))
    quiet = [a.value for a in runs if a.quiet] or [runs[-1].value]
    old, new, ctx, added = min(quiet, key=added_of)
    benchmark.extra_info.update(
        start_mark_ns=old, handle_ns=new, context_marks_ns=ctx, added_ns=added
    )
    print(
        f"\nper request of 4 stages: handle {new:.0f} ns vs start()/mark() {old:.0f} ns "
        f"({new / old:.2f}x); paired difference {added:+.0f} ns added (target ≤ {HANDLE_TARGET_NS} ns: "
        f"{'met' if added <= HANDLE_TARGET_NS else 'NOT met'}); marks through "
        f"timer.mark(name) {ctx:.0f} ns ({ctx - new:+.0f} ns over r.mark)"
    )
    # every request was stored (the default window keeps the last 10 000: trims are measured too)
    assert (
        handle_timer.stored
        == legacy_timer.stored
        > ctx_timer.stored
        == REPEATS * ROUNDS * len(runs)
    )
    benchmark(handle)
    judge(
        f"ns a request handle adds over start()/mark() ({MARGIN:g}x the target)",
        runs,
        added_of,
        bound=bound,
        higher_is_better=False,
        fmt=".0f",
    )


async def _bare_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"b")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def _marking_app(scope: Any, receive: Any, send: Any) -> None:
    timer = scope["timer"]
    if timer is not None:
        for name in STAGES:
            timer.mark(name)
    await _bare_app(scope, receive, send)


def _drive(app: Any, timer: StageTimer | None, n: int) -> Callable[[], None]:
    """``n`` requests through ``app`` on one event loop per call; no server, no sockets."""
    scope = {"type": "http", "method": "GET", "path": "/ask", "headers": [], "timer": timer}

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        return None

    async def many() -> None:
        for _ in range(n):
            await app(scope, receive, send)

    loop = asyncio.new_event_loop()

    def run() -> None:
        loop.run_until_complete(many())

    run.loop = loop  # type: ignore[attr-defined]
    return run


def test_middleware_overhead(benchmark: Any) -> None:
    need("starlette", "serve")
    from ragbench.middleware import TimingMiddleware

    n = 200
    plain_timer, export_timer = StageTimer(STAGES), StageTimer(STAGES)
    exported = [0]

    def sink(names: Any, stamps: Any, attributes: Any) -> None:
        exported[0] += 1

    with Background(sink, max_queued=10**9) as export:
        bare = _drive(_marking_app, None, n)
        header = _drive(TimingMiddleware(_marking_app, timer=plain_timer), plain_timer, n)
        exporting = _drive(
            TimingMiddleware(_marking_app, timer=export_timer, export=export), export_timer, n
        )
        put = StageTimer(STAGES, on_request=export)

        def put_one() -> None:
            with put.request() as r:
                r.mark("embed")

        only_handle = StageTimer(STAGES)

        def handle_one() -> None:
            with only_handle.request() as r:
                r.mark("embed")

        b, h, e = (x / n for x in _interleaved([bare, header, exporting], inner=5, rounds=21))
        wall_h, wall_e = (
            x / n
            for x in _interleaved([header, exporting], inner=5, rounds=21, clock=perf_counter_ns)
        )
        with_put, without = _interleaved([put_one, handle_one])
        assert export.flush(60)
    assert len(plain_timer) == len(export_timer)
    assert exported[0] == export_timer.stored + len(put)  # len(): the window only
    benchmark.extra_info.update(
        bare_ns=b,
        middleware_ns=h,
        middleware_export_ns=e,
        wall_middleware_ns=wall_h,
        wall_middleware_export_ns=wall_e,
        queue_put_ns=with_put - without,
    )
    print(
        f"\nASGI request, 4 stages marked: bare app {b / 1000:.1f} µs, with TimingMiddleware "
        f"{h / 1000:.1f} µs (+{(h - b) / 1000:.1f} µs: handle, marks, Server-Timing header), "
        f"with export=Background {e / 1000:.1f} µs (+{(e - b) / 1000:.1f} µs); the export's "
        f"request-path share (queue put, stamps copied) {with_put - without:.0f} ns per request "
        f"(CPU time of the request's thread); wall clock, export thread included: "
        f"{wall_h / 1000:.1f} µs without export, {wall_e / 1000:.1f} µs with"
    )
    benchmark.pedantic(header, rounds=5, iterations=1)
    for run in (bare, header, exporting):
        run.loop.close()  # type: ignore[attr-defined]


def test_stage_histogram_cost(benchmark: Any) -> None:
    prometheus_client = need("prometheus_client", "serve")
    from ragbench.middleware import StageHistogram

    histogram = StageHistogram(registry=prometheus_client.CollectorRegistry())
    stamps = [0, 1_000_000, 1_500_000, 3_000_000, 23_000_000]
    (ns,) = _interleaved([lambda: histogram.on_request(STAGES, stamps, None)])
    benchmark.extra_info.update(histogram_ns=ns)
    print(f"\nStageHistogram.on_request, 4 stages: {ns / 1000:.1f} µs (on the export thread)")
    benchmark(histogram.on_request, STAGES, stamps, None)


def _loop_service(offload: bool) -> Any:
    """The shape of docs/getting-started/timing-your-service.md's service: a CPU embed stage, then an awaited LLM call; and a health check."""
    import numpy as np
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from ragbench.middleware import TimingMiddleware

    timer = StageTimer(["embed", "generate"])
    weights = np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32)

    def embed(text: str) -> Any:  # ~ a small encoder's CPU work: numpy, the GIL released
        x = np.full((64, 384), len(text), dtype=np.float32)
        for _ in range(20):
            x = np.tanh(x @ weights)
        return x.mean(axis=0)

    async def ask(request: Any) -> JSONResponse:
        q = request.query_params["q"]
        vector = await asyncio.to_thread(embed, q) if offload else embed(q)
        timer.mark("embed")
        await asyncio.sleep(0.02)
        timer.mark("generate")
        return JSONResponse({"n": float(vector[0])})

    async def health(request: Any) -> JSONResponse:
        return JSONResponse({"ok": True})

    app = Starlette(
        routes=[Route("/ask", ask), Route("/health", health)],
        middleware=[Middleware(TimingMiddleware, timer=timer)],
    )
    return app, timer


def test_cpu_stage_on_the_event_loop(benchmark: Any) -> None:
    """Report: 50 requests at once, the CPU stage called in ``async def`` vs ``asyncio.to_thread``."""
    httpx = need("httpx", "serve")
    need("starlette", "serve")
    from ragbench.threads import set_threads

    set_threads(1)  # one BLAS thread per call, as the service of timing-your-service.md

    async def run(offload: bool) -> dict[str, float]:
        app, timer = _loop_service(offload)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            await client.get("/ask", params={"q": "warm"})

            async def health() -> float:
                due = perf_counter_ns() + 5_000_000
                await asyncio.sleep(0.005)  # once the 50 are queued
                await client.get("/health")
                return (perf_counter_ns() - due) / 1e6  # late by: the loop was not free

            asks = [client.get("/ask", params={"q": "x" * i}) for i in range(50)]
            *_, health_ms = await asyncio.gather(*asks, health())
        stats = timer.stats()
        return {
            "request_p50_ms": stats["total"].p50_ns / 1e6,
            "embed_p50_ms": stats["embed"].p50_ns / 1e6,
            "generate_p50_ms": stats["generate"].p50_ns / 1e6,
            "health_ms": health_ms,
        }

    naive, offloaded = asyncio.run(run(False)), asyncio.run(run(True))
    benchmark.extra_info.update(naive=naive, to_thread=offloaded)
    for label, got in (("embed in async def", naive), ("await asyncio.to_thread", offloaded)):
        print(
            f"\n50 requests at once, {label}: request p50 {got['request_p50_ms']:.0f} ms, "
            f"embed p50 {got['embed_p50_ms']:.1f} ms, the 20 ms await (generate) p50 "
            f"{got['generate_p50_ms']:.1f} ms, a health check meanwhile {got['health_ms']:.1f} ms",
            end="",
        )
    print()
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def test_thread_pool_wait_of_a_def_endpoint(benchmark: Any) -> None:
    """Report: a FastAPI ``def`` endpoint, 64 requests at a time: where the wait for a thread lands.

    The endpoint (run in anyio's 40-thread pool) fetches its handle, sleeps 1 ms (embed) and
    20 ms (generate, holding its thread). The same requests are timed by a timer without a
    ``queue`` stage (the wait lands in embed) and one with it, interleaved rounds of 128
    requests each through ``httpx.ASGITransport`` (FastAPI's own thread-pool path, no sockets).
    """
    httpx = need("httpx", "serve")
    fastapi = need("fastapi", "dev")
    from ragbench.middleware import TimingMiddleware

    def service(names: list[str]) -> tuple[Any, StageTimer]:
        timer = StageTimer(names)
        app = fastapi.FastAPI()
        app.add_middleware(TimingMiddleware, timer=timer)

        @app.get("/ask")
        def ask() -> dict[str, bool]:
            r = timer.current()
            assert r is not None
            time.sleep(0.001)
            r.mark("embed")
            time.sleep(0.02)
            r.mark("generate")
            return {"ok": True}

        return app, timer

    services = [service(["embed", "generate"]), service(["queue", "embed", "generate"])]

    async def round_of(app: Any) -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            gate = asyncio.Semaphore(64)

            async def one() -> None:
                async with gate:
                    assert (await client.get("/ask")).status_code == 200

            await asyncio.gather(*(one() for _ in range(128)))

    for r in range(pick(6, 2)):
        for app, _ in services if r % 2 == 0 else services[::-1]:
            asyncio.run(round_of(app))
    figures = {}
    for label, (_, timer) in zip(("no queue stage", "queue stage"), services, strict=True):
        stats = timer.stats()
        figures[label] = {
            name: (s.p50_ns / 1e6, s.p99_ns / 1e6) for name, s in stats.items() if s.count
        }
        parts = ", ".join(
            f"{name} p50 {p50:.1f} ms p99 {p99:.1f} ms"
            for name, (p50, p99) in figures[label].items()
            if name != "total"
        )
        print(f"\nFastAPI def endpoint, 64 at a time, {label}: {parts}", end="")
    print()
    benchmark.extra_info.update(figures)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def test_stats_cost_does_not_grow_with_requests_served(benchmark: Any) -> None:
    """``stats()`` after 10x the window of requests vs after one window: the same rows, the same cost.

    Two timers with the default window (10 000), one fed 10 000 requests and one 100 000
    (the timer before the window kept them all, so its ``stats()``, on the event loop of a
    service's ``/stats``, grew with them); their ``stats()`` timed interleaved.
    """
    from ragbench.timing.timer import WINDOW

    def fed(n: int) -> StageTimer:
        timer = StageTimer(STAGES)
        for i in range(n):
            t = 1_000 * i
            timer.add([t, t + 3 + i % 7, t + 10, t + 11 + i % 5, t + 30])
        return timer

    one, ten = fed(WINDOW), fed(10 * WINDOW)
    assert len(one) == len(ten) == WINDOW and ten.stored == 10 * WINDOW
    one_ns, ten_ns = _interleaved([one.stats, ten.stats], inner=3, rounds=pick(15, 7))
    ratio = ten_ns / one_ns
    benchmark.extra_info.update(stats_window_ns=one_ns, stats_10x_ns=ten_ns, ratio=ratio)
    print(
        f"\nstats() of {WINDOW} rows of 4 stages: {one_ns / 1e6:.2f} ms after {WINDOW} requests, "
        f"{ten_ns / 1e6:.2f} ms after {10 * WINDOW} ({ratio:.2f}x)"
    )
    assert ratio <= 2.0, ratio  # the rows read are the same window
    benchmark.pedantic(ten.stats, rounds=3, iterations=1)

"""StageTimer in a real concurrent service: per-request handles, threads, asyncio tasks, storage.

The service tests serve a Starlette app with uvicorn on 127.0.0.1 and call it
over a real socket, 50 requests at a time. Every handler keeps ground truth:
its own ``perf_counter_ns`` right before and right after each mark, so the
timer's stamp for that mark lies between the two, and each stored stage time
is bracketed exactly (no tolerance) by the handler's stamps. Stage sleeps
differ per stage, so a row whose columns shifted, or that mixed two
requests, falls outside its brackets.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any

import numpy as np
import pytest

from ragbench.errors import ConfigError, InputError
from ragbench.timing import Background, StageTimer

httpx = pytest.importorskip("httpx", reason="needs ragbench[serve]")
uvicorn = pytest.importorskip("uvicorn", reason="needs ragbench[serve]")
starlette = pytest.importorskip("starlette", reason="needs ragbench[serve]")

from starlette.applications import Starlette  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402
from starlette.requests import Request as HTTPRequest  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

STAGES = ["embed", "retrieve", "rerank", "generate"]
#: a different sleep per stage (seconds): a shifted column breaks the brackets
SLEEPS = {"embed": 0.004, "retrieve": 0.001, "rerank": 0.0025, "generate": 0.006}
MS = 1_000_000


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; stop it after."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # loop="asyncio": uvicorn would pick uvloop when installed (chromadb brings it), whose
    # millisecond loop clock can end an awaited sleep up to 1 ms early by perf_counter
    # timeout_keep_alive: uvicorn's 5 s default closes a pooled connection the client may be
    # reusing at that moment on a loaded host (a CI run read httpx.ReadError); ragbench's own
    # server keeps them an hour (ragbench.transports.asgi_server)
    config = uvicorn.Config(
        app,
        lifespan="off",
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


class Truth:
    """One request's ground truth: the handler's stamps right before and after each mark."""

    def __init__(self) -> None:
        self.before: list[int] = []
        self.after: list[int] = []

    def around(self, mark: Any, *args: Any) -> None:
        self.before.append(perf_counter_ns())
        mark(*args)
        self.after.append(perf_counter_ns())

    def bounds(self) -> tuple[list[int], list[int]]:
        """Per stage (in mark order): the least and the most the stored time can be."""
        lo = [self.before[j] - self.after[j - 1] for j in range(1, len(self.before))]
        hi = [self.after[j] - self.before[j - 1] for j in range(1, len(self.before))]
        return lo, hi


def within(row: Any, truth: Truth) -> bool:
    lo, hi = truth.bounds()
    return all(a <= int(v) <= b for v, a, b in zip(row, lo, hi, strict=True))


def recording_timer() -> tuple[StageTimer, dict[str, list[int]]]:
    """A timer whose hook keeps each request's stamps by the request id it was annotated with."""
    seen: dict[str, list[int]] = {}

    def hook(names: list[str], stamps: Any, attributes: Any) -> None:
        assert names == STAGES
        seen[attributes["rid"]] = list(stamps)

    return StageTimer(STAGES, on_request=hook), seen


def make_app(timer: StageTimer, truths: dict[str, Truth]) -> Starlette:
    """Three endpoint shapes timing the same four stages."""

    async def awaiting(request: HTTPRequest) -> JSONResponse:
        rid = request.query_params["rid"]
        truth = truths[rid] = Truth()
        # the start: the bracket's first pair is around entering the ``with``
        truth.before.append(perf_counter_ns())
        async with timer.request() as r:
            truth.after.append(perf_counter_ns())
            r.annotate({"rid": rid})
            for name in STAGES:
                await asyncio.sleep(SLEEPS[name])  # other requests run here
                if name == "rerank":
                    truth.around(timer.mark, name)  # through the context variable
                else:
                    truth.around(r.mark, name)
        return JSONResponse({"rid": rid})

    def pool_stage(truth: Truth, name: str) -> None:
        time.sleep(SLEEPS[name])
        truth.around(timer.mark, name)  # a pool thread: the copied context has the handle

    async def pooled(request: HTTPRequest) -> JSONResponse:
        rid = request.query_params["rid"]
        truth = truths[rid] = Truth()
        truth.before.append(perf_counter_ns())
        with timer.request():
            truth.after.append(perf_counter_ns())
            timer.annotate({"rid": rid})
            for name in STAGES:
                await run_in_threadpool(pool_stage, truth, name)
        return JSONResponse({"rid": rid})

    def plain(request: HTTPRequest) -> JSONResponse:  # Starlette runs it in its thread pool
        rid = request.query_params["rid"]
        truth = truths[rid] = Truth()
        truth.before.append(perf_counter_ns())
        with timer.request() as r:
            truth.after.append(perf_counter_ns())
            r.annotate({"rid": rid})
            for name in STAGES:
                time.sleep(SLEEPS[name])
                truth.around(r.mark, name)
        return JSONResponse({"rid": rid})

    def legacy(request: HTTPRequest) -> JSONResponse:  # the old one-request-at-a-time pattern
        try:
            timer.start()
            for name in STAGES:
                time.sleep(SLEEPS[name])
                timer.mark()
        except InputError as e:
            return JSONResponse({"error": str(e)}, status_code=500)
        return JSONResponse({})

    return Starlette(
        routes=[
            Route("/awaiting", awaiting),
            Route("/pooled", pooled),
            Route("/plain", plain),
            Route("/legacy", legacy),
        ]
    )


async def fire(base: str, path: str, n: int = 200, concurrency: int = 50) -> list[Any]:
    """``n`` GETs of ``path``, ``concurrency`` in flight at a time, over one client's pool."""
    limits = httpx.Limits(max_connections=concurrency)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:

        async def one(i: int) -> Any:
            async with gate:
                return await client.get(path, params={"rid": f"{path}-{i}"})

        return list(await asyncio.gather(*(one(i) for i in range(n))))


@pytest.mark.integration
@pytest.mark.parametrize("path", ["/awaiting", "/pooled", "/plain"])
def test_every_row_of_a_concurrent_service_is_its_own_requests(path: str) -> None:
    timer, seen = recording_timer()
    truths: dict[str, Truth] = {}
    with serving(make_app(timer, truths)) as base:
        responses = asyncio.run(fire(base, path))
    assert [r.status_code for r in responses] == [200] * 200
    assert len(timer) == 200 and timer.failed == 0 and len(seen) == 200
    for rid, stamps in seen.items():  # the hook's row of each request id, against its own truth
        assert within(np.diff(stamps), truths[rid]), (rid, np.diff(stamps), truths[rid].bounds())
    # the stored rows are exactly the hooked rows (same multiset, nothing lost or mixed)
    hooked = sorted(tuple(np.diff(s).tolist()) for s in seen.values())
    assert sorted(map(tuple, timer.samples().tolist())) == hooked
    assert sorted(timer.starts().tolist()) == sorted(s[0] for s in seen.values())
    assert timer.ran().all()
    stats = timer.stats()
    for name, sleep in SLEEPS.items():
        assert stats[name].count == 200
        assert stats[name].min_ns >= sleep * 1e9  # a sleep never returns early
    assert stats["total"].min_ns >= sum(SLEEPS.values()) * 1e9


@pytest.mark.integration
def test_the_old_start_mark_pattern_raises_under_concurrency_and_stores_no_garbage() -> None:
    timer = StageTimer(STAGES)
    with serving(make_app(timer, {})) as base:
        responses = asyncio.run(fire(base, "/legacy", n=60, concurrency=20))
    ok = sum(r.status_code == 200 for r in responses)
    assert ok < 60  # overlapping requests are refused...
    refused = [r.json()["error"] for r in responses if r.status_code != 200]
    assert all(("overlap" in e or "before start" in e) for e in refused), refused
    assert len(timer) == ok  # ...and only whole requests are stored
    rows = timer.samples()
    for j, name in enumerate(STAGES):  # no row mixes two requests (a 4 ms stage of 41 µs)
        assert (rows[:, j] >= SLEEPS[name] * 1e9).all(), rows


# ---------------------------------------------------------------- handles in threads and tasks


def test_asyncio_tasks_each_time_their_own_request() -> None:
    timer, seen = recording_timer()
    truths: dict[int, Truth] = {}

    async def one(i: int) -> None:
        truth = truths[i] = Truth()
        truth.before.append(perf_counter_ns())
        async with timer.request() as r:
            truth.after.append(perf_counter_ns())
            r.annotate({"rid": i})
            for j, name in enumerate(STAGES):
                await asyncio.sleep(SLEEPS[name] * (1 + (i + j) % 3))
                if name == "embed":  # CPU stage in a worker thread, marked there
                    await asyncio.to_thread(truth.around, timer.mark, name)
                else:
                    truth.around(r.mark, name)

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(50)))

    asyncio.run(main())
    assert len(timer) == 50
    for i, truth in truths.items():
        assert within(np.diff(seen[i]), truth), i  # type: ignore[index]


def test_threads_mark_through_the_context_variable() -> None:
    timer, seen = recording_timer()
    truths: dict[str, Truth] = {}
    go = threading.Barrier(8)

    def helper(truth: Truth, name: str) -> None:  # deep in the call stack, no handle passed
        time.sleep(SLEEPS[name])
        truth.around(timer.mark, name)

    def worker(t: int) -> None:
        go.wait()
        for i in range(10):
            truth = truths[f"{t}-{i}"] = Truth()
            truth.before.append(perf_counter_ns())
            with timer.request() as r:
                truth.after.append(perf_counter_ns())
                r.annotate({"rid": f"{t}-{i}"})
                assert timer.current() is r
                for name in STAGES:
                    helper(truth, name)
            assert timer.current() is None

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(timer) == len(seen) == 80
    for rid, truth in truths.items():
        assert within(np.diff(seen[rid]), truth), rid


# ---------------------------------------------------------------- what a handle stores


def test_stage_time_is_since_the_previous_mark_in_any_order() -> None:
    timer = StageTimer(["a", "b", "c"])
    truth = Truth()
    truth.before.append(perf_counter_ns())
    with timer.request() as r:
        truth.after.append(perf_counter_ns())
        time.sleep(0.003)
        truth.around(r.mark, "c")  # out of stage order
        time.sleep(0.001)
        truth.around(r.mark, "a")
        time.sleep(0.002)
        truth.around(r.mark, "b")
        durations = r.durations()
    lo, hi = truth.bounds()
    row = timer.samples()[0]
    assert lo[0] <= row[2] <= hi[0] and lo[1] <= row[0] <= hi[1] and lo[2] <= row[1] <= hi[2]
    assert durations == {"a": row[0], "b": row[1], "c": row[2]}


def test_a_skipped_stage_has_no_sample_and_a_repeated_one_adds_up() -> None:
    calls: list[tuple[list[str], list[int]]] = []
    timer = StageTimer(["a", "b", "c"], on_request=lambda n, s, _: calls.append((n, list(s))))
    with timer.request() as r:  # all three
        time.sleep(0.002)
        r.mark("a")
        r.mark("b")
        r.mark("c")
    truth = Truth()
    truth.before.append(perf_counter_ns())
    with timer.request() as r:  # b skipped, a twice
        truth.after.append(perf_counter_ns())
        time.sleep(0.001)
        truth.around(r.mark, "a")
        time.sleep(0.003)
        truth.around(r.mark, "a")
        time.sleep(0.002)
        truth.around(r.mark, "c")
    lo, hi = truth.bounds()
    rows = timer.samples()
    assert rows.shape == (2, 3)
    assert lo[0] + lo[1] <= rows[1, 0] <= hi[0] + hi[1] and lo[2] <= rows[1, 2] <= hi[2]
    assert rows[1, 1] == 0  # skipped: 0 in samples() ...
    np.testing.assert_array_equal(timer.ran(), [[True, True, True], [True, False, True]])
    stats = timer.stats()
    assert (stats["a"].count, stats["b"].count, stats["c"].count) == (2, 1, 2)  # ... no sample
    assert stats["b"].max_ns == rows[0, 1]  # b's statistics are the request that ran it
    assert stats["total"].count == 2 and stats["total"].max_ns == rows.sum(axis=1).max()
    names, stamps = calls[1]  # the hook gets the stages that ran, laid back to back
    assert names == ["a", "c"] and np.diff(stamps).tolist() == [rows[1, 0], rows[1, 2]]
    assert stamps[0] == timer.starts()[1]


def test_a_request_that_raises_or_marks_nothing_is_not_stored() -> None:
    timer = StageTimer(["a", "b"])
    with pytest.raises(KeyError), timer.request() as r:
        r.mark("a")
        raise KeyError("boom")
    with timer.request():
        pass
    assert len(timer) == 0 and timer.failed == 1
    assert timer.stats()["a"].count == 0


def test_a_queue_handle_marks_the_wait_at_the_handlers_first_use() -> None:
    timer = StageTimer(["queue", "a"])
    for use in ("current", "annotate", "begin"):
        with timer.request(queue="queue") as r:
            time.sleep(0.002)  # the wait before the handler
            entered = perf_counter_ns()
            if use == "current":
                assert timer.current() is r
            elif use == "annotate":
                timer.annotate({"k": 1})
            else:
                r.begin()
            began = perf_counter_ns()
            timer.current()  # once only: this adds nothing to queue
            time.sleep(0.001)
            r.mark("a")
        start, queue = int(timer.starts()[-1]), int(timer.samples("queue")[-1])
        assert entered <= start + queue <= began, use
    with timer.request(queue="queue") as r:  # a mark before any use: the wait stays in it
        time.sleep(0.001)
        r.mark("a")
        timer.current()
    with timer.request() as r:  # no queue= : current() marks nothing
        timer.current()
        r.mark("a")
    assert timer.ran("queue").tolist() == [True, True, True, False, False]
    assert timer.samples("a")[3] >= 1_000_000
    with pytest.raises(InputError, match="unknown stage 'wait'"):
        timer.request(queue="wait")


def test_handle_misuse_is_a_clear_error() -> None:
    timer = StageTimer(["a", "b"])
    with pytest.raises(InputError, match="no request open"):
        timer.mark("a")
    r = timer.request()
    with pytest.raises(InputError, match="outside"):
        r.mark("a")
    with r:
        with pytest.raises(InputError, match="unknown stage 'zz'"):
            r.mark("zz")
        with pytest.raises(InputError, match="by name"):
            timer.mark()  # the old form inside a handle
        r.mark("a")
    with pytest.raises(InputError, match="outside"):
        r.mark("b")
    with pytest.raises(InputError, match="one request"), r:
        pass
    assert len(timer) == 1


def test_nested_requests_are_separate_and_the_outer_is_current_again() -> None:
    timer = StageTimer(["a", "b"])
    with timer.request() as outer:
        outer.mark("a")
        with timer.request() as inner:
            assert timer.current() is inner
            timer.mark("b")
        assert timer.current() is outer
        timer.mark("b")
    assert timer.current() is None
    np.testing.assert_array_equal(timer.ran(), [[True, True], [False, True]])  # by start


# ---------------------------------------------------------------- start()/mark() overlap


def test_start_mark_overlap_between_tasks_raises() -> None:
    timer = StageTimer(["a", "b"])
    errors: list[str] = []

    async def request(delay: float) -> None:
        try:
            timer.start()
            await asyncio.sleep(delay)
            timer.mark()
            await asyncio.sleep(delay)
            timer.mark()
        except InputError as e:
            errors.append(str(e))

    async def main() -> None:
        await asyncio.gather(request(0.01), request(0.01))

    asyncio.run(main())
    assert len(errors) == 2, errors  # the second start, then the first one's mark
    assert "overlap" in errors[0]
    assert len(timer) == 0
    timer.start()  # a lone request afterwards is fine
    timer.mark()
    timer.mark()
    assert len(timer) == 1


def test_start_mark_from_two_threads_raises() -> None:
    timer = StageTimer(["a", "b"])
    timer.start()
    caught: list[Exception] = []

    def other() -> None:
        try:
            timer.mark()
        except InputError as e:
            caught.append(e)

    th = threading.Thread(target=other)
    th.start()
    th.join()
    assert caught and "different thread or task" in str(caught[0])
    with pytest.raises(InputError, match="before start"):
        timer.mark()  # the overlapped request was dropped
    other_start: list[Exception] = []

    def starts() -> None:
        try:
            timer.start()
        except InputError as e:
            other_start.append(e)

    timer.start()
    th = threading.Thread(target=starts)
    th.start()
    th.join()
    assert other_start and "overlap" in str(other_start[0])
    assert len(timer) == 0


def test_start_again_in_the_same_thread_begins_a_new_request() -> None:
    timer = StageTimer(["a", "b"])
    timer.start()
    timer.mark()  # then the next stage raised: the request is abandoned
    timer.start()
    time.sleep(0.002)
    timer.mark()
    timer.mark()
    assert len(timer) == 1 and timer.samples()[0, 0] >= 2 * MS
    timer.start()
    timer.abandon()
    with pytest.raises(InputError, match="before start"):
        timer.mark()


# ---------------------------------------------------------------- storage under threads


def expected_row(t: int, i: int) -> list[int]:
    return [t + 1, i % 1000, (t * 7 + i % 1000) % 13]


def test_add_from_8_threads_keeps_every_row_and_readers_see_whole_rows() -> None:
    n_threads, per_thread = 8, 20_000
    timer = StageTimer(["a", "b", "c"], window=None)  # keep every row
    go = threading.Barrier(n_threads + 1)
    stop = threading.Event()
    bad: list[Any] = []
    seen_counts: list[int] = []

    def writer(t: int) -> None:
        go.wait()
        for i in range(per_thread):
            a, b, c = expected_row(t, i)
            base = 1_000_000 + i
            timer.add([base, base + a, base + a + b, base + a + b + c])

    def reader() -> None:
        go.wait()
        while not stop.is_set():
            rows = timer.samples()
            seen_counts.append(len(rows))
            # every row a reader sees is whole: its columns belong together
            t = rows[:, 0] - 1
            if not ((rows[:, 0] >= 1) & (rows[:, 0] <= n_threads)).all():
                bad.append(rows)
            i_mod = rows[:, 1]
            ok = (rows[:, 2] - (t * 7 + i_mod) % 13) % 13 == 0
            if not ok.all():
                bad.append(rows[~ok])
            stats = timer.stats()
            if stats["a"].count != stats["total"].count:
                bad.append(stats)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    read = threading.Thread(target=reader)
    for th in [*threads, read]:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    read.join()
    assert not bad, bad[:2]
    assert len(seen_counts) > 1 and seen_counts == sorted(seen_counts)  # counts only grow
    assert len(timer) == n_threads * per_thread
    got = timer.samples()
    want = np.array([expected_row(t, i) for t in range(n_threads) for i in range(per_thread)])
    order = np.lexsort(got.T[::-1])
    np.testing.assert_array_equal(got[order], want[np.lexsort(want.T[::-1])])
    for t in range(n_threads):  # each thread's rows in the order it stored them
        mine = got[got[:, 0] == t + 1]
        np.testing.assert_array_equal(mine, [expected_row(t, i) for i in range(per_thread)])


def test_a_window_keeps_the_latest_rows_whole_while_8_threads_store_and_trim() -> None:
    """window=5000: each thread trims its buffer ~3 times while a reader reads all along."""
    n_threads, per_thread, window = 8, 20_000, 5_000
    timer = StageTimer(["a", "b", "c"], window=window)
    go = threading.Barrier(n_threads + 1)
    stop = threading.Event()
    bad: list[Any] = []
    seen: list[int] = []

    def writer(t: int) -> None:
        go.wait()
        for i in range(per_thread):
            a, b, c = expected_row(t, i)
            base = 1_000_000 + i
            timer.add([base, base + a, base + a + b, base + a + b + c])

    def reader() -> None:
        go.wait()
        while not stop.is_set():
            rows = timer.samples()
            seen.append(len(rows))
            t = rows[:, 0] - 1
            ok = (rows[:, 2] - (t * 7 + rows[:, 1]) % 13) % 13 == 0
            if not ok.all() or not ((t >= 0) & (t < n_threads)).all():
                bad.append(rows)
            if timer.stats()["total"].count > window:
                bad.append("stats over the window")

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    read = threading.Thread(target=reader)
    for th in [*threads, read]:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    read.join()
    assert not bad, bad[:2]
    assert len(seen) > 1 and max(seen) <= window
    assert timer.stored == n_threads * per_thread
    assert len(timer) == window == timer.stats()["total"].count
    # the window is the requests that started last: start 1_000_000 + i, the same i on every
    # thread, so the newest window / n_threads values of i, on all 8 threads
    first_kept = per_thread - window // n_threads
    got = timer.samples()
    want = [expected_row(t, i) for t in range(n_threads) for i in range(first_kept, per_thread)]
    np.testing.assert_array_equal(
        got[np.lexsort(got.T[::-1])], np.array(want)[np.lexsort(np.array(want).T[::-1])]
    )
    np.testing.assert_array_equal(timer.starts(), np.sort(timer.starts()))


def test_the_window_bounds_a_service_timer_and_keeps_the_last_requests() -> None:
    """Handles, one thread: the rows kept are the last `window` requests, whatever was served."""
    seen: list[int] = []
    timer = StageTimer(["a", "b"], window=100, on_request=lambda n, s, _: seen.append(s[0]))
    assert timer.window == 100
    for i in range(1_234):
        with timer.request() as r:
            r.mark("a")
            if i % 3:
                r.mark("b")
    assert timer.stored == 1_234 and len(timer) == 100
    np.testing.assert_array_equal(timer.starts(), seen[-100:])
    stats = timer.stats()
    assert stats["total"].count == 100
    assert stats["b"].count == sum(1 for i in range(1_234 - 100, 1_234) if i % 3)
    assert StageTimer(["a"]).window == 10_000  # the default
    for bad in (0, -1, 2.5, True, "100"):
        with pytest.raises(ConfigError, match="window"):
            StageTimer(["a"], window=bad)  # type: ignore[arg-type]


def test_add_rejects_decreasing_stamps() -> None:
    timer = StageTimer(["a", "b"])
    with pytest.raises(InputError, match="must not decrease"):
        timer.add([10, 9, 12])
    timer.add([10, 10, 12])
    np.testing.assert_array_equal(timer.samples(), [[0, 2]])
    assert timer.ran().all()  # a stage of 0 ns ran; it was not skipped


# ---------------------------------------------------------------- Background


def test_background_runs_sinks_on_its_own_thread_after_the_request() -> None:
    release = threading.Event()
    got: list[tuple[str, list[int], Any]] = []

    def slow_sink(names: list[str], stamps: Any, attributes: Any) -> None:
        assert release.wait(10)  # blocks until the request is long over
        got.append((threading.current_thread().name, list(stamps), attributes))

    failing_calls = itertools.count()

    def failing(*args: Any) -> None:
        next(failing_calls)
        raise RuntimeError("sink down")

    with Background(failing, slow_sink, max_queued=2) as bg:
        timer = StageTimer(["a"], on_request=bg)
        for i in range(3):
            with timer.request() as r:
                r.annotate({"i": i})
                r.mark("a")
        assert len(timer) == 3 and not got  # stored, not yet exported: nothing waited for it
        release.set()
        assert bg.flush(10)
        assert bg.errors == 3 - bg.dropped and next(failing_calls) == 3 - bg.dropped
    assert bg.dropped <= 1  # the queue holds 2: the third may be dropped, never blocks
    assert [a["i"] for _, _, a in got] == list(range(3 - bg.dropped))
    assert {name for name, _, _ in got} == {"ragbench-export"}
    assert got[0][1][0] == timer.starts()[0]
    bg(["a"], [0, 1], None)  # after close: dropped, not queued
    assert bg.dropped >= 1


def test_otel_hook_exports_each_handle_with_its_own_attributes() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="needs ragbench[otel]")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ragbench.otel import REQUEST_SPAN, TraceExporter

    spans = InMemorySpanExporter()
    exporter = TraceExporter(spans, batch=False, first_token_stage=None)
    timer = StageTimer(STAGES, otel=exporter)
    go = threading.Barrier(4)

    def worker(t: int) -> None:
        go.wait()
        for i in range(5):
            with timer.request() as r:
                r.annotate({"rid": f"{t}-{i}"})
                for name in STAGES[: 2 + (t + i) % 3]:  # some requests skip the last stages
                    time.sleep(SLEEPS[name] / 4)
                    timer.mark(name)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    exporter.close()
    finished = spans.get_finished_spans()
    roots = {s.attributes["rid"]: s for s in finished if s.name == REQUEST_SPAN}  # type: ignore[index]
    assert len(roots) == len(timer) == 20
    starts = timer.starts().tolist()
    for rid, root in roots.items():
        t, i = map(int, rid.split("-"))
        children = sorted(
            (
                s
                for s in finished
                if s.parent is not None and s.parent.span_id == root.context.span_id
            ),
            key=lambda s: s.start_time,
        )
        assert [c.name for c in children] == STAGES[: 2 + (t + i) % 3]
        row = timer.samples()[starts.index(root.start_time - exporter.offset_ns)]
        assert [c.end_time - c.start_time for c in children] == row[: len(children)].tolist()
        assert not row[len(children) :].any()  # the skipped stages: 0, and no span

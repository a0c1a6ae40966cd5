"""Asyncio workers: one event loop per worker process, async clients, offload, event-loop lag."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench.aioworkers import AsyncWorkers, plan
from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.generators.stub_server import serve
from ragbench.settings.sources import normalize
from ragbench.traffic import (
    COMPLETED,
    FAILED,
    REJECTED,
    TIMED_OUT,
    Traffic,
    arrivals,
    closed_loop,
    open_loop,
    summarize,
)

SMALL = {"name": "synthetic", "n": 2000, "dim": 32, "n_queries": 40, "seed": 3}
#: CPU time the planted reranker burns per request, in a loop that releases the GIL
BUSY_MS = 20.0
#: what the workers must register to know the planted reranker (this module is on their path)
REGISTER = (("rerankers", "test-busy", "test_aioworkers:BusyReranker"),)


def config(**tables: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "dataset": dict(SMALL),
        "run": {"queries": 40, "warmup": 3, "k": 10, "k_candidates": 50},
        "retrieve": {"backend": "flat"},
        "rerank": {"backend": "numpy"},
        "serialize": {"backend": "json"},
        "transport": {"backend": "inproc"},
    }
    for table, value in tables.items():
        cfg[table] = {**cfg.get(table, {}), **value}
    return normalize(cfg)


class BusyReranker:
    """numpy rerank after burning :data:`BUSY_MS` of CPU in hashlib (which releases the GIL)."""

    name = "test-busy"

    def __init__(self, metric: str = "ip", **params: Any) -> None:
        self.metric = metric
        self._inner = rb.rerankers.create("numpy", metric=metric)
        # large chunks: the GIL is released for each whole chunk and held only between
        # them, so a thread running this rarely keeps the loop's thread waiting for it
        self._block = b"x" * (4 << 20)

    def rerank(self, *args: Any) -> Any:
        end = time.thread_time_ns() + int(BUSY_MS * 1e6)
        while time.thread_time_ns() < end:
            hashlib.sha256(self._block).digest()
        return self._inner.rerank(*args)

    def rerank_batch(self, *args: Any) -> Any:
        return self._inner.rerank_batch(*args)

    def warmup(self, dim: int) -> int:
        return 0


@pytest.fixture
def busy_backend() -> Iterator[None]:
    rb.rerankers.register("test-busy", BusyReranker)
    try:
        yield
    finally:
        rb.rerankers.registry.unregister("test-busy")


def _resource_tracker(pid: str) -> bool:
    """multiprocessing's own resource tracker, which lives as long as this process by design."""
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def descendants() -> set[int]:
    """Every live process below this one (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z" and not _resource_tracker(entry):
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def check_every_request_ends_once(run: Traffic, scheduled: int | None = None) -> None:
    outcomes = run.outcome
    if scheduled is not None:
        assert outcomes.size == scheduled
    counted = sum(int((outcomes == o).sum()) for o in (COMPLETED, TIMED_OUT, REJECTED, FAILED))
    assert counted == outcomes.size  # none left pending, none counted twice


def check_stamps(run: Traffic, pipe: rb.Pipeline) -> None:
    done = [(j, r) for j, r in enumerate(run.records) if r is not None]
    assert done
    for j, rec in done:
        stamps = np.asarray(rec.stamps)
        assert len(stamps) == len(pipe.stages) + 1
        assert (np.diff(stamps) >= 0).all()
        assert run.dispatch_ns[j] <= stamps[0] and stamps[-1] <= run.finish_ns[j]
    wall, cpu = pipe.stage_samples([r for _, r in done])
    assert cpu is None and (wall >= 0).all()
    totals = [r.stamps[-1] - r.stamps[0] for _, r in done]
    np.testing.assert_array_equal(wall.sum(axis=1), totals)


# ---------------------------------------------------------------- async clients, directly


@pytest.mark.parametrize("backend", ["http", "grpc", "asgi"])
def test_async_send_gives_the_sync_reply(backend: str) -> None:
    transport = rb.transports.create(backend)
    codec = rb.codecs.create("json")
    hits = [rb.Hit(f"d{i}", 1.0 - i / 10, f"chunk {i}", {}, None) for i in range(3)]
    payload = codec.encode(rb.RetrievalResult("q1", "what is it?", hits))
    transport.start("json", {}, {})
    try:
        sync = transport.send(payload, "what is it?")

        async def many() -> list[Any]:
            await transport.aconnect()
            try:
                return list(
                    await asyncio.gather(*(transport.asend(payload, "q") for _ in range(5)))
                )
            finally:
                await transport.aclose()

        replies = asyncio.run(many())
    finally:
        transport.close()
    assert transport.async_requests == 5
    assert {r.prompt for r in replies} == {sync.prompt} and sync.prompt_tokens > 0
    assert all(r.wire_bytes_sent > len(payload) for r in replies)
    assert "httpx.AsyncClient" in transport.async_client() or backend == "grpc"


@pytest.mark.parametrize("client", ["minimal", "openai"])
def test_async_first_token_streams_from_the_stub(client: str) -> None:
    server, port = serve(prefill_ms_per_1k_tokens=0, base_ms=0, inter_token_ms=1, max_tokens=5)
    gen = rb.generators.create(
        "openai", base_url=f"http://127.0.0.1:{port}/v1", max_tokens=1, client=client
    )
    try:
        gen.start()

        async def many() -> list[Any]:
            await gen.aconnect()
            try:
                return list(
                    await asyncio.gather(*(gen.afirst_token("hi there", 2) for _ in range(4)))
                )
            finally:
                await gen.aclose()

        firsts = asyncio.run(many())
    finally:
        gen.close()
        server.shutdown()
        server.server_close()
    assert gen.async_requests == 4
    assert all(f.text and f.ttft_ns > 0 for f in firsts)
    assert ("AsyncOpenAI" if client == "openai" else "httpx.AsyncClient") in gen.async_client()


def test_the_plan_groups_cpu_stages_and_awaits_the_clients() -> None:
    class Stage:
        def __init__(self, awaitable: bool = False, instant: bool = False) -> None:
            self.awaitable, self.instant = awaitable, instant

    path = (Stage(), Stage(), Stage(True), Stage(), Stage(instant=True))
    assert [s.how for s in plan(path, "none")] == ["inline", "await", "inline"]
    assert [(s.start, s.stop, s.how) for s in plan(path, "process")] == [
        (0, 2, "process"),
        (2, 3, "await"),
        (3, 4, "thread"),  # after an awaited stage the request's state is on the loop
        (4, 5, "inline"),
    ]


# ---------------------------------------------------------------- workers


@pytest.mark.integration
def test_open_and_closed_loop_over_real_http_and_a_streaming_stub_llm() -> None:
    before = descendants()
    cfg = config(transport={"backend": "http"}, generate={"backend": "stub"})
    with rb.Pipeline(cfg) as pipe:
        pipe.setup()
        pool = AsyncWorkers(pipe.config, 2, concurrency=4, offload="none", warmup=4)
        try:
            assert len(descendants() - before) >= 6  # 2 workers, each with 2 servers
            opened = open_loop(pool, arrivals(60.0, 40, kind="uniform"), timeout_s=10)
            sent = pool.async_requests
            closed = closed_loop(pool, 3, 0.5, timeout_s=10)
            info = pool.describe()
        finally:
            pool.close()
        check_every_request_ends_once(opened, 40)
        check_every_request_ends_once(closed)
        assert int((opened.outcome == COMPLETED).sum()) == 40
        check_stamps(opened, pipe)
        check_stamps(closed, pipe)
        fields = summarize(opened, pipe, timeout_s=10)
        shut = summarize(closed, pipe, timeout_s=10)
    # the requests really went through the async clients: counted by the clients themselves
    assert sent["transport"] >= 40 and sent["generator"] >= 40
    assert info["stage_runs"]["transport"] == info["stage_runs"]["generate"] == "await"
    assert info["async_clients"]["transport"].startswith("httpx.AsyncClient")
    assert info["async_clients"]["generate"].startswith("httpx.AsyncClient")
    # the stub models at least base_ms (5 ms) before the first token
    assert fields["ttft_p50_us"] >= 5000 and fields["ttft_p99_us"] >= fields["ttft_p50_us"]
    assert fields["loop_lag_samples"] > 100 and fields["loop_lag_p99_us"] >= 0
    # closed loop: 3 clients on each of the 2 loops, each waiting for its last request
    assert shut["completed"] > 6 and closed.outcome.size == shut["scheduled"]
    assert descendants() <= before  # no worker, far side or stub server left


@pytest.mark.integration
def test_a_cpu_stage_inline_delays_the_loop_and_a_thread_offload_does_not(
    busy_backend: None,
) -> None:
    before = descendants()
    cfg = config(rerank={"backend": "test-busy"}, generate={"backend": "stub"})
    lag_p99, rerank_p50 = {}, {}
    with rb.Pipeline(cfg) as pipe:
        pipe.setup()
        for offload in ("none", "thread"):
            pool = AsyncWorkers(
                pipe.config, 1, concurrency=4, offload=offload, warmup=2, register=REGISTER
            )
            try:
                run = open_loop(pool, arrivals(20.0, 24, kind="uniform"), timeout_s=10)
            finally:
                pool.close()
            check_every_request_ends_once(run, 24)
            check_stamps(run, pipe)
            fields = summarize(run, pipe, timeout_s=10)
            assert fields["completed"] == 24
            # every request burned BUSY_MS in its rerank stage, wherever it ran
            assert fields["stage_p50_us"]["rerank"] >= BUSY_MS * 1e3
            lag_p99[offload] = fields["loop_lag_p99_us"]
            rerank_p50[offload] = fields["stage_p50_us"]["rerank"]
    # inline, each rerank holds the loop for its whole wall time (BUSY_MS of CPU, longer on a
    # busy machine): a heartbeat due then wakes about that late
    assert lag_p99["none"] >= 0.75 * max(BUSY_MS * 1e3, rerank_p50["none"])
    # on a thread that releases the GIL the loop keeps beating; what lag is left is the
    # machine's own scheduling
    assert lag_p99["thread"] <= 0.5 * lag_p99["none"]
    assert descendants() <= before


@pytest.mark.integration
def test_process_offload_runs_the_cpu_stages_in_pool_processes(busy_backend: None) -> None:
    before = descendants()
    cfg = config(rerank={"backend": "test-busy"})
    with rb.Pipeline(cfg) as pipe:
        pipe.setup()
        pool = AsyncWorkers(
            pipe.config, 1, concurrency=3, offload="process", offload_workers=2, register=REGISTER
        )
        try:
            # the worker and its two pool processes (each with its own pipeline)
            assert len(descendants() - before) >= 3
            run = open_loop(pool, arrivals(30.0, 15, kind="uniform"), timeout_s=10)
            info = pool.describe()
        finally:
            pool.close()
        check_every_request_ends_once(run, 15)
        check_stamps(run, pipe)
        fields = summarize(run, pipe, timeout_s=10)
    assert fields["completed"] == 15 and fields["recall_at_k"] > 0.9
    assert info["stage_runs"]["rerank"] == info["stage_runs"]["transport"] == "process"
    assert info["stage_runs"]["generate"] == "inline"  # generate = none: nothing to move
    assert fields["stage_p50_us"]["rerank"] >= BUSY_MS * 1e3
    assert fields["loop_lag_samples"] > 0
    assert descendants() <= before


def test_asyncio_workers_refuse_cpu_time_and_bad_offloads() -> None:
    with pytest.raises(ConfigError, match="CPU time"):
        AsyncWorkers(config(run={"cpu_time": True}), 1)
    with pytest.raises(ConfigError, match="none, thread, process"):
        AsyncWorkers(config(), 1, offload="fibers")


# ---------------------------------------------------------------- the command line

BASE = [
    "load",
    "--dataset",
    "synthetic",
    "--set",
    "dataset.n=2000",
    "--set",
    "dataset.dim=16",
    "--set",
    'retrieve.backend="flat"',
    "--set",
    'serialize.backend="json"',
    "--duration",
    "0.4",
    "--warmup",
    "2",
    "--workers",
    "1",
]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--qps", "10", "--offload", "thread"], "--offload needs --worker-kind asyncio"),
        (
            ["--qps", "10", "--worker-kind", "asyncio", "--offload", "fibers"],
            "give one or more of none, thread, process",
        ),
        (["--qps", "10", "--worker-kind", "asyncio", "--concurrency", "2,4"], "one whole number"),
        (["--qps", "10", "--worker-kind", "thread", "--concurrency", "2"], "either --qps"),
        (["--qps", "10", "--worker-kind", "asyncio", "--cpu-time"], "--cpu-time"),
    ],
)
def test_bad_asyncio_options_are_one_line_and_exit_2(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = descendants()
    code = main(BASE + extra)
    err = capsys.readouterr().err
    assert code == 2 and says in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert descendants() <= before


@pytest.mark.integration
def test_load_cli_with_asyncio_workers_records_offload_and_loop_lag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = descendants()
    out = tmp_path / "load.jsonl"
    code = main(
        BASE
        + ["--worker-kind", "asyncio", "--offload", "thread", "--concurrency", "3"]
        + ["--qps", "20,40", "--set", 'generate.backend="stub"', "--out", str(out)]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["offered_qps"] for r in recs] == [20.0, 40.0]
    for r in recs:
        assert r["worker_kind"] == "asyncio" and r["offload"] == "thread"
        assert r["tasks_per_worker"] == 3
        assert r["completed"] + r["timed_out"] + r["rejected"] + r["failed"] == r["scheduled"]
        assert r["loop_lag_p99_us"] >= r["loop_lag_p50_us"] >= 0
        assert r["ttft_p50_us"] >= 5000
    assert "loop lag p99 ms" in captured.out and "TTFT p99 ms" in captured.out
    assert descendants() <= before

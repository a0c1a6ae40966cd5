"""Requests under load: concurrency, accounting, closed loop, CPU time, worker processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench.errors import ConfigError
from ragbench.generators import FirstToken
from ragbench.results.records import knees
from ragbench.settings.sources import normalize
from ragbench.traffic import (
    COMPLETED,
    REJECTED,
    TIMED_OUT,
    LoadOptions,
    arrivals,
    closed_loop,
    load_points,
    open_loop,
    summarize,
)
from ragbench.workers import ProcessWorkers, ThreadWorkers

SMALL = {"name": "synthetic", "n": 1500, "dim": 32, "n_queries": 40, "seed": 3}
NAP_MS = 4.0
SPIN_MS = 4.0


def config(**tables: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "dataset": dict(SMALL),
        "run": {"queries": 40, "warmup": 3, "k": 10, "k_candidates": 50},
        "retrieve": {"backend": "hnsw"},
        "rerank": {"backend": "numba"},
        "serialize": {"backend": "json"},
        "transport": {"backend": "inproc"},
    }
    for table, value in tables.items():
        cfg[table] = {**cfg.get(table, {}), **value}
    return cfg


class NapGenerator:
    """A first token after a known sleep: a stage that waits and uses no CPU."""

    name = "test-nap"
    simulated = True

    def __init__(self, **params: Any) -> None:
        pass

    def start(self) -> int:
        return 0

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        time.sleep(NAP_MS / 1000)
        return FirstToken("x", 0)

    def close(self) -> None:
        pass


class SpinReranker:
    """numpy rerank after spinning the CPU for a known time: a stage that is all CPU."""

    name = "test-spin"

    def __init__(self, metric: str = "ip", **params: Any) -> None:
        self.metric = metric
        self._inner = rb.rerankers.create("numpy", metric=metric)

    def rerank(self, *args: Any) -> Any:
        end = time.thread_time_ns() + int(SPIN_MS * 1e6)
        while time.thread_time_ns() < end:
            pass
        return self._inner.rerank(*args)

    def rerank_batch(self, *args: Any) -> Any:
        return self._inner.rerank_batch(*args)

    def warmup(self, dim: int) -> int:
        return 0


@pytest.fixture
def test_backends() -> Iterator[None]:
    rb.generators.register("test-nap", NapGenerator)
    rb.rerankers.register("test-spin", SpinReranker)
    try:
        yield
    finally:
        rb.generators.registry.unregister("test-nap")
        rb.rerankers.registry.unregister("test-spin")


@pytest.fixture
def pipe() -> Iterator[rb.Pipeline]:
    with rb.Pipeline.from_config(config()) as p:
        p.setup()
        p.warm(5)
        yield p


def test_threads_sharing_a_pipeline_get_the_same_hits_as_one_at_a_time(pipe: rb.Pipeline) -> None:
    alone = {i: pipe.serve(i).hit_ids.tolist() for i in range(40)}

    def serve_all(offset: int) -> list[tuple[int, Any]]:
        rb.threads.pin_thread(1)
        return [(i, pipe.serve(i)) for i in [(offset + j) % 40 for j in range(40)]]

    with ThreadPoolExecutor(4) as ex:
        runs = list(ex.map(serve_all, [0, 10, 20, 30]))
    for served in runs:
        assert len(served) == 40
        for i, rec in served:
            assert rec.hit_ids.tolist() == alone[i]
            assert len(rec.stamps) == len(pipe._loop_names) + 1
            assert rec.payload_bytes > 0 and rec.query_row == i
    # the records make a full report: every stage column, recall of each request
    wall, _ = pipe.stage_samples([rec for served in runs for _, rec in served])
    assert wall.shape == (160, len(pipe.stage_names))
    assert pipe.recall([rec for _, rec in runs[0]]).mean() > 0.9


def test_overload_ends_every_request_once_and_the_knee_is_below_it(test_backends: None) -> None:
    with rb.Pipeline.from_config(config(generate={"backend": "test-nap"})) as p:
        p.setup()
        pool = ThreadWorkers(p, 2)
        try:
            # capacity is about 2 / 4 ms = 500 requests per second
            # a 0.3 s timeout: the low level's 4 ms requests finish in time on a loaded machine too
            options = LoadOptions(duration_s=0.4, timeout_s=0.3, queue_size=20, slo_ms=50.0)
            recs = load_points([p], [pool], [50.0, 5000.0], options=options)
        finally:
            pool.close()
    low, high = recs
    for r in recs:
        assert r["completed"] + r["timed_out"] + r["rejected"] + r["failed"] == r["scheduled"]
    assert low["completed"] == low["scheduled"] and low["rejected"] == 0
    assert high["scheduled"] == 2000
    # overload: the queue holds 20, so nearly everything is turned away or times out
    # (at most ~500 per second served for the 0.4 s and the 0.3 s of timeout after it)
    assert high["rejected"] > 1000 and high["completed"] < 500
    assert high["response_p99_us"] <= 300_000 + 20_000  # nothing completed long after its timeout
    assert high["response_all_p99_us"] == pytest.approx(300_000)  # failures counted at the timeout
    assert knees(recs, 50.0) == {p.label: 50.0}


def test_overload_memory_is_bounded_by_the_queue_not_the_offered_rate(pipe: rb.Pipeline) -> None:
    import tracemalloc

    pool = ThreadWorkers(pipe, 1)
    try:
        tracemalloc.start()
        try:
            run = open_loop(pool, arrivals(50_000.0, 20_000), timeout_s=0.05, queue_size=32)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        pool.close()
    kept = sum(r is not None for r in run.records)
    assert kept == int((run.outcome == COMPLETED).sum()) < 5_000  # only what was served
    assert int((run.outcome == REJECTED).sum()) > 10_000  # the rest was rejected at the door
    assert peak < 40 * 2**20  # 20 000 requests offered in 0.4 s, a few MB held


def test_a_low_rate_is_achieved(pipe: rb.Pipeline) -> None:
    pool = ThreadWorkers(pipe, 2)
    try:
        run = open_loop(pool, arrivals(200.0, 200, kind="uniform"), timeout_s=5)
    finally:
        pool.close()
    fields = summarize(run, pipe, timeout_s=5)
    assert fields["completed"] == 200
    assert fields["achieved_qps"] == pytest.approx(200.0, rel=0.05)
    # each request started no earlier than it arrived, in arrival order
    assert (run.dispatch_ns >= run.scheduled_ns).all()
    assert (np.diff(run.scheduled_ns) > 0).all()


def test_closed_loop_throughput_is_concurrency_over_service_time(test_backends: None) -> None:
    with rb.Pipeline.from_config(config(generate={"backend": "test-nap"})) as p:
        p.setup()
        pool = ThreadWorkers(p, 4)
        try:
            for clients in (1, 3):
                run = closed_loop(pool, clients, 0.6, timeout_s=5)
                ok = run.outcome == COMPLETED
                service_s = (run.finish_ns[ok] - run.dispatch_ns[ok]).mean() / 1e9
                window_s = (run.finish_ns[ok].max() - run.start_ns) / 1e9
                throughput = ok.sum() / window_s
                assert service_s >= NAP_MS / 1000
                assert throughput == pytest.approx(clients / service_s, rel=0.25)
                assert ok.all()  # more workers than clients: nothing queued long or timed out
        finally:
            pool.close()


def test_cpu_time_tells_a_waiting_stage_from_a_busy_one(test_backends: None) -> None:
    cfg = config(
        run={"cpu_time": True},
        rerank={"backend": "test-spin"},
        generate={"backend": "test-nap"},
    )
    with rb.Pipeline.from_config(cfg) as p:
        report = p.run(queries=10, warmup=1)
    cpu = report.cpu()
    assert cpu is not None
    # the spinning stage used its 4 ms of CPU per request; the sleeping one almost none
    # (cpu % of the spinner is ~100 % on a quiet machine, lower when other work takes the core)
    assert cpu["rerank"]["cpu_mean_us"] >= SPIN_MS * 1e3
    assert cpu["generate"]["cpu_mean_us"] < 0.2 * NAP_MS * 1e3
    assert cpu["generate"]["cpu_pct"] < 20
    assert cpu["rerank"]["cpu_pct"] > 5 * cpu["generate"]["cpu_pct"]
    assert cpu["rerank"]["cpu_share"] > 0.5
    # the table says so, and the record carries the CPU samples
    assert "cpu %" in report.table()
    rec = report.to_record()
    assert set(rec["cpu_samples_ns"]) == set(report.stage_names)
    assert rb.Report.from_record(rec).cpu_samples_ns is not None


def test_cpu_time_is_off_unless_asked(pipe: rb.Pipeline) -> None:
    assert pipe.serve(0).cpu_stamps is None
    assert pipe.run(queries=3, warmup=0).cpu() is None
    with pytest.raises(ConfigError, match="cpu_time"):
        rb.Pipeline.from_config(config(run={"cpu_time": "yes"}))


@pytest.mark.integration
def test_process_workers_load_the_saved_index_and_serve(tmp_path: Path) -> None:
    index_file = tmp_path / "hnsw.index"
    cfg = config(retrieve={"backend": "hnsw", "index_file": str(index_file)})
    with rb.Pipeline.from_config(cfg) as p:
        p.setup()
        assert index_file.exists() and "index_save" in p.setup_ns
        built = index_file.stat().st_mtime_ns
        pool = ProcessWorkers(p.config, 2, warmup=3)
        try:
            run = open_loop(pool, arrivals(100.0, 40, kind="uniform"), timeout_s=5)
            fields = summarize(run, p, timeout_s=5)
        finally:
            pool.close()
    assert index_file.stat().st_mtime_ns == built  # the workers loaded it, none rebuilt it
    assert fields["completed"] == 40
    assert fields["recall_at_k"] > 0.9
    # recall as a distribution: one value per completed request, each from its own hits
    per_query = fields["recall_per_query"]
    assert len(per_query) == 40 and all(0.0 <= v <= 1.0 for v in per_query)
    assert fields["recall_p10"] == pytest.approx(float(np.percentile(per_query, 10)))
    assert min(per_query) <= fields["recall_p10"] <= fields["recall_at_k"]
    # a set-up pipeline over the file loads it rather than building
    with rb.Pipeline.from_config(cfg) as again:
        again.setup()
        assert "index_load" in again.setup_ns and "index_build" not in again.setup_ns


@pytest.mark.integration
def test_a_worker_process_that_cannot_set_up_is_a_clear_error() -> None:
    bad = config(dataset={"name": "no-such-dataset"})
    with pytest.raises(ConfigError, match="no-such-dataset"):
        ProcessWorkers(normalize(bad), 1, startup_timeout=120)


def test_an_index_file_of_another_config_is_refused(tmp_path: Path) -> None:
    index_file = tmp_path / "x.index"
    with rb.Pipeline.from_config(
        config(retrieve={"backend": "flat", "index_file": str(index_file)})
    ) as p:
        p.setup()
    other = config(retrieve={"backend": "hnsw", "index_file": str(index_file)})
    with (
        rb.Pipeline.from_config(other) as p,
        pytest.raises(rb.errors.IndexFileError, match="index_file"),
    ):
        p.setup()


# ---------------------------------------------------------------- admission on the board


def _queue_model(due: list[int], service: int, timeout: int, size: int) -> dict[int, int]:
    """One worker and a bounded FIFO queue, simulated one arrival at a time (the reference)."""
    from collections import deque

    out: dict[int, int] = {}
    waiting: deque[int] = deque()
    free, i = 0, 0
    while i < len(due) or waiting:
        while i < len(due) and due[i] <= free:  # arrivals while the worker is busy
            if sum(due[q] >= due[i] - timeout for q in waiting) >= size:
                out[i] = REJECTED
            else:
                waiting.append(i)
            i += 1
        while waiting and due[waiting[0]] < free - timeout:
            out[waiting.popleft()] = TIMED_OUT
        if waiting:
            out[waiting.popleft()] = COMPLETED
            free += service
        elif i < len(due):
            out[i] = COMPLETED
            free = due[i] + service
            i += 1
    return out


def _board_run(
    monkeypatch: pytest.MonkeyPatch, due: np.ndarray, service: int, run: Any, legacy: bool
) -> dict[int, int]:
    """The same on a Board with a fake clock: take_next, or take() then admit() per request."""
    import threading

    import ragbench.workers.board as w

    clock = [0]
    monkeypatch.setattr(w, "perf_counter_ns", lambda: clock[0])
    board = w.Board(bytearray(w.Board.size(len(due))), len(due), threading.Lock())
    board.reset(due)
    while True:
        j = board.take() if legacy else board.take_next(run)
        if j < 0:
            break
        if legacy and due[j] <= clock[0] and w.admit(board, j, run, clock[0]) != w.PENDING:
            continue
        board.outcome[j] = COMPLETED
        clock[0] = max(clock[0], int(due[j])) + service
    return dict(enumerate(board.outcome.tolist()))


def test_the_board_decides_arrivals_as_a_bounded_queue_does(monkeypatch) -> None:
    from ragbench.workers.board import OpenRun

    rng = np.random.default_rng(0)
    for _ in range(120):
        n = int(rng.integers(1, 300))
        due = np.cumsum(rng.exponential(int(rng.integers(1, 100)), n)).astype(np.int64) + 1
        service, timeout, size = (int(rng.integers(1, x)) for x in (2000, 5000, 30))
        size -= 1  # 0 too: every late arrival rejected
        want = _queue_model(due.tolist(), service, timeout, size)
        run = OpenRun(timeout, size, 0)
        assert _board_run(monkeypatch, due, service, run, legacy=False) == want
        # take() + admit(), as a worker taking one request at a time does, agree
        assert _board_run(monkeypatch, due, service, run, legacy=True) == want


def test_overload_costs_the_workers_a_small_time_per_arrival(pipe: rb.Pipeline) -> None:
    pool = ThreadWorkers(pipe, 1)
    try:
        run = open_loop(pool, arrivals(100_000.0, 50_000), timeout_s=0.05, queue_size=32)
    finally:
        pool.close()
    counts = np.bincount(run.outcome, minlength=5)
    assert counts.sum() == 50_000 and counts[0] == 0  # nothing left pending
    assert counts[REJECTED] > 30_000
    # taking and admitting cost a fraction of serving: per arrival, well under a request
    served = run.finish_ns[run.outcome == COMPLETED] - run.dispatch_ns[run.outcome == COMPLETED]
    assert run.admission_ns / 50_000 < 0.2 * np.median(served)


@pytest.mark.integration
def test_closed_loop_runs_inside_process_workers(tmp_path: Path) -> None:
    cfg = config(retrieve={"backend": "flat", "index_file": str(tmp_path / "flat.index")})
    with rb.Pipeline.from_config(cfg) as p:
        p.setup()
        pool = ProcessWorkers(p.config, 2, warmup=2)
        try:
            run = closed_loop(pool, 3, 0.4, timeout_s=5)
        finally:
            pool.close()
        fields = summarize(run, p, timeout_s=5, workers=2)
    ok = run.outcome == COMPLETED
    assert ok.all() and ok.sum() > 20
    assert all(r is not None for r in run.records)
    assert (run.dispatch_ns >= run.scheduled_ns).all() and (run.finish_ns > run.dispatch_ns).all()
    # 3 clients on 2 workers: at most 3 requests in flight at any time (a client sends its
    # next request at the very ns its last one finished: finishes sort first)
    events = np.concatenate([-np.ones(ok.sum()), np.ones(ok.sum())])
    order = np.argsort(np.concatenate([run.finish_ns, run.scheduled_ns]), kind="stable")
    assert np.cumsum(events[order]).max() <= 3
    assert fields["recall_at_k"] > 0.9 and fields["dead_workers"] == []


def test_a_pool_without_run_closed_is_driven_from_the_caller(pipe: rb.Pipeline) -> None:
    class Handed:
        """Only dispatch / poll, as a pool of another kind may offer."""

        def __init__(self, inner: ThreadWorkers) -> None:
            self.size, self.dispatch, self.poll = inner.size, inner.dispatch, inner.poll

    inner = ThreadWorkers(pipe, 2)
    try:
        run = closed_loop(Handed(inner), 2, 0.3, timeout_s=5)
    finally:
        inner.close()
    assert (run.outcome == COMPLETED).all() and run.outcome.size > 10

"""Asyncio workers: each worker process serves many requests at once on ONE event loop.

``ragbench load --worker-kind asyncio`` serves requests the way an async
Python service does: :class:`AsyncWorkers` starts ``n`` worker processes
(spawned, like :class:`ragbench.workers.ProcessWorkers`' workers, each with
its own pipeline built from the config), and each runs one event loop with
up to ``concurrency`` requests in flight:

- open loop: ``concurrency`` tasks per loop, each taking the next request
  from the shared :class:`ragbench.workers.Board`, waiting for its arrival
  on the loop, admitting it (:func:`ragbench.workers.admit`), serving it;
- closed loop: ``concurrency`` clients per loop, each sending its next
  request as soon as its last one ended.

The transport and the LLM call are **awaited** with async clients when the
backend has one (``http``/``asgi``: :class:`httpx.AsyncClient`, ``grpc``:
``grpc.aio``, ``stub``/``openai``: an async SSE client or
``openai.AsyncOpenAI``; see :mod:`ragbench.transports.aio` and
:mod:`ragbench.generators.aio`). Every other stage is CPU work -- embed,
cache, retrieve, rerank, serialize, and the far side's decode and prompt
with ``inproc`` -- and runs as ``offload`` says (:data:`OFFLOADS`):

``none``
    inline on the loop, as naive async code does: while it runs, no other
    request on that loop moves (its awaited calls finish but are not resumed).
``thread``
    in a :class:`~concurrent.futures.ThreadPoolExecutor` of ``concurrency``
    threads (each pinning its library threads), consecutive CPU stages in one
    hop. Stages that release the GIL (numba, faiss, hnswlib, torch) then run
    beside the loop; pure-Python ones still take the GIL from it.
``process``
    the CPU stages before the first awaited one run in a
    :class:`~concurrent.futures.ProcessPoolExecutor` whose processes each set
    up their own pipeline from the same config: the loop sends the request's
    index, the pool process runs those stages on its own context and sends
    back their stamps and what the later stages need (the payload bytes, the
    hit ids; with ``inproc`` also the prompt). Later CPU stages (rare: a CPU
    generator after an awaited transport) use a thread. The cache, when on,
    is then each pool process's own.

Stamps stay per request and per stage (:class:`ragbench.pipeline.RequestRecord`):
a stage's time runs from the loop handing it over to the loop resuming the
request after it, so it includes the hop to a pool and the wait for a busy
loop -- an awaited LLM call whose first token arrived while another request's
rerank held the loop counts that wait in its ``generate`` time. (``perf_counter_ns``
is the system-wide monotonic clock, so a pool process's stamps line up.)

**Event-loop lag**: a heartbeat task per loop sleeps :data:`HEARTBEAT_S` and
records how late it woke, for the whole of every run; :attr:`AsyncWorkers.loop_lag_ns`
holds the last run's samples (every worker's), which the load record
summarises as ``loop_lag_p50_us``/``loop_lag_p99_us``.

The worker processes are not daemonic (a daemonic process may not start the
process pool); each stops when :meth:`AsyncWorkers.close` says so or its
pipe to the parent breaks, and pool processes stop when their worker does.
Per-stage CPU time (``[run] cpu_time``) is not measured here: one thread
interleaves many requests, so its CPU clock belongs to none of them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from array import array
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import shared_memory
from time import perf_counter_ns
from typing import Any, NamedTuple

import numpy as np

from . import threads
from .config import load_config
from .errors import ConfigError, RagbenchError, TransportError
from .pipeline import Pipeline, RequestContext, RequestRecord
from .pipeline.capabilities import (
    AwaitableStage,
    ClosesAsync,
    ConnectsAsync,
    CountsAsyncRequests,
    InstantStage,
    NamesAsyncClient,
)
from .traffic import Traffic
from .validate import positive_int
from .workers import (
    COMPLETED,
    FAILED,
    PENDING,
    TIMED_OUT,
    WORKER_ENV,
    Board,
    OpenRun,
    admit,
    pack_record,
    unpack_record,
)

__all__ = ["HEARTBEAT_S", "OFFLOADS", "AsyncWorkers", "aio_worker", "check_offload"]

#: Where CPU stages run on an asyncio worker (see the module docstring).
OFFLOADS = ("none", "thread", "process")

#: The heartbeat's sleep; how late it wakes is the loop's lag.
HEARTBEAT_S = 0.001
_HEARTBEAT_NS = int(HEARTBEAT_S * 1e9)

#: A task waiting for an arrival sleeps until this long before it, then yields
#: to the loop until it is due: the loop's selector rounds a timeout up to the
#: next millisecond, so sleeping alone wakes up to 1 ms late.
SPIN_NS = 1_200_000


def check_offload(offload: object) -> str:
    """``offload`` checked to be one of :data:`OFFLOADS` (:class:`ConfigError` naming them)."""
    if offload not in OFFLOADS:
        raise ConfigError(f"offload must be one of {', '.join(OFFLOADS)}, got {offload!r}")
    return str(offload)


class Settings(NamedTuple):
    """What every asyncio worker process is told at its start."""

    concurrency: int
    offload: str
    offload_workers: int
    warmup: int
    #: backends registered in code in the parent, re-registered in each worker:
    #: ``(registry, name, "module:attr")``, e.g. ``("rerankers", "busy", "mod:Busy")``
    register: tuple[tuple[str, str, str], ...]


def _register(entries: tuple[tuple[str, str, str], ...]) -> None:
    for kind, name, target in entries:
        importlib.import_module(f"ragbench.{kind}").register(name, target)


# ---------------------------------------------------------------- the process pool's side

_POOL: dict[str, Any] = {}


def _watch_parent(parent: int) -> None:
    """Exit when the process that started this one is gone (a pool process never outlives it)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="ragbench-parent-watch").start()


def _pool_init(
    config: Mapping[str, Any], register: tuple[tuple[str, str, str], ...], barrier: Any
) -> None:
    """Initializer of an offload pool process: its own set-up pipeline, warm."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(os.getppid())
    _register(register)
    pipe = Pipeline(config)
    pipe.setup()
    pipe.warm(3)
    threads.pin_thread(pipe.request_threads)
    _POOL["pipe"], _POOL["barrier"] = pipe, barrier


def _pool_ready(timeout: float) -> int:
    """Wait until every pool process is set up (each runs one of these at once)."""
    _POOL["barrier"].wait(timeout)
    return os.getpid()


_SHIPPED = ("payload", "hit_ids", "far", "prompt", "prompt_tokens", "first_token")


def _pool_cpu_part(i: int, upto: int) -> tuple[list[int], dict[str, Any]]:
    """Stages ``[0, upto)`` of request ``i`` on this pool process's pipeline: stamps, context fields."""
    pipe: Pipeline = _POOL["pipe"]
    ctx = pipe.context(i)
    stages = pipe.stages
    stamps = [0] * (upto + 1)
    stamps[0] = perf_counter_ns()
    for j in range(upto):
        stages[j](ctx)
        stamps[j + 1] = perf_counter_ns()
    fields = {f: getattr(ctx, f) for f in _SHIPPED if hasattr(ctx, f)}
    fields["model_prompt_tokens"] = ctx.model_prompt_tokens
    if ctx.decode_rest is not None:  # a CPU generator ran here: its next tokens too
        fields["inter_token_ns"] = ctx.decode_rest()
    return stamps, fields


# ---------------------------------------------------------------- one request on the loop


class Segment(NamedTuple):
    """Stages ``[start, stop)`` of the request path and how the loop runs them."""

    start: int
    stop: int
    how: str  # "await" (one awaited stage), "inline", "thread" or "process"


def plan(stages: tuple[Any, ...], offload: str) -> list[Segment]:
    """The request path cut into segments: awaited stages alone, runs of CPU stages together."""
    out: list[Segment] = []
    for j, stage in enumerate(stages):
        if isinstance(stage, AwaitableStage) and stage.awaitable:
            out.append(Segment(j, j + 1, "await"))
            continue
        instant = isinstance(stage, InstantStage) and stage.instant
        how = "inline" if offload == "none" or instant else offload
        if how == "process" and (j > 0 and out[-1].how != "process"):
            how = "thread"  # after an awaited stage the request's state lives here
        if out and out[-1].how == how and how != "await":
            out[-1] = Segment(out[-1].start, j + 1, how)
        else:
            out.append(Segment(j, j + 1, how))
    return out


def _run_cpu(stages: tuple[Any, ...], seg: Segment, ctx: RequestContext, stamps: list[int]) -> None:
    for j in range(seg.start, seg.stop):
        stages[j](ctx)
        stamps[j + 1] = perf_counter_ns()


class LoopServer:
    """Serves requests of one set-up pipeline on the running event loop (one per worker process)."""

    def __init__(self, pipe: Pipeline, settings: Settings, config: Mapping[str, Any]) -> None:
        self.pipe = pipe
        self.stages: tuple[Any, ...] = pipe.stages
        self.segments = plan(self.stages, settings.offload)
        self.settings = settings
        self.threads: ThreadPoolExecutor | None = None
        self.procs: ProcessPoolExecutor | None = None
        if any(s.how == "thread" for s in self.segments):
            self.threads = ThreadPoolExecutor(
                max_workers=settings.concurrency,
                initializer=threads.pin_thread,
                initargs=(pipe.request_threads,),
                thread_name_prefix="ragbench-offload",
            )
        if any(s.how == "process" for s in self.segments):
            ctx = multiprocessing.get_context("spawn")
            n = settings.offload_workers
            self.procs = ProcessPoolExecutor(
                max_workers=n,
                mp_context=ctx,
                initializer=_pool_init,
                initargs=(dict(config), settings.register, ctx.Barrier(n)),
            )

    async def start(self) -> None:
        """Start the pools, open the async clients' connections, run the warm-up requests."""
        loop = asyncio.get_running_loop()
        if self.procs is not None:
            n = self.settings.offload_workers
            ready = [loop.run_in_executor(self.procs, _pool_ready, 600.0) for _ in range(n)]
            await asyncio.gather(*ready)
        for part in (self.pipe.transport, self.pipe.components.generator):
            if isinstance(part, ConnectsAsync):
                await part.aconnect()
        per_round = self.settings.concurrency
        for r in range(0, self.settings.warmup, per_round):
            n = min(per_round, self.settings.warmup - r)
            await asyncio.gather(*(self.serve(r + k) for k in range(n)))

    async def serve(self, i: int) -> RequestRecord:
        """Request ``i`` through every stage, stamped per stage (see the module docstring)."""
        pipe, stages = self.pipe, self.stages
        ctx = pipe.context(i)
        stamps = [0] * (len(stages) + 1)
        stamps[0] = perf_counter_ns()
        loop = asyncio.get_running_loop()
        for seg in self.segments:
            if seg.how == "await":
                await stages[seg.start].acall(ctx)
            elif seg.how == "inline":
                _run_cpu(stages, seg, ctx, stamps)
            elif seg.how == "thread":
                await loop.run_in_executor(self.threads, _run_cpu, stages, seg, ctx, stamps)
            else:
                inner, fields = await loop.run_in_executor(self.procs, _pool_cpu_part, i, seg.stop)
                stamps[seg.start + 1 : seg.stop] = inner[seg.start + 1 : seg.stop]
                _adopt(ctx, fields)
            # the segment ends when the loop resumes this request: its wait for the loop counts
            stamps[seg.stop] = perf_counter_ns()
        return pipe.record_of(ctx, stamps)

    async def serve_timed(self, i: int) -> tuple[int, int, RequestRecord | None, str | None]:
        """(start ns, finish ns, record or None, error or None) of request ``i``."""
        t0 = perf_counter_ns()
        try:
            rec, err = await self.serve(i), None
        except RagbenchError as exc:  # the request failed; the loop goes on
            rec, err = None, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # an async client's own failure must not stop the other tasks
            rec, err = None, f"{type(exc).__name__}: {exc}"
        t1 = perf_counter_ns()
        if rec is not None and rec.inter_token_ns:
            t1 = rec.stamps[-1]
        return t0, t1, rec, err

    def async_requests(self) -> dict[str, int]:
        """Requests the transport's and the generator's async clients carried so far."""
        parts = {"transport": self.pipe.transport, "generator": self.pipe.components.generator}
        return {
            k: int(p.async_requests) if isinstance(p, CountsAsyncRequests) else 0
            for k, p in parts.items()
        }

    def describe(self) -> dict[str, Any]:
        """How each stage runs here, and which async clients the awaited ones use."""
        how = {}
        for seg in self.segments:
            for j in range(seg.start, seg.stop):
                how[self.stages[j].name] = seg.how
        clients = {}
        for name, part in (
            ("transport", self.pipe.transport),
            ("generate", self.pipe.components.generator),
        ):
            if how.get(name) == "await" and isinstance(part, NamesAsyncClient):
                clients[name] = part.async_client()
        return {"stage_runs": how, "async_clients": clients}

    async def close(self) -> None:
        for part in (self.pipe.transport, self.pipe.components.generator):
            if isinstance(part, ClosesAsync):
                with contextlib.suppress(Exception):
                    await part.aclose()
        if self.threads is not None:
            self.threads.shutdown(wait=True)
        if self.procs is not None:
            self.procs.shutdown(wait=True, cancel_futures=True)


def _adopt(ctx: RequestContext, fields: dict[str, Any]) -> None:
    """What a pool process's stages wrote on their context, written on this one."""
    rest = fields.pop("inter_token_ns", None)
    for name, value in fields.items():
        setattr(ctx, name, value)
    if rest is not None:
        ctx.decode_rest = lambda: rest


# ---------------------------------------------------------------- runs on the loop


class Heartbeat:
    """Sleeps :data:`HEARTBEAT_S` over and over on the loop; keeps how late each wake-up was (ns)."""

    def __init__(self) -> None:
        self.lag = array("q")
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        lag, clock = self.lag, perf_counter_ns
        while True:
            t = clock()
            await asyncio.sleep(HEARTBEAT_S)
            lag.append(clock() - t - _HEARTBEAT_NS)

    def start(self) -> None:
        self.lag = array("q")
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def stop(self) -> bytes:
        """Stop beating; the lag samples as int64 bytes."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.lag.tobytes()


async def _until(t_ns: int) -> None:
    """Sleep on the loop until ``t_ns``, yielding to it for the last :data:`SPIN_NS`."""
    left = t_ns - perf_counter_ns()
    if left > SPIN_NS:
        await asyncio.sleep((left - SPIN_NS) / 1e9)
    while perf_counter_ns() < t_ns:
        await asyncio.sleep(0)


async def _open_task(
    server: LoopServer, board: Board, run: OpenRun, kept: list[tuple[int, Any, str | None]]
) -> None:
    """One task's part of an open-loop run: take, wait or admit, serve, record."""
    while (j := board.take()) >= 0:
        arrived = int(board.due[j])
        now = perf_counter_ns()
        if now < arrived:
            board.idle[j] = 1
            await _until(arrived)
        elif admit(board, j, run, now) != PENDING:
            continue
        board.left[j] = perf_counter_ns()
        t0, t1, rec, err = await server.serve_timed(run.first_request + j)
        board.start[j], board.finish[j] = t0, t1
        if err is not None:
            board.outcome[j] = FAILED
        else:
            board.outcome[j] = TIMED_OUT if t1 - arrived > run.timeout_ns else COMPLETED
        kept.append((j, pack_record(rec), err))


async def _open_run(server: LoopServer, lock: Any, job: tuple[Any, ...]) -> tuple[Any, ...]:
    _, shm_name, n, run = job
    shm = shared_memory.SharedMemory(name=shm_name)
    kept: list[tuple[int, Any, str | None]] = []
    beat = Heartbeat()
    try:
        board = Board(shm.buf, n, lock)
        beat.start()
        params = OpenRun(*run)
        tasks = [
            _open_task(server, board, params, kept) for _ in range(server.settings.concurrency)
        ]
        await asyncio.gather(*tasks)
        del board
    finally:
        lag = await beat.stop()
        shm.close()
    return ("done", kept, lag, server.async_requests())


async def _closed_run(server: LoopServer, job: tuple[Any, ...]) -> tuple[Any, ...]:
    """``clients`` clients on this loop until ``end_ns``; every request's times and outcome."""
    _, clients, end_ns, timeout_ns, first, stride = job
    rows: list[tuple[int, int, int, int]] = []
    kept: list[tuple[int, Any, str | None]] = []
    count = [0]

    async def client() -> None:
        while (sent := perf_counter_ns()) < end_ns:
            i = first + stride * count[0]
            count[0] += 1
            t0, t1, rec, err = await server.serve_timed(i)
            if err is not None:
                outcome = FAILED
            else:
                outcome = TIMED_OUT if t1 - sent > timeout_ns else COMPLETED
            kept.append((len(rows), pack_record(rec), err))
            rows.append((sent, t0, t1, outcome))

    beat = Heartbeat()
    beat.start()
    try:
        await asyncio.gather(*(client() for _ in range(clients)))
    finally:
        lag = await beat.stop()
    times = np.asarray(rows, dtype=np.int64).reshape(-1, 4).tobytes()
    return ("done", kept, lag, server.async_requests(), times)


async def _serve_jobs(conn: Any, lock: Any, server: LoopServer) -> None:
    while True:
        try:
            job = await asyncio.to_thread(conn.recv)
        except EOFError:  # the parent went away
            return
        if job is None:
            return
        if job[0] == "open":
            reply = await _open_run(server, lock, job)
        else:
            reply = await _closed_run(server, job)
        conn.send(reply)


async def _worker_main(
    pipe: Pipeline, conn: Any, lock: Any, settings: Settings, config: Mapping[str, Any]
) -> None:
    server: LoopServer | None = None
    try:
        server = LoopServer(pipe, settings, config)
        await server.start()
    except BaseException as exc:  # the parent turns this into an error of its own
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        if server is not None:
            await server.close()
        return
    conn.send(("ready", os.getpid(), server.describe()))
    try:
        await _serve_jobs(conn, lock, server)
    finally:
        await server.close()


def aio_worker(
    config: Mapping[str, Any], conn: Any, lock: Any, settings: Settings, core: int | None = None
) -> None:
    """Entry point of an asyncio worker process (spawned): set up, start the loop, serve runs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    try:
        _register(settings.register)
        pipe = Pipeline(config)
        pipe.setup()
        if core is not None:
            os.sched_setaffinity(0, {core})
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        asyncio.run(_worker_main(pipe, conn, lock, settings, config))
    finally:
        pipe.close()


# ---------------------------------------------------------------- the parent's side


class AsyncWorkers:
    """``n`` asyncio worker processes, each serving up to ``concurrency`` requests on one loop.

    ``offload``: where CPU stages run (:data:`OFFLOADS`); ``offload_workers``:
    processes per worker for ``offload="process"`` (default: usable cores /
    ``n``, at least 1). ``register``: backends registered in code here that the
    workers must know too, as ``(registry, name, "module:attr")``. ``pin``:
    each worker on a core of its own when there are enough (only with
    ``offload="none"``: offloaded work needs the other cores). Serves
    :meth:`run_open` (the shared board) and :meth:`run_closed`.
    """

    kind = "asyncio"

    def __init__(
        self,
        config: Mapping[str, Any],
        n: int,
        *,
        concurrency: int = 16,
        offload: str = "none",
        offload_workers: int | None = None,
        warmup: int = 20,
        startup_timeout: float = 600.0,
        pin: bool = True,
        register: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.size = positive_int("asyncio workers", "n", n)
        self.concurrency = positive_int("asyncio workers", "concurrency", concurrency)
        self.offload = check_offload(offload)
        config = load_config(config)  # checked and normalized before any process starts
        if config["run"]["cpu_time"]:
            raise ConfigError(
                "asyncio workers do not measure per-stage CPU time (one thread interleaves "
                "many requests); drop --cpu-time or use --worker-kind thread|process"
            )
        cores = threads.usable_cores()
        pool = offload_workers or max(1, len(cores) // self.size)
        self.settings = Settings(
            self.concurrency,
            self.offload,
            positive_int("asyncio workers", "offload_workers", pool),
            positive_int("asyncio workers", "warmup", warmup, lo=0),
            tuple(register),
        )
        self.pinned = bool(pin and offload == "none" and self.size <= len(cores))
        self.loop_lag_ns = np.zeros(0, dtype=np.int64)
        self.async_requests: dict[str, int] = {}
        self.info: dict[str, Any] = {}
        self._start(config, cores, startup_timeout)

    def _start(self, config: Mapping[str, Any], cores: list[int], timeout: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._lock = ctx.Lock()
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        atexit.register(self.close)
        saved = {k: os.environ.get(k) for k in WORKER_ENV}
        os.environ.update(WORKER_ENV)  # read by each child at its start, before numpy loads
        try:
            for w in range(self.size):
                parent, child = ctx.Pipe(duplex=True)
                core = cores[w] if self.pinned else None
                proc = ctx.Process(
                    target=aio_worker,
                    args=(dict(config), child, self._lock, self.settings, core),
                    name=f"ragbench-aio-worker-{w}",
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float) -> None:
        for w, conn in enumerate(self._conns):
            if not conn.poll(timeout):
                raise TransportError(f"asyncio worker {w} was not ready after {timeout:.0f} s")
            reply = self._recv(w)
            if reply[0] != "ready":
                raise ConfigError(f"asyncio worker {w} failed to set up: {reply[1]}")
            self.info = reply[2]

    def _recv(self, w: int) -> Any:
        try:
            return self._conns[w].recv()
        except EOFError:
            code = self._procs[w].exitcode
            raise TransportError(f"asyncio worker {w} died (exit code {code})") from None

    def describe(self) -> dict[str, Any]:
        """What load records keep about this pool: offload, tasks per loop, async clients."""
        return {
            "offload": self.offload,
            "tasks_per_worker": self.concurrency,
            "offload_workers": self.settings.offload_workers if self.offload == "process" else None,
            **self.info,
        }

    def _collect(self) -> list[tuple[Any, ...]]:
        """Every worker's reply to the job just sent; the lag and async counts kept."""
        replies: list[tuple[Any, ...]] = [()] * self.size
        waiting = set(range(self.size))
        owner = {id(c): w for w, c in enumerate(self._conns)}
        while waiting:
            ready: list[Any] = multiprocessing.connection.wait([self._conns[w] for w in waiting])
            for conn in ready:
                w = owner[id(conn)]
                replies[w] = self._recv(w)
                waiting.discard(w)
        self.loop_lag_ns = np.concatenate([np.frombuffer(r[2], dtype=np.int64) for r in replies])
        totals: dict[str, int] = {}
        for r in replies:
            for k, v in r[3].items():
                totals[k] = totals.get(k, 0) + v
        self.async_requests = totals
        return replies

    def run_open(self, due_ns: np.ndarray, run: OpenRun) -> tuple[Board, list[Any], list[str]]:
        """Serve an open-loop schedule (absolute ``due_ns``) on every loop; (board, records, errors)."""
        n = len(due_ns)
        shm = shared_memory.SharedMemory(create=True, size=Board.size(n))
        try:
            board = Board(shm.buf, n, self._lock)
            board.reset(due_ns)
            for conn in self._conns:
                conn.send(("open", shm.name, n, tuple(run)))
            try:
                replies = self._collect()
            finally:
                del board  # no view may outlive the shared block
            private = bytearray(Board.size(n))
            private[:] = memoryview(shm.buf)[: Board.size(n)]  # type: ignore[arg-type]
        finally:
            shm.close()
            shm.unlink()
        records: list[Any] = [None] * n
        errors: list[str] = []
        for reply in replies:
            for j, packed, err in reply[1]:
                records[j] = unpack_record(packed)
                if err is not None:
                    errors.append(err)
        return Board(private, n, None), records, errors

    def run_closed(
        self, concurrency: int, duration_s: float, *, timeout_s: float, first_request: int = 0
    ) -> Traffic:
        """``concurrency`` clients on EACH loop for ``duration_s``, each sending its next request
        when its last one ended; every request ends completed, timed out or failed."""
        clients = positive_int("closed loop", "concurrency", concurrency)
        start = perf_counter_ns()
        end = start + int(duration_s * 1e9)
        for w, conn in enumerate(self._conns):
            conn.send(("closed", clients, end, int(timeout_s * 1e9), first_request + w, self.size))
        replies = self._collect()
        times = np.concatenate(
            [np.frombuffer(r[4], dtype=np.int64).reshape(-1, 4) for r in replies]
        )
        records: list[RequestRecord | None] = []
        errors: list[str] = []
        for r in replies:
            for _, packed, err in r[1]:
                records.append(unpack_record(packed))
                if err is not None:
                    errors.append(err)
        outcome = times[:, 3]
        return Traffic(
            start_ns=start,
            end_ns=perf_counter_ns(),
            scheduled_ns=times[:, 0].copy(),
            dispatch_ns=times[:, 1].copy(),
            finish_ns=times[:, 2].copy(),
            outcome=outcome.copy(),
            idle=np.zeros(len(times), dtype=bool),
            records=[
                rec if o == COMPLETED else None for rec, o in zip(records, outcome, strict=True)
            ],
            errors=errors,
            loop_lag_ns=self.loop_lag_ns,
        )

    def close(self) -> None:
        """Stop every worker (and its pools); idempotent."""
        atexit.unregister(self.close)
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []

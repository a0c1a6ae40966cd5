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
pipe to the parent breaks, and the kernel kills it (and a pool process) when
its parent ends, however that ends (:func:`ragbench.workers.watch.die_with_parent`).

**Faults** are handled as :class:`ragbench.workers.ProcessWorkers` handles
them: a worker that dies during a level, or is still silent at its end +
timeout + grace, is killed and named in the level's ``faults``; a pool
process that dies breaks its worker's pool, so that worker stops taking
requests and reports it (the process, how it died, how many requests failed
with it) and is then killed; a worker that dies or is not ready within
``startup_timeout`` is a :class:`~ragbench.workers.WorkerFault` at start.
Per-stage CPU time (``[run] cpu_time``) is not measured here: one thread
interleaves many requests, so its CPU clock belongs to none of them.

The package: :mod:`~ragbench.aioworkers.loop` (the plan of a request's
stages and the server running them on the loop),
:mod:`~ragbench.aioworkers.runs` (open- and closed-loop runs, the
heartbeat, the worker process) and :mod:`~ragbench.aioworkers.pool` (the
parent's side).
"""

from __future__ import annotations

from .loop import OFFLOADS, LoopServer, Segment, Settings, check_offload, plan
from .pool import AsyncWorkers
from .runs import HEARTBEAT_S, aio_worker

__all__ = [
    "HEARTBEAT_S",
    "OFFLOADS",
    "AsyncWorkers",
    "LoopServer",
    "Segment",
    "Settings",
    "aio_worker",
    "check_offload",
    "plan",
]

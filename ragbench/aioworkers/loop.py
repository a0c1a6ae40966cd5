"""One request on an asyncio worker's loop: the plan of its stages and the server that runs it.

:func:`plan` cuts the request path into segments -- awaited stages alone,
runs of CPU stages together, inline, on a thread or in a process pool
(:data:`OFFLOADS`) -- and :class:`LoopServer` serves requests of one set-up
pipeline through them, stamped per stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from time import perf_counter_ns
from typing import Any, NamedTuple

from .. import threads
from ..errors import ConfigError, RagbenchError
from ..pipeline import Pipeline, RequestContext, RequestRecord
from ..pipeline.capabilities import (
    AwaitableStage,
    ClosesAsync,
    ConnectsAsync,
    CountsAsyncRequests,
    InstantStage,
    NamesAsyncClient,
)
from ..workers.watch import die_with_parent, exit_text, parent_for_children

__all__ = [
    "LoopServer",
    "OFFLOADS",
    "Segment",
    "Settings",
    "check_offload",
    "plan",
    "register_backends",
]


#: Where CPU stages run on an asyncio worker (see the module docstring).
OFFLOADS = ("none", "thread", "process")


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


def register_backends(entries: tuple[tuple[str, str, str], ...]) -> None:
    for kind, name, target in entries:
        importlib.import_module(f"ragbench.{kind}").register(name, target)


# ---------------------------------------------------------------- the process pool's side

_POOL: dict[str, Any] = {}


def _pool_init(
    config: Mapping[str, Any],
    register: tuple[tuple[str, str, str], ...],
    barrier: Any,
    parent: int | None = None,
) -> None:
    """Initializer of an offload pool process: its own set-up pipeline, warm.

    It dies with its asyncio worker (``parent``, :func:`die_with_parent`),
    even one killed with SIGKILL; SIGINT is its worker's to act on.
    """
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    register_backends(register)
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
                initargs=(dict(config), settings.register, ctx.Barrier(n), parent_for_children()),
            )
        #: the offload pool's processes (pid -> process), known once it has started
        self.pool_procs: dict[int, Any] = {}
        #: requests that failed because the offload pool broke (one of its processes died)
        self.lost = 0

    async def start(self) -> None:
        """Start the pools, open the async clients' connections, run the warm-up requests."""
        loop = asyncio.get_running_loop()
        if self.procs is not None:
            n = self.settings.offload_workers
            ready = [loop.run_in_executor(self.procs, _pool_ready, 600.0) for _ in range(n)]
            await asyncio.gather(*ready)
            self.pool_procs = dict(getattr(self.procs, "_processes", None) or {})
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
                try:
                    inner, fields = await loop.run_in_executor(
                        self.procs, _pool_cpu_part, i, seg.stop
                    )
                except BrokenProcessPool:
                    self.lost += 1
                    raise
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

    @property
    def broken(self) -> bool:
        """The offload pool broke (one of its processes died): no request can be served."""
        return self.lost > 0

    def faults(self) -> list[dict[str, Any]]:
        """The offload pool's failure, for the level's record (``[]`` if none).

        ``pid`` is this worker's (as in every fault: ``worker <w> (pid <pid>)``;
        it was the offload process's, so the line named the worker by that
        pid); ``detail`` names the process that died (the pool terminates the
        others with SIGTERM when it notices) and how many requests failed with it.
        """
        if not self.lost:
            return []
        # the dead process may not be reaped yet when the pool breaks ("offload process 0
        # died (still running)" was read): wait for it a little
        deadline = time.monotonic() + 2.0
        while True:
            ended = {
                pid: p.exitcode for pid, p in self.pool_procs.items() if p.exitcode is not None
            }
            if ended or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        culprits = [pid for pid, code in ended.items() if code != -signal.SIGTERM] or list(ended)
        who = (
            f"offload process {culprits[0]} died ({exit_text(ended[culprits[0]])})"
            if culprits
            else "an offload process died"
        )
        detail = f"{who}: its process pool broke, {self.lost} requests failed with it"
        return [{"pid": os.getpid(), "what": "died", "detail": detail}]

    async def close(self) -> None:
        for part in (self.pipe.transport, self.pipe.components.generator):
            if isinstance(part, ClosesAsync):
                with contextlib.suppress(Exception):
                    await part.aclose()
        if self.threads is not None:
            self.threads.shutdown(wait=True)
        if self.procs is not None:
            self.procs.shutdown(wait=False, cancel_futures=True)
            _end_processes(list(self.pool_procs.values()), 5.0)


def _end_processes(procs: list[Any], within_s: float) -> None:
    """Let ``procs`` end by themselves for ``within_s`` s, then kill the rest (a stopped one too)."""
    end = time.monotonic() + within_s
    for proc in procs:
        proc.join(max(0.0, end - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGCONT)  # a stopped one: ends with its pipe's fds too
            proc.kill()
            proc.join(2.0)


def _adopt(ctx: RequestContext, fields: dict[str, Any]) -> None:
    """What a pool process's stages wrote on their context, written on this one."""
    rest = fields.pop("inter_token_ns", None)
    for name, value in fields.items():
        setattr(ctx, name, value)
    if rest is not None:
        ctx.decode_rest = lambda: rest

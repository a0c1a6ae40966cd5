"""Offered traffic (``ragbench load``): how response time grows with the offered load.

Two ways to offer load:

- **open loop** (default): requests arrive on a schedule fixed in advance
  (Poisson, uniform, or gamma with a burstiness factor) whether or not
  earlier ones have finished, as users arriving at a service do. Response
  time counts from each request's *scheduled* arrival, so waiting behind
  slow requests counts (no coordinated omission).
- **closed loop**: ``concurrency`` clients each send their next request as
  soon as their last one finished; throughput follows from the service
  time. Every table, record and plot labels it closed-loop.

Requests are served by a pool of workers: threads sharing one set-up
pipeline (the stages that release the GIL -- faiss, hnswlib, numba -- really
overlap), or processes each with its own pipeline, like the worker processes
of a Python service (:class:`ThreadWorkers`, :class:`ProcessWorkers`), or
asyncio worker processes each serving many requests at once on one event
loop (:class:`ragbench.aioworkers.AsyncWorkers`: their closed loop runs in
the workers, ``concurrency`` clients per loop, and each run's event-loop lag
is summarised in the record). The
dispatcher hands a due request to an idle worker at once, or queues it in a
bounded queue; a request arriving to a full queue is **rejected**, one still
queued or unfinished ``timeout`` after its arrival is **timed out**, one the
service answered with an error (a dead far side, say) has **failed**; every
scheduled request ends as exactly one of completed, timed out, rejected or
failed.
Per request it keeps the scheduled, dispatch (a worker started it) and
finish times and the pipeline's per-stage stamps.

Each level also says whether the load generator itself kept up
(``generator_ok``, with ``generator_note`` saying why not): its own CPU
(the calling thread's, and the workers' time spent taking and admitting
requests), the dispatch delay of requests that found a worker idle against
the inter-arrival time, the level's wall time against ``duration + timeout
+ 1 s``, and any worker that died or hung (``dead_workers``,
``stuck_workers``: its requests count as failed). A level where it did not
measures the client, not the system.

The package's parts: :mod:`~ragbench.traffic.schedule` (arrivals, options),
:mod:`~ragbench.traffic.runs` (one measured run), :mod:`~ragbench.traffic.summary`
(its record's fields) and :mod:`~ragbench.traffic.curves` (load curves).
"""

from __future__ import annotations

from ..workers import COMPLETED, FAILED, REJECTED, TIMED_OUT
from .curves import load_points
from .runs import Traffic, closed_loop, merge_concurrent, open_loop, warm
from .schedule import ARRIVALS, LoadOptions, arrivals
from .schedule import LEAD_NS as LEAD_NS
from .summary import ADMISSION_MAX_SHARE as ADMISSION_MAX_SHARE
from .summary import GENERATOR_MAX_CORES as GENERATOR_MAX_CORES
from .summary import OVERRUN_S as OVERRUN_S
from .summary import summarize

__all__ = [
    "ARRIVALS",
    "COMPLETED",
    "FAILED",
    "REJECTED",
    "TIMED_OUT",
    "LoadOptions",
    "Traffic",
    "arrivals",
    "closed_loop",
    "load_points",
    "merge_concurrent",
    "open_loop",
    "summarize",
    "warm",
]

"""Worker pools that serve a pipeline's requests concurrently: threads or processes.

:class:`ThreadWorkers`: ``n`` threads sharing one set-up pipeline (the stages
that release the GIL -- faiss, hnswlib, numba -- really overlap); each pins
its own library threads. :class:`ProcessWorkers`: ``n`` processes each with
its own pipeline built from the same config, like the worker processes of a
Python service; give the config a ``[retrieve] index_file`` so the index is
built once and loaded by every worker.

Both serve three ways, none with the parent in the path of a request:

- handed requests one by one (``dispatch`` / ``poll``): warm-up uses this;
- an open-loop schedule on a shared :class:`Board` (``run_open``): each idle
  worker takes the next request in arrival order and, when it is not due
  yet, waits for its arrival itself -- no dispatcher thread between arrival
  and service, so the dispatch delay with idle workers is the wake-up
  precision of one worker (it sleeps, then spins the last
  :data:`SPIN_NS`). A worker that frees up decides in one step every
  request that arrived meanwhile (rejected if the queue was full when it
  arrived, timed out if it waited longer than the timeout) and takes the
  oldest one left (see :class:`Board`);
- a closed loop (``serve_closed``): each worker runs its share of the
  clients itself (:func:`run_closed_worker`).

Records are sent once, at the end of a level. The parent blocks on the
workers meanwhile, with a watchdog: a worker that dies, or has not finished
by the level's end + timeout + :data:`GRACE_NS`, is a fault -- killed, its
requests failed, named in the level's result.

The package: :mod:`~ragbench.workers.board` (the open-loop board, outcome
codes, the wait), :mod:`~ragbench.workers.closed` (the closed loop in a
worker), :mod:`~ragbench.workers.threaded` and
:mod:`~ragbench.workers.processes` (the two pools), :mod:`~ragbench.workers.spawn`
(starting, greeting and reading spawned workers; the asyncio pool uses it too) and
:mod:`~ragbench.workers.watch` (the watchdog over spawned workers, and tying a
child's life to its parent's).
"""

from __future__ import annotations

from .board import (
    COMPLETED,
    FAILED,
    GRACE_NS,
    PENDING,
    REJECTED,
    SPIN_NS,
    STOP_GRACE_NS,
    TIMED_OUT,
    Board,
    OpenRun,
    Result,
    WorkerFault,
    admit,
    run_open_worker,
)
from .closed import ClosedResult, ClosedRun, run_closed_worker, split_clients
from .processes import WORKER_ENV, ProcessWorkers, pack_record, process_worker, unpack_record
from .threaded import ThreadWorkers

__all__ = [
    "COMPLETED",
    "FAILED",
    "GRACE_NS",
    "PENDING",
    "REJECTED",
    "SPIN_NS",
    "STOP_GRACE_NS",
    "TIMED_OUT",
    "WORKER_ENV",
    "Board",
    "ClosedResult",
    "ClosedRun",
    "OpenRun",
    "ProcessWorkers",
    "Result",
    "ThreadWorkers",
    "WorkerFault",
    "admit",
    "pack_record",
    "process_worker",
    "run_closed_worker",
    "run_open_worker",
    "split_clients",
    "unpack_record",
]

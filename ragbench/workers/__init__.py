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

from .._deprecated import moved_names
from .board import (
    COMPLETED,
    FAILED,
    PENDING,
    REJECTED,
    TIMED_OUT,
    Board,
    Result,
    WorkerFault,
    admit,
)
from .processes import ProcessWorkers
from .threaded import ThreadWorkers

#: What users call: the two pools, the shared open-loop board and its outcome codes, a request's
#: result, the fault a dead worker raises (tests/project/test_public_api.py pins this list). The
#: building blocks the pools and the asyncio workers share live in the package's modules.
__all__ = [
    "Board",
    "COMPLETED",
    "FAILED",
    "PENDING",
    "ProcessWorkers",
    "REJECTED",
    "Result",
    "TIMED_OUT",
    "ThreadWorkers",
    "WorkerFault",
    "admit",
]

#: Names ``ragbench.workers`` exported until its ``__all__`` was trimmed to what users call
#: (issue 30) still import from here for one release, warning where they live now
#: (:data:`ragbench._deprecated.MOVED` lists them).
__getattr__ = moved_names(__name__)

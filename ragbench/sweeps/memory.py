"""Memory an engine holds for search, measured the same way for every engine.

The engines' own accountings disagree on what they count (a serialized
index, a folder holding SQLite records, a table and its index relations on a
server), so a column of them mixes definitions. Here every index is measured
alike: the mappings (:func:`ragbench.procstat.mappings`) of this process and
every process below it (a database server ragbench started: its postmaster
and backends) are read before the build (or the load from the index cache)
and after it plus one batch search of every query, the heap trimmed before
each reading. The difference (:func:`ragbench.procstat.held_bytes`) is
``memory_bytes``, with ``memory_method`` naming this method
(``pss-delta-new-files``): anonymous memory and shared memory by their
proportional set size (PSS; a server's shared buffers, shared by its
processes, counted once), and a file's mapped pages by their PSS only if the
file was not mapped before the build. A file mapped before (libpython, libc,
numpy's and the engine's ``.so`` files) counts only its copied-on-write
pages: its PSS divides each page by the number of processes on the machine
mapping it, so it moves when any other Python process starts or ends, and
would move the difference with it (records before this method,
``pss-delta``, counted it). Before the baseline a throw-away index of the
same engine is built on a few rows and searched (:func:`_warm_engine`), so
the engine library, its compiled kernels and thread pools are not counted; a
server ragbench starts for the index (pgvector's own) is, whole: it exists
for that index (its program's and libraries' pages by their PSS, which still
depends on how many other processes on the machine map them).

The build gets its own copy of the corpus vectors, made inside the measured
window: an engine that keeps the caller's array instead of copying it keeps
that copy alive, and it is counted; one that copies frees it. Pages of
memory-mapped files count once the search touches them; the operating
system's page cache (a server's reads of its relation files) does not. The
engine's own accounting stays in the record as ``engine_bytes``.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Mapping
from typing import Any

from .. import indexes, procstat, threads
from ..errors import RagbenchError
from ..results.rebuilds import seeded_build
from .data import SweepData
from .points import build_index

__all__ = ["built_with_memory"]


def _resident() -> procstat.Mappings | None:
    gc.collect()
    procstat.trim_heap()
    return procstat.mappings()


def _touch(index: Any, data: SweepData, k: int) -> None:
    """One batch search of every query (default parameters): what search reads is resident."""
    texts = index.input_kind == "texts"
    kk = max(1, min(k, int(index.ntotal)))
    batch_threads = threads.get_threads()
    threads.set_threads(1)
    try:
        index.search(data.query_texts if texts else data.queries, kk)
    finally:
        threads.set_threads(batch_threads)


#: Rows of the throw-away index built before the baseline reading (:func:`_warm_engine`).
WARM_ROWS = 2000


def _warm_engine(name: str, data: SweepData, build: Mapping[str, Any], k: int) -> Any:
    """Build and search a throw-away index of ``name`` on the first :data:`WARM_ROWS` rows.

    What an engine takes once per process (its library imported, kernels
    compiled, thread pools started) is then in the baseline, not in the
    index's memory. The index is returned, to be closed after the last reading
    (an engine freeing it lazily would otherwise free it inside the window);
    ``None`` when the engine cannot build on so few rows (its one-time costs
    are then counted with the index).
    """
    m = min(len(data.vectors), WARM_ROWS)
    dim = int(data.vectors.shape[1])
    try:
        index = indexes.create(name, dim=dim, metric=data.metric, **seeded_build(name, build, 0))
        texts = index.input_kind == "texts"
        index.build(data.texts[:m] if texts else data.vectors[:m].copy())
        index.search(data.query_texts[:1] if texts else data.queries[:1], max(1, min(k, m)))
    except RagbenchError:
        return None
    return index


def _close(index: Any) -> None:
    close = getattr(index, "close", None)
    if callable(close):
        close()


def built_with_memory(
    name: str,
    data: SweepData,
    build: Mapping[str, Any],
    *,
    k: int,
    fast_build: bool = False,
    i: int = 0,
) -> tuple[Any, float, dict[str, Any]]:
    """:func:`~ragbench.sweeps.points.build_index`, measured: (index, build s, memory fields).

    Memory fields: ``memory_bytes`` (int bytes; ``None`` where ``/proc`` cannot be
    read), ``memory_method`` (:data:`ragbench.procstat.METHOD`) and ``engine_bytes``
    (the index's own ``memory_bytes()``).
    """
    warm = _warm_engine(name, data, build, k)
    warmed = warm is not None
    before = _resident()
    own = dataclasses.replace(data, vectors=data.vectors.copy())
    index, build_s = build_index(name, own, build, fast_build=fast_build, i=i)
    del own
    _touch(index, data, k)
    after = _resident()
    if warm is not None:
        _close(warm)
    del warm
    held = None if before is None or after is None else max(0, procstat.held_bytes(before, after))
    fields = {
        "memory_bytes": held,
        "memory_method": (procstat.METHOD if warmed else procstat.METHOD_COLD)
        if held is not None
        else None,
        "engine_bytes": int(index.memory_bytes()),
    }
    return index, build_s, fields

"""One thread setting for every library ragbench drives.

Thread counts change latency more than most code changes do, so they are
pinned in one place and recorded in every record. ``set_threads(n)`` sets the
count used for batch work (faiss OpenMP, hnswlib ``num_threads``, numba
parallel kernels, torch); single-query latency is always measured on one
thread by the callers that measure it.

The default comes from ``RAGBENCH_THREADS`` or the number of usable cores.
Every thread count ragbench accepts (this one, ``--threads``, the
``threads`` of a config, ``--search-threads``) is at most
:data:`MAX_THREADS`: each library starts that many OS threads, and a count
like 10**6 would start threads until the kernel refuses and nothing on the
machine can fork.

:class:`ThreadConnections` is the per-thread connection registry the
clients share (one keep-alive connection per calling thread).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .validate import positive_int

__all__ = [
    "MAX_THREADS",
    "ThreadConnections",
    "apply",
    "blas_threads",
    "get_threads",
    "note",
    "pin_thread",
    "set_threads",
    "settings",
    "usable_cores",
]


#: The most threads any one thread setting may ask for (a fixed cap: 256 is more cores than
#: the largest common servers have, and few enough that starting them all is harmless).
MAX_THREADS = 256


def _default() -> int:
    env = os.environ.get("RAGBENCH_THREADS")
    if env:
        try:
            value: object = int(env)
        except ValueError:
            value = env  # not a number: positive_int names it
        return positive_int("environment", "RAGBENCH_THREADS", value, hi=MAX_THREADS)
    return len(usable_cores())


def usable_cores() -> list[int]:
    """The CPUs this process may run on (its affinity mask), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return list(range(os.cpu_count() or 1))


_threads: int | None = None
# caller -> the torch intra-op thread counts its calls ran with (see note())
_torch_used: dict[str, set[int]] = {}
_torch_used_lock = threading.Lock()


def note(caller: str, torch_threads: int) -> None:
    """Record that ``caller`` ran a call with ``torch_threads`` intra-op threads.

    A stage that pins torch for its own calls (the MiniLM embedder) restores
    the count after each one, so torch's count when a record is written says
    nothing about what ran; :func:`settings` reports these instead, under
    ``torch_threads_by_caller`` (every count seen, in order).
    """
    with _torch_used_lock:
        _torch_used.setdefault(caller, set()).add(int(torch_threads))


def get_threads() -> int:
    """The pinned thread count for batch work."""
    global _threads
    if _threads is None:
        _threads = _default()
    return _threads


def set_threads(n: int) -> None:
    """Pin the thread count for batch work in every library already loaded and later."""
    global _threads
    _threads = positive_int("set_threads", "n", n, hi=MAX_THREADS)
    apply()


def apply() -> None:
    """Push the setting into the libraries that are loaded (never imports one).

    BLAS (numpy's OpenBLAS, and faiss's) gets the same count, process-wide:
    an idle OpenBLAS pool spins on the other core after each call and slows
    whatever runs next (measured: a numba rerank alternated with numpy
    matmuls ran 14x slower). faiss's OpenMP and numba's thread counts are
    per calling thread: :func:`pin_thread` sets them in a worker thread.
    """
    n = get_threads()
    _limit_blas(n)
    pin_thread(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def pin_thread(n: int | None = None) -> None:
    """Set faiss's OpenMP and numba's thread count for the calling thread (default: the pin).

    Both are per-thread settings: a new thread starts with the library's
    default (every core), so each worker thread of a service must call this
    itself (measured: two worker threads doing single-query flat search
    reached 0.83x the throughput of one when pinned only in the main thread,
    1.92x when each pinned itself).
    """
    n = get_threads() if n is None else positive_int("pin_thread", "n", n, hi=MAX_THREADS)
    if "faiss" in sys.modules:
        sys.modules["faiss"].omp_set_num_threads(n)
    if _numba_pool_started():
        import numba

        numba.set_num_threads(min(n, int(numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]


def _numba_pool_started() -> bool:
    """Whether numba's thread pool runs (``set_num_threads`` would start it otherwise).

    Starting it early costs dearly: numba's OpenMP runtime, once started
    before torch loads, is the one torch's parallel code then runs on, and
    sentence embedding became 11x slower (measured: 64 passages 29.6 s vs
    2.7 s). The parallel kernels set their own count when they first run.
    """
    if "numba" not in sys.modules:
        return False
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return bool(getattr(parallel, "_is_initialized", True)) if parallel is not None else False


def _blas_controller() -> Any:
    if "numpy" not in sys.modules and "faiss" not in sys.modules:
        return None
    try:
        import threadpoolctl
    except ImportError:  # pragma: no cover - a core dependency
        return None
    return threadpoolctl.ThreadpoolController().select(user_api="blas")


def _limit_blas(n: int) -> None:
    controller = _blas_controller()
    if controller is not None:
        controller.limit(limits=n)


def blas_threads() -> list[int]:
    """The thread count of each loaded BLAS library (empty when none is loaded)."""
    controller = _blas_controller()
    if controller is None:
        return []
    return [int(lib.num_threads) for lib in controller.lib_controllers]


def settings() -> dict[str, Any]:
    """What every record stores about threads: the pin, env vars and library values."""
    out: dict[str, Any] = {"ragbench_threads": get_threads()}
    for var in (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMBA_NUM_THREADS",
        "RAGBENCH_THREADS",
        # how long an idle OpenMP pool spins (read once, when the runtime loads)
        "OMP_WAIT_POLICY",
        "GOMP_SPINCOUNT",
        "KMP_BLOCKTIME",
    ):
        if var in os.environ:
            out[var] = os.environ[var]
    if "faiss" in sys.modules:
        out["faiss_omp_max_threads"] = int(sys.modules["faiss"].omp_get_max_threads())
    if "numba" in sys.modules:
        out["numba_threads"] = int(sys.modules["numba"].get_num_threads())
    if "torch" in sys.modules:
        out["torch_threads"] = int(sys.modules["torch"].get_num_threads())
    with _torch_used_lock:
        if _torch_used:
            out["torch_threads_by_caller"] = {c: sorted(n) for c, n in sorted(_torch_used.items())}
    blas = blas_threads()
    if blas:
        out["blas_threads"] = blas
    return out


_T = TypeVar("_T")


class ThreadConnections(Generic[_T]):
    """Each calling thread's connection, and every open one with the thread that owns it.

    Thread-safe. The lock is held only to add or remove entries, never
    while a connection is used or closed: the methods that remove
    connections return them for the caller to close.
    """

    def __init__(self) -> None:
        # The calling thread's connection is self.local.conn (a plain attribute:
        # the quickest read, for a per-request path; take_all replaces it, so
        # read it each time rather than keeping it). Every connection is in
        # self._owners (with its thread). The lock guards both.
        self.local = threading.local()
        self._owners: dict[_T, threading.Thread] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many threads' connections are registered now."""
        return len(self._owners)

    def current(self) -> _T | None:
        """The calling thread's connection, or ``None`` when it has none."""
        conn: _T | None = getattr(self.local, "conn", None)
        return conn

    def register(self, conn: _T) -> list[_T]:
        """Make ``conn`` the calling thread's connection; return those of ended threads.

        The returned connections are removed; the caller closes them.
        """
        with self._lock:
            return self._add(conn)

    def register_if(self, conn: _T, admit: Callable[[], bool]) -> list[_T] | None:
        """:meth:`register` if ``admit()``, called under the lock, is true; else ``None``.

        Nothing is registered when it is ``None``: ``conn`` is the caller's to close.
        """
        with self._lock:
            return self._add(conn) if admit() else None

    def _add(self, conn: _T) -> list[_T]:
        """Register ``conn`` for the calling thread, with the lock held; remove the stale ones."""
        stale = [c for c, owner in self._owners.items() if not owner.is_alive()]
        for c in stale:
            del self._owners[c]
        self._owners[conn] = threading.current_thread()
        self.local.conn = conn
        return stale

    def drop_current(self) -> _T | None:
        """Remove the calling thread's connection and return it (``None`` if it has none)."""
        with self._lock:
            local = self.local
            conn: _T | None = getattr(local, "conn", None)
            if conn is None:
                return None
            del local.conn
            self._owners.pop(conn, None)
        return conn

    def take_all(self) -> list[_T]:
        """Remove every thread's connection and return them (oldest first)."""
        with self._lock:
            conns = list(self._owners)
            self._owners.clear()
            # A fresh local: no thread still holds a removed connection.
            self.local = threading.local()
        return conns

"""The numba reranker: one fused pass over the candidate rows, read in place."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .. import progress
from ..errors import ConfigError, DimensionError, NonFiniteError
from ..threads import get_threads
from ..validate import bad_id_error, bool_param, check_ids, check_k, int_arg, positive_int
from ._contract import K_LIMIT, BaseReranker, check_queries, check_query, check_vectors

__all__ = ["DEFAULT_PARALLEL_THRESHOLD", "NumbaReranker"]

# With ``parallel=True``: candidates per query from which one query is split
# across threads (each thread keeps its own top-k, then they are merged).
# Measured on the project machine (2 shared cores, dim 384, k=10, ip, ids
# drawn from a 100k-row base, medians of interleaved calls, nothing else
# running), serial vs 2 threads in µs: 256: 16 vs 21, 512: 28 vs 28, 1024:
# 71 vs 57, 2048: 136 vs 90, 4096: 354 vs 206. Below ~1k the hand-off to the
# second thread eats the gain. Without ``parallel=True`` nothing is split (see
# the class docstring for why one thread is the default).
DEFAULT_PARALLEL_THRESHOLD = 1024

_METRIC_CODES = {"ip": 0, "cosine": 1, "l2": 2}
_NDARRAY = np.ndarray
_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
_empty = np.empty
_NEVER = 1 << 62  # more candidates than any call can hold

# The compiled rerank_serial for (float32 (d,), int64 (n,), float32 (N, d),
# int, int64 (k,), float32 (k,)), all C-contiguous, aligned and writeable.
# Calling it skips the dispatcher's typing of six arguments (~0.25 µs of a
# ~4.5 µs call at 100 candidates). Only ever called with arrays checked to be
# exactly those types: its argument unboxing does not check dtype or ndim.
# Until the first call it is a stand-in that loads the kernel, then replaces
# itself.


def _first_serial_call(
    q: np.ndarray, ids: np.ndarray, x: np.ndarray, code: int, out_i: np.ndarray, out_s: np.ndarray
) -> int:
    return int(_resolve_serial_entry()(q, ids, x, code, out_i, out_s))


_serial_entry: Any = _first_serial_call


def _resolve_serial_entry() -> Any:
    """Load (or compile) the serial kernel for the exact types; return its entry point."""
    global _serial_entry
    if _serial_entry is _first_serial_call:
        kernels = _kernels()
        args = (
            np.zeros(1, _F32),
            np.zeros(1, _I64),
            np.zeros((1, 1), _F32),
            0,
            np.zeros(1, _I64),
            np.zeros(1, _F32),
        )
        dispatcher = kernels.rerank_serial
        dispatcher(*args)
        key = tuple(dispatcher.typeof_pyval(a) for a in args)
        _serial_entry = dispatcher.overloads[key].entry_point
    return _serial_entry


def _kernels() -> Any:
    # numba loads on first use, not when the registry lists names.
    from . import _kernels

    return _kernels


# A process forked after numba's OpenMP layer started must not launch a
# parallel kernel: numba terminates it ("fork() called from a process already
# using GNU OpenMP"). Such a child runs the serial kernels only.
_parallel_started = False
_serial_only = False


def _after_fork_in_child() -> None:
    global _serial_only
    _serial_only = _serial_only or _parallel_started


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _threads() -> int:
    """Threads for the next parallel kernel (1: run a serial one instead)."""
    if _serial_only:
        return 1
    import numba

    n = min(get_threads(), int(numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    # numba's thread count is per calling thread: set it where the kernel runs.
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    if n > 1:
        _parallel_in_use()
    return n


def _parallel_in_use() -> None:
    global _parallel_started
    _parallel_started = True


class NumbaReranker(BaseReranker):
    """Exact rerank in one compiled pass: score each candidate row in place, keep the k best.

    ``rerank(query, candidate_ids, vectors, k)`` follows the contract of every
    reranker (see ``ragbench.rerankers._contract``): ids int64 ``(k,)`` and
    scores float32 ``(k,)``, best first, equal scores to the smaller id, ``-1``
    ids skipped, repeated ids counted once, padding id -1 with score -inf.

    How it works: the kernel walks the candidate ids, reads each row of
    ``vectors`` where it lies (no gathered copy), scores four rows per pass and
    tests each score against the worst of the k kept so far; only a better
    candidate touches the kept entries (a sorted run up to k=16, a heap
    above, sorted at the end).

    Threads: one by default, for :meth:`rerank` and :meth:`rerank_batch`
    alike; numba's thread pool is never started. ``parallel=True`` opts in:
    from ``parallel_threshold`` candidates on (default
    :data:`DEFAULT_PARALLEL_THRESHOLD`) one query is split across
    ``ragbench.threads.get_threads()`` threads, each keeping its own top-k,
    merged at the end, and ``rerank_batch`` runs queries in parallel.
    Why one thread: measured on the project machine (2 shared cores, 10k
    candidates of dim 384 out of a 100k-row base, k=10, medians of
    interleaved calls; ``bench/test_bench_rerank.py::test_mixed_work``), the
    split takes 0.22-0.23 ms alone against 0.61-0.63 ms on one thread, but
    called alternately with a numpy ``(64, 384) @ (384, 384)`` matmul (a query
    encoder's layer: any BLAS call big enough for OpenBLAS to use its
    threads) it takes 4.2 ms (up to 10 ms) while one thread stays at 0.61-0.63
    ms, 2.5-3.0x faster than numpy argpartition alternated the same way.
    Two thread pools spin against each other: numba's ``omp`` layer (GNU
    libgomp) lets its workers busy-wait 300 000 spins after each parallel
    region (``GOMP_SPINCOUNT``'s default when ``OMP_WAIT_POLICY`` is unset),
    and OpenBLAS's workers spin (``sched_yield``) for 2^28 cycles after each
    threaded BLAS call (``OPENBLAS_THREAD_TIMEOUT``), so each pool's next call
    waits for the other's spinning thread to leave the second core (with
    nothing else in between, the matmul itself went from 0.12 to 3.7 ms).
    No setting on numba's side makes the split pay there (measured the same
    way, one process each): ``OMP_WAIT_POLICY=passive`` stops the fight but
    costs the split its gain (0.34-0.55 ms alone, 0.55-0.73 ms mixed),
    ``GOMP_SPINCOUNT=10000`` still loses (1.6 ms mixed), the ``workqueue``
    layer gains nothing (0.63-0.75 ms alone); and each would have to be set
    in the environment before the pool starts, for the whole process. Opt in
    where the cores are free of other thread pools, or where OpenBLAS does
    not spin (``OPENBLAS_THREAD_TIMEOUT=4`` set before numpy is imported: the
    split then measured 0.23-0.54 ms mixed).

    Arithmetic: float32 accumulation with ``fastmath`` limited to
    reassociation and FMA contraction, which lets the dot product vectorise.
    Scores match a float64 computation to about ``1e-5`` of
    ``sum(|x_i q_i|)``; they can differ from the ``numpy`` reference in the
    last bits, so compare the two with a tolerance and tie-aware. Identical
    rows always get identical scores, so ties go to the smaller id.

    Scores: ``ip`` dot, ``cosine`` ``dot / (|q| |x|)`` and 0.0 when that
    denominator is 0, ``l2`` negated squared distance. Overflow gives
    ``+-inf`` scores, which sort as real scores. A NaN score (a NaN, or
    inf-minus-inf, in a base row; the base matrix is never scanned) sorts after
    every real score and is never returned ahead of one.

    Checks: types and shapes in Python; the id range and the query's
    finiteness as the first loop of the same compiled call, before any row is
    read (a numpy ``min``/``max``/``isfinite`` costs more than a whole rerank of
    100 candidates). Bad input raises the same errors as every reranker.

    Compilation: kernels are cached on disk (``cache=True``); :meth:`warmup`
    compiles or loads them and returns the nanoseconds taken, so that first
    call is kept out of request latency. Read-only arrays (e.g. a memory-mapped
    ``vectors``) are a different numba type: the first such call compiles once
    more (seconds), cached on disk after that.

    Processes: a child forked after a parallel kernel ran in the parent uses
    the serial kernels only (numba's OpenMP layer would terminate it).
    """

    name = "numba"
    extra_params = frozenset({"parallel", "parallel_threshold"})

    def __init__(
        self,
        metric: str = "ip",
        *,
        parallel: bool = False,
        parallel_threshold: int | None = None,
        **params: Any,
    ) -> None:
        super().__init__(metric, **params)
        owner = "reranker 'numba'"
        self.parallel = bool_param(owner, "parallel", parallel)
        if parallel_threshold is None:
            parallel_threshold = DEFAULT_PARALLEL_THRESHOLD
        elif not self.parallel:
            raise ConfigError(
                f"{owner}: parallel_threshold={parallel_threshold!r} applies only with "
                "parallel=True (the reranker runs on one thread by default); pass "
                "parallel=True as well to split queries across threads, or drop "
                "parallel_threshold"
            )
        self.parallel_threshold = positive_int(owner, "parallel_threshold", parallel_threshold)
        # Candidates from which rerank() splits a query: never, on one thread.
        self._split_from = self.parallel_threshold if self.parallel else _NEVER
        self._code = _METRIC_CODES[self.metric]
        self._k = _kernels()

    def __repr__(self) -> str:
        if not self.parallel:
            return f"NumbaReranker(metric={self.metric!r})"
        return (
            f"NumbaReranker(metric={self.metric!r}, parallel=True, "
            f"parallel_threshold={self.parallel_threshold})"
        )

    def rerank(
        self, query: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k best candidates: ``(ids int64 (k,), scores float32 (k,))``, best first.

        ``query`` is ``(d,)`` (converted to float32 if needed), ``candidate_ids``
        integer ``(n,)`` with ``-1`` as padding (converted to int64 if needed),
        ``vectors`` float32 C-contiguous ``(N, d)`` (never converted or copied).
        """
        # The common case (exactly the types the serial kernel was compiled
        # for: ``flags.carray`` is C-contiguous, aligned and writeable, each a
        # different numba type) costs a dozen attribute reads, ~0.5 µs, and
        # calls the compiled entry point; anything else takes the full checks,
        # which convert or raise, and the numba dispatcher, which types (or
        # compiles for) it.
        fn = _serial_entry
        x = vectors
        if not (type(x) is _NDARRAY and x.dtype is _F32 and x.ndim == 2 and x.flags.carray):
            x = check_vectors(vectors)
            fn = None
        n_rows, dim = x.shape
        q = query
        if not (
            type(q) is _NDARRAY
            and q.dtype is _F32
            and q.ndim == 1
            and len(q) == dim
            and q.flags.carray
        ):
            q = check_query(query, dim, finite=False)
            fn = None
        ids = candidate_ids
        if not (type(ids) is _NDARRAY and ids.dtype is _I64 and ids.ndim == 1 and ids.flags.carray):
            ids = check_ids(candidate_ids, n_rows, values=False)
            fn = None
        n = len(ids)
        if type(k) is not int or k < 1 or (k > n and k > n_rows):
            k = check_k(k, n if n > n_rows else n_rows, what=K_LIMIT)
        out_ids = _empty(k, _I64)
        out_scores = _empty(k, _F32)
        if n >= self._split_from and (threads := _threads()) > 1:
            status = self._k.rerank_chunked(q, ids, x, self._code, threads, out_ids, out_scores)
        else:
            if fn is None:
                fn = self._k.rerank_serial
            status = fn(q, ids, x, self._code, out_ids, out_scores)
        if status:
            self._raise(status, int(out_ids[0]), n_rows, batch=False)
        return out_ids, out_scores

    def rerank_batch(
        self, queries: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`rerank` for ``queries (nq, d)`` and ``candidate_ids (nq, n)``,
        queries spread over threads with ``parallel=True``. Returns ``(ids int64 (nq, k), scores float32 (nq, k))``;
        row ``r`` equals ``rerank(queries[r], candidate_ids[r], vectors, k)``."""
        x = check_vectors(vectors)
        qs = check_queries(queries, x.shape[1], finite=False)
        ids = check_ids(candidate_ids, x.shape[0], ndim=2, values=False)
        if ids.shape[0] != qs.shape[0]:
            raise DimensionError(
                f"candidate_ids: {ids.shape[0]} rows for {qs.shape[0]} queries; "
                "pass one row of candidates per query"
            )
        n, n_rows = ids.shape[1], x.shape[0]
        k = check_k(k, n if n > n_rows else n_rows, what=K_LIMIT)
        out_ids = np.empty((qs.shape[0], k), dtype=np.int64)
        out_scores = np.empty((qs.shape[0], k), dtype=np.float32)
        if self.parallel and _threads() > 1:
            status = self._k.rerank_many(qs, ids, x, self._code, out_ids, out_scores)
            if status:
                self._raise(status, int(out_ids[0, 0]), x.shape[0], batch=True)
            return out_ids, out_scores
        for r in range(qs.shape[0]):
            status = self._k.rerank_serial(qs[r], ids[r], x, self._code, out_ids[r], out_scores[r])
            if status:
                self._raise(
                    status, r if status == 2 else int(out_ids[r, 0]), x.shape[0], batch=True
                )
        return out_ids, out_scores

    def warmup(self, dim: int) -> int:
        """Compile (or load from the on-disk cache) the kernels; return the ns taken.

        The serial kernel, and with ``parallel=True`` the parallel ones too
        (which starts numba's thread pool). The kernels are typed on float32
        query/vectors and int64 ids, whatever ``dim`` is, so one warm-up covers
        every width and metric.
        """
        dim = int_arg("dim", dim, lo=0)
        t0 = time.perf_counter_ns()
        # ~10 s on a fresh checkout (compiling), ~0.1 s from numba's on-disk cache after
        with progress.task("compiling the numba rerank kernels", 1, unit="step") as advance:
            x = np.ones((4, int(dim)), dtype=np.float32)
            ids = np.arange(4, dtype=np.int64)
            q = np.ones(int(dim), dtype=np.float32)
            out_ids = np.empty((2, 2), dtype=np.int64)
            out_scores = np.empty((2, 2), dtype=np.float32)
            self._k.rerank_serial(q, ids, x, self._code, out_ids[0], out_scores[0])
            _resolve_serial_entry()
            if self.parallel and not _serial_only:
                _threads()
                _parallel_in_use()
                self._k.rerank_chunked(q, ids, x, self._code, 2, out_ids[0], out_scores[0])
                self._k.rerank_many(x[:2], ids.reshape(2, 2), x, self._code, out_ids, out_scores)
            advance(1)
        return time.perf_counter_ns() - t0

    @staticmethod
    def _raise(status: int, bad: int, n_rows: int, *, batch: bool) -> None:
        if status == 1:
            raise bad_id_error(int(bad), n_rows)
        if batch:
            raise NonFiniteError(f"queries: row {int(bad)} holds NaN or inf")
        raise NonFiniteError("query holds NaN or inf")

"""``ragbench stream``: an index under live inserts and deletes while queries arrive.

A big-ann-benchmarks-style streaming workload in one process. The index is
built over a random ``initial`` fraction of the corpus (ids are positions in
one seeded permutation of the corpus rows, so inserts take the next ids in
order); then, for ``duration`` seconds, the driver thread inserts at
``insert_rate`` and deletes random live ids at ``delete_rate`` (one
``add``/``delete`` call per 20 ms tick, each call timed) and releases
queries open loop at ``qps`` to ``search_threads`` searcher threads, which
search while the writes run. Inserts stop once every corpus row is in
(``inserted_total`` says how many went in); deletes never take the live set
below ``k`` rows.
A share ``fresh`` of the queries is aimed at the most recently inserted
document not yet found: its own vector plus Gaussian noise (``noise`` times
the vector's length, renormalized); the rest are the dataset's queries. The
index's own thread-safety rules apply (searches run beside ``add``; a delete
or a faiss write waits for running searches, see
:mod:`ragbench.indexes._writes_and_filters`).

``checkpoints`` times (evenly spaced) the writers and searchers pause and a
record is made of the interval since the last one:

- ``recall``: recall@k of the dataset's queries (one call each) against the
  exact top-k of the rows live at that moment (brute force over the live set);
- search, insert and delete call latency p50/p99 (µs), every completed call's
  ``latency_ns`` (what ``ragbench diff`` compares two stream runs on) and
  counts (issued, completed, failed) -- every operation is accounted;
- ``freshness``: seconds from an insert's completion to the end of the first
  search that returned that document to a query aimed at it (p50/p99), and
  how many aimed-at documents were never returned;
- ``deleted_returned``: results holding an id whose delete had completed
  before the search started (must be 0).

A runbook (TOML, ``[[step]]`` tables with ``insert = N``, ``delete = N``,
``search = N``, ``checkpoint = true``) replays a fixed sequence instead:
each step's inserts, deletes and searches run in that order (searches on the
searcher threads, open loop at ``qps``), then its checkpoint.

Every option and runbook count is checked before anything is loaded
(:class:`~ragbench.errors.ConfigError` naming it and its range): numbers are
finite and within the stated maxima (:data:`LIMITS`; a value beyond them
is a typo or a run that would not end), a runbook is a regular file of at
most 1 MiB whose every step does something, with at least one checkpoint.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import indexes
from .datasets import brute_force_neighbors
from .errors import ConfigError, UnsupportedConfigError
from .files import CONFIG_LIMIT, read_regular
from .indexes.contract import WritableIndex, can_delete, declares
from .metrics import recall_at_k
from .results.records import new_record
from .settings.sources import load_toml
from .stream_limits import LIMITS, MAX_SEARCHES, MAX_STEP_COUNT
from .stream_limits import number_text as _num

__all__ = [
    "LIMITS",
    "MAX_SEARCHES",
    "MAX_STEP_COUNT",
    "LiveStream",
    "Step",
    "StreamOptions",
    "check_steps",
    "read_runbook",
    "run_stream",
]

_TICK_S = 0.02


@dataclass(frozen=True, slots=True)
class Step:
    """One runbook step: inserts, then deletes, then searches, then maybe a checkpoint."""

    insert: int = 0
    delete: int = 0
    search: int = 0
    checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What :func:`run_stream` does; see the module docstring."""

    index: str = "hnsw"
    build: Mapping[str, Any] = field(default_factory=dict)
    search: Mapping[str, Any] = field(default_factory=dict)
    k: int = 10
    initial: float = 0.5
    insert_rate: float = 200.0
    delete_rate: float = 100.0
    qps: float = 200.0
    duration: float = 10.0
    checkpoints: int = 5
    fresh: float = 0.3
    noise: float = 0.05
    search_threads: int = 2
    seed: int = 0

    def check(self, *, timed: bool = True) -> None:
        """Raise :class:`ConfigError` naming the first option outside :data:`LIMITS`.

        ``timed`` (no runbook): ``qps`` x ``duration`` is at most :data:`MAX_SEARCHES` too.
        """
        for name, (lo, hi) in LIMITS.items():
            value = getattr(self, name)
            flag = "--" + name.replace("_", "-")
            if isinstance(lo, int):
                if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                    raise ConfigError(f"{flag} must be an integer in [{lo}, {hi}], got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{flag} must be a number, got {value!r}")
            low_ok = value > lo if name == "initial" else value >= lo
            if not (math.isfinite(value) and low_ok and value <= hi):
                left = "(" if name == "initial" else "["
                raise ConfigError(f"{flag} must be in {left}{_num(lo)}, {_num(hi)}], got {value!r}")
        if timed and self.qps * self.duration > MAX_SEARCHES:
            raise ConfigError(
                f"--qps x --duration = {self.qps * self.duration:.0f} searches, more than the "
                f"{MAX_SEARCHES} a run may ask for; lower one of them"
            )


def read_runbook(path: str | Path) -> list[Step]:
    """The ``[[step]]`` tables of a runbook TOML file, checked (:class:`ConfigError` naming the step).

    Only a regular file of at most 1 MiB is read (never a FIFO or a device).
    Each count is an integer in ``[0, MAX_STEP_COUNT]``, each step does
    something, the searches in all are at most :data:`MAX_SEARCHES` and the
    checkpoints between 1 and ``LIMITS["checkpoints"]``.
    """
    raw = read_regular(path, limit_bytes=CONFIG_LIMIT, what="runbook", error=ConfigError)
    data = load_toml(raw, f"runbook {path}")
    steps = data.get("step")
    if not isinstance(steps, list) or not steps:
        raise ConfigError(f"runbook {path}: no [[step]] tables")
    return check_steps(steps, f"runbook {path}")


def check_steps(steps: Sequence[Step | Mapping[str, Any]], where: str = "runbook") -> list[Step]:
    """``steps`` (:class:`Step` objects or ``[[step]]`` tables) checked, as Steps.

    :class:`ConfigError` starting with ``where`` unless each count is an
    integer in ``[0, MAX_STEP_COUNT]``, each step does something, the searches
    in all are at most :data:`MAX_SEARCHES` and the checkpoints between 1 and
    ``LIMITS["checkpoints"]``.
    """
    out = [
        _step(asdict(st) if isinstance(st, Step) else st, f"{where}: step {i}")
        for i, st in enumerate(steps, 1)
    ]
    searches = sum(st.search for st in out)
    if searches > MAX_SEARCHES:
        raise ConfigError(
            f"{where}: {searches} searches in all, more than the {MAX_SEARCHES} a run may ask for"
        )
    checkpoints, most = sum(st.checkpoint for st in out), LIMITS["checkpoints"][1]
    if not 1 <= checkpoints <= most:
        problem = (
            "no step has checkpoint = true: nothing would be measured"
            if not checkpoints
            else f"{checkpoints} checkpoints, more than the {_num(most)} a run may have"
        )
        raise ConfigError(f"{where}: {problem}")
    return out


def _step(st: Any, where: str) -> Step:
    """One ``[[step]]`` table as a :class:`Step`; ``where`` names it in errors."""
    if not isinstance(st, Mapping):
        raise ConfigError(f"{where}: must be a [[step]] table, got {st!r}")
    bad = sorted(set(st) - {"insert", "delete", "search", "checkpoint"})
    if bad:
        raise ConfigError(f"{where}: unknown key {bad[0]!r}")
    ins, dels, srch = (st.get(key, 0) for key in ("insert", "delete", "search"))
    for c in (ins, dels, srch):
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_STEP_COUNT:
            raise ConfigError(
                f"{where}: counts must be integers in [0, {MAX_STEP_COUNT}], got {c!r}"
            )
    if not isinstance(st.get("checkpoint", False), bool):
        raise ConfigError(f"{where}: checkpoint must be true or false")
    step = Step(ins, dels, srch, bool(st.get("checkpoint", False)))
    if step == Step():
        raise ConfigError(f"{where}: does nothing; give insert, delete, search or checkpoint")
    return step


class _Ops:
    """Latencies and outcomes of one kind of operation since the last checkpoint (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ns: list[int] = []
        self.issued = self.completed = self.failed = self.items = 0

    def done(self, ns: int, ok: bool, items: int = 1) -> None:
        with self.lock:
            self.completed += ok
            self.failed += not ok
            self.items += items if ok else 0
            if ok:
                self.ns.append(ns)

    def take(self) -> dict[str, Any]:
        with self.lock:
            ns = np.asarray(self.ns, dtype=np.float64)
            out = {
                "issued": self.issued,
                "completed": self.completed,
                "failed": self.failed,
                "items": self.items,
                "p50_us": float(np.percentile(ns, 50)) / 1e3 if ns.size else None,
                "p99_us": float(np.percentile(ns, 99)) / 1e3 if ns.size else None,
                # every completed call's ns, in completion order: ragbench diff's intervals
                "latency_ns": self.ns,  # swapped out just below: no longer shared
            }
            self.ns = []
            self.issued = self.completed = self.failed = self.items = 0
        return out


class LiveStream:
    """The live state: which ids are in the index, when they came and went, what searches saw.

    ``V``: float32 ``(n, d)``, the corpus in a seeded random order; id ``i``
    is row ``V[i]``, the first ``m0`` built, the rest inserted in order.
    ``live``: bool ``(n,)``; ``inserted_ns``/``deleted_ns``: int64 ``(n,)``
    ``perf_counter_ns`` when the insert/delete completed (0: never);
    ``index``: the index under test (set by :func:`run_stream`).
    """

    def __init__(self, vectors: np.ndarray, queries: np.ndarray, metric: str, o: StreamOptions):
        self.o = o
        self.rng = np.random.default_rng(o.seed)
        self.V = np.ascontiguousarray(vectors[self.rng.permutation(len(vectors))])
        self.Q = queries
        self.metric = metric
        n = len(self.V)
        self.m0 = max(o.k, int(round(o.initial * n)))
        self.live = np.zeros(n, dtype=bool)
        self.live[: self.m0] = True
        self.next_id = self.m0
        self.inserted_ns = np.zeros(n, dtype=np.int64)  # 0: built, not inserted
        self.deleted_ns = np.zeros(n, dtype=np.int64)  # 0: not deleted
        self.first_found_ns = np.zeros(n, dtype=np.int64)
        self.aimed: list[int] = []  # inserted ids not yet found by an aimed query
        self.freshness_ns: list[int] = []
        self.deleted_returned = 0
        self.lock = threading.Lock()  # live set, aimed list
        self.ops = {"search": _Ops(), "insert": _Ops(), "delete": _Ops()}
        self.index: Any = None

    # -- writes ---------------------------------------------------------------------

    def insert(self, count: int) -> None:
        ids = np.arange(self.next_id, min(self.next_id + count, len(self.V)), dtype=np.int64)
        if not ids.size:
            return
        self.next_id += ids.size
        ops = self.ops["insert"]
        ops.issued += 1
        t0 = time.perf_counter_ns()
        try:
            self.index.add(self.V[ids], ids=ids)
        except Exception:  # noqa: BLE001 - every failed write is counted, none stops the run
            ops.done(0, False)
            return
        t1 = time.perf_counter_ns()
        ops.done(t1 - t0, True, ids.size)
        with self.lock:
            self.live[ids] = True
            self.inserted_ns[ids] = t1
            self.aimed.extend(ids.tolist())

    def delete(self, count: int) -> None:
        with self.lock:
            live = np.flatnonzero(self.live)
            if live.size <= self.o.k or count <= 0:
                return
            ids = self.rng.choice(live, size=min(count, live.size - self.o.k), replace=False)
            self.live[ids] = False  # no longer counted as live for truth or aiming
        ops = self.ops["delete"]
        ops.issued += 1
        t0 = time.perf_counter_ns()
        try:
            self.index.delete(ids)
        except Exception:  # noqa: BLE001
            ops.done(0, False)
            with self.lock:
                self.live[ids] = True
            return
        t1 = time.perf_counter_ns()
        ops.done(t1 - t0, True, ids.size)
        self.deleted_ns[ids] = t1

    # -- searches -------------------------------------------------------------------

    def next_query(self) -> tuple[np.ndarray, int]:
        """A query vector ``(1, d)`` and the id it is aimed at (-1: a dataset query)."""
        with self.lock:
            aimed = self.aimed
            target = -1
            if aimed and self.rng.random() < self.o.fresh:
                target = aimed.pop()  # the most recently inserted not yet found
                while aimed and not self.live[target]:
                    target = aimed.pop()
                if not self.live[target]:
                    target = -1
            j = int(self.rng.integers(len(self.Q)))
            noise = self.rng.standard_normal(self.V.shape[1], dtype=np.float32)
        if target < 0:
            return self.Q[j : j + 1], -1
        v = self.V[target]
        scale = np.float32(self.o.noise * float(np.linalg.norm(v)) / np.sqrt(len(v)))
        q = np.asarray(v + noise * scale, dtype=np.float32)
        q /= np.linalg.norm(q)
        return q[None, :], target

    def search_one(self, q: np.ndarray, target: int) -> None:
        ops = self.ops["search"]
        t0 = time.perf_counter_ns()
        try:
            ids = self.index.search(q, self.o.k, **self.o.search)[0][0]
        except Exception:  # noqa: BLE001
            ops.done(0, False)
            return
        t1 = time.perf_counter_ns()
        ops.done(t1 - t0, True)
        got = ids[ids >= 0]
        gone = self.deleted_ns[got]
        bad = int(((gone > 0) & (gone < t0)).sum())
        if bad:
            with self.lock:
                self.deleted_returned += bad
        if target >= 0:
            with self.lock:
                if not (got == target).any():
                    self.aimed.append(target)  # aim at it again later
                elif self.first_found_ns[target] == 0:
                    self.first_found_ns[target] = t1
                    self.freshness_ns.append(t1 - int(self.inserted_ns[target]))

    # -- checkpoint -----------------------------------------------------------------

    def checkpoint(self, number: int, elapsed_s: float) -> dict[str, Any]:
        """Recall over the live set now, and the interval's operation statistics."""
        live = self.live.copy()
        allowed = np.broadcast_to(live, (len(self.Q), len(live)))
        truth = brute_force_neighbors(self.Q, self.V, self.o.k, self.metric, allowed=allowed)
        found = np.full((len(self.Q), self.o.k), -1, dtype=np.int64)
        for i in range(len(self.Q)):
            ids = self.index.search(self.Q[i : i + 1], self.o.k, **self.o.search)[0][0]
            found[i, : len(ids)] = ids[: self.o.k]
        recall = recall_at_k(found, truth, self.V, self.Q, self.o.k, self.metric)
        fresh = np.asarray(self.freshness_ns, dtype=np.float64) / 1e9
        with self.lock:
            self.freshness_ns = []
            waiting = len(self.aimed)
            returned, self.deleted_returned = self.deleted_returned, 0
        return {
            "checkpoint": number,
            "elapsed_s": elapsed_s,
            "live": int(live.sum()),
            "inserted_total": int(self.next_id - self.m0),
            "deleted_total": int((self.deleted_ns > 0).sum()),
            "recall": float(recall.mean()),
            "recall_p10": float(np.percentile(recall, 10)),
            "recall_zero": int(np.count_nonzero(recall == 0)),
            "recall_per_query": recall.tolist(),
            "search": self.ops["search"].take(),
            "insert": self.ops["insert"].take(),
            "delete": self.ops["delete"].take(),
            "freshness": {
                "found": int(fresh.size),
                "p50_s": float(np.percentile(fresh, 50)) if fresh.size else None,
                "p99_s": float(np.percentile(fresh, 99)) if fresh.size else None,
                "not_yet_found": waiting,
            },
            "deleted_returned": returned,
        }


class _Searchers:
    """Searcher threads fed by an open-loop schedule (a query due every ``1 / qps`` s)."""

    def __init__(self, st: LiveStream) -> None:
        self.st = st
        self.due: list[tuple[np.ndarray, int]] = []
        self.cond = threading.Condition()
        self.stopping = False
        self.busy = 0
        self.threads = [
            threading.Thread(target=self._work, daemon=True, name=f"rb-search-{i}")
            for i in range(st.o.search_threads)
        ]
        for t in self.threads:
            t.start()

    def release(self, count: int) -> None:
        for _ in range(count):
            q = self.st.next_query()
            self.st.ops["search"].issued += 1
            with self.cond:
                self.due.append(q)
                self.cond.notify()

    def drain(self) -> None:
        """Wait until every released query has finished."""
        with self.cond:
            while self.due or self.busy:
                self.cond.wait(0.01)

    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.due and not self.stopping:
                    self.cond.wait()
                if not self.due:
                    return
                q, target = self.due.pop(0)
                self.busy += 1
            try:
                self.st.search_one(q, target)
            finally:
                with self.cond:
                    self.busy -= 1
                    self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=60)


def _paced(rate: float, start: float, now: float, done: int) -> int:
    """How many of a ``rate``-per-second stream are due by ``now`` beyond the ``done`` ones."""
    return max(0, int(rate * (now - start)) - done)


def _timed_run(
    st: LiveStream, searchers: _Searchers, emit: Callable[[dict[str, Any]], None]
) -> None:
    o = st.o
    start = time.perf_counter()
    bounds = [start + o.duration * (c + 1) / o.checkpoints for c in range(o.checkpoints)]
    sent = {"insert": 0, "delete": 0, "search": 0}
    paused = 0.0
    for number, until in enumerate(bounds, 1):
        while True:
            now = time.perf_counter()
            if now >= until + paused:
                break
            t = now - paused
            for kind, rate in (("insert", o.insert_rate), ("delete", o.delete_rate)):
                due = _paced(rate, start, t, sent[kind])
                sent[kind] += due
                if due:
                    getattr(st, kind)(due)
            due = _paced(o.qps, start, t, sent["search"])
            sent["search"] += due
            searchers.release(due)
            time.sleep(min(_TICK_S, max(0.0, until + paused - time.perf_counter())))
        t0 = time.perf_counter()
        searchers.drain()
        emit(st.checkpoint(number, t0 - paused - start))
        paused += time.perf_counter() - t0  # checkpoints do not eat the schedule


def _runbook_run(
    st: LiveStream,
    searchers: _Searchers,
    steps: Sequence[Step],
    emit: Callable[[dict[str, Any]], None],
) -> None:
    start = time.perf_counter()
    number = 0
    batch = max(1, int(st.o.insert_rate * _TICK_S)) if st.o.insert_rate else 1_000_000
    for step in steps:
        for s in range(0, step.insert, batch):
            if st.next_id >= len(st.V):
                break  # every corpus row is in: the rest of the step's inserts cannot happen
            st.insert(min(batch, step.insert - s))
        if step.delete:
            st.delete(step.delete)
        t0 = time.perf_counter()
        for i in range(step.search):
            if st.o.qps:
                time.sleep(max(0.0, t0 + i / st.o.qps - time.perf_counter()))
            searchers.release(1)
        searchers.drain()
        if step.checkpoint:
            number += 1
            emit(st.checkpoint(number, time.perf_counter() - start))


def _reads_texts(backend: Any) -> bool:
    return getattr(backend, "input_kind", "vectors") == "texts"


def _check_streamable(name: str) -> None:
    """:class:`UnsupportedConfigError` for an index this workload cannot write to, by its class:
    one over texts (the stream inserts vectors) or one without ``add`` (bm25s's ``bm25``)."""
    cls = indexes.registry.factory(name)
    if not declares(cls, WritableIndex):
        writable = indexes.writable_backends()
        dense = [n for n in writable if not _reads_texts(indexes.registry.factory(n))]
        raise UnsupportedConfigError(
            f"index {name!r} cannot add rows after its build; use one of {', '.join(dense)}"
        )
    if _reads_texts(cls):
        raise UnsupportedConfigError(
            f"index {name!r} reads texts (its add takes texts); ragbench stream inserts vectors into a dense index"
        )


def run_stream(
    vectors: np.ndarray,
    queries: np.ndarray,
    metric: str,
    options: StreamOptions,
    *,
    runbook: Sequence[Step] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    dataset: str = "",
    stream: LiveStream | None = None,
) -> list[dict[str, Any]]:
    """Run the streaming workload; one ``stream`` record per checkpoint (see the module docstring).

    ``vectors`` float32 ``(n, d)`` corpus, ``queries`` float32 ``(nq, d)``.
    ``stream``: a :class:`LiveStream` made from the same arguments, to read
    the live state and the index afterwards. An index that cannot delete
    (faiss-hnsw) raises :class:`UnsupportedConfigError` (an
    :class:`UnsupportedOperationError` and a :class:`ConfigError`) when the
    workload deletes, before anything is built;
    options and ``runbook`` steps outside their limits (:meth:`StreamOptions.check`,
    :func:`check_steps`) raise it before anything is built.
    """
    options.check(timed=runbook is None)
    if runbook is not None:
        runbook = check_steps(runbook)
    if options.k > len(vectors):
        raise ConfigError(f"--k {options.k} is more than the corpus's {len(vectors)} rows")
    st = stream if stream is not None else LiveStream(vectors, queries, metric, options)
    deletes = options.delete_rate > 0 if runbook is None else any(s.delete for s in runbook)
    _check_streamable(options.index)
    if deletes and not can_delete(indexes.registry.factory(options.index)):
        can = ", ".join(indexes.deleting_backends())
        raise UnsupportedConfigError(
            f"index {options.index!r} cannot delete; use one of {can} or --delete-rate 0"
        )
    index = indexes.create(options.index, dim=int(vectors.shape[1]), metric=metric, **options.build)
    t0 = time.perf_counter()
    index.build(st.V[: st.m0])
    build_s = time.perf_counter() - t0
    st.index = index
    fields = {
        "dataset": dataset,
        "n": int(len(vectors)),
        "dim": int(vectors.shape[1]),
        "metric": metric,
        "k": options.k,
        "index": options.index,
        "build": dict(index.build_params),
        "query": dict(options.search),
        "initial": st.m0,
        "build_s": build_s,
        "options": {
            key: getattr(options, key)
            for key in ("insert_rate", "delete_rate", "qps", "duration", "fresh", "noise")
        }
        | {"search_threads": options.search_threads, "runbook": runbook is not None},
    }
    out: list[dict[str, Any]] = []

    def emit(point: dict[str, Any]) -> None:
        rec = new_record("stream", {**fields, **point})
        out.append(rec)
        if on_record is not None:
            on_record(rec)

    searchers = _Searchers(st)
    try:
        if runbook is None:
            _timed_run(st, searchers, emit)
        else:
            _runbook_run(st, searchers, runbook, emit)
    finally:
        searchers.stop()
    return out

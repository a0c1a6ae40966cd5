"""Machinery for filtered search and live writes, shared by the index backends.

Three pieces, none of them backend specific:

:class:`WriteGate`
    Lets searches run without taking a lock while a writer can still wait
    for the running ones to finish and hold new ones off (see its docstring).
:class:`IdSpace`
    One immutable snapshot of the mapping between the library's internal
    *positions* (row numbers inside faiss/hnswlib/datasketch) and the ids
    the caller sees, with the deleted positions. A write publishes a new
    snapshot; a search reads one and uses it throughout.
:func:`resolve_filter`
    Turns the caller's allow-list (a boolean mask over ids, an array of ids,
    one per query or one for the batch) into boolean masks over positions.

Ids: a freshly built index has ids ``0..n-1`` equal to its positions
(``labels is None``: nothing to translate). ``add(vectors, ids=...)`` with
ids that are not the next positions, or a delete in a backend that compacts
its storage (faiss flat and lsh), switches to an explicit ``labels`` array.
A boolean mask is indexed by id and has length :attr:`IdSpace.id_bound`
(one more than the largest id ever given; equal to ``ntotal`` until the
first write).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import ConfigError, DimensionError, IdOutOfRangeError, InputError

_I64 = np.dtype(np.int64)


class WriteGate:
    """Searches announce themselves; a writer excludes them only while it must.

    One list, :attr:`entries`, holds both sides' flags: ``entries[0]`` is
    the writer's (true while a writer excludes searches) and every running
    search appends one ``None`` when it starts and pops one when it ends
    (each one atomic list operation, about 30 ns; no lock), then reads
    ``entries[0]``. An exclusive writer first sets ``entries[0]``, then
    waits until the list holds nothing else. Both sides write their own
    flag before reading the other's, so (the interpreter orders these
    operations) at least one of them sees the other: a search that sees the
    writer's flag steps back and waits on :attr:`opened`; a writer that sees
    a search waits for it. A search pops only after its own append, so the
    list is never shorter than two then and the flag is never popped. One
    list rather than two attributes: the search's announcement and its read
    of the writer's flag are made on the same object, in that order.
    Writers are serialised by :attr:`lock`, and :meth:`writer` takes only
    that lock (for writes the library allows beside searches, such as
    hnswlib's ``add_items``).

    A search enters the gate as a context manager (``with index._gate:``);
    the gate is one object for every search, so entering and leaving is two
    method calls and no allocation. Never re-enter: a search must not call
    another gated search (a waiting writer would wait for the outer one
    forever); backends gate the public method only.
    """

    __slots__ = ("entries", "lock", "opened")

    def __init__(self) -> None:
        self.entries: list[bool | None] = [False]
        self.lock = threading.Lock()
        self.opened = threading.Event()
        self.opened.set()

    def wait_enter(self) -> None:
        """Enter after the writer's flag was seen set (the announcement already withdrawn)."""
        entries = self.entries
        while True:
            self.opened.wait()
            entries.append(None)
            if not entries[0]:
                return
            entries.pop()

    def __enter__(self) -> None:
        """A search starts: announce it (no lock), or wait while a writer holds searches off."""
        entries = self.entries
        entries.append(None)
        if entries[0]:
            entries.pop()
            self.wait_enter()

    def __exit__(self, *exc: object) -> None:
        """A search ends: withdraw its announcement (never the writer's flag: see above)."""
        self.entries.pop()

    @contextmanager
    def writer(self) -> Iterator[None]:
        """Serialise against other writers only; searches keep running."""
        with self.lock:
            yield

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Inside :meth:`writer`: wait for running searches, hold new ones off until done."""
        entries = self.entries
        self.opened.clear()
        entries[0] = True
        try:
            delay = 1e-6
            while len(entries) > 1:
                time.sleep(delay)
                delay = min(delay * 2, 1e-3)
            yield
        finally:
            entries[0] = False
            self.opened.set()


class IdSpace:
    """Positions ↔ ids and deletions at one moment; never changed once published.

    ``labels``: int64 ``(n_pos,)`` id of each position, or ``None`` when ids
    equal positions. ``dead``: bool ``(n_pos,)`` deleted positions still held
    by the library (hnswlib, ivf), or ``None`` when there are none.
    ``live``: positions not deleted. ``id_bound``: largest id ever + 1.
    """

    __slots__ = ("_by_id", "_ext", "dead", "id_bound", "labels", "live", "n_pos")

    def __init__(
        self, n_pos: int, labels: np.ndarray | None, dead: np.ndarray | None, id_bound: int
    ) -> None:
        self.n_pos = n_pos
        self.labels = labels
        self.dead = dead
        self.id_bound = id_bound
        self.live = n_pos - (int(dead.sum()) if dead is not None else 0)
        # (ids sorted, their positions) for live positions: built on first use.
        self._by_id: tuple[np.ndarray, np.ndarray] | None = None
        self._ext = None if labels is None else np.append(labels, np.int64(-1))

    @classmethod
    def identity(cls, n: int) -> IdSpace:
        return cls(n, None, None, n)

    def labels_ext(self) -> np.ndarray | None:
        """``labels`` followed by ``-1``: ``labels_ext[pos]`` maps a ``-1`` pad to ``-1``."""
        return self._ext

    def live_mask(self) -> np.ndarray:
        """bool ``(n_pos,)``: positions not deleted."""
        if self.dead is None:
            return np.ones(self.n_pos, dtype=bool)
        return ~self.dead

    def by_id(self) -> tuple[np.ndarray, np.ndarray]:
        """Live ids sorted ascending and their positions (cached on the snapshot)."""
        cached = self._by_id
        if cached is None:
            pos = np.flatnonzero(self.live_mask()).astype(np.int64)
            ids = pos if self.labels is None else self.labels[pos]
            order = np.argsort(ids, kind="stable")
            cached = self._by_id = (ids[order], pos[order])
        return cached

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        """Positions of the live ``ids`` (int64 ``(m,)``); ``-1`` for an id not live."""
        if self.labels is None and self.dead is None:
            return np.where(ids < self.n_pos, ids, -1)
        sorted_ids, pos = self.by_id()
        if not sorted_ids.size:
            return np.full(ids.shape, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
        return np.where(sorted_ids[at] == ids, pos[at], -1)

    def to_ids(self, pos: np.ndarray) -> np.ndarray:
        """The ids of positions ``pos`` (any shape, ``-1`` pads kept)."""
        ext = self.labels_ext()
        return pos if ext is None else ext[pos]


def check_new_ids(ids: Any, m: int, space: IdSpace) -> np.ndarray | None:
    """Validate the ids given to ``add`` for ``m`` new rows; ``None`` keeps the next ids.

    Ids must be non-negative integers, unique, and not live in the index (a
    deleted id may be given again).
    """
    if ids is None:
        return None
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or arr.shape[0] != m:
        raise DimensionError(f"ids: expected {m} ids (one per vector), got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise InputError(f"ids: expected integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 2**62):
        bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
        raise IdOutOfRangeError(f"ids: id {bad} is out of range; ids are in [0, 2**62)")
    if np.unique(arr).size != arr.size:
        raise InputError("ids: the same id is given twice; ids must be unique")
    taken = space.positions_of(arr) >= 0
    if taken.any():
        raise InputError(
            f"ids: id {int(arr[np.argmax(taken)])} is already in the index; "
            "delete it first to replace its vector"
        )
    return arr


def space_after_add(space: IdSpace, m: int, ids: Any) -> tuple[IdSpace, np.ndarray]:
    """The snapshot after adding ``m`` rows at the next positions, and their ids (int64 ``(m,)``)."""
    given = check_new_ids(ids, m, space)
    start = space.n_pos
    positions = np.arange(start, start + m, dtype=_I64)
    new_ids = given if given is not None else np.arange(space.id_bound, space.id_bound + m)
    new_ids = new_ids.astype(_I64)
    labels: np.ndarray | None = None
    if space.labels is not None or not np.array_equal(new_ids, positions):
        base = space.labels if space.labels is not None else np.arange(start, dtype=_I64)
        labels = np.concatenate([base, new_ids])
    dead = None
    if space.dead is not None:
        dead = np.concatenate([space.dead, np.zeros(m, dtype=bool)])
    bound = max(space.id_bound, int(new_ids.max()) + 1) if m else space.id_bound
    return IdSpace(start + m, labels, dead, bound), new_ids


def positions_to_delete(space: IdSpace, ids: Any) -> np.ndarray:
    """Sorted positions of ``ids`` (each must be live), or :class:`InputError`."""
    raw = np.asarray(ids).reshape(-1)
    if not raw.size or raw.dtype.kind not in "iu":
        raise InputError(f"delete: expected a non-empty array of integer ids, got {raw!r}")
    arr = np.unique(raw).astype(_I64)
    pos = space.positions_of(arr)
    if (pos < 0).any():
        missing = int(arr[np.argmax(pos < 0)])
        raise InputError(f"delete: id {missing} is not in the index (never added, or deleted)")
    return np.sort(pos)


def space_after_delete(space: IdSpace, pos: np.ndarray, mode: str | None) -> IdSpace:
    """The snapshot after deleting positions ``pos``: marked dead, or compacted away."""
    if mode == "mark":
        dead = np.zeros(space.n_pos, dtype=bool) if space.dead is None else space.dead.copy()
        dead[pos] = True
        return IdSpace(space.n_pos, space.labels, dead, space.id_bound)
    base = space.labels if space.labels is not None else np.arange(space.n_pos, dtype=_I64)
    return IdSpace(space.n_pos - pos.size, np.delete(base, pos), None, space.id_bound)


def check_strategy(owner: str, strategy: Any, supported: tuple[str, ...]) -> str:
    """The filter strategy name, or :class:`ConfigError` naming the supported ones."""
    if strategy is None:
        return "auto"
    if strategy == "auto" or strategy in supported:
        return str(strategy)
    raise ConfigError(
        f"{owner}: filter strategy {strategy!r} is not supported; supported: "
        f"{', '.join(('auto', *supported))}"
    )


class FilterPlan:
    """A resolved allow-list: bool masks over positions, live positions only.

    ``shared``: one ``(n_pos,)`` mask for every query, or ``None`` with
    ``per_query`` a list of them (one per query). ``counts``: allowed live
    positions per query (int64 ``(nq,)``).
    """

    __slots__ = ("counts", "per_query", "shared")

    def __init__(
        self,
        shared: np.ndarray | None,
        per_query: list[np.ndarray] | None,
        nq: int,
        count: int | None = None,
    ) -> None:
        self.shared = shared
        self.per_query: list[np.ndarray] = per_query or []
        if shared is not None:
            if count is None:
                count = int(np.count_nonzero(shared))
            self.counts = np.full(nq, count, dtype=np.int64)
        else:
            self.counts = np.array([np.count_nonzero(m) for m in self.per_query], dtype=np.int64)

    def mask(self, row: int) -> np.ndarray:
        """The positions mask of query ``row``."""
        if self.shared is not None:
            return self.shared
        return self.per_query[row]


def _one_mask(f: Any, space: IdSpace, what: str) -> np.ndarray:
    """One allow-list (mask over ids or array of ids) → bool mask over live positions."""
    arr = np.asarray(f)
    if arr.dtype == np.bool_:
        if arr.ndim != 1 or arr.shape[0] != space.id_bound:
            raise DimensionError(
                f"{what}: a boolean mask must have shape ({space.id_bound},) (one entry per id, "
                f"0..{space.id_bound - 1}), got {arr.shape}"
            )
        if not arr.any():
            raise InputError(f"{what}: the allow-list is empty (the mask is all False)")
        # Never written to: the caller's array itself when ids are positions.
        pos_mask = arr if space.labels is None else arr[space.labels]
    else:
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InputError(
                f"{what}: expected a boolean mask or a 1-D integer array of ids, "
                f"got dtype {arr.dtype} shape {arr.shape}"
            )
        if not arr.size:
            raise InputError(f"{what}: the allow-list is empty (no ids)")
        ids = arr.astype(np.int64)
        lo, hi = int(ids.min()), int(ids.max())
        if lo >= 0 and hi <= 1 and ids.size == space.id_bound >= 2:
            # Only a bool array is a mask; 0/1 integers one per id look like a mask cast to
            # int8 (read as ids, they would allow rows 0 and 1 only), so neither is guessed.
            raise InputError(
                f"{what}: an integer array of {ids.size} 0s and 1s (one per id) could be a mask "
                "or ids; pass a bool mask (arr.astype(bool)) or the ids (np.flatnonzero(arr))"
            )
        if lo < 0 or hi >= space.id_bound:
            bad = lo if lo < 0 else hi
            raise IdOutOfRangeError(
                f"{what}: id {bad} is out of range; ids are in [0, {space.id_bound})"
            )
        pos = space.positions_of(ids)
        pos_mask = np.zeros(space.n_pos, dtype=bool)
        pos_mask[pos[pos >= 0]] = True
    if space.dead is not None:
        pos_mask = pos_mask & ~space.dead
    return pos_mask


def resolve_filter(f: Any, nq: int, space: IdSpace) -> FilterPlan:
    """Check an allow-list and turn it into masks over positions (see :class:`FilterPlan`).

    ``f``: a bool mask ``(id_bound,)`` or int ids ``(m,)`` for the whole batch;
    a bool mask ``(nq, id_bound)`` or a list/tuple of ``nq`` masks or id arrays,
    one per query.
    """
    if (
        type(f) is np.ndarray
        and f.dtype == np.bool_
        and f.shape == (space.n_pos,)
        and space.labels is None
        and space.dead is None
    ):
        # The common case, ~1 µs: one mask over an index never written to.
        count = int(np.count_nonzero(f))
        if count:
            return FilterPlan(f, None, nq, count)
    if isinstance(f, (list, tuple)):
        if f and all(isinstance(x, (int, np.integer)) for x in f):
            return FilterPlan(_one_mask(np.asarray(f, dtype=np.int64), space, "filter"), None, nq)
        if len(f) != nq:
            raise DimensionError(
                f"filter: {len(f)} per-query allow-lists for {nq} queries; pass one per query"
            )
        masks = [_one_mask(x, space, f"filter[{i}]") for i, x in enumerate(f)]
        return FilterPlan(None, masks, nq)
    arr = np.asarray(f)
    if arr.dtype == np.bool_ and arr.ndim == 2:
        if arr.shape[0] != nq:
            raise DimensionError(
                f"filter: a 2-D mask needs one row per query: {arr.shape[0]} rows for {nq} queries"
            )
        return FilterPlan(
            None, [_one_mask(row, space, f"filter[{i}]") for i, row in enumerate(arr)], nq
        )
    return FilterPlan(_one_mask(arr, space, "filter"), None, nq)

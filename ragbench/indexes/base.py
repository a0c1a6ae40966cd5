"""The public base classes of the index backends, and every hook they offer.

A backend can be written from the :class:`~ragbench.indexes.contract.Index`
Protocol alone; these classes give it the rest of the contract for the
price of a few hooks. Three levels, each a subclass of the one before:

:class:`BaseIndex` -- parameters, ``info()``, ``save`` and ``restore``
    Class attributes (knobs):

    - ``name``: the registry name (``"flat"``); ``library``: the distribution
      whose version records show (``"faiss"``); ``input_kind``:
      ``"vectors"`` or ``"texts"``;
    - ``supported_metrics``: of ``ip``, ``cosine``, ``l2``;
    - ``build_defaults`` / ``query_defaults``: every build and search
      parameter with its default (a name outside them is a ConfigError);
    - ``payload_format``: a tag of the saved bytes, checked on load;
    - ``build_deterministic`` (True): one-thread builds of the same data and
      seeds are the same index (False: records say ``deterministic: false``
      and the build cache skips it); ``build_cacheable`` (True): the build
      cache may save and reload it (either may be a property).

    Hooks: ``build(data)`` (check with ``_corpus``, run the library inside
    ``_timed_build(fn)``), ``search``, ``memory_bytes()``, ``_payload()``
    (the bytes to save) and ``_attach(payload, header)`` (the inverse, for
    ``restore``); optional: ``_check_build_params(params) -> params``,
    ``_check_query_value(name, value) -> value``, ``_compile_query(params)``
    (what a search needs from its parameters, cached), ``_payload_extra()``
    (facts saved in the header and checked on load), ``extra_info()``,
    ``search_thread_count()``.

:class:`VectorIndex` -- dense vectors of width ``dim``
    ``__init__(dim, metric="ip", **build_params)``; helpers ``_corpus(data)``
    (float32, finite, normalized for cosine), ``_slow_queries(queries)``
    (every query check) and ``_normalize_queries(q)``.

:class:`LiveVectorIndex` -- filtered search, ``add`` and ``delete``
    Knobs: ``filter_strategies`` (of ``pre``, ``post``, ``in-graph``),
    ``default_strategy`` and ``auto_pre_fraction`` (what ``auto`` picks),
    ``delete_mode`` (``None``: no delete; ``"mark"``; ``"compact"``),
    ``no_delete_reason``, ``exclusive_add`` (``add`` holds searches off),
    ``post_max_candidates``.

    Hooks: ``_prepare_queries(queries)`` (checked queries as the library
    takes them), ``_raw_search(q, k, compiled, allow)`` (positions and
    scores, ``-1``/``-inf`` padded; ``allow`` a positions mask for
    ``in-graph``), ``_lib_add(vectors, positions)``,
    ``_lib_delete(positions)``; optional: ``_read_vectors(space)`` (for
    ``pre``), ``_unit_queries(q)``, ``_on_space(space)``,
    ``_caller_ids(pos, space)``. Call
    ``_init_live()`` in ``__init__`` and ``_publish_built(n)`` once a build
    or load holds ``n`` rows. :meth:`LiveVectorIndex.search` is the plain
    reference search over those hooks; a backend may answer the common case
    first with a measured fast path (:mod:`ragbench.indexes._fast_paths`)
    that returns exactly what the reference returns.

A complete backend on :class:`LiveVectorIndex` is ``docs/how-to/examples/sq_index.py``
(walked through in ``docs/how-to/writing-a-backend.md``). The library
families add knobs of their own in their private modules
(``finite_answer_proves_query``, ``faiss_class``, ``chunked_add``, ...);
a new backend needs none of them.

Filtered search and writes in detail:
Filtered search and live ``add``/``delete`` for the dense backends (base class).

:class:`LiveVectorIndex` holds what the strategies share; a backend supplies
the library calls: :meth:`~LiveVectorIndex._raw_search` (search over
positions, optionally restricted in the library to a positions mask),
:meth:`~LiveVectorIndex._read_vectors`, :meth:`~LiveVectorIndex._lib_add`
and :meth:`~LiveVectorIndex._lib_delete`.

Filter strategies (``search(Q, k, filter=..., strategy=...)``):

``pre``
    Exact top-k over the allowed rows: the numba rerank kernel
    (:class:`ragbench.rerankers.numba_reranker.NumbaReranker`) scores every
    allowed row in place. Needs the vectors in ragbench's memory: the first
    ``pre`` search copies them out of the library (``n·dim·4`` bytes, kept
    and extended by ``add``; not part of ``memory_bytes()``).
``post``
    Search ``k'`` unfiltered candidates and keep the allowed ones; ``k'``
    starts at ``2k / selectivity`` (at least ``2k``) and is multiplied by 4
    for the queries still short of ``k``, up to :attr:`post_max_candidates`
    (default 4096) or the live count.
``in-graph``
    The library skips disallowed rows itself (faiss ``IDSelectorBitmap`` in
    ``SearchParameters``, hnswlib's ``filter`` callable).
``auto`` (the default)
    ``pre`` when every query allows at most :attr:`auto_pre_fraction` of the
    live rows (5 %; 20 % for hnswlib, whose filtered walk slows down as
    1/selectivity) and the backend has ``pre``, otherwise the backend's
    :attr:`default_strategy`. The fractions come from
    ``bench/test_bench_filters.py`` (20 000 × 128): where ``pre`` and
    ``in-graph`` cost the same.

Fewer than ``k`` results: when fewer than ``k`` allowed live rows exist, the
row is ``-1``/``-inf`` padded, as for any search. When ``post`` or
``in-graph`` finds fewer than ``min(k, allowed)`` rows (the library's walk
or the candidate cap ran out), the row is padded the same way and
:attr:`filter_shortfalls` (a counter of such query rows since the index was
created) goes up: compare it before and after a call to know.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np

from .. import __version__ as _RAGBENCH_VERSION
from .._registry import check_params
from ..errors import (
    ConfigError,
    IndexFileError,
    InputError,
    NotBuiltError,
    UnsupportedOperationError,
)
from ..threads import get_threads
from ..validate import METRICS, as_matrix, check_k, check_metric, positive_int
from ._arrays import F32, I64, INT32_MAX
from ._writes_and_filters import (
    FilterPlan,
    IdSpace,
    WriteGate,
    check_strategy,
    positions_to_delete,
    resolve_filter,
    space_after_add,
    space_after_delete,
)

__all__ = ["BaseIndex", "LiveVectorIndex", "VectorIndex"]

# Compiled query params are cached for the last params dict only: callers sweep
# one setting at a time and reuse it for thousands of calls.
_NO_PARAMS: tuple[dict[str, Any], Any] = ({}, None)


class BaseIndex:
    """What every backend shares: parameters, ``info()``, ``save`` and restore.

    Subclasses set the class attributes and implement ``build``, ``search``,
    ``memory_bytes``, ``_payload`` and ``_attach``.
    """

    name: ClassVar[str] = ""
    input_kind: ClassVar[Literal["vectors", "texts", "both"]] = "vectors"
    library: ClassVar[str] = ""
    supported_metrics: ClassVar[tuple[str, ...]] = METRICS
    build_defaults: ClassVar[Mapping[str, Any]] = {}
    query_defaults: ClassVar[Mapping[str, Any]] = {}
    payload_format: ClassVar[str] = ""

    metric: str
    dim: int | None
    build_params: dict[str, Any]
    query_params: frozenset[str]
    default_query_params: dict[str, Any]
    build_seconds: float | None
    # Nanoseconds the last build/load spent on kernels of ragbench's own (hnsw's
    # compiled score conversion); part of neither the library's build time.
    compile_ns: int

    @property
    def build_deterministic(self) -> bool:
        """One-thread builds of the same data and seeds are the same index (see
        :mod:`ragbench.indexes.builds`); False: records say ``deterministic: false``."""
        return True

    @property
    def build_cacheable(self) -> bool:
        """The build cache may save this index and load it instead of a rebuild."""
        return True

    def _init_common(self, dim: int | None, metric: str, build_params: dict[str, Any]) -> None:
        check_params(f"index {self.name!r}", build_params, frozenset(self.build_defaults))
        self.metric = check_metric(f"index {self.name!r}", metric, self.supported_metrics)
        self.dim = dim
        params = dict(self.build_defaults)
        params.update(build_params)
        self.build_params = self._check_build_params(params)
        self.query_params = frozenset(self.query_defaults)
        self.default_query_params = dict(self.query_defaults)
        self.build_seconds = None
        # How the last build ran ("build" in info(); see ragbench.indexes.builds).
        self.build_record: dict[str, Any] | None = None
        self.compile_ns = 0
        # The header's "data" record once saved or loaded (see save()); None otherwise.
        self.saved_data: dict[str, Any] | None = None
        self._n = 0
        # (last params dict, its compiled form): one tuple so a concurrent
        # caller never pairs one call's params with another's compiled value.
        self._last_query: tuple[dict[str, Any], Any] = _NO_PARAMS
        self._default_compiled = self._compile_query(dict(self.query_defaults))

    # -- parameters -----------------------------------------------------------------

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return params

    def _check_query_value(self, name: str, value: Any) -> Any:
        # The libraries take these as C ints (faiss efSearch, hnswlib ef): above
        # int32 the SWIG/pybind11 call would raise OverflowError mid-request.
        return positive_int(f"index {self.name!r}", name, value, hi=INT32_MAX)

    def _compile_query(self, params: dict[str, Any]) -> Any:
        """Turn validated query params (defaults filled in) into what search needs."""
        return None

    def _parse_query(self, params: dict[str, Any]) -> Any:
        """Validate per-call params; cache the compiled form for the next identical call."""
        check_params(f"index {self.name!r} search", params, self.query_params)
        merged = dict(self.query_defaults)
        for key, value in params.items():
            merged[key] = self._check_query_value(key, value)
        compiled = self._compile_query(merged)
        self._last_query = (dict(params), compiled)
        return compiled

    def check_query_params(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ConfigError` for an unknown query parameter or a bad value.

        Works before ``build`` (a pipeline checks its config with it before any
        data is loaded); remembers nothing.
        """
        check_params(f"index {self.name!r} search", dict(params), self.query_params)
        for key, value in params.items():
            self._check_query_value(key, value)

    # -- state ----------------------------------------------------------------------

    @property
    def ntotal(self) -> int:
        """Number of items in the index (0 before ``build``)."""
        return self._n

    def _not_built(self) -> NotBuiltError:
        return NotBuiltError(f"index {self.name!r}: call build(data) before search/save")

    def _timed_build(self, fn: Callable[[], None]) -> None:
        start = time.perf_counter_ns()
        used = get_threads()
        fn()
        self.build_seconds = (time.perf_counter_ns() - start) / 1e9
        # On one thread every bundled backend builds the same index from the
        # same data and seeds, unless it says it cannot (``build_deterministic``
        # False: pgvector); ragbench.indexes.builds.build fills in the rest.
        self.build_record = {
            "deterministic": used == 1 and bool(self.build_deterministic),
            "threads": used,
            "seed": self.build_params.get("seed"),
            "cached": False,
            "seconds": self.build_seconds,
        }

    def library_version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        dist = {"faiss": "faiss-cpu"}.get(self.library, self.library)
        try:
            return version(dist)
        except PackageNotFoundError:
            return "unknown"

    def extra_info(self) -> dict[str, Any]:
        """Backend facts added to ``info()`` (e.g. the effective ``nlist``)."""
        return {}

    def search_thread_count(self) -> int | None:
        """Threads one query's search may use; ``None``: the library's own pools, not limited.

        One query at a time is a fair comparison only when every engine answers
        it on the same number of threads. The bundled in-process indexes search
        one query on the calling thread (``threads``/``get_threads()`` is for
        builds and batches), so 1; an engine with a search pool of its own says
        its setting (qdrant-edge's ``search_threads``) or ``None``.
        """
        return 1

    def info(self) -> dict[str, Any]:
        """JSON-able description for records: backend, params, library, threads, search_threads."""
        out: dict[str, Any] = {
            "backend": self.name,
            "input_kind": self.input_kind,
            "metric": self.metric,
            "dim": self.dim,
            "params": dict(self.build_params),
            "query_params": dict(self.default_query_params),
            "library": self.library,
            "library_version": self.library_version(),
            "threads": get_threads(),
            "search_threads": self.search_thread_count(),
            "ntotal": self._n,
            "build_seconds": self.build_seconds,
        }
        if self.build_record is not None:
            out["build"] = dict(self.build_record)
        out.update(self.extra_info())
        return out

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} metric={self.metric!r} dim={self.dim} "
            f"ntotal={self._n} params={self.build_params!r}>"
        )

    # -- persistence ----------------------------------------------------------------

    def _payload(self) -> bytes | memoryview:
        raise NotImplementedError

    def _payload_extra(self) -> dict[str, Any]:
        """Backend facts stored in the header and checked again on load."""
        return {}

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        raise NotImplementedError

    def save(self, path: Any, *, data: Any = None, source: str | None = None) -> None:
        """Write the index as one file: ragbench header + the library's own format.

        ``data``: the corpus the index was built on (the vectors or texts given
        to ``build``); its :func:`~ragbench.indexes.persist.data_fingerprint`
        goes into the header with ``source`` (a description of that data for
        messages), so a later user can check the file is an index of *its*
        data (:attr:`saved_data`; a pipeline refuses a mismatch). See
        :mod:`ragbench.indexes.persist` for the layout.
        """
        from .persist import data_fingerprint, write_index_file

        if self._n == 0:
            raise self._not_built()
        record = None
        if data is not None:
            record = {"fingerprint": data_fingerprint(data), "source": source}
        header = {
            "backend": self.name,
            "input_kind": self.input_kind,
            "build_params": dict(self.build_params),
            "dim": self.dim,
            "metric": self.metric,
            "count": self._n,
            "library": {"name": self.library, "version": self.library_version()},
            "ragbench_version": _RAGBENCH_VERSION,
            "payload_format": self.payload_format,
            "extra": self._payload_extra(),
            "data": record,
        }
        write_index_file(path, header, self._payload())
        self.saved_data = record

    @classmethod
    def restore(cls, header: dict[str, Any], payload: memoryview) -> BaseIndex:
        """Rebuild an index from a verified header and payload (``ragbench.indexes.load``).

        Creates the index from the header's parameters, then ``_attach``es the
        payload; :class:`IndexFileError` when either does not fit.
        """
        params = header.get("build_params")
        if not isinstance(params, dict):
            raise IndexFileError(f"{cls.name}: header build_params is not a table")
        if header.get("payload_format") != cls.payload_format:
            raise IndexFileError(
                f"{cls.name}: payload format {header.get('payload_format')!r} is not "
                f"{cls.payload_format!r}; the file was written by another backend or version"
            )
        try:
            obj = cls(dim=header.get("dim"), metric=header.get("metric"), **params)  # type: ignore[call-arg]
        except ConfigError as exc:
            raise IndexFileError(f"{cls.name}: header holds invalid parameters: {exc}") from None
        obj._attach(payload, header)
        obj.saved_data = header.get("data")
        count = header.get("count")
        if obj._n != count:
            raise IndexFileError(
                f"{cls.name}: header says {count} items but the payload holds {obj._n}"
            )
        return obj


class VectorIndex(BaseIndex):
    """Base of the dense-vector backends (``input_kind == "vectors"``)."""

    input_kind: ClassVar[Literal["vectors", "texts", "both"]] = "vectors"
    dim: int

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        if dim is None:
            raise ConfigError(f"index {self.name!r}: pass dim=<vector width>, e.g. dim=384")
        dim = positive_int(f"index {self.name!r}", "dim", dim, hi=INT32_MAX)
        self._init_common(dim, metric, build_params)
        self._cosine = metric == "cosine"

    def _corpus(self, data: Any) -> np.ndarray:
        """Validate the corpus: float32 C-contiguous ``(n, dim)``, finite, non-empty.

        For ``cosine`` the rows are normalized into a copy (the caller's array
        is never modified).
        """
        vectors = as_matrix(data, name="corpus vectors", dim=self.dim)
        if vectors.shape[0] == 0:
            raise InputError(f"index {self.name!r}: the corpus is empty; pass at least one vector")
        if self._cosine:
            norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64))
            zero = np.flatnonzero(norms == 0)
            if zero.size:
                raise InputError(
                    f"corpus vectors: row {int(zero[0])} has zero norm; cosine similarity is "
                    "undefined for it (drop the row or use metric='ip')"
                )
            vectors = (vectors / norms[:, None]).astype(np.float32)
        return vectors

    def _slow_queries(self, queries: Any) -> np.ndarray:
        """Full validation of queries, used when the inline fast check fails.

        The fast checks are ``0 < vdot(q, q) < inf`` for one float32 row (it
        fails for an all-zero query and when finite values overflow the
        float32 sum of squares, |x| > ~1e19) and :func:`batch_is_finite` for a
        batch (it fails for an empty one), so this path re-checks element by
        element before raising.
        """
        q = as_matrix(queries, name="queries", dim=self.dim)
        if self._cosine and q.shape[0]:
            norms = np.einsum("ij,ij->i", q, q, dtype=np.float64)
            zero = np.flatnonzero(norms == 0)
            if zero.size:
                raise InputError(
                    f"queries: row {int(zero[0])} has zero norm; cosine similarity is undefined"
                )
        return q

    def _normalize_queries(self, q: np.ndarray) -> np.ndarray:
        """Unit-length copy of validated queries (cosine only; costs one pass + allocation)."""
        if q.shape[0] == 1:
            scaled: np.ndarray = q * np.float32(1.0 / math.sqrt(float(np.vdot(q, q))))
            return scaled
        norms = np.sqrt(np.einsum("ij,ij->i", q, q, dtype=np.float64))
        return np.asarray(q / norms[:, None], dtype=np.float32)


class LiveVectorIndex(VectorIndex):
    """A dense index with filtered search, ``add`` and ``delete`` (see the module docstring)."""

    #: Filter strategies this backend offers (besides ``auto``).
    filter_strategies: ClassVar[tuple[str, ...]] = ("pre", "post", "in-graph")
    #: ``auto`` takes ``pre`` when every query allows at most this fraction of the live rows.
    auto_pre_fraction: ClassVar[float] = 0.05
    #: What ``auto`` uses above :attr:`auto_pre_fraction`.
    default_strategy: ClassVar[str] = "in-graph"
    #: ``"mark"``: deleted positions stay (hnswlib, ivf); ``"compact"``: the library
    #: renumbers the rows after them (faiss flat, lsh); ``None``: no delete.
    delete_mode: ClassVar[str | None] = None
    #: Whether ``add`` holds searches off (faiss, whose ``add`` reallocates); hnswlib
    #: adds beside running searches and holds them off only to resize.
    exclusive_add: ClassVar[bool] = True
    no_delete_reason: ClassVar[str] = "the library cannot remove rows"
    #: Largest ``k'`` the ``post`` strategy asks the library for.
    post_max_candidates: int = 4096

    _gate: WriteGate
    _space: IdSpace | None

    def _init_live(self) -> None:
        self._gate = WriteGate()
        self._space = None
        self._store: np.ndarray | None = None
        self._store_rows = 0
        self._store_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._reranker: Any = None
        self._written = False
        #: Query rows for which ``post``/``in-graph`` found fewer than ``min(k, allowed)`` rows.
        self.filter_shortfalls = 0

    # -- backend hooks ----------------------------------------------------------------

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions int64 ``(nq, k)`` and scores, ``-1``/``-inf`` padded; ``allow`` in the library."""
        raise NotImplementedError

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        """Checked queries as :meth:`_raw_search` takes them."""
        raise NotImplementedError

    def _unit_queries(self, q: np.ndarray) -> np.ndarray:
        """Queries from :meth:`_prepare_queries` as the ``pre`` kernel scores them."""
        return q

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        """float32 ``(n_pos, dim)`` copy of the stored rows (deleted rows may be zeros)."""
        raise UnsupportedOperationError(
            f"index {self.name!r}: the 'pre' filter strategy needs the vectors, which "
            f"{self.library} does not keep"
        )

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        raise NotImplementedError

    def _lib_delete(self, positions: np.ndarray) -> None:
        raise NotImplementedError

    def _on_space(self, space: IdSpace) -> None:
        """Refresh the backend's search state for a new id snapshot (before it is published)."""

    # -- state ------------------------------------------------------------------------

    def _publish_built(self, n: int) -> None:
        """After build/load: ids 0..n-1, nothing deleted, no copied vectors."""
        space = IdSpace.identity(n)
        with self._store_lock:
            self._store = None
        self._written = False
        self._on_space(space)
        self._space = space
        self._n = space.live

    def _publish(self, space: IdSpace) -> None:
        self._on_space(space)
        self._space = space
        self._n = space.live
        self._written = True

    @property
    def id_bound(self) -> int:
        """Length of a boolean filter mask: one more than the largest id ever held."""
        space = self._space
        if space is None:
            raise self._not_built()
        return space.id_bound

    def save(self, path: Any, *, data: Any = None, source: str | None = None) -> None:
        """As :meth:`BaseIndex.save`; an index changed by ``add``/``delete`` cannot be saved yet."""
        if self._written:
            raise UnsupportedOperationError(
                f"index {self.name!r}: saving an index changed by add()/delete() is not "
                "supported yet (its ids and deletions are not part of the file format); "
                "build it again from the final vectors and save that"
            )
        super().save(path, data=data, source=source)

    # -- search -----------------------------------------------------------------------

    def search(
        self, queries: Any, k: int, *, filter: Any = None, strategy: Any = None, **params: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query, optionally restricted to an allow-list: the reference search.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            filter, strategy: an allow-list and how to apply it (module docstring).
            **params: the backend's query parameters (``query_params``).

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.

        Plainly written over the hooks: every backend's answers are defined
        by it. A backend may answer the common case first with a measured
        fast path (:mod:`ragbench.indexes._fast_paths`), which must return
        exactly what this returns.
        """
        with self._gate:
            compiled = self._parse_query(params) if params else self._default_compiled
            if filter is not None or strategy is not None:
                return self._search_filtered(queries, k, compiled, filter, strategy)
            space = self._space
            if space is None:
                raise self._not_built()
            q = self._prepare_queries(queries)
            k = check_k(k, space.live)
            if not q.shape[0]:
                return np.empty((0, k), I64), np.empty((0, k), F32)
            pos, scores = self._raw_search(q, k, compiled, None)
            return self._caller_ids(pos, space), scores

    def _caller_ids(self, pos: np.ndarray, space: IdSpace) -> np.ndarray:
        """The caller's ids of the positions a search returned, ``-1`` pads kept.

        ``space`` is the snapshot the search started from. A library that adds
        rows beside running searches (hnswlib) may return positions published
        after it: such a backend maps them with the snapshot of its last add.
        """
        return space.to_ids(pos)

    # -- filtered search --------------------------------------------------------------

    def _search_filtered(
        self, queries: Any, k: Any, compiled: Any, allow: Any, strategy: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """The body of ``search`` when ``filter=`` or ``strategy=`` is passed."""
        owner = f"index {self.name!r}"
        strategy = check_strategy(owner, strategy, self.filter_strategies)
        if allow is None:
            raise InputError(f"{owner}: strategy={strategy!r} needs filter=<mask or ids>")
        space = self._space
        if space is None:
            raise self._not_built()
        q = self._prepare_queries(queries)
        k = check_k(k, space.live)
        nq = q.shape[0]
        plan = resolve_filter(allow, nq, space)
        if nq == 0:
            return np.empty((0, k), I64), np.empty((0, k), F32)
        if strategy == "auto":
            small = int(plan.counts.max()) <= self.auto_pre_fraction * space.live
            strategy = "pre" if small and "pre" in self.filter_strategies else self.default_strategy
        if strategy == "pre":
            pos, scores = self._pre(q, k, plan, space)
        elif strategy == "post":
            pos, scores = self._post(q, k, compiled, plan, space)
        else:
            pos, scores = self._in_graph(q, k, compiled, plan)
        if strategy != "pre":
            self._count_shortfalls(pos, k, plan)
        return self._caller_ids(pos, space), scores

    def _count_shortfalls(self, pos: np.ndarray, k: int, plan: FilterPlan) -> None:
        if pos.shape[0] == 1 and pos.item(-1) >= 0:
            return  # a full row (pads are last): nothing to count
        found = (pos >= 0).sum(axis=1)
        short = int((found < np.minimum(plan.counts, k)).sum())
        if short:
            with self._stats_lock:
                self.filter_shortfalls += short

    def _in_graph(
        self, q: np.ndarray, k: int, compiled: Any, plan: FilterPlan
    ) -> tuple[np.ndarray, np.ndarray]:
        if plan.shared is not None:
            return self._raw_search(q, k, compiled, plan.shared)
        ids = np.empty((q.shape[0], k), I64)
        scores = np.empty((q.shape[0], k), F32)
        for r in range(q.shape[0]):
            ids[r : r + 1], scores[r : r + 1] = self._raw_search(
                q[r : r + 1], k, compiled, plan.mask(r)
            )
        return ids, scores

    def _post(
        self, q: np.ndarray, k: int, compiled: Any, plan: FilterPlan, space: IdSpace
    ) -> tuple[np.ndarray, np.ndarray]:
        nq = q.shape[0]
        out_i = np.full((nq, k), -1, dtype=I64)
        out_s = np.full((nq, k), -np.inf, dtype=F32)
        limit = max(k, min(space.live, self.post_max_candidates))
        need = np.minimum(plan.counts, k)
        sel = np.maximum(plan.counts, 1) / max(space.live, 1)
        want = np.minimum(limit, np.maximum(2 * k, np.ceil(2 * k / sel))).astype(np.int64)
        pending = np.arange(nq)
        while pending.size:
            still = []
            # One library call per k' (each query's answer then depends on its own k'
            # only, as if it were searched alone).
            for kk in np.unique(want[pending]).tolist():
                rows = pending[want[pending] == kk]
                pos, scores = self._raw_search(np.ascontiguousarray(q[rows]), kk, compiled, None)
                for j, r in enumerate(rows.tolist()):
                    got_i, got_s = self._keep_allowed(pos[j], scores[j], plan.mask(r), k)
                    out_i[r, : got_i.size] = got_i
                    out_s[r, : got_s.size] = got_s
                    if got_i.size < need[r] and kk < limit:
                        want[r] = min(limit, kk * 4)
                        still.append(r)
            pending = np.asarray(still, dtype=np.int64)
        return out_i, out_s

    @staticmethod
    def _keep_allowed(
        pos: np.ndarray, scores: np.ndarray, mask: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The first ``k`` of ``pos`` (best first) that ``mask`` allows."""
        ok = (pos >= 0) & (pos < mask.size)
        ok[ok] = mask[pos[ok]]
        keep = np.flatnonzero(ok)[:k]
        return pos[keep], scores[keep]

    def _pre(
        self, q: np.ndarray, k: int, plan: FilterPlan, space: IdSpace
    ) -> tuple[np.ndarray, np.ndarray]:
        x = self._vectors_for(space)
        rr = self._pre_reranker()
        uq = self._unit_queries(q)
        nq = q.shape[0]
        out_i = np.empty((nq, k), I64)
        out_s = np.empty((nq, k), F32)
        shared = None if plan.shared is None else np.flatnonzero(plan.shared).astype(I64)
        for r in range(nq):
            allowed = shared if shared is not None else np.flatnonzero(plan.mask(r)).astype(I64)
            out_i[r], out_s[r] = rr.rerank(uq[r], allowed, x, k)
        return out_i, out_s

    def _pre_reranker(self) -> Any:
        rr = self._reranker
        if rr is None:
            from ..rerankers.numba_reranker import NumbaReranker

            rr = self._reranker = NumbaReranker(metric="l2" if self.metric == "l2" else "ip")
        return rr

    def _vectors_for(self, space: IdSpace) -> np.ndarray:
        """The stored rows ``(n_pos, dim)``, copied out of the library on first use."""
        store = self._store
        if store is None or self._store_rows < space.n_pos:
            with self._store_lock:
                store = self._store
                if store is None or self._store_rows < space.n_pos:
                    store = np.ascontiguousarray(self._read_vectors(space), F32)
                    self._store, self._store_rows = store, space.n_pos
        return store[: space.n_pos]

    # -- writes -----------------------------------------------------------------------

    def _cannot_delete(self) -> UnsupportedOperationError:
        from . import deleting_backends

        return UnsupportedOperationError(
            f"index {self.name!r} cannot delete: {self.no_delete_reason}; "
            f"backends that can: {', '.join(deleting_backends())}"
        )

    def add(self, vectors: Any, ids: Any = None) -> np.ndarray:
        """Insert float32 ``(m, dim)`` rows; returns their ids (int64 ``(m,)``).

        ``ids``: ``m`` unique non-negative integers not live in the index, or
        ``None`` for the next ids (``id_bound``, ``id_bound + 1``, ...). For
        ``cosine`` the rows are normalized into a copy, as at build. See the
        backend's docstring for what searches running meanwhile see.
        """
        if self._space is None:
            raise NotBuiltError(f"index {self.name!r}: call build(data) before add()")
        vecs = self._corpus(vectors)
        m = vecs.shape[0]
        with self._gate.writer():
            space = self._space
            if space is None:
                raise self._not_built()
            new_space, new_ids = space_after_add(space, m, ids)
            positions = np.arange(new_space.n_pos - m, new_space.n_pos, dtype=I64)
            if self.exclusive_add:
                with self._gate.exclusive():
                    self._commit_add(vecs, positions, new_space)
            else:
                self._commit_add(vecs, positions, new_space)
        return new_ids

    def _commit_add(self, vecs: np.ndarray, positions: np.ndarray, space: IdSpace) -> None:
        self._extend_store(vecs, int(positions[0]))
        # Labels first: a search running beside hnswlib's add may already see the rows.
        self._on_space(space)
        self._lib_add(vecs, positions)
        self._publish(space)

    def _extend_store(self, vecs: np.ndarray, start: int) -> None:
        """Append to the copied vectors (if any): in place while capacity lasts, else 2x."""
        with self._store_lock:
            store = self._store
            if store is None:
                return
            if self._store_rows != start:
                self._store = None
                return
            stop = start + vecs.shape[0]
            if stop > store.shape[0]:
                grown = np.empty((max(stop, 2 * store.shape[0]), self.dim), dtype=F32)
                grown[:start] = store[:start]
                store = grown
            # Rows past a running search's snapshot: it never reads them.
            store[start:stop] = vecs
            self._store = store
            self._store_rows = stop

    def delete(self, ids: Any) -> None:
        """Remove the rows with these ids (int ``(m,)``; each must be live in the index).

        Searches never return a deleted id, filtered or not. See the backend's
        docstring for whether the memory is freed and how searches are held off.
        """
        if self.delete_mode is None:
            raise self._cannot_delete()
        if self._space is None:
            raise self._not_built()
        with self._gate.writer():
            space = self._space
            if space is None:
                raise self._not_built()
            pos = positions_to_delete(space, ids)
            new_space = space_after_delete(space, pos, self.delete_mode)
            with self._gate.exclusive():
                self._lib_delete(pos)
                if self.delete_mode == "compact":
                    with self._store_lock:
                        self._store = None
                self._publish(new_space)

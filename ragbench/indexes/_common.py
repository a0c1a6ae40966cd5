"""Shared machinery for the index backends: parameter checks, query validation, padding.

Every backend keeps its ``search`` hot path inline (attribute look-ups and a
single BLAS call to check finiteness); the slower, complete checks live here
and run only when the fast checks cannot vouch for the input.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np

from .. import __version__ as _RAGBENCH_VERSION
from .._registry import check_params
from ..errors import ConfigError, IndexFileError, InputError, NotBuiltError
from ..threads import get_threads
from ..validate import METRICS, as_matrix, check_metric, positive_int

__all__ = [
    "BaseIndex",
    "F32",
    "FLT_MAX",
    "I64",
    "INT32_MAX",
    "VectorIndex",
    "batch_is_finite",
    "build_step",
    "fix_padding",
]

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
INF = math.inf
#: The largest finite float32, as a Python float: faiss's pad score (negated for ip).
FLT_MAX = float(np.finfo(np.float32).max)
#: Largest value of an integer parameter handed to faiss or hnswlib as a C ``int``.
INT32_MAX = 2**31 - 1

_max_reduce = np.maximum.reduce
_min_reduce = np.minimum.reduce


def batch_is_finite(q: np.ndarray) -> bool:
    """Whether a non-empty float32 query batch holds no NaN or +-inf (False when empty).

    A max and a min pass (numpy's own SIMD loops, one thread; both propagate
    NaN). Not ``vdot(q, q)`` as for a single row: on a batch that is a
    threaded BLAS call, and OpenBLAS's worker then spins on the other core
    while the index library's search threads want it (measured: +2.0 % on a
    500-query hnswlib batch of ~30 ms on 2 cores, vs -0.3 % for a numpy
    reduction).
    """
    if not q.size:
        return False
    return float(_min_reduce(q, axis=None)) > -INF and float(_max_reduce(q, axis=None)) < INF


_MIN_BUILD_STEP = 10_000


def build_step(n: int) -> int:
    """Rows per add call when an index is built in chunks to report progress.

    At least 10 000 rows, and at most 100 calls: a chunk takes long enough
    that the calls' overhead and each call's thread start and join stay far
    below the noise of a build; a corpus up to 10 000 rows is one call.
    """
    return max(_MIN_BUILD_STEP, -(-n // 100))


# Compiled query params are cached for the last params dict only: callers sweep
# one setting at a time and reuse it for thousands of calls.
_NO_PARAMS: tuple[dict[str, Any], Any] = ({}, None)


def fix_padding(ids: np.ndarray, scores: np.ndarray) -> None:
    """In place: ``-inf`` scores where ``ids == -1``, each row re-sorted best first.

    Libraries pad with ``±FLT_MAX`` (faiss) or leave holes anywhere in a row;
    the contract is ``-1`` ids with ``-inf`` scores at the end of the row.
    Only called on the rare path where a pad was seen.
    """
    pads = ids < 0
    ids[pads] = -1
    scores[pads] = -INF
    # Stable, so equal scores keep the library's order.
    order = np.argsort(-scores, axis=1, kind="stable")
    ids[...] = np.take_along_axis(ids, order, axis=1)
    scores[...] = np.take_along_axis(scores, order, axis=1)


class BaseIndex:
    """What every backend shares: parameters, ``info()``, ``save`` and restore.

    Subclasses set the class attributes and implement ``build``, ``search``,
    ``memory_bytes``, ``_payload`` and ``_attach``.
    """

    name: ClassVar[str] = ""
    input_kind: ClassVar[Literal["vectors", "texts"]] = "vectors"
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
            "deterministic": used == 1 and bool(getattr(self, "build_deterministic", True)),
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
    def _restore(cls, header: dict[str, Any], payload: memoryview) -> BaseIndex:
        """Rebuild an index from a verified header and payload (used by ``load``)."""
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

    input_kind: ClassVar[Literal["vectors", "texts"]] = "vectors"
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

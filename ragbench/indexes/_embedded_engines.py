"""What the embedded vector-engine backends share (``chroma``, ``qdrant-edge``, ``usearch``).

:class:`EngineIndex` is a :class:`~ragbench.indexes.base.LiveVectorIndex`
with the search entry every engine backend had written out: the write gate,
the query parameters (the last call's compiled value kept), the
filter/strategy dispatch, the query checks (shape, dtype, NaN/inf, cosine
zero rows, ``k``), the empty batch and the caller's ids. A backend supplies
:meth:`~ragbench.indexes.base.LiveVectorIndex._raw_search` (positions,
``-1``/``-inf`` padded: :func:`padded` and :func:`pad_rows` build that).
This search is the engines' reference; a measured fast path of an engine
(:mod:`ragbench.indexes._fast_paths`) answers first in the backend's own
``search`` and leaves every other call to it.

:class:`FolderEngineIndex` adds the temporary folder an engine keeps its
files in: removed by ``close()`` or when the index is garbage-collected, its
size (:func:`folder_bytes`), and its payload as a tar (:func:`tar_folder`,
:func:`extract_tar`).

:class:`WhereSearch` adds ``search(where=spec)`` for an engine whose table
holds attribute columns (``pgvector``, ``lancedb``): the specs become the
backend's filter form (:mod:`ragbench.indexes.attribute_filters`) for its
``in-graph`` search, and a mask for the other strategies.
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
import tarfile
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from ..errors import ConfigError
from ..validate import check_k, positive_int
from ._arrays import F32, I64, INF, INT32_MAX, batch_is_finite
from ._fast_paths import NOT_CACHED, cached_query_params
from ._writes_and_filters import FilterPlan, IdSpace
from .attribute_filters import AttributeColumns, Term, WhereFilter, spec_terms, where_masks
from .base import LiveVectorIndex

_T = TypeVar("_T")
_ndarray = np.ndarray
_empty = np.empty


def import_engine(index: str, module: str, what: str) -> Any:
    """The engine's module, imported on first use; ConfigError naming the extra when it is missing.

    ``what`` names the package in the message (``"the usearch package"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - the vectordb extra is missing
        raise ConfigError(
            f"index {index!r} needs {what}: pip install 'ragbench[vectordb]'"
        ) from None


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic surfaced by PyO3 (``pyo3_runtime.PanicException``).

    PyO3 derives it from ``BaseException``, so ``except Exception`` lets it
    through; the class is not importable, hence the name test.
    """
    return type(exc).__name__ == "PanicException"


def check_graph_params(owner: str, params: dict[str, Any], *ints: str) -> dict[str, Any]:
    """An HNSW build's ``M`` (2 to 4096), then each of ``ints`` (1 to 2**31 - 1), checked in place."""
    params["M"] = positive_int(owner, "M", params["M"], lo=2, hi=4096)
    for key in ints:
        params[key] = positive_int(owner, key, params[key], hi=INT32_MAX)
    return params


def padded(nq: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """An answer with nothing found yet: ids int64 ``(nq, k)`` of ``-1``, scores float32 of ``-inf``."""
    return np.full((nq, k), -1, dtype=I64), np.full((nq, k), -INF, dtype=F32)


def pad_rows(ids: Sequence[Any], scores: Sequence[Any], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of any length (ints, or decimal strings for ids) as ``(len(ids), k)`` arrays.

    Row ``r`` holds its first ``min(len(ids[r]), k)`` ids (int64) and scores
    (float32); the rest is ``-1``/``-inf``.
    """
    out_i, out_s = padded(len(ids), k)
    for r, (row_i, row_s) in enumerate(zip(ids, scores, strict=True)):
        m = min(len(row_i), k)
        if m:
            out_i[r, :m] = np.asarray(row_i[:m], dtype=I64)
            out_s[r, :m] = row_s[:m]
    return out_i, out_s


class EngineIndex(LiveVectorIndex):
    """A dense index run by an engine library: the shared search entry (see the module docstring)."""

    #: Whether the engine reads query rows as C-contiguous memory (usearch): other
    #: queries are copied into a contiguous array.
    contiguous_queries: ClassVar[bool] = False

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        # labels_ext of the id snapshot (None: the caller's ids are the engine's positions).
        self._labels_ext: np.ndarray | None = None
        self._similarity = metric != "l2"
        self._init_live()

    def _on_space(self, space: IdSpace) -> None:
        self._labels_ext = space.labels_ext()

    def search(
        self, queries: Any, k: int, filter: Any = None, strategy: Any = None, **params: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            filter, strategy: an allow-list and how to apply it (the strategies of
                :attr:`filter_strategies`; see the backend's module docstring).
            **params: the backend's query parameters (``query_params``; see its
                module docstring); any other name raises ConfigError.

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.
        """
        with self._gate:
            compiled = self._default_compiled if not params else self._params(params)
            if filter is not None or strategy is not None:
                return self._search_filtered(queries, k, compiled, filter, strategy)
            return self._search_unfiltered(queries, k, compiled)

    def _search_unfiltered(
        self, queries: Any, k: Any, compiled: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` without a filter, inside the gate, with every check."""
        space = self._space
        if space is None:
            raise self._not_built()
        q = self._queries(queries)
        if type(k) is not int or k < 1 or k > space.live:
            k = check_k(k, space.live)
        if not q.shape[0]:
            return _empty((0, k), I64), _empty((0, k), F32)
        pos, scores = self._raw_search(q, k, compiled, None)
        return (pos if self._labels_ext is None else space.to_ids(pos)), scores

    def _params(self, params: dict[str, Any]) -> Any:
        """This call's compiled query parameters (the last call's, when they are equal)."""
        compiled = cached_query_params(self, params)
        return self._parse_query(params) if compiled is NOT_CACHED else compiled

    def _queries(self, q: Any) -> np.ndarray:
        """Checked float32 ``(nq, dim)`` queries (NaN/inf, wrong width, cosine zero rows).

        A float32 ``(nq, dim)`` ip/l2 array passes on a min and a max pass
        (:func:`batch_is_finite`, which propagate NaN); cosine needs its
        per-row zero-norm check, and every other input the full check.
        """
        if (
            type(q) is _ndarray
            and q.dtype is F32
            and q.ndim == 2
            and q.shape[1] == self.dim
            and (not self.contiguous_queries or q.flags.c_contiguous)
            and not self._cosine
            and batch_is_finite(q)
        ):
            return q
        checked = self._slow_queries(q)
        return np.ascontiguousarray(checked) if self.contiguous_queries else checked

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        return self._queries(queries)


def close_and_remove(handle: Any, folder: str) -> None:
    """Close an engine handle (if any) and remove its folder (also run by the garbage collector)."""
    try:
        if handle is not None:
            handle.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def in_new_folder(prefix: str, opener: Callable[[str], _T]) -> tuple[_T, str]:
    """``(opener(folder), folder)`` for a new temporary folder, removed again if ``opener`` raises."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        return opener(folder), folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def folder_bytes(folder: str) -> int:
    """Bytes the files below ``folder`` occupy (blocks allocated, 512 bytes each)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def tar_folder(folder: str, name: str) -> bytes:
    """The subfolder ``name`` of ``folder`` as an uncompressed tar archive (stored as ``name``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(os.path.join(folder, name), arcname=name)
    return buf.getvalue()


def extract_tar(payload: memoryview, folder: str) -> None:
    """Unpack an uncompressed tar into ``folder`` (tarfile's ``data`` filter: no links out)."""
    with tarfile.open(fileobj=io.BytesIO(bytes(payload)), mode="r:") as tar:
        tar.extractall(folder, filter="data")


class FolderEngineIndex(EngineIndex):
    """An :class:`EngineIndex` whose engine keeps its files in a temporary folder of its own."""

    #: The engine's subfolder of the temporary folder: what ``save`` stores, as a tar.
    data_folder: ClassVar[str] = "db"

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._folder: str | None = None
        self._finalizer: Any = None

    def _own_folder(self, handle: Any, folder: str) -> None:
        """Drop any earlier engine; ``handle`` (closed first) and ``folder`` go with this index."""
        self.close()
        self._folder = folder
        self._finalizer = weakref.finalize(self, close_and_remove, handle, folder)

    def _drop_handles(self) -> None:
        """Forget the engine's objects (``close`` has closed them, or will)."""

    def close(self) -> None:
        """Close the engine and remove its temporary folder (the index is unbuilt after)."""
        finalizer, self._finalizer = self._finalizer, None
        self._drop_handles()
        self._folder = None
        self._space = None
        self._n = 0
        if finalizer is not None:
            finalizer()

    def memory_bytes(self) -> int:
        """Bytes the engine's temporary folder occupies (blocks allocated; engines map their files)."""
        if self._folder is None:
            raise self._not_built()
        return folder_bytes(self._folder)

    def _flush(self) -> None:
        """Write what the engine holds in memory to its folder (before ``save``)."""

    def _payload(self) -> bytes:
        if self._folder is None:
            raise self._not_built()
        self._flush()
        return tar_folder(self._folder, self.data_folder)


class WhereSearch(EngineIndex):
    """An :class:`EngineIndex` whose table holds attribute columns: ``search(where=spec)``.

    The backend sets ``_attrs`` (``set_attributes``) and ``_local`` (a
    ``threading.local``), says whether the table holds the columns
    (:meth:`_where_ready`), gives a query's terms in the form its
    ``_raw_search`` takes as a fifth argument (:meth:`_where_form`; ``None``:
    no filter, the allow-list's rows) and may pick the strategy of a ``where``
    search (:meth:`_where_strategy`).
    """

    _attrs: AttributeColumns | None
    _local: Any

    def search(
        self,
        queries: Any,
        k: int,
        filter: Any = None,
        strategy: Any = None,
        where: Any = None,
        **params: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            filter, strategy: an allow-list and how to apply it (see the backend's module
                docstring).
            where: the filter as a spec (``{"tenant": [3, 7]}``; a list: one per query
                row), run by the engine on the attribute columns; ``filter`` is then the
                same rows as a mask (computed from the columns when left out).
            **params: the backend's query parameters (see its module docstring).

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.
        """
        if where is not None:
            filter = WhereFilter(filter, where)
        return _engine_search(self, queries, k, filter, strategy, **params)

    def _where_ready(self) -> bool:
        """Whether the table holds the attribute columns ``set_attributes`` gave."""
        raise NotImplementedError

    def _where_form(self, terms: tuple[Term, ...]) -> Any:
        """One query's terms as ``_raw_search`` takes them (``None``: the allow-list)."""
        return terms

    def _where_strategy(self, strategy: Any) -> Any:
        """The strategy a ``where`` search runs (the caller's, by default)."""
        return strategy

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None, where: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _search_filtered(
        self, queries: Any, k: Any, compiled: Any, allow: Any, strategy: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        if type(allow) is WhereFilter:
            return self._search_where(queries, k, compiled, allow.allow, strategy, allow.where)
        return super()._search_filtered(queries, k, compiled, allow, strategy)

    def _search_where(
        self, queries: Any, k: Any, compiled: Any, allow: Any, strategy: Any, where: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """``where=``: the specs in the engine when the table has the columns, else the mask."""
        attrs, space = self._attrs, self._space
        if space is None:
            raise self._not_built()
        if attrs is None or not self._where_ready():
            if allow is not None:  # the table has no attribute columns: the allow-list
                return self._search_filtered(queries, k, compiled, allow, strategy)
            raise ConfigError(
                f"index {self.name!r}: where= needs attribute columns (set_attributes before build)"
            )
        per_row = not isinstance(where, Mapping)
        specs = list(where) if per_row else [where]
        if allow is None:
            masks = where_masks(attrs, specs, space.id_bound)
            allow = masks if per_row else masks[0]
        forms = [self._where_form(spec_terms(attrs, spec)) for spec in specs]
        self._local.where = (per_row, forms)
        strategy = self._where_strategy(strategy)
        try:
            return self._search_filtered(queries, k, compiled, allow, strategy)
        finally:
            self._local.where = None

    def _in_graph(
        self, q: np.ndarray, k: int, compiled: Any, plan: FilterPlan
    ) -> tuple[np.ndarray, np.ndarray]:
        where = getattr(self._local, "where", None)
        if where is None:
            return super()._in_graph(q, k, compiled, plan)
        per_row, forms = where
        if not per_row:  # one filter for every row
            return self._raw_search(q, k, compiled, None, forms[0])
        if len(forms) != q.shape[0]:
            raise ConfigError(
                f"index {self.name!r}: where= has {len(forms)} filters for {q.shape[0]} queries"
            )
        ids = _empty((q.shape[0], k), I64)
        scores = _empty((q.shape[0], k), F32)
        for r in range(q.shape[0]):
            ids[r : r + 1], scores[r : r + 1] = self._raw_search(
                q[r : r + 1], k, compiled, None, forms[r]
            )
        return ids, scores


_engine_search = EngineIndex.search

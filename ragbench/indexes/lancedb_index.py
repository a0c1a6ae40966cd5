"""``lancedb`` backend: a LanceDB table, embedded (``pip install ragbench[vectordb]``).

LanceDB runs in this process: one table (columns ``id`` int64 and
``vector`` fixed-size list of float32) in a temporary folder, removed by
:meth:`LanceDbIndex.close` or when the index is garbage-collected. ``build``
creates the table from one Arrow table over the caller's rows (no copy of
the vectors on the Python side) and then, unless ``index_type="flat"``,
builds LanceDB's vector index on it before returning.

Build parameters: ``index_type`` (``flat``, the default: no index, an exact
scan; ``ivf_flat``, ``ivf_pq``, ``ivf_sq``, ``ivf_hnsw_sq``,
``ivf_hnsw_pq``: LanceDB's ``IVF_*`` index types), ``num_partitions`` (IVF
lists; 0 = LanceDB's default, about ``sqrt(n)``), ``num_sub_vectors`` (PQ;
0 = LanceDB's default), ``M`` and ``ef_construction`` (the HNSW graph inside
each partition of ``ivf_hnsw_*``; LanceDB's ``m``/``ef_construction``).
Query parameters, passed per call (concurrent searches with different
values do not race): ``nprobes`` (partitions searched, default 20),
``refine_factor`` (re-rank ``k * refine_factor`` candidates on the full
vectors; 0 = no refine, the default), ``ef`` (HNSW, default 64). On a
``flat`` table they are checked and have no effect. LanceDB's HNSW returns
``k × refine_factor`` candidates (``k`` without refine) from a search of
width ``ef``, and refuses ``ef`` below that: ragbench checks it before the
call and raises :class:`~ragbench.errors.ConfigError` naming both (raise
``ef`` or lower ``refine_factor``), as it does past 10 million refine
candidates (LanceDB allocates them up front: ``refine_factor=2**31-1``
aborted the process); any other error LanceDB raises during a
search comes back as a ``ConfigError`` naming the query parameters.

Metrics: ``ip`` → LanceDB ``dot`` (its ``_distance`` is ``1 - dot``,
measured), ``cosine`` → ``cosine`` (``1 - cos``; the corpus is normalized
at build), ``l2`` → ``l2`` (the squared distance). Scores: ``1 -
_distance`` for ``ip``/``cosine``, ``-_distance`` for ``l2``, as every
ragbench backend. Approximate index types (``*_pq``, ``*_sq``) return the
codes' approximate distances unless ``refine_factor`` > 0.

Filtered search: ``in-graph`` (a SQL prefilter ``id IN (...)`` on the
allowed rows, ``where(..., prefilter=True)``: LanceDB filters before the
vector search, so a ``flat`` table gives the exact filtered top-k),
``post`` (ragbench's: more candidates, the allowed ones kept) and ``pre``
(ragbench's exact kernel over a copy of the vectors read from the table);
``auto`` uses ``pre`` below 5 % of the rows, else ``in-graph``. Per-query
allow-lists are one LanceDB call per query.

Attributes: ``set_attributes(columns)`` before ``build`` adds typed columns
to the Arrow table (int64, float64 with NaN as null, str → utf8); a search
with ``where=spec`` (the query's filter; see
:mod:`ragbench.indexes.attribute_filters`) then prefilters with SQL on them,
``(`tenant` IN (3, 7)) AND (`year` >= 2010 AND `year` <= 2015)`` (strings
quoted with ``'`` doubled), as ``in-graph`` (``auto`` too: the filter runs in
LanceDB); a filter given only as a mask or ids keeps ``id IN (...)``.
``set_attributes`` refuses (ConfigError naming the attribute) a name
starting with ``_`` (LanceDB's own columns), holding ``.`` or a backtick,
and a str value holding a NUL character.
``filter_path`` says which a spec takes (``where`` or ``ids``).
Rows added later have null attributes: no ``where`` filter returns them.

Files: ``save`` stores the table folder as a tar, and in the header
(``extra.vectors_sha256``) the sha256 of the table's vectors (float32, in id
order, prefixed by ``dim``); ``load`` reads the table back, checks the
vector width, the ids ``0..count-1`` and that hash (Lance's data files carry
no checksum: changed vector bytes loaded). An IVF index's own codes are not
covered. A file without the hash (older ragbench) is refused: rebuild it.

Live writes: ``add`` appends rows (``Table.add``; an IVF index does not
cover them until rebuilt, LanceDB scans them exactly beside it),
``delete`` deletes by id (``Table.delete("id IN (...)")``). Both hold
searches off.

Timing parts: :meth:`LanceDbIndex.last_parts` splits the calling thread's
last search into ``prepare`` (checks, building the query), ``query``
(LanceDB's ``to_arrow``) and ``decode`` (Arrow columns to the numpy
result), in ns.

Threads: searches may run from many threads at once (LanceDB's table is
shared; each call runs on LanceDB's own runtime); a batch is one LanceDB
call with one query vector per row. How many threads one query's search
uses is LanceDB's (its Rust runtime and pools; ragbench's thread setting
does not size them): ``search_thread_count()`` is ``None``, and tables say
"not limited" on its row.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np

from .. import progress
from ..errors import ConfigError, IndexFileError
from ..timing import Parts
from ..validate import positive_int as int_param
from ._arrays import F32, I64, INT32_MAX
from ._embedded_engines import (
    EngineIndex,
    FolderEngineIndex,
    WhereSearch,
    check_graph_params,
    extract_tar,
    import_engine,
    is_panic,
    padded,
)
from ._lance_checks import check_ef, search_error
from ._writes_and_filters import IdSpace
from .attribute_filters import AttributeColumns, Term, where_text

__all__ = ["INDEX_TYPES", "LanceDbIndex"]

#: ragbench's names of LanceDB's index types (``flat``: no index).
INDEX_TYPES = ("flat", "ivf_flat", "ivf_pq", "ivf_sq", "ivf_hnsw_sq", "ivf_hnsw_pq")
_DISTANCE = {"ip": "dot", "cosine": "cosine", "l2": "l2"}
_TABLE = "vectors"
_COLUMNS = ["id", "_distance"]
_perf = time.perf_counter_ns


@contextmanager
def _foreign_datasets_hidden() -> Iterator[None]:
    """Hide a ``datasets`` module that is not Hugging Face's while LanceDB looks for it.

    LanceDB registers a converter for Hugging Face ``datasets`` when a module of
    that name is imported (at import and on every ``Table.add``) and then
    imports ``datasets.Dataset`` from it. Run from a ragbench checkout, the
    bundled-corpora folder ``datasets/`` is importable as a namespace package,
    and transformers (the minilm embedder) imports it: LanceDB then fails.
    """
    found = sys.modules.get("datasets")
    if found is None or hasattr(found, "Dataset"):
        yield
        return
    del sys.modules["datasets"]
    try:
        yield
    finally:
        sys.modules.setdefault("datasets", found)


def _lancedb() -> Any:
    with _foreign_datasets_hidden():
        return import_engine("lancedb", "lancedb", "the lancedb package")


_RESERVED = ("id", "vector", "_distance", "query_index")
_ARROW = {"i": "int64", "f": "float64", "U": "string"}


def _arrow_table(
    vectors: np.ndarray, ids: np.ndarray, attrs: Mapping[str, np.ndarray | str] | None = None
) -> Any:
    """An Arrow table ``(id int64, vector fixed_size_list<float32>[dim], *attrs)`` over the rows.

    ``attrs``: name -> int64, float64 (NaN becomes null) or str ``(n,)``; a
    name mapped to a dtype kind string instead (``"i"``) is a column of nulls.
    """
    import pyarrow as pa

    flat = pa.array(np.ascontiguousarray(vectors, dtype=F32).reshape(-1))
    column = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
    cols: dict[str, Any] = {"id": pa.array(ids.astype(I64)), "vector": column}
    for name, col in (attrs or {}).items():
        if isinstance(col, str):
            cols[name] = pa.nulls(vectors.shape[0], type=getattr(pa, _ARROW[col])())
        else:
            cols[name] = pa.array(col, from_pandas=col.dtype.kind == "f")
    return pa.table(cols)


def _check_lance_name(owner: str, name: Any) -> None:
    """ConfigError for a column name LanceDB reserves or cannot hold as a top-level column.

    Lance keeps names starting with ``_`` for its own columns (``_rowid``,
    ``_rowaddr``, ``_distance``, ``_score``, ...; it raised on ``_rowid``), a
    ``.`` means a struct field to it (``a.b`` raised), and ragbench quotes
    names with backticks in its SQL filters.
    """
    text = str(name)
    why = None
    if text.startswith("_"):
        why = (
            "LanceDB reserves names starting with '_' for its own columns (_rowid, _distance, ...)"
        )
    elif "." in text:
        why = "LanceDB reads a '.' as a struct field path"
    elif "`" in text:
        why = "it holds a backtick (ragbench quotes names with backticks in LanceDB's SQL)"
    if why is not None:
        raise ConfigError(f"{owner}: attribute name {text!r} cannot be a column: {why}")


def _vectors_sha256(data: Any, dim: int) -> str:
    """sha256 hex of an Arrow table's ``vector`` column as float32 rows in ``id`` order.

    Covers ``dim`` and each row's little-endian float32 bytes; the table's
    rows, not the copies or codes inside an IVF index.
    """
    ids = data.column("id").to_numpy()
    flat = data.column("vector").combine_chunks().flatten().to_numpy()
    rows = np.ascontiguousarray(flat.reshape(-1, dim)[np.argsort(ids, kind="stable")], "<f4")
    sha = hashlib.sha256(f"lancedb vectors f32 dim={dim}\0".encode())
    sha.update(rows.tobytes())
    return sha.hexdigest()


def _id_list(positions: np.ndarray) -> str:
    """SQL ``id IN (...)`` of int positions."""
    return "id IN (" + ",".join(map(str, positions.tolist())) + ")"


_where_search = WhereSearch.search
_engine_unfiltered = EngineIndex._search_unfiltered


class LanceDbIndex(WhereSearch, FolderEngineIndex):
    """A LanceDB table in a temporary folder; see the module docstring."""

    name: ClassVar[str] = "lancedb"
    library: ClassVar[str] = "lancedb"
    payload_format: ClassVar[str] = "lancedb table folder (tar)"
    #: the names of :meth:`last_parts` (before, inside, after LanceDB's own call)
    part_names: ClassVar[tuple[str, str, str]] = ("prepare", "query", "decode")
    build_defaults: ClassVar[dict[str, Any]] = {
        "index_type": "flat",
        "num_partitions": 0,
        "num_sub_vectors": 0,
        "M": 16,
        "ef_construction": 100,
    }
    query_defaults: ClassVar[dict[str, Any]] = {"nprobes": 20, "refine_factor": 0, "ef": 64}
    filter_strategies: ClassVar[tuple[str, ...]] = ("pre", "post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"
    delete_mode: ClassVar[str | None] = "mark"

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._table: Any = None
        self._distance = _DISTANCE[metric]
        self._local = threading.local()
        self._attrs: AttributeColumns | None = None
        self._attr_kinds: dict[str, str] = {}  # the attribute columns the table holds

    # -- parameters -------------------------------------------------------------------

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        if params["index_type"] not in INDEX_TYPES:
            raise ConfigError(
                f"{owner}: index_type={params['index_type']!r} is not one of "
                f"{', '.join(INDEX_TYPES)}"
            )
        for key in ("num_partitions", "num_sub_vectors"):
            params[key] = int_param(owner, key, params[key], lo=0, hi=INT32_MAX)
        return check_graph_params(owner, params, "ef_construction")

    def _check_query_value(self, name: str, value: Any) -> Any:
        lo = 0 if name == "refine_factor" else 1
        return int_param(f"index {self.name!r}", name, value, lo=lo, hi=INT32_MAX)

    def _compile_query(self, params: dict[str, Any]) -> Any:
        """The builder calls a query needs: ``((method name, value), ...)``."""
        kind = self.build_params["index_type"]
        if kind == "flat":
            return ()
        calls: list[tuple[str, int]] = [("nprobes", params["nprobes"])]
        if params["refine_factor"]:
            calls.append(("refine_factor", params["refine_factor"]))
        if "hnsw" in kind:
            calls.append(("ef", params["ef"]))
        return tuple(calls)

    def _index_config(self) -> Any:
        from lancedb import index as li

        p = self.build_params
        kind = p["index_type"]
        kw: dict[str, Any] = {"distance_type": self._distance}
        if p["num_partitions"]:
            kw["num_partitions"] = p["num_partitions"]
        if kind.endswith("_pq") and p["num_sub_vectors"]:
            kw["num_sub_vectors"] = p["num_sub_vectors"]
        if "hnsw" in kind:
            kw.update(m=p["M"], ef_construction=p["ef_construction"])
        classes = {
            "ivf_flat": li.IvfFlat,
            "ivf_pq": li.IvfPq,
            "ivf_sq": li.IvfSq,
            "ivf_hnsw_sq": li.HnswSq,
            "ivf_hnsw_pq": li.HnswPq,
        }
        return classes[kind](**kw)

    # -- attributes -------------------------------------------------------------------

    def set_attributes(self, columns: Mapping[str, Any]) -> None:
        """Attribute columns for the next ``build``: name -> int64, float64 or str ``(n,)``."""
        owner = f"index {self.name!r}"
        for name in columns:
            _check_lance_name(owner, name)
        attrs = AttributeColumns(owner, columns, _RESERVED)
        self._attrs = attrs if attrs.columns else None

    @property
    def build_cacheable(self) -> bool:
        """False once ``set_attributes`` gave columns: a cached load would not restore them."""
        return self._attrs is None

    @property
    def filter_path(self) -> str:
        """``where`` when the table holds attribute columns (a spec becomes SQL), else ``ids``."""
        return "where" if self._attr_kinds else "ids"

    # -- build, open, close -----------------------------------------------------------

    def build(self, data: Any) -> None:
        """Index ``data``: float32 ``(n, dim)``, finite, n >= 1; row ``i`` gets id ``i``."""
        vectors = self._corpus(data)
        attrs = self._attrs.columns if self._attrs is not None else {}
        if self._attrs is not None and self._attrs.n != vectors.shape[0]:
            raise ConfigError(
                f"index {self.name!r}: the attribute columns have {self._attrs.n} rows, the "
                f"corpus {vectors.shape[0]}"
            )

        def run() -> None:
            folder = tempfile.mkdtemp(prefix="ragbench-lancedb-")
            self._own_folder(None, folder)
            n = vectors.shape[0]
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                db = _lancedb().connect(os.path.join(folder, "db"))
                with _foreign_datasets_hidden():
                    table = db.create_table(_TABLE, _arrow_table(vectors, np.arange(n), attrs))
                advance(n)
            self._attr_kinds = {name: col.dtype.kind for name, col in attrs.items()}
            if self.build_params["index_type"] != "flat":
                try:
                    table.create_index("vector", config=self._index_config())
                except (ValueError, RuntimeError) as exc:
                    raise ConfigError(
                        f"index {self.name!r}: LanceDB cannot build "
                        f"{self.build_params['index_type']} on {n} rows: {exc}"
                    ) from None
            self._table = table
            self._publish_built(int(table.count_rows()))

        self._timed_build(run)

    def _drop_handles(self) -> None:
        self._table = None
        self._attr_kinds = {}

    # -- search -----------------------------------------------------------------------

    def search(
        self,
        queries: Any,
        k: int,
        filter: Any = None,
        strategy: Any = None,
        where: Any = None,
        **params: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query, as :meth:`WhereSearch.search` (``where``: SQL on the columns).

        ``**params``: ``nprobes``, ``refine_factor``, ``ef`` (ints; see the module
        docstring). An unfiltered search's parts are kept for :meth:`last_parts`.
        """
        local = self._local
        local.start = _perf()  # before the gate: ``prepare`` counts from here
        local.parts = None
        return _where_search(self, queries, k, filter, strategy, where, **params)

    def _search_unfiltered(
        self, queries: Any, k: Any, compiled: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        local = self._local
        local.t0 = local.start  # the one LanceDB call of this search records its parts
        try:
            return _engine_unfiltered(self, queries, k, compiled)
        finally:
            local.t0 = None

    def _where_ready(self) -> bool:
        return bool(self._attr_kinds)

    def _where_form(self, terms: tuple[Term, ...]) -> str | None:
        return where_text(terms)

    def _where_strategy(self, strategy: Any) -> Any:
        return "in-graph" if strategy in (None, "auto") else strategy  # the filter runs in LanceDB

    def last_parts(self) -> Parts | None:
        """The calling thread's last unfiltered search: :class:`~ragbench.timing.Parts`
        ``prepare``, ``query``, ``decode`` (ns).

        They sum to the time spent inside :meth:`search`; ``None`` before the
        first search of this thread, or when it was filtered (several calls).
        """
        ns: tuple[int, int, int] | None = getattr(self._local, "parts", None)
        return None if ns is None else Parts(self.part_names, ns)

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        data = self._table.to_arrow()
        pos = data["id"].to_numpy()
        flat = data["vector"].combine_chunks().flatten().to_numpy()
        out = np.zeros((space.n_pos, self.dim), dtype=F32)
        out[pos] = flat.reshape(-1, self.dim)
        return out

    def _raw_search(
        self,
        q: np.ndarray,
        k: int,
        compiled: Any,
        allow: np.ndarray | None,
        where: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        if compiled:
            check_ef(compiled, k)
        query = self._table.search(q, vector_column_name="vector")
        query = query.distance_type(self._distance).select(_COLUMNS).limit(k)
        for method, value in compiled:
            query = getattr(query, method)(value)
        if where is not None:
            query = query.where(where, prefilter=True)
        elif allow is not None:
            query = query.where(_id_list(np.flatnonzero(allow)), prefilter=True)
        t1 = _perf()
        try:
            result = query.to_arrow()
        except (RuntimeError, ValueError, OSError) as exc:  # lance's Rust errors
            raise search_error(exc, compiled, k) from None
        t2 = _perf()
        ids, scores = self._decode(result, q.shape[0], k)
        local = self._local
        t0 = getattr(local, "t0", None)
        if t0 is not None and allow is None:
            local.t0 = None
            local.parts = (t1 - t0, t2 - t1, _perf() - t2)
        return ids, scores

    def _decode(self, result: Any, nq: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """LanceDB's Arrow result → ids int64 and scores float32 ``(nq, k)``, padded."""
        ids = result.column("id").to_numpy()
        dist = result.column("_distance").to_numpy()
        scores = np.subtract(1.0, dist, dtype=F32) if self._similarity else -dist.astype(F32)
        if nq == 1 and ids.size == k:
            return ids.astype(I64, copy=False).reshape(1, k), scores.reshape(1, k)
        rows = (
            result.column("query_index").to_numpy().astype(I64)
            if "query_index" in result.column_names
            else np.zeros(ids.size, dtype=I64)
        )
        if ids.size == nq * k and (rows == np.repeat(np.arange(nq), k)).all():
            return ids.astype(I64).reshape(nq, k), scores.reshape(nq, k)
        order = np.lexsort((-scores, rows))
        rows, ids, scores = rows[order], ids[order], scores[order]
        starts = np.searchsorted(rows, np.arange(nq))
        rank = np.arange(rows.size) - starts[rows]
        keep = rank < k
        out_i, out_s = padded(nq, k)
        out_i[rows[keep], rank[keep]] = ids[keep]
        out_s[rows[keep], rank[keep]] = scores[keep]
        return out_i, out_s

    # -- writes -----------------------------------------------------------------------

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        with _foreign_datasets_hidden():
            self._table.add(_arrow_table(vectors, positions, self._attr_kinds))

    def _lib_delete(self, positions: np.ndarray) -> None:
        self._table.delete(_id_list(positions))

    # -- facts, files -----------------------------------------------------------------

    def search_thread_count(self) -> None:
        """``None``: LanceDB's own runtime and pools search, not sized by ragbench."""
        return None

    def extra_info(self) -> dict[str, Any]:
        return {
            "engine": "LanceDB, embedded (a table in a temporary folder)",
            "index_type": self.build_params["index_type"],
            "filter_path": self.filter_path,
            "attribute_columns": {n: _ARROW[kd] for n, kd in self._attr_kinds.items()},
        }

    def _payload_extra(self) -> dict[str, Any]:
        if self._table is None:
            raise self._not_built()
        return {"vectors_sha256": _vectors_sha256(self._table.to_arrow(), self.dim)}

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        folder = tempfile.mkdtemp(prefix="ragbench-lancedb-")
        self._own_folder(None, folder)
        extra = header.get("extra")
        want = extra.get("vectors_sha256") if isinstance(extra, dict) else None
        if not isinstance(want, str):
            self.close()
            raise IndexFileError(
                "lancedb: the header holds no hash of the stored vectors (a file saved by an "
                "older ragbench); delete it so it is rebuilt"
            )
        try:
            extract_tar(payload, folder)
            table = _lancedb().connect(os.path.join(folder, "db")).open_table(_TABLE)
            width = table.schema.field("vector").type.list_size
            data = table.to_arrow()
            ids = data.column("id").to_numpy()
            got = _vectors_sha256(data, width) if width == self.dim else None
        except BaseException as exc:  # tarfile, LanceDB (plain Rust errors, panics), pyarrow
            self.close()
            if not (isinstance(exc, Exception) or is_panic(exc)):
                raise  # KeyboardInterrupt, SystemExit
            raise IndexFileError(f"lancedb: the payload is not a LanceDB table: {exc}") from None
        problem = None
        if width != self.dim:
            problem = f"the table holds dim={width}, header dim={self.dim}"
        elif not np.array_equal(np.sort(ids), np.arange(ids.size)):
            problem = "the table's ids are not the row ids 0..count-1"
        elif got != want:
            problem = "the stored vectors differ from those saved (their sha256 does not match)"
        if problem is not None:
            self.close()
            raise IndexFileError(f"lancedb: {problem}")
        self._table = table
        kinds = {"int64": "i", "double": "f", "string": "U", "large_string": "U"}
        self._attr_kinds = {
            f.name: kinds[str(f.type)]
            for f in table.schema
            if f.name not in _RESERVED and str(f.type) in kinds
        }
        if self._attrs is None or set(self._attrs.columns) != set(self._attr_kinds):
            self._attr_kinds = {}  # not the columns set_attributes gave: the allow-list path
        self._publish_built(int(ids.size))

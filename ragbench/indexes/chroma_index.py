"""``chroma`` backend: a Chroma collection, embedded (``chromadb``; ``pip install ragbench[vectordb]``).

Chroma runs in this process: a ``chromadb.PersistentClient`` on a
temporary folder (Chroma's Rust core: SQLite for the records, its hnswlib
fork for the vectors), closed and removed by :meth:`ChromaIndex.close` or
when the index is garbage-collected. The collection is created with
``embedding_function=None`` (ragbench passes the vectors: Chroma's default
ONNX embedding model is never loaded or downloaded) and the client with
``Settings(anonymized_telemetry=False)`` (no product telemetry). Chroma's
ids are strings: row position ``i`` is stored as ``str(i)`` and read back
into int64 arrays.

Build parameters (ragbench's names): ``M`` (Chroma ``max_neighbors``,
default 16), ``ef_construction`` (default 100), ``ef_search`` (default 64).
Chroma takes ``ef_search`` at collection creation: in chromadb 1.5.9 a later
``Collection.modify(configuration={"hnsw": {"ef_search": ...}})`` is
recorded but not applied to the loaded index (measured; the HNSW index
reads it when it is loaded), so it is a build parameter here and there are
no query parameters.

Metrics: ``ip`` → Chroma ``ip`` (distance ``1 - dot``, measured),
``cosine`` → ``cosine`` (``1 - cos``; the corpus is normalized at build),
``l2`` → ``l2`` (the squared distance). Scores: ``1 - distance`` for
``ip``/``cosine``, ``-distance`` for ``l2``, as every ragbench backend.

Filtered search: ``in-graph`` (``query(..., ids=[allowed])``: Chroma
restricts the search to those records) and ``post`` (ragbench's); ``auto``
uses ``in-graph``. Per-query allow-lists are one Chroma call per query.

Live writes: ``add`` = ``Collection.add``, ``delete`` =
``Collection.delete(ids=...)``. Both hold searches off.

Threads: searches may run from many threads at once (Chroma's bindings
serve concurrent queries, as its server does); the HNSW index uses
``ragbench.threads.get_threads()`` threads (Chroma's ``num_threads``, set at
build). A batch is one Chroma call.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import weakref
from typing import Any, ClassVar

import numpy as np

from .. import progress
from ..errors import ConfigError, IndexFileError
from ..threads import get_threads
from ..validate import check_k
from ..validate import positive_int as int_param
from ._common import F32, I64, INF, INT32_MAX, batch_is_finite
from ._live import IdSpace
from ._writable import LiveVectorIndex

__all__ = ["ChromaIndex"]

_COLLECTION = "ragbench"
_INCLUDE = ["distances"]
_BATCH = 5000
_ndarray = np.ndarray
_vdot = getattr(np.vdot, "_implementation", np.vdot)
_array = np.array


def _chromadb() -> Any:
    try:
        import chromadb
    except ImportError:  # pragma: no cover - the vectordb extra is missing
        raise ConfigError(
            "index 'chroma' needs the chromadb package: pip install 'ragbench[vectordb]'"
        ) from None
    return chromadb


def _client(path: str) -> Any:
    chromadb = _chromadb()
    from chromadb.config import Settings

    return chromadb.PersistentClient(
        path=path, settings=Settings(anonymized_telemetry=False, allow_reset=False)
    )


def _close(client: Any, folder: str) -> None:
    """Close a client and remove its folder (also run by the garbage collector)."""
    try:
        client.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _str_ids(positions: np.ndarray) -> list[str]:
    return [str(p) for p in positions.tolist()]


class ChromaIndex(LiveVectorIndex):
    """A Chroma collection on a temporary folder; see the module docstring."""

    name: ClassVar[str] = "chroma"
    library: ClassVar[str] = "chromadb"
    payload_format: ClassVar[str] = "chroma persistent folder (tar)"
    build_defaults: ClassVar[dict[str, Any]] = {"M": 16, "ef_construction": 100, "ef_search": 64}
    query_defaults: ClassVar[dict[str, Any]] = {}
    filter_strategies: ClassVar[tuple[str, ...]] = ("post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"
    delete_mode: ClassVar[str | None] = "mark"

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._client: Any = None
        self._collection: Any = None
        self._query: Any = None
        self._folder: str | None = None
        self._finalizer: Any = None
        self._labels_ext: np.ndarray | None = None
        self._similarity = metric != "l2"
        self._init_live()

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params["M"] = int_param(owner, "M", params["M"], lo=2, hi=4096)
        for key in ("ef_construction", "ef_search"):
            params[key] = int_param(owner, key, params[key], hi=INT32_MAX)
        return params

    def _configuration(self) -> dict[str, Any]:
        p = self.build_params
        return {
            "hnsw": {
                "space": self.metric,
                "max_neighbors": p["M"],
                "ef_construction": p["ef_construction"],
                "ef_search": p["ef_search"],
                "num_threads": get_threads(),
            }
        }

    # -- build, open, close -----------------------------------------------------------

    def build(self, data: Any) -> None:
        """Index ``data``: float32 ``(n, dim)``, finite, n >= 1; row ``i`` gets id ``i``."""
        vectors = self._corpus(data)

        def run() -> None:
            folder = tempfile.mkdtemp(prefix="ragbench-chroma-")
            try:
                client = _client(os.path.join(folder, "db"))
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            self._set_client(client, folder)
            collection = client.create_collection(
                _COLLECTION, configuration=self._configuration(), embedding_function=None
            )
            self._set_collection(collection)
            n = vectors.shape[0]
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start in range(0, n, _BATCH):
                    stop = min(n, start + _BATCH)
                    self._lib_add(vectors[start:stop], np.arange(start, stop))
                    advance(stop - start)
            self._publish_built(int(collection.count()))

        self._timed_build(run)

    def _set_client(self, client: Any, folder: str) -> None:
        self.close()
        self._client, self._folder = client, folder
        self._finalizer = weakref.finalize(self, _close, client, folder)

    def _set_collection(self, collection: Any) -> None:
        self._collection = collection
        self._query = collection.query

    def close(self) -> None:
        """Close the client and remove its temporary folder (the index is unbuilt after)."""
        finalizer, self._finalizer = self._finalizer, None
        self._client = self._collection = self._query = self._folder = None
        self._space = None
        self._n = 0
        if finalizer is not None:
            finalizer()

    def _on_space(self, space: IdSpace) -> None:
        self._labels_ext = space.labels_ext()

    # -- search -----------------------------------------------------------------------

    def search(
        self, queries: Any, k: int, filter: Any = None, strategy: Any = None, **params: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            filter, strategy: an allow-list and how to apply it (see the module docstring).
            **params: none (``ef_search`` is a build parameter, see the module docstring).

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.
        """
        gate = self._gate
        active = gate.active
        active.append(None)
        if gate.writing:
            active.pop()
            gate.wait_enter()
        try:
            compiled = self._default_compiled if not params else self._params(params)
            if filter is not None or strategy is not None:
                return self._search_filtered(queries, k, compiled, filter, strategy)
            space = self._space
            if space is None:
                raise self._not_built()
            q = self._queries(queries)
            if type(k) is not int or k < 1 or k > space.live:
                k = check_k(k, space.live)
            if not q.shape[0]:
                return np.empty((0, k), I64), np.empty((0, k), F32)
            pos, scores = self._raw_search(q, k, compiled, None)
            ext = self._labels_ext
            return (pos if ext is None else space.to_ids(pos)), scores
        finally:
            active.pop()

    def _params(self, params: dict[str, Any]) -> Any:
        last_params, last = self._last_query
        return last if params == last_params else self._parse_query(params)

    def _queries(self, q: Any) -> np.ndarray:
        """Checked float32 ``(nq, dim)`` queries (NaN/inf, wrong width, cosine zero rows)."""
        if type(q) is _ndarray and q.dtype is F32 and q.ndim == 2 and q.shape[1] == self.dim:
            if q.shape[0] == 1:
                if 0.0 < float(_vdot(q, q)) < INF:
                    return q
            elif not self._cosine and batch_is_finite(q):
                return q
        return self._slow_queries(q)

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        return self._queries(queries)

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        if allow is None:
            found = self._query(query_embeddings=q, n_results=k, include=_INCLUDE)
        else:
            found = self._query(
                query_embeddings=q,
                n_results=k,
                include=_INCLUDE,
                ids=_str_ids(np.flatnonzero(allow)),
            )
        ids, dist = found["ids"], found["distances"]
        nq = q.shape[0]
        if all(len(row) == k for row in ids):
            # numpy parses the decimal strings into int64 itself (one pass, no Python ints)
            out_i = _array(ids, dtype=I64)
            out_s = _array(dist, dtype=F32)
        else:
            out_i = np.full((nq, k), -1, dtype=I64)
            out_s = np.full((nq, k), -INF, dtype=F32)
            for r, (row_i, row_d) in enumerate(zip(ids, dist, strict=True)):
                m = len(row_i)
                if m:
                    out_i[r, :m] = _array(row_i, dtype=I64)
                    out_s[r, :m] = row_d
        found_mask = out_i >= 0
        if self._similarity:
            np.subtract(np.float32(1.0), out_s, out=out_s, where=found_mask)
        else:
            np.negative(out_s, out=out_s, where=found_mask)
        return out_i, out_s

    # -- writes -----------------------------------------------------------------------

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        for start in range(0, vectors.shape[0], _BATCH):
            stop = start + _BATCH
            self._collection.add(
                ids=_str_ids(positions[start:stop]), embeddings=vectors[start:stop]
            )

    def _lib_delete(self, positions: np.ndarray) -> None:
        self._collection.delete(ids=_str_ids(positions))

    # -- facts, files -----------------------------------------------------------------

    def memory_bytes(self) -> int:
        """Bytes the client's folder occupies (SQLite records + HNSW segment files)."""
        if self._folder is None:
            raise self._not_built()
        total = 0
        for root, _dirs, files in os.walk(self._folder):
            for name in files:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
        return total

    def extra_info(self) -> dict[str, Any]:
        return {"engine": "Chroma, embedded (PersistentClient on a temporary folder)"}

    def _payload(self) -> bytes:
        if self._folder is None:
            raise self._not_built()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(os.path.join(self._folder, "db"), arcname="db")
        return buf.getvalue()

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        folder = tempfile.mkdtemp(prefix="ragbench-chroma-")
        try:
            with tarfile.open(fileobj=io.BytesIO(bytes(payload)), mode="r:") as tar:
                tar.extractall(folder, filter="data")
            client = _client(os.path.join(folder, "db"))
        except Exception as exc:  # tarfile, Chroma (plain errors from its Rust core)
            shutil.rmtree(folder, ignore_errors=True)
            raise IndexFileError(f"chroma: the payload is not a Chroma folder: {exc}") from None
        self._set_client(client, folder)
        try:
            collection = client.get_collection(_COLLECTION, embedding_function=None)
            count = int(collection.count())
            got = collection.get(ids=["0"], include=["embeddings"])["embeddings"]
        except Exception as exc:
            self.close()
            raise IndexFileError(
                f"chroma: the folder holds no readable collection: {exc}"
            ) from None
        width = len(got[0]) if got is not None and len(got) else None
        if width != self.dim:
            self.close()
            raise IndexFileError(f"chroma: the collection holds dim={width}, header dim={self.dim}")
        self._set_collection(collection)
        self._publish_built(count)

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
default 16), ``ef_construction`` (default 100), ``ef_search`` (default 64:
the collection's ``ef_search`` at creation). Query parameter: ``ef`` (the
name every HNSW backend uses; default ``None``: the collection's
``ef_search`` as built). In chromadb 1.5.9
``Collection.modify(configuration={"hnsw": {"ef_search": ...}})`` is
recorded but not applied to the loaded index: the HNSW index reads it when
it is loaded (measured: recall 0.405 at 10 stayed 0.405 after modify to
200, and read 0.991 once the folder was opened again). So a search with
another ``ef`` modifies the collection and opens a copy of its folder with a
new client (tens of milliseconds at 8 000 rows, a folder copy at any size),
the old client closed and its folder removed: a sweep over ``ef`` measures
one build, never a rebuild per value. Searches with the same ``ef`` never
reload; do not search one index with different ``ef`` from several threads
at once (a reload closes the collection the others are reading).

Builds are not reproducible: two one-thread builds of the same rows in the
same order give different graphs (tests/results/test_fair_comparisons.py; 100k ×
384 rebuilt at ``ef_search`` 40 read recall 0.924 and 0.951), so
``build_deterministic`` is False: records say ``deterministic: false`` and
the index cache keeps no Chroma build.

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

import os
import shutil
import threading
import warnings
import weakref
from typing import Any, ClassVar

import numpy as np

from .. import progress
from ..errors import IndexFileError
from ..threads import get_threads
from ._arrays import F32, I64
from ._embedded_engines import (
    FolderEngineIndex,
    check_graph_params,
    close_and_remove,
    extract_tar,
    import_engine,
    in_new_folder,
    pad_rows,
)

__all__ = ["ChromaIndex"]

_COLLECTION = "ragbench"
_INCLUDE = ["distances"]
_BATCH = 5000
_array = np.array


def _chromadb() -> Any:
    return import_engine("chroma", "chromadb", "the chromadb package")


def _client(path: str) -> Any:
    chromadb = _chromadb()
    from chromadb.config import Settings

    return chromadb.PersistentClient(
        path=path, settings=Settings(anonymized_telemetry=False, allow_reset=False)
    )


def _str_ids(positions: np.ndarray) -> list[str]:
    return [str(p) for p in positions.tolist()]


class ChromaIndex(FolderEngineIndex):
    """A Chroma collection on a temporary folder; see the module docstring."""

    name: ClassVar[str] = "chroma"
    library: ClassVar[str] = "chromadb"
    payload_format: ClassVar[str] = "chroma persistent folder (tar)"
    build_defaults: ClassVar[dict[str, Any]] = {"M": 16, "ef_construction": 100, "ef_search": 64}
    query_defaults: ClassVar[dict[str, Any]] = {"ef": None}
    #: Two builds of the same rows differ (see the module docstring).
    build_deterministic: ClassVar[bool] = False
    filter_strategies: ClassVar[tuple[str, ...]] = ("post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"
    delete_mode: ClassVar[str | None] = "mark"

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._client: Any = None
        self._collection: Any = None
        self._query: Any = None
        # the ef_search the open collection searches with; reloads take the lock
        self._ef: int = int(self.build_params["ef_search"])
        self._ef_lock = threading.Lock()

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return check_graph_params(f"index {self.name!r}", params, "ef_construction", "ef_search")

    def _check_query_value(self, name: str, value: Any) -> Any:
        return None if value is None else super()._check_query_value(name, value)

    def _compile_query(self, params: dict[str, Any]) -> Any:
        return params["ef"]  # None: the collection's ef_search as it is

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
            client, folder = in_new_folder(
                "ragbench-chroma-", lambda folder: _client(os.path.join(folder, "db"))
            )
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
        self._own_folder(client, folder)
        self._client = client

    def _set_collection(self, collection: Any) -> None:
        self._collection = collection
        self._query = collection.query
        hnsw = (collection.configuration_json or {}).get("hnsw") or {}
        self._ef = int(hnsw.get("ef_search") or self.build_params["ef_search"])

    def _use_ef(self, ef: int) -> None:
        """Search with ``ef_search = ef`` from now on: modify, then open a copy of the folder.

        Chroma applies a modified ``ef_search`` only when it loads the HNSW
        index, and a client on the same path reuses the loaded one; a client on
        a copy of the folder loads it afresh. The old client is closed and its
        folder removed.
        """
        with self._ef_lock:
            if ef == self._ef or self._folder is None:
                return
            with warnings.catch_warnings():
                # modify reads the stored configuration, whose embedding function (None)
                # Chroma calls "legacy" with a DeprecationWarning
                warnings.simplefilter("ignore", DeprecationWarning)
                self._collection.modify(configuration={"hnsw": {"ef_search": ef}})
            source = os.path.join(self._folder, "db")

            def copy(folder: str) -> Any:
                shutil.copytree(source, os.path.join(folder, "db"))
                return _client(os.path.join(folder, "db"))

            client, folder = in_new_folder("ragbench-chroma-", copy)
            old, self._finalizer = self._finalizer, None
            self._folder = folder
            self._finalizer = weakref.finalize(self, close_and_remove, client, folder)
            self._client = client
            self._set_collection(client.get_collection(_COLLECTION, embedding_function=None))
            if old is not None:
                old()

    def _drop_handles(self) -> None:
        self._client = self._collection = self._query = None

    # -- search (EngineIndex.search; ``compiled`` is the ef asked for, or None) ---------

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        if compiled is not None and compiled != self._ef:
            self._use_ef(compiled)
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
        if all(len(row) == k for row in ids):
            # numpy parses the decimal strings into int64 itself (one pass, no Python ints)
            out_i = _array(ids, dtype=I64)
            out_s = _array(dist, dtype=F32)
        else:
            out_i, out_s = pad_rows(ids, dist, k)
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

    # memory_bytes: the folder (SQLite records + HNSW segment files); save: the folder's tar.

    def extra_info(self) -> dict[str, Any]:
        return {"engine": "Chroma, embedded (PersistentClient on a temporary folder)"}

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        def unpack(folder: str) -> Any:
            extract_tar(payload, folder)
            return _client(os.path.join(folder, "db"))

        try:
            client, folder = in_new_folder("ragbench-chroma-", unpack)
        except Exception as exc:  # tarfile, Chroma (plain errors from its Rust core)
            raise IndexFileError(f"chroma: the payload is not a Chroma folder: {exc}") from None
        self._set_client(client, folder)
        try:
            collection = client.get_collection(_COLLECTION, embedding_function=None)
            count = int(collection.count())
            got = collection.get(ids=["0"], include=["embeddings"])["embeddings"]
            # the JSON form: ``configuration`` rebuilds the embedding function and warns
            space = ((collection.configuration_json or {}).get("hnsw") or {}).get("space")
        except Exception as exc:
            self.close()
            raise IndexFileError(
                f"chroma: the folder holds no readable collection: {exc}"
            ) from None
        width = len(got[0]) if got is not None and len(got) else None
        if width != self.dim:
            self.close()
            raise IndexFileError(f"chroma: the collection holds dim={width}, header dim={self.dim}")
        if space != self.metric:  # Chroma searches with the space it was built with
            self.close()
            raise IndexFileError(
                f"chroma: the collection's space is {space!r}, header metric {self.metric!r}"
            )
        self._set_collection(collection)
        self._publish_built(count)

"""``qdrant-edge`` backend: Qdrant's engine, embedded (``qdrant-edge-py``; not the Qdrant server).

Qdrant Edge runs Qdrant's Rust storage and HNSW code in this process: one
``EdgeShard`` in a temporary folder (removed by :meth:`QdrantEdgeIndex.close`
or when the index is garbage-collected). ``build`` upserts the corpus in
batches of 1 000 points (point id = row position) and runs the shard's
optimizers, which build the HNSW index, before returning.

Build parameters (ragbench's names, the same as ``hnsw``/``usearch`` so one
sweep covers all three): ``M`` (Qdrant ``m``, default 16),
``ef_construction`` (``ef_construct``, default 100), ``full_scan_threshold``
(KB, Qdrant's default 10 000: a filtered search whose allowed rows are
estimated below it scans them exactly instead of walking the graph).
Query parameter: ``ef`` (Qdrant ``hnsw_ef``, default 64; passed per call in
``SearchParams``, so concurrent searches with different values do not race).

Metrics: ``ip`` → ``Distance.Dot`` (score = dot), ``cosine`` → ``Cosine``
(Qdrant normalizes stored and query vectors; score = cosine), ``l2`` →
``Euclid`` (Qdrant returns the distance; the score is ``-distance²``, the
negated squared distance every ragbench backend reports).

Filtered search: ``in-graph`` (a ``HasIdCondition`` with the allowed
positions: Qdrant's planner picks an exact scan of those rows or a filtered
graph walk) and ``post``; ``auto`` uses ``in-graph``.

Search: the engines' reference (:meth:`~ragbench.indexes._embedded_engines.EngineIndex.search`
over :meth:`QdrantEdgeIndex._raw_search`); one float32 ``(1, dim)`` ``ip``/``l2``
query is answered first by :func:`~ragbench.indexes._fast_paths.qdrant_one_query`
(the engine-wrapper target), which returns exactly what the reference returns.

Live writes: ``add`` upserts points, ``delete`` deletes them by id (Qdrant
marks them deleted; its optimizer vacuums later). Both hold searches off.

Files: ``save`` stores the shard folder as a tar, and in the header
(``extra.vectors_sha256``) the sha256 of the vectors Qdrant returns for ids
``0..count-1`` (read back from the shard, float32, in id order, prefixed by
``dim``). ``load`` lets Qdrant open the unpacked folder, checks the point
count, reads every vector back the same way and compares the hash: a changed
vector, a point missing or marked deleted is an :class:`IndexFileError`,
also when the payload's own checksum was recomputed. A Rust panic in Qdrant
while it opens or reads a loaded folder (``PanicException``, a
``BaseException``) becomes an ``IndexFileError`` as well. A file without the
vector hash (saved by an older ragbench) is refused: rebuild it.

Qdrant pre-allocates files and leaves them mostly zero: every segment's
payload storage has a 32 MiB ``page_0.dat`` and 1 MiB ``tracker.dat``, and a
shard keeps an empty appendable segment beside the optimized one, so a 300 x
16 shard folder spans ~70 MB of which ~0.1 MB are written (the files are
sparse on disk). The tar leaves out each file's zero tail when it is at least
``_ZERO_TAIL`` bytes and records the file's size in the member's pax header
(``RAGBENCH.size``); ``load`` unpacks the members and extends those files back
to their size with ``os.truncate`` (sparse: zeros, no bytes written), so Qdrant
opens a folder byte-for-byte the one saved. ``EdgeShard`` (qdrant-edge-py
0.9.0) has no call that drops the empty segment or the pre-allocation: after
``optimize`` the shard holds the indexed segment and an empty appendable one,
and ``flush`` writes them as they are. A tar without these headers (an older
ragbench's) unpacks as before.

Threads: the shard's indexing pool gets ``ragbench.threads.get_threads()``
threads (one for a deterministic build); its search pool gets the build
parameter ``search_threads`` (default 1, at most 256: one query on one thread,
as every other engine answers it; it used to follow ``get_threads()``, so a
shard loaded from the index cache searched on 2 threads beside single-threaded
hnswlib). Both are set at build and again at load, which re-applies the
configuration to the unpacked shard; queries are sent one per ``search`` call.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Callable
from itertools import chain
from typing import Any, ClassVar, TypeVar

import numpy as np

from .. import progress
from ..errors import IndexFileError
from ..threads import MAX_THREADS, get_threads
from ..validate import positive_int
from ._arrays import F32, I64
from ._embedded_engines import (
    FolderEngineIndex,
    check_graph_params,
    import_engine,
    in_new_folder,
    is_panic,
    pad_rows,
)
from ._fast_paths import qdrant_one_query
from ._writes_and_filters import IdSpace

__all__ = ["QdrantEdgeIndex"]

_BATCH = 1000
#: rows per ``retrieve`` call when the stored vectors are hashed (bounds the Python lists)
_HASH_BATCH = 4096
#: a file's zero tail at least this long is left out of the saved tar (one disk block)
_ZERO_TAIL = 4096
#: the pax header of a member whose zero tail was left out: the file's full size
_SIZE_KEY = "RAGBENCH.size"
#: the largest size such a header may give (Qdrant's pre-allocated files are 32 MiB)
_MAX_SIZE = 1 << 31
_T = TypeVar("_T")


def _qdrant() -> Any:
    return import_engine("qdrant-edge", "qdrant_edge", "qdrant-edge-py")


class QdrantEdgeIndex(FolderEngineIndex):
    """Qdrant's engine, embedded (one EdgeShard); see the module docstring."""

    name: ClassVar[str] = "qdrant-edge"
    library: ClassVar[str] = "qdrant-edge-py"
    payload_format: ClassVar[str] = "qdrant-edge shard folder (tar)"
    build_defaults: ClassVar[dict[str, Any]] = {
        "M": 16,
        "ef_construction": 100,
        "full_scan_threshold": 10_000,
        "search_threads": 1,
    }
    query_defaults: ClassVar[dict[str, Any]] = {"ef": 64}
    filter_strategies: ClassVar[tuple[str, ...]] = ("post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"
    delete_mode: ClassVar[str | None] = "mark"
    data_folder: ClassVar[str] = "shard"

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._shard: Any = None
        # (shard.search, SearchRequest, Query.Nearest) of the open shard
        self._api: tuple[Any, Any, Any] = (None, None, None)
        self._l2 = metric == "l2"
        # qdrant_one_query's state for the current id snapshot (see _on_space), or
        # None (cosine, ids that are not Qdrant's point ids, no open shard).
        self._fast: tuple[Any, ...] | None = None

    def search(
        self, queries: Any, k: int, filter: Any = None, strategy: Any = None, **params: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`EngineIndex.search`, the reference, after :func:`qdrant_one_query`."""
        if filter is None and strategy is None:
            answer = qdrant_one_query(self, queries, k, params)
            if answer is not None:
                return answer  # type: ignore[no-any-return]
        return super().search(queries, k, filter, strategy, **params)

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params = check_graph_params(owner, params, "ef_construction", "full_scan_threshold")
        threads = params["search_threads"]
        params["search_threads"] = positive_int(owner, "search_threads", threads, hi=MAX_THREADS)
        return params

    def search_thread_count(self) -> int:
        """The shard's search pool: the ``search_threads`` build parameter."""
        return int(self.build_params["search_threads"])

    def _compile_query(self, params: dict[str, Any]) -> Any:
        return _qdrant().SearchParams(hnsw_ef=params["ef"])

    def _config(self) -> Any:
        qe = _qdrant()
        p = self.build_params
        distance = {"ip": qe.Distance.Dot, "cosine": qe.Distance.Cosine, "l2": qe.Distance.Euclid}
        threads = get_threads()
        return qe.EdgeConfig(
            vectors={"": qe.EdgeVectorParams(size=self.dim, distance=distance[self.metric])},
            hnsw_config=qe.HnswIndexConfig(
                m=p["M"],
                ef_construct=p["ef_construction"],
                full_scan_threshold=p["full_scan_threshold"],
                max_indexing_threads=threads,
            ),
            # index every segment whatever its size, in one segment
            optimizers=qe.EdgeOptimizersConfig(indexing_threshold=1, default_segment_number=1),
            max_search_threads=p["search_threads"],
            # a temporary folder needs no crash recovery; flush() still persists the segments
            wal_enabled=False,
        )

    def build(self, data: Any) -> None:
        """Index ``data``: float32 ``(n, dim)``, finite, n >= 1; row ``i`` gets id ``i``."""
        vectors = self._corpus(data)

        def run() -> None:
            shard, folder = in_new_folder(
                "ragbench-qdrant-edge-",
                lambda folder: _qdrant().EdgeShard.create(
                    os.path.join(folder, "shard"), self._config()
                ),
            )
            self._set_shard(shard, folder)
            n = vectors.shape[0]
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start in range(0, n, _BATCH):
                    stop = min(n, start + _BATCH)
                    self._upsert(vectors[start:stop], range(start, stop))
                    advance(stop - start)
            shard.optimize()
            self._publish_built(self._count())

        self._timed_build(run)

    def _upsert(self, vectors: np.ndarray, positions: Any) -> None:
        qe = _qdrant()
        points = [qe.Point(int(p), v) for p, v in zip(positions, vectors.tolist(), strict=True)]
        self._shard.update(qe.UpdateOperation.upsert_points(points))

    def _count(self) -> int:
        return int(self._shard.info().points_count)

    def _set_shard(self, shard: Any, folder: str) -> None:
        self._own_folder(shard, folder)
        self._shard = shard
        qe = _qdrant()
        self._api = (shard.search, qe.SearchRequest, qe.Query.Nearest)

    def _drop_handles(self) -> None:
        self._shard = None
        self._fast = None

    def _on_space(self, space: IdSpace) -> None:
        # Called with no search running (build, load, or inside a write's exclusive section).
        self._labels_ext = ext = space.labels_ext()
        search, request, nearest = self._api
        self._fast = None
        # cosine needs its zero-norm check; other ids than Qdrant's point ids
        # need the mapping: the reference answers both.
        if not self._cosine and ext is None and search is not None:
            self._fast = (search, request, nearest, (1, self.dim), space.live, self._l2)

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        search, request, nearest = self._api
        rows = q.tolist()
        if allow is None and len(rows) == 1:
            # One unfiltered query (the common case): as few calls as Qdrant's own client code.
            hits = search(request(query=nearest(rows[0]), limit=k, params=compiled))
            if len(hits) == k:
                ids = np.array([[h.id for h in hits]], dtype=I64)
                scores = np.array([[h.score for h in hits]], dtype=F32)
                if self._l2:
                    np.square(scores, out=scores)
                    np.negative(scores, out=scores)
                return ids, scores
        return self._search_rows(rows, k, compiled, allow)

    def _search_rows(
        self, rows: list[list[float]], k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One Qdrant search per query row; ``-1``/``-inf`` past what each found."""
        qe = _qdrant()
        search, request, nearest = self._api
        filt = None
        if allow is not None:
            allowed = set(np.flatnonzero(allow).tolist())
            filt = qe.Filter(must=[qe.HasIdCondition(point_ids=allowed)])
        answers = [
            search(request(query=nearest(row), limit=k, filter=filt, params=compiled))
            for row in rows
        ]
        ids, scores = pad_rows(
            [[h.id for h in hits] for hits in answers],
            [[h.score for h in hits] for hits in answers],
            k,
        )
        if self._l2:
            found = ids >= 0
            scores[found] = -np.square(scores[found])
        return ids, scores

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        for start in range(0, vectors.shape[0], _BATCH):
            stop = start + _BATCH
            self._upsert(vectors[start:stop], positions[start:stop].tolist())

    def _lib_delete(self, positions: np.ndarray) -> None:
        qe = _qdrant()
        self._shard.update(qe.UpdateOperation.delete_points([int(p) for p in positions]))

    # memory_bytes: the shard's folder (Qdrant maps its segment files); save: its tar.

    def extra_info(self) -> dict[str, Any]:
        return {"engine": "Qdrant engine, embedded (qdrant-edge-py; not the Qdrant server)"}

    def _flush(self) -> None:
        self._shard.flush()

    def _payload(self) -> bytes:
        if self._folder is None:
            raise self._not_built()
        self._flush()
        return tar_without_zero_tails(os.path.join(self._folder, self.data_folder))

    def _payload_extra(self) -> dict[str, Any]:
        return {"vectors_sha256": vectors_sha256(self._shard, self.dim, self._n)}

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        extra = header.get("extra")
        want = extra.get("vectors_sha256") if isinstance(extra, dict) else None
        if not isinstance(want, str):
            raise IndexFileError(
                "qdrant-edge: the header holds no hash of the stored vectors (a file saved "
                "by an older ragbench); delete it so it is rebuilt"
            )
        shard, folder = in_new_folder(
            "ragbench-qdrant-edge-", lambda folder: self._open_payload(payload, folder)
        )
        self._set_shard(shard, folder)
        try:
            count = _loaded_call("count its points", self._count)
            if count != header.get("count"):
                raise IndexFileError(
                    f"qdrant-edge: header says {header.get('count')} items but the shard "
                    f"holds {count}"
                )
            got = _loaded_call("read its vectors", lambda: vectors_sha256(shard, self.dim, count))
            if got != want:
                raise IndexFileError(
                    "qdrant-edge: the stored vectors differ from those saved (their sha256 "
                    "does not match the header's): the file is corrupt"
                )
        except BaseException:
            self.close()
            raise
        self._publish_built(count)

    def _open_payload(self, payload: memoryview, folder: str) -> Any:
        try:
            extract_restoring_zero_tails(payload, folder)
        except (tarfile.TarError, OSError, ValueError) as exc:
            raise IndexFileError(f"qdrant-edge: the payload is not a shard folder: {exc}") from None
        path = os.path.join(folder, "shard")
        size = _stored_size(path)
        if size != self.dim:
            raise IndexFileError(f"qdrant-edge: the shard holds dim={size}, header dim={self.dim}")
        config = self._config()
        return _loaded_call("load the shard", lambda: _qdrant().EdgeShard.load(path, config))


def tar_without_zero_tails(path: str) -> bytes:
    """The folder ``path`` as an uncompressed tar (stored under its base name), zero tails left out.

    A regular file whose last ``_ZERO_TAIL`` or more bytes are zero is stored
    up to its last non-zero byte, with its size in the pax header ``_SIZE_KEY``.
    """

    def trim(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if info.isfile() and _ZERO_TAIL <= info.size <= _MAX_SIZE:
            end = _data_end(os.path.join(os.path.dirname(path), info.name), info.size)
            if info.size - end >= _ZERO_TAIL:
                info.pax_headers = {**info.pax_headers, _SIZE_KEY: str(info.size)}
                info.size = end  # tarfile stores the file's first ``size`` bytes
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(path, arcname=os.path.basename(path), filter=trim)
    return buf.getvalue()


def _data_end(path: str, size: int) -> int:
    """Offset after the last non-zero byte of the file's first ``size`` bytes (0: all zero)."""
    chunk = 1 << 20
    with open(path, "rb") as fh:
        end = size
        while end > 0:
            start = max(0, end - chunk)
            fh.seek(start)
            data = fh.read(end - start).rstrip(b"\0")
            if data:
                return start + len(data)
            end = start
    return 0


def extract_restoring_zero_tails(payload: memoryview, folder: str) -> None:
    """Unpack a tar of :func:`tar_without_zero_tails` into ``folder``, files back to full size.

    Raises:
        IndexFileError: a member's ``_SIZE_KEY`` is not a size from its stored
            length to ``_MAX_SIZE``, or names no regular file inside ``folder``.
    """
    with tarfile.open(fileobj=io.BytesIO(bytes(payload)), mode="r:") as tar:
        tar.extractall(folder, filter="data")  # no links out, no absolute names
        for member in tar.getmembers():
            want = member.pax_headers.get(_SIZE_KEY)
            if want is None:
                continue
            size = int(want) if want.isdigit() else -1
            if not member.isfile() or not member.size <= size <= _MAX_SIZE:
                raise IndexFileError(
                    f"qdrant-edge: member {member.name!r} of the payload gives a size "
                    f"{want!r} it cannot have"
                )
            path = os.path.join(folder, member.name)
            inside = os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)
            if not inside or not stat.S_ISREG(os.lstat(path).st_mode):
                raise IndexFileError(
                    f"qdrant-edge: member {member.name!r} of the payload is not a file of the shard"
                )
            os.truncate(path, size)  # the zeros left out, as a hole


def _loaded_call(what: str, call: Callable[[], _T]) -> _T:
    """``call()`` on a loaded shard; Qdrant's errors and Rust panics as IndexFileError."""
    try:
        return call()
    except IndexFileError:
        raise
    except BaseException as exc:  # the Rust side raises plain exceptions, or panics
        if not (isinstance(exc, Exception) or is_panic(exc)):
            raise  # KeyboardInterrupt, SystemExit
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise IndexFileError(f"qdrant-edge: Qdrant cannot {what}: {text}") from None


def vectors_sha256(shard: Any, dim: int, count: int) -> str:
    """sha256 hex of the vectors ``shard`` returns for ids ``0..count-1``, float32 in id order.

    The digest covers ``dim``, then each row's little-endian float32 bytes.
    A point Qdrant does not return (missing, or marked deleted) raises
    IndexFileError. Reading back 20 000 x 384 took 1.5-2.1 s on the loaded
    dev machine (Qdrant hands each vector to Python as a list of floats).
    """
    sha = hashlib.sha256(f"qdrant-edge vectors f32 dim={dim}\0".encode())
    for start in range(0, count, _HASH_BATCH):
        ids = list(range(start, min(count, start + _HASH_BATCH)))
        records = sorted(shard.retrieve(ids, False, True), key=lambda r: int(r.id))
        if [int(r.id) for r in records] != ids:
            raise IndexFileError(
                f"qdrant-edge: the shard does not return every point of ids {start}..{ids[-1]}"
            )
        vectors = [_plain_vector(r.vector) for r in records]
        if any(len(v) != dim for v in vectors):
            raise IndexFileError(f"qdrant-edge: the shard returns a vector whose size is not {dim}")
        # fromiter over the concatenated lists: cheaper than np.array on nested lists
        rows = np.fromiter(chain.from_iterable(vectors), dtype="<f4", count=len(ids) * dim)
        sha.update(rows.tobytes())
    return sha.hexdigest()


def _plain_vector(vector: Any) -> Any:
    """The unnamed vector of a record (a list, or ``{"": list}``; ``{}``: none stored)."""
    if isinstance(vector, dict):
        if "" not in vector:
            raise IndexFileError("qdrant-edge: a point of the shard has no stored vector")
        return vector[""]
    return vector


def _stored_size(path: str) -> int | None:
    """The vector size in the shard's ``edge_config.json`` (None when unreadable)."""
    import json

    try:
        with open(os.path.join(path, "edge_config.json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
        return int(cfg["vectors"][""]["size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None

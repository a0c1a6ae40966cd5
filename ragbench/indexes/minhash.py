"""``minhash-lsh`` backend: datasketch MinHashLSH over word shingles of chunk texts.

Texts are lower-cased, split into words (``\\w+``) and turned into the set of
word ``shingle_size``-grams (a text shorter than that is one shingle of all
its words). Each set gets a 128-permutation MinHash (datasketch's default
``affine32`` scheme, SHA-1 based, stable across processes); LSH banding
(datasketch picks bands × rows for ``threshold``) finds candidates whose
estimated Jaccard similarity is likely above ``threshold``.

Ranking: LSH returns an unordered candidate set. ``search`` scores each
candidate by its estimated Jaccard similarity (the fraction of equal MinHash
values, vectorized over the stored hash values) and returns the best ``k``
sorted by that estimate, ties broken by smaller row id. Fewer than ``k``
candidates are padded with ``-1`` / ``-inf``. Scores are estimated Jaccard
similarities in ``[0, 1]``.

A text with no words has an empty shingle set; it is stored but never
inserted into the LSH (an empty MinHash would collide with every other
empty one), so it is never returned, and an empty query returns only pads.

Live writes: ``add(texts, ids=None)`` inserts into the LSH (datasketch
``insert``), ``delete(ids)`` removes (``remove``; the stored hash values
stay, unused). Ids work as for the dense indexes (see
:mod:`ragbench.indexes._writes_and_filters`). datasketch is not thread-safe: a write waits
for running searches and holds new ones off (a
:class:`~ragbench.indexes._writes_and_filters.WriteGate`; a search takes no lock unless a
write is under way). Filtered search is for the dense indexes only.

Build parameters: ``num_perm`` (128), ``threshold`` (0.3), ``shingle_size``
(3 words), ``seed`` (1). No query parameters. Build cost is dominated by
SHA-1 hashing of every shingle in Python: roughly 3 s for 5 000 texts of
~170 words on one core.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from datasketch import LeanMinHash, MinHash, MinHashLSH

from ..errors import ConfigError, IndexFileError, InputError, UnsupportedOperationError
from ..validate import METRICS, check_k, check_metric
from ..validate import positive_int as int_param
from ._arrays import F32, I64
from ._writes_and_filters import (
    IdSpace,
    WriteGate,
    positions_to_delete,
    space_after_add,
    space_after_delete,
)
from .base import BaseIndex

__all__ = ["MinHashLshIndex", "shingles"]

_WORD = re.compile(r"\w+")
_SCHEME = "affine32"
_EMPTY = np.iinfo(np.uint32).max
# Its own metric, then the vector metrics it records as rescore_metric.
_ACCEPTED_METRICS = ("jaccard", *METRICS)


def shingles(text: str, size: int) -> list[bytes]:
    """The word ``size``-gram shingles of ``text`` as UTF-8 bytes (unique, any order)."""
    words = _WORD.findall(text.lower())
    if not words:
        return []
    if len(words) <= size:
        return [" ".join(words).encode()]
    return list({" ".join(words[i : i + size]).encode() for i in range(len(words) - size + 1)})


def _texts(data: Any, what: str) -> list[str]:
    if isinstance(data, (str, bytes)):
        if what == "queries" and isinstance(data, str):
            return [data]
        raise InputError(
            f"{what}: expected a sequence of strings, got a single {type(data).__name__}"
        )
    if not isinstance(data, Sequence) and not hasattr(data, "__iter__"):
        raise InputError(f"{what}: expected a sequence of strings, got {type(data).__name__}")
    texts = list(data)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"{what}: item {i} is {type(text).__name__}, not str")
    return texts


class MinHashLshIndex(BaseIndex):
    """Text index: MinHash signatures + LSH banding; see the module docstring.

    Created like every index, ``create("minhash-lsh", dim=..., metric=..., **build)``,
    so one call fits vector and text indexes alike:

    ``dim``
        Ignored: this index hashes texts, not vectors. ``None`` or a
        positive int (the width of the corpus vectors a pipeline also
        holds); anything else raises :class:`ConfigError`.
    ``metric``
        ``"jaccard"`` (the default) or ``None``: candidates are ranked by
        estimated Jaccard similarity, and :attr:`metric` is always
        ``"jaccard"``, since that is what :meth:`search`'s scores are. A
        vector metric (``"ip"``, ``"cosine"``, ``"l2"``), as a pipeline passes
        for its corpus vectors, is accepted and recorded as
        :attr:`rescore_metric`: the metric the candidates are re-scored with
        by the rerank stage. It does not change what this index returns, and
        is saved with the index (files without it load with ``None``).
    """

    name: ClassVar[str] = "minhash-lsh"
    input_kind: ClassVar[Literal["vectors", "texts"]] = "texts"
    library: ClassVar[str] = "datasketch"
    supported_metrics: ClassVar[tuple[str, ...]] = ("jaccard",)
    payload_format: ClassVar[str] = "ragbench.minhash-hashvalues-u32"
    #: Deleted ids are removed from the LSH tables; their positions stay unused.
    delete_mode: ClassVar[str | None] = "mark"
    build_defaults: ClassVar[dict[str, Any]] = {
        "num_perm": 128,
        "threshold": 0.3,
        "shingle_size": 3,
        "seed": 1,
    }

    def __init__(
        self, dim: int | None = None, metric: str | None = "jaccard", **build_params: Any
    ) -> None:
        owner = f"index {self.name!r}"
        if dim is not None:
            int_param(owner, "dim", dim)  # checked, then unused: this index hashes texts
        metric = check_metric(owner, "jaccard" if metric is None else metric, _ACCEPTED_METRICS)
        #: The vector metric the rerank stage re-scores candidates with, or None.
        self.rescore_metric: str | None = None if metric == "jaccard" else metric
        self._init_common(None, "jaccard", build_params)
        self._lsh: MinHashLSH | None = None
        self._hashvalues = np.empty((0, self.build_params["num_perm"]), dtype=np.uint32)
        self._gate = WriteGate()
        self._space: IdSpace | None = None
        self._written = False

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params["num_perm"] = int_param(owner, "num_perm", params["num_perm"], lo=2, hi=8192)
        params["shingle_size"] = int_param(owner, "shingle_size", params["shingle_size"], hi=64)
        params["seed"] = int_param(owner, "seed", params["seed"], lo=0, hi=2**32 - 1)
        threshold = params["threshold"]
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not (0.0 < float(threshold) < 1.0)
        ):
            raise ConfigError(f"{owner}: threshold must be a number in (0, 1), got {threshold!r}")
        params["threshold"] = float(threshold)
        return params

    def _minhashes(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), num_perm)`` uint32 MinHash values (all-max rows for empty texts)."""
        p = self.build_params
        sets = [shingles(t, p["shingle_size"]) for t in texts]
        out = np.full((len(texts), p["num_perm"]), _EMPTY, dtype=np.uint32)
        # generator() builds the permutations once and copies them per text.
        minhashes = MinHash.generator(sets, num_perm=p["num_perm"], seed=p["seed"], scheme=_SCHEME)
        for row, mh in enumerate(minhashes):
            out[row] = mh.hashvalues
        return out

    def _make_lsh(self, hashvalues: np.ndarray) -> MinHashLSH:
        p = self.build_params
        lsh = MinHashLSH(threshold=p["threshold"], num_perm=p["num_perm"])
        with lsh.insertion_session() as session:
            for row in np.flatnonzero((hashvalues != _EMPTY).any(axis=1)):
                session.insert(
                    int(row),
                    LeanMinHash(seed=p["seed"], hashvalues=hashvalues[row], scheme=_SCHEME),
                    check_duplication=False,
                )
        return lsh

    def build(self, data: Any) -> None:
        """Index a sequence of ``n >= 1`` texts; row ``i`` gets id ``i``. Replaces any earlier build."""
        texts = _texts(data, "corpus texts")
        if not texts:
            raise InputError(f"index {self.name!r}: the corpus is empty; pass at least one text")

        def run() -> None:
            hashvalues = self._minhashes(texts)
            self._lsh = self._make_lsh(hashvalues)
            self._hashvalues = hashvalues
            self._n = len(texts)
            self._space = IdSpace.identity(len(texts))
            self._written = False

        self._timed_build(run)

    def add(self, texts: Any, ids: Any = None) -> np.ndarray:
        """Insert texts; returns their ids (int64 ``(m,)``), the next ids unless ``ids`` given."""
        space, lsh = self._space, self._lsh
        if space is None or lsh is None:
            raise self._not_built()
        new = _texts(texts, "texts")
        hashvalues = self._minhashes(new)
        p = self.build_params
        with self._gate.lock:
            space = self._space or space
            new_space, new_ids = space_after_add(space, len(new), ids)
            with self._gate.exclusive():
                start = self._hashvalues.shape[0]
                self._hashvalues = np.concatenate([self._hashvalues, hashvalues])
                for j in np.flatnonzero((hashvalues != _EMPTY).any(axis=1)):
                    mh = LeanMinHash(seed=p["seed"], hashvalues=hashvalues[j], scheme=_SCHEME)
                    lsh.insert(start + int(j), mh, check_duplication=False)
                self._publish(new_space)
        return new_ids

    def delete(self, ids: Any) -> None:
        """Remove the texts with these ids (each must be in the index); never returned again."""
        lsh = self._lsh
        if self._space is None or lsh is None:
            raise self._not_built()
        with self._gate.lock:
            space = self._space
            if space is None:
                raise self._not_built()
            pos = positions_to_delete(space, ids)
            with self._gate.exclusive():
                for p in pos.tolist():
                    if lsh.__contains__(p):
                        lsh.remove(p)
                self._publish(space_after_delete(space, pos, "mark"))

    def _publish(self, space: IdSpace) -> None:
        self._space = space
        self._n = space.live
        self._written = True

    def save(self, path: Any, *, data: Any = None, source: str | None = None) -> None:
        """As :meth:`BaseIndex.save`; an index changed by ``add``/``delete`` cannot be saved yet."""
        if self._written:
            raise UnsupportedOperationError(
                f"index {self.name!r}: saving an index changed by add()/delete() is not "
                "supported yet; build it again from the final texts and save that"
            )
        super().save(path, data=data, source=source)

    def search(self, queries: Any, k: int, **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``k`` candidates per query text; see :meth:`_search`."""
        if "filter" in params or "strategy" in params:
            raise UnsupportedOperationError(
                f"index {self.name!r}: filtered search is for the dense indexes only "
                "(flat, hnsw, faiss-hnsw, ivf, lsh)"
            )
        with self._gate:
            return self._search(queries, k, params)

    def _search(
        self, queries: Any, k: int, params: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``k`` candidates per query text, best estimated Jaccard first.

        Args:
            queries: a sequence of query strings (one string is one query).
            k: results per query, ``1 <= k <= ntotal``.

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``
            (estimated Jaccard), ``-1`` / ``-inf`` padded.
        """
        if params:
            self._parse_query(params)
        lsh = self._lsh
        if lsh is None:
            raise self._not_built()
        texts = _texts(queries, "queries")
        k = check_k(k, self._n)
        ids = np.full((len(texts), k), -1, dtype=I64)
        scores = np.full((len(texts), k), -np.inf, dtype=F32)
        if not texts:
            return ids, scores
        p = self.build_params
        stored = self._hashvalues
        for row, qh in enumerate(self._minhashes(texts)):
            if (qh == _EMPTY).all():
                continue
            found = lsh.query(LeanMinHash(seed=p["seed"], hashvalues=qh, scheme=_SCHEME))
            if not found:
                continue
            cand = np.fromiter(found, dtype=I64, count=len(found))
            est = (stored[cand] == qh).mean(axis=1)
            # best estimate first, then smaller id
            order = np.lexsort((cand, -est))[:k]
            ids[row, : order.size] = cand[order]
            scores[row, : order.size] = est[order]
        space = self._space
        return (ids if space is None else space.to_ids(ids)), scores

    def memory_bytes(self) -> int:
        """Estimated bytes: stored hash values (exact) plus the LSH tables.

        The LSH estimate counts, per inserted text and band, one bytes key
        (``4·rows + 33``), a one-element Python set (~216) and dict slots
        (~100), plus the per-key list of band hashes (``8·bands + 56``).
        """
        lsh = self._lsh
        if lsh is None:
            raise self._not_built()
        inserted = int((self._hashvalues != _EMPTY).any(axis=1).sum())
        bands, rows = int(lsh.b), int(lsh.r)
        per_text = bands * (4 * rows + 33 + 216 + 100) + 8 * bands + 56
        return int(self._hashvalues.nbytes) + inserted * per_text

    def extra_info(self) -> dict[str, Any]:
        if self._lsh is None:
            return {}
        return {"bands": int(self._lsh.b), "rows_per_band": int(self._lsh.r)}

    def _payload(self) -> memoryview:
        if self._lsh is None:
            raise self._not_built()
        values: Any = np.ascontiguousarray(self._hashvalues, dtype="<u4")
        return memoryview(values).cast("B")

    def _payload_extra(self) -> dict[str, Any]:
        return {
            "scheme": _SCHEME,
            "dtype": "<u4",
            "shape": list(self._hashvalues.shape),
            "rescore_metric": self.rescore_metric,
        }

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        count, num_perm = header.get("count"), self.build_params["num_perm"]
        extra = header.get("extra")
        if extra is None:
            extra = {}
        if not isinstance(extra, dict):
            raise IndexFileError(
                f"{self.name}: header field 'extra' is a {type(extra).__name__}, not a table"
            )
        if extra.get("scheme") != _SCHEME or extra.get("dtype") != "<u4":
            raise IndexFileError(f"{self.name}: payload scheme/dtype is not {_SCHEME} uint32")
        if not isinstance(count, int) or extra.get("shape") != [count, num_perm]:
            raise IndexFileError(
                f"{self.name}: payload shape {extra.get('shape')} does not match "
                f"count={count}, num_perm={num_perm}"
            )
        rescore_metric = extra.get("rescore_metric")
        if rescore_metric is not None and rescore_metric not in METRICS:
            raise IndexFileError(
                f"{self.name}: header rescore_metric {rescore_metric!r} is not one of "
                f"{', '.join(METRICS)}"
            )
        if payload.nbytes != count * num_perm * 4:
            raise IndexFileError(
                f"{self.name}: payload holds {payload.nbytes} bytes, expected "
                f"{count * num_perm * 4} for {count} texts x {num_perm} permutations"
            )
        hashvalues = np.frombuffer(payload, dtype="<u4").reshape(count, num_perm).astype(np.uint32)
        self._lsh = self._make_lsh(hashvalues)
        self._hashvalues = hashvalues
        self._n = count
        self.rescore_metric = rescore_metric
        self._space = IdSpace.identity(count)

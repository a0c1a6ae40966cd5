"""Datasets: a corpus, its queries, and cached vectors and exact neighbours.

::

    ds = rb.datasets.load("pydocs")                       # bundled text corpus
    ds = rb.datasets.load("synthetic", n=10_000, dim=384, n_queries=200, seed=0)
    ds = rb.datasets.load("/data/sift")                   # field formats, see below
    X = ds.corpus_vectors("minilm")                       # float32 (n, 384), cached on disk
    truth = ds.exact_neighbors(10)                        # int64 (nq, 10)

Field formats (:mod:`ragbench._formats`): ann-benchmarks HDF5, texmex
``.fvecs``/``.bvecs`` (+ ``.ivecs`` ground truth), BEIR folders, ``.npy``
matrices and ragbench JSONL.

Vectors and neighbours are cached under ``$RAGBENCH_CACHE_DIR`` (default
``~/.cache/ragbench``): embedded vectors keyed by the distinct texts and the
embedder's fingerprint (not by the dataset's name, path, ids or row order),
neighbours by the dataset's content hash and the fingerprint; every entry is verified against a sidecar before it is used, and
each use is recorded in :attr:`Dataset.cache_events`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _formats, _synthetic, attributes, progress
from ._cache import ArrayCache, CacheEvent, cache_dir
from ._registry import check_params
from ._shipped import ShippedVectors, find_shipped
from .errors import ConfigError, DatasetError, InputError, RagbenchError
from .files import SIDECAR_LIMIT, open_regular, read_regular
from .metrics import unit_rows
from .validate import (
    as_matrix,
    bool_param,
    check_k,
    check_memory,
    check_metric,
    json_loads,
    positive_int,
)

if TYPE_CHECKING:
    from .embedders import Embedder

__all__ = [
    "from_table",
    "spec_table",
    "CacheEvent",
    "Corpus",
    "Dataset",
    "Queries",
    "brute_force_neighbors",
    "datasets_dir",
    "describe",
    "load",
    "names",
    "synthetic",
]

log = logging.getLogger("ragbench.datasets")

SYNTHETIC_DEFAULTS: dict[str, int] = {"n": 10_000, "dim": 384, "n_queries": 200, "seed": 0}
_SYNTHETIC_VERSION = _synthetic.VERSION  # keys caches; bumped when the data changes
_KNOWN_FILE = "known_datasets.json"
_NEIGHBORS_BLOCK_BYTES = 64 << 20  # score block size: bounded memory on 1M-row corpora


def datasets_dir() -> Path:
    """Where bundled datasets live: ``$RAGBENCH_DATASETS_DIR`` or the repository's ``datasets/``."""
    env = os.environ.get("RAGBENCH_DATASETS_DIR")
    if env:
        return Path(env).expanduser()
    source_tree = Path(__file__).resolve().parents[1] / "datasets"
    if source_tree.is_dir():
        return source_tree
    # a wheel install carries the bundled corpora as data files under <prefix>/share
    import sys

    return Path(sys.prefix) / "share" / "ragbench" / "datasets"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Corpus:
    """The documents: ``ids[i]``, ``texts[i]`` and ``metadata[i]`` describe row ``i``.

    Metadata dicts may be shared between rows (the synthetic corpus shares one
    per cluster): treat them as read-only. ``attributes``: name -> array of
    length ``n`` (int64, float64 or str), what filters select on (see
    :mod:`ragbench.attributes`); not part of :attr:`Dataset.corpus_hash`
    (filtered neighbours are keyed by the filters' masks instead).
    """

    ids: list[str]
    texts: list[str]
    metadata: list[dict[str, str]]
    attributes: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (len(self.ids) == len(self.texts) == len(self.metadata)):
            raise DatasetError(
                f"corpus: {len(self.ids)} ids, {len(self.texts)} texts and "
                f"{len(self.metadata)} metadata entries must have the same length"
            )
        for name, column in self.attributes.items():
            if column.shape != (len(self.ids),):
                raise DatasetError(
                    f"corpus attribute {name!r} has shape {column.shape}, not ({len(self.ids)},)"
                )

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class Queries:
    """The questions: ``ids[i]`` and ``texts[i]`` describe query ``i``.

    ``filters``: the filter written with each query (a ``filter`` field in
    ``queries.jsonl``, e.g. ``{"tenant": 3}``; ``None`` for a query without
    one), or ``None`` when no query has one.
    """

    ids: list[str]
    texts: list[str]
    filters: list[dict[str, Any] | None] | None = None

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts):
            raise DatasetError(
                f"queries: {len(self.ids)} ids and {len(self.texts)} texts must have the same length"
            )
        if self.filters is not None and len(self.filters) != len(self.ids):
            raise DatasetError(f"queries: {len(self.filters)} filters for {len(self.ids)} queries")

    def __len__(self) -> int:
        return len(self.ids)


def _hash_texts(sha: Any, ids: Sequence[str], texts: Sequence[str]) -> None:
    # Length-prefixed so that ("ab", "c") and ("a", "bc") hash differently.
    for doc_id, text in zip(ids, texts, strict=True):
        i = doc_id.encode("utf-8", "surrogatepass")
        t = text.encode("utf-8", "surrogatepass")
        sha.update(len(i).to_bytes(8, "little"))
        sha.update(i)
        sha.update(len(t).to_bytes(8, "little"))
        sha.update(t)


def _hash_array(sha: Any, arr: np.ndarray | None) -> None:
    if arr is None:
        sha.update(b"none")
        return
    sha.update(f"{arr.dtype.str}{arr.shape}".encode())
    sha.update(np.ascontiguousarray(arr).data.cast("B"))


# --------------------------------------------------------------------------- dataset


class Dataset:
    """A corpus, its queries, optional shipped vectors/ground truth, and cached derivations.

    Attributes: ``name``; ``corpus`` (:class:`Corpus`); ``queries``
    (:class:`Queries`); ``metric`` (``"ip"``, ``"cosine"`` or ``"l2"``);
    ``vectors`` (float32 ``(n, d)`` or None); ``query_vectors_precomputed``
    (float32 ``(nq, d)`` or None); ``ground_truth`` (int64 ``(nq, K)`` or
    None); ``default_embedder`` (``"precomputed"`` when vectors ship, else
    ``"minilm"``); ``cache_events`` (list of :class:`CacheEvent`);
    ``source`` and ``notes`` (strings describing where it came from).
    """

    def __init__(
        self,
        name: str,
        corpus: Corpus,
        queries: Queries,
        *,
        metric: str = "ip",
        vectors: np.ndarray | None = None,
        query_vectors_precomputed: np.ndarray | None = None,
        ground_truth: np.ndarray | None = None,
        source: str = "",
        notes: Sequence[str] = (),
        corpus_hash: str | None = None,
        queries_hash: str | None = None,
    ) -> None:
        check_metric(f"dataset {name!r}", metric)
        if len(corpus) == 0:
            raise DatasetError(f"{name}: the corpus is empty")
        if len(queries) == 0:
            raise DatasetError(f"{name}: there are no queries")
        if (vectors is None) != (query_vectors_precomputed is None):
            raise DatasetError(f"{name}: corpus and query vectors must ship together")
        if vectors is not None and query_vectors_precomputed is not None:
            if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(corpus):
                raise DatasetError(
                    f"{name}: vectors must be float32 ({len(corpus)}, d), got "
                    f"{vectors.dtype}{vectors.shape}"
                )
            qv = query_vectors_precomputed
            if qv.dtype != np.float32 or qv.shape != (len(queries), vectors.shape[1]):
                raise DatasetError(
                    f"{name}: query vectors must be float32 ({len(queries)}, "
                    f"{vectors.shape[1]}), got {qv.dtype}{qv.shape}"
                )
            vectors = np.ascontiguousarray(vectors)
            query_vectors_precomputed = np.ascontiguousarray(qv)
        if ground_truth is not None:
            gt = ground_truth
            if gt.dtype != np.int64 or gt.ndim != 2 or gt.shape[0] != len(queries):
                raise DatasetError(
                    f"{name}: ground truth must be int64 ({len(queries)}, K), got {gt.dtype}{gt.shape}"
                )
        self.name = name
        self.corpus = corpus
        self.queries = queries
        self.metric = metric
        self.vectors = vectors
        self.query_vectors_precomputed = query_vectors_precomputed
        self.ground_truth = ground_truth
        self.default_embedder = "precomputed" if vectors is not None else "minilm"
        self.source = source
        self.notes = list(notes)
        self.cache_events: list[CacheEvent] = []
        #: folder that may hold shipped vectors (``vectors-<embedder>.json``); bundled datasets
        self.shipped_dir: Path | None = None
        self._corpus_hash = corpus_hash
        self._queries_hash = queries_hash
        # "corpus"/"queries" -> (entry row per text, distinct texts, content hash); see _text_rows
        self._text_keys: dict[str, tuple[np.ndarray, list[str], str]] = {}

    def __repr__(self) -> str:
        dim = f", dim={self.vectors.shape[1]}" if self.vectors is not None else ""
        return (
            f"Dataset({self.name!r}, corpus={len(self.corpus)}, queries={len(self.queries)}"
            f"{dim}, metric={self.metric!r})"
        )

    # -- hashes ----------------------------------------------------------------

    @property
    def corpus_hash(self) -> str:
        """sha256 hex of the corpus ids, texts and shipped vectors (computed once)."""
        if self._corpus_hash is None:
            sha = hashlib.sha256(b"corpus\0")
            _hash_texts(sha, self.corpus.ids, self.corpus.texts)
            _hash_array(sha, self.vectors)
            self._corpus_hash = sha.hexdigest()
        return self._corpus_hash

    @property
    def queries_hash(self) -> str:
        """sha256 hex of the query ids, texts and shipped query vectors."""
        if self._queries_hash is None:
            sha = hashlib.sha256(b"queries\0")
            _hash_texts(sha, self.queries.ids, self.queries.texts)
            _hash_array(sha, self.query_vectors_precomputed)
            self._queries_hash = sha.hexdigest()
        return self._queries_hash

    @property
    def content_hash(self) -> str:
        """sha256 hex of corpus and queries (ids, texts, shipped vectors); the cache key base."""
        return hashlib.sha256(f"{self.corpus_hash}:{self.queries_hash}".encode()).hexdigest()

    # -- vectors -----------------------------------------------------------------

    def _embedder(self, embedder: str | Embedder, params: dict[str, Any]) -> Embedder | None:
        """The embedder to use, or None for the dataset's own shipped vectors."""
        if isinstance(embedder, str):
            if embedder == "precomputed":
                if params:
                    raise ConfigError(
                        f"precomputed vectors take no parameters, got {', '.join(sorted(params))}"
                    )
                return None
            from . import embedders

            return embedders.create(embedder, **params)
        if params:
            raise ConfigError(
                "pass embedder parameters only with an embedder name, not an instance"
            )
        if getattr(embedder, "name", None) == "precomputed":
            return None
        return embedder

    def _shipped(self, which: str) -> np.ndarray:
        arr = self.vectors if which == "corpus" else self.query_vectors_precomputed
        if arr is None:
            raise DatasetError(
                f"{self.name}: the dataset ships no precomputed vectors; use a text embedder "
                "such as 'minilm' or 'hashing'"
            )
        return arr

    def _embed_cached(self, which: str, emb: Embedder, *, force: bool = False) -> np.ndarray:
        """Embedded vectors of the corpus or queries, cached by what the texts say.

        The cache key is the set of distinct texts and the embedder's
        fingerprint, never the dataset's name, path or ids: the same passages
        loaded from a folder instead of a file, renamed, reordered or with
        other ids reuse the entry. An entry holds one row per distinct text in
        the order of their digests; the rows are put back in this dataset's
        order (duplicates embedded once).
        """
        if which not in self._text_keys:
            self._text_keys[which] = _text_rows(
                self.corpus.texts if which == "corpus" else self.queries.texts
            )
        rows, unique, content = self._text_keys[which]
        key = _key(f"{which}-{emb.name}", content, emb.fingerprint)

        def compute() -> np.ndarray:
            unit = "passages" if which == "corpus" else "queries"
            return _embed_all(emb, unique, f"embedding {which} ({emb.name})", unit)

        stored = ArrayCache().get_or_compute(
            key,
            f"{which}_vectors[{emb.name}]",
            compute,
            self.cache_events,
            info={
                "texts": len(unique),
                "embedder": emb.fingerprint,
                "content": content,
                "first_seen_in": self.name,
            },
            force=force,
            rows=len(unique),
        )
        if stored.shape[0] != len(unique):
            raise DatasetError(
                f"cache entry {key}: {stored.shape[0]} rows for {len(unique)} distinct texts; "
                "delete it or run with --re-embed"
            )
        return np.ascontiguousarray(stored[rows])

    def shipped_vectors(self, embedder: Embedder) -> ShippedVectors | None:
        """The vectors shipped for ``embedder`` if they apply to these texts, else None.

        They apply when the sidecar's embedder fingerprint and content hashes
        equal ``embedder.fingerprint`` and this dataset's :attr:`corpus_hash`
        and :attr:`queries_hash`.
        """
        found = find_shipped(self.shipped_dir, embedder.name)
        if found is None or not found.matches(
            embedder.fingerprint, self.corpus_hash, self.queries_hash
        ):
            return None
        return found

    def _vectors(self, which: str, emb: Embedder, re_embed: bool) -> np.ndarray:
        found = None if re_embed else self.shipped_vectors(emb)
        if found is None:
            return self._embed_cached(which, emb, force=re_embed)
        t0 = time.perf_counter_ns()
        arr = found.load(which)
        seconds = (time.perf_counter_ns() - t0) / 1e9
        path = str(found.path(which))
        self.cache_events.append(
            CacheEvent(f"{which}_vectors[{emb.name}]", True, path, seconds, shipped=True)
        )
        return arr

    def corpus_vectors(
        self, embedder: str | Embedder = "minilm", *, re_embed: bool = False, **params: Any
    ) -> np.ndarray:
        """Corpus vectors: float32 ``(n, d)``, C-contiguous.

        ``"precomputed"`` returns the shipped vectors as they are; a text
        embedder (name plus its parameters, or an instance) gives L2-normalized
        vectors: the ones shipped with the dataset for that embedder when
        :meth:`shipped_vectors` finds them, else embedded and cached on disk;
        each use is recorded in :attr:`cache_events`. ``re_embed=True``
        ignores shipped and cached vectors and embeds (the result is still
        cached). Do not modify the returned array in place.
        """
        emb = self._embedder(embedder, params)
        if emb is None:
            return self._shipped("corpus")
        return self._vectors("corpus", emb, re_embed)

    def query_vectors(
        self, embedder: str | Embedder = "minilm", *, re_embed: bool = False, **params: Any
    ) -> np.ndarray:
        """Query vectors: float32 ``(nq, d)``, C-contiguous; same rules as :meth:`corpus_vectors`."""
        emb = self._embedder(embedder, params)
        if emb is None:
            return self._shipped("queries")
        return self._vectors("queries", emb, re_embed)

    def exact_neighbors(
        self,
        k: int,
        *,
        embedder: str | Embedder | None = None,
        metric: str | None = None,
        re_embed: bool = False,
        filters: attributes.QueryFilters | None = None,
    ) -> np.ndarray:
        """Exact top-``k`` corpus rows per query: int64 ``(nq, k)``, best first.

        With ``filters`` (one mask per query, :class:`ragbench.attributes.QueryFilters`):
        the exact top-``k`` among each query's allowed rows, ``-1`` padded
        when fewer are allowed; cached under a key that includes the masks.

        Uses the shipped ground truth when the dataset has one, the vectors are
        the shipped ones, the metric is the dataset's and ``k`` fits; otherwise
        brute force (float32 matmul in blocks; equal scores rank the smaller
        row first), cached on disk. ``embedder`` defaults to
        :attr:`default_embedder`, ``metric`` to :attr:`metric`. The
        neighbours are those of the vectors :meth:`corpus_vectors` gives with
        the same ``re_embed`` (shipped vectors and embedded ones are cached
        apart); ``re_embed=True`` recomputes them too.
        """
        k = check_k(k, len(self.corpus))
        metric = check_metric(f"dataset {self.name!r}", self.metric if metric is None else metric)
        emb = self._embedder(self.default_embedder if embedder is None else embedder, {})
        gt = self.ground_truth
        shipped_ok = emb is None and gt is not None and metric == self.metric
        if shipped_ok and filters is None and gt is not None and k <= gt.shape[1]:
            return np.ascontiguousarray(gt[:, :k])
        if filters is not None and filters.masks.shape != (len(self.queries), len(self.corpus)):
            raise DatasetError(
                f"{self.name}: filter masks {filters.masks.shape} are not "
                f"({len(self.queries)}, {len(self.corpus)})"
            )
        fingerprint = "precomputed" if emb is None else emb.fingerprint
        label = "precomputed" if emb is None else emb.name
        found = None if emb is None or re_embed else self.shipped_vectors(emb)
        if found is not None:
            # computed from the shipped vectors, which differ in the last bits from embedded ones
            fingerprint += f":shipped:{found.parts['corpus']['sha256']}"
        what = f"neighbors-{label}-{metric}-k{k}"
        if filters is not None:
            fingerprint += f":filters:{filters.key}"
            what += "-filtered"
        key = _key(what, self.content_hash, fingerprint)

        def compute() -> np.ndarray:
            if emb is None:
                base, queries = self._shipped("corpus"), self._shipped("queries")
            elif found is not None:
                base = self._vectors("corpus", emb, False)
                queries = self._vectors("queries", emb, False)
            else:
                # the embedded vectors, from the cache a re_embed just filled
                base = self._embed_cached("corpus", emb)
                queries = self._embed_cached("queries", emb)
            allowed = None if filters is None else filters.masks
            return brute_force_neighbors(queries, base, k, metric, allowed=allowed)

        return ArrayCache().get_or_compute(
            key,
            f"exact_neighbors[{label},{metric},k={k}{',filtered' if filters else ''}]",
            compute,
            self.cache_events,
            info={"dataset": self.name, "embedder": fingerprint, "metric": metric, "k": k},
            force=re_embed,
            rows=len(self.queries),
            check=lambda ids: _neighbour_problem(ids, len(self.queries), k, len(self.corpus)),
        )

    def query_filters(
        self,
        table: Mapping[str, Any],
        *,
        embedder: str | Embedder | None = None,
        metric: str | None = None,
    ) -> attributes.QueryFilters:
        """One filter per query as a ``[retrieve] filter`` table asks (:mod:`ragbench.attributes`).

        ``{"attribute": ..., "selectivity": ..., "correlated": ...}`` draws
        filters at that selectivity (a correlated one from each query's exact
        neighbours under ``embedder``/``metric``, as in :meth:`exact_neighbors`);
        ``{"from": "queries"}`` takes the ones written with the queries.
        """
        spec = attributes.check_filter_table("[retrieve]", table)
        if spec.get("from") == "queries":
            if self.queries.filters is None:
                raise DatasetError(
                    f"{self.name}: its queries carry no filters (a 'filter' field in queries.jsonl)"
                )
            return attributes.filters_from_specs(self.corpus.attributes, self.queries.filters)
        near = None
        if spec["correlated"]:
            m = min(100, len(self.corpus))
            near = self.exact_neighbors(m, embedder=embedder, metric=metric)
        return attributes.make_filters(self.corpus.attributes, spec, len(self.queries), near)

    def subset(self, n_queries: int) -> Dataset:
        """The same corpus with only the first ``n_queries`` queries (ground truth sliced too)."""
        n = check_k(n_queries, len(self.queries), what="the number of queries")
        f = self.queries.filters
        queries = Queries(
            self.queries.ids[:n], self.queries.texts[:n], None if f is None else f[:n]
        )
        qv = self.query_vectors_precomputed
        gt = self.ground_truth
        out = Dataset(
            self.name,
            self.corpus,
            queries,
            metric=self.metric,
            vectors=self.vectors,
            query_vectors_precomputed=None if qv is None else qv[:n],
            ground_truth=None if gt is None else np.ascontiguousarray(gt[:n]),
            source=self.source,
            notes=self.notes,
            corpus_hash=self._corpus_hash,
        )
        out.default_embedder = self.default_embedder
        out.shipped_dir = self.shipped_dir  # queries differ, so only a full set's vectors apply
        return out


def _neighbour_problem(ids: np.ndarray, nq: int, k: int, n: int) -> str:
    """Why ``ids`` cannot be the exact top-``k`` of ``nq`` queries over ``n`` rows ("" if it can)."""
    if ids.dtype.kind not in "iu" or ids.shape != (nq, k):
        return f"neighbours are {ids.dtype}{list(ids.shape)}, expected int64[{nq}, {k}]"
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
        return f"neighbour ids outside the corpus rows [0, {n})"
    return ""


def _key(what: str, content: str, fingerprint: str) -> str:
    """The cache key of ``what`` computed from ``content`` by ``fingerprint`` (no dataset name)."""
    digest = hashlib.sha256(f"{content}\0{fingerprint}\0{what}".encode()).hexdigest()[:24]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in what)[:80]
    return f"{safe}-{digest}"


def _text_rows(texts: Sequence[str]) -> tuple[np.ndarray, list[str], str]:
    """Where each text's vector is in a content-keyed cache entry.

    Returns ``rows`` (int64 ``(len(texts),)``: the entry row of each text),
    the distinct texts in entry order (sorted by their 16-byte blake2b
    digest), and the entry's content hash (sha256 hex of those digests).
    """
    digests = [
        hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest() for t in texts
    ]
    first: dict[bytes, int] = {}
    for i, d in enumerate(digests):
        first.setdefault(d, i)
    order = sorted(first)
    rank = {d: r for r, d in enumerate(order)}
    rows = np.fromiter((rank[d] for d in digests), dtype=np.int64, count=len(digests))
    content = hashlib.sha256(b"texts-v1\0" + b"".join(order)).hexdigest()
    return rows, [texts[first[d]] for d in order], content


_EMBED_CHUNK = 256  # texts per embed() call: the progress step, a few batches of the model


def _embed_all(
    emb: Embedder, texts: Sequence[str], description: str = "embedding", unit: str = "texts"
) -> np.ndarray:
    """Embed ``texts`` in chunks, longest first, reporting progress; rows in input order.

    Sorting by length first keeps the padding of each model batch small, as
    sentence-transformers does within one call, so chunking costs no speed.
    """
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    parts = []
    with progress.task(description, len(texts), unit=unit) as advance:
        for start in range(0, len(order), _EMBED_CHUNK):
            rows = order[start : start + _EMBED_CHUNK]
            parts.append(emb.embed([texts[i] for i in rows]))
            advance(len(rows))
    out = np.zeros((0, emb.dim), np.float32)
    if parts:
        out = np.empty((len(texts), parts[0].shape[1]), np.float32)
        out[np.asarray(order, dtype=np.int64)] = np.concatenate(parts)
    out = np.ascontiguousarray(out, dtype=np.float32)
    if out.shape != (len(texts), emb.dim):
        raise InputError(
            f"embedder {emb.name!r} returned {out.shape} for {len(texts)} texts of dim {emb.dim}"
        )
    if not np.isfinite(out).all():
        raise InputError(f"embedder {emb.name!r} returned NaN or inf")
    return out


def brute_force_neighbors(
    queries: np.ndarray,
    base: np.ndarray,
    k: int,
    metric: str = "ip",
    *,
    allowed: np.ndarray | None = None,
) -> np.ndarray:
    """Exact top-``k`` rows of ``base`` for each query: int64 ``(nq, k)``.

    ``allowed``: bool ``(nq, n)``, the rows each query may return (a
    filter); rows it excludes never appear, and a query with fewer than
    ``k`` allowed rows gets ``-1`` in the places left.

    ``queries`` float32 ``(nq, d)``, ``base`` float32 ``(n, d)``. ``"ip"`` and
    ``"cosine"`` rank by descending similarity, ``"l2"`` by ascending distance;
    equal scores rank the smaller row first. Scores are computed in float32
    blocks of corpus rows so memory stays bounded; cosine follows
    :func:`ragbench.metrics.exact_scores` (0.0 against a zero row or query),
    through :func:`ragbench.metrics.unit_rows`.
    """
    check_metric("brute_force_neighbors", metric)
    x = as_matrix(base, name="base vectors")
    q = as_matrix(queries, name="query vectors", dim=x.shape[1])
    n, nq = x.shape[0], q.shape[0]
    k = check_k(k, n)
    if metric == "cosine":
        q = unit_rows(q)
    if allowed is not None and (allowed.dtype != np.bool_ or allowed.shape != (nq, n)):
        raise InputError(f"allowed must be bool ({nq}, {n}), got {allowed.dtype}{allowed.shape}")
    block = max(k, min(n, _NEIGHBORS_BLOCK_BYTES // (4 * max(nq, 1))))
    best_scores = np.full((nq, 0), -np.inf, np.float32)
    best_ids = np.zeros((nq, 0), np.int64)
    with progress.task("exact neighbours", n, unit="rows") as advance:
        for start in range(0, n, block):
            stop = start + block
            best_scores, best_ids = _neighbors_block(
                q,
                x[start:stop],
                start,
                k,
                metric,
                (best_scores, best_ids),
                None if allowed is None else allowed[:, start:stop],
            )
            advance(min(block, n - start))
    if allowed is not None:
        best_ids[best_scores == -np.inf] = -1  # fewer than k allowed rows
    return np.ascontiguousarray(best_ids, dtype=np.int64)


def _neighbors_block(
    q: np.ndarray,
    xb: np.ndarray,
    start: int,
    k: int,
    metric: str,
    best: tuple[np.ndarray, np.ndarray],
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Merge the top-``k`` of corpus rows ``start:start+len(xb)`` into ``best`` (scores, ids).

    ``allowed``: bool ``(nq, len(xb))``; excluded rows score ``-inf``.
    """
    best_scores, best_ids = best
    if metric == "cosine":
        xb = unit_rows(xb)
    scores = q @ xb.T
    if metric == "l2":
        # ||q-x||^2 = ||q||^2 - 2 q.x + ||x||^2; ||q||^2 is constant per row, so rank by the rest.
        scores = 2 * scores - np.einsum("ij,ij->i", xb, xb)[None, :]
    if allowed is not None:
        scores[~allowed] = -np.inf
    top_scores, top_ids = _block_topk(scores, min(k, scores.shape[1]))
    all_scores = np.concatenate([best_scores, top_scores], axis=1)
    all_ids = np.concatenate([best_ids, top_ids + start], axis=1)
    order = np.lexsort((all_ids, -all_scores), axis=1)[:, :k]
    return np.take_along_axis(all_scores, order, axis=1), np.take_along_axis(all_ids, order, axis=1)


def _block_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row with ties at the cut broken toward smaller columns."""
    nq, m = scores.shape
    if k >= m:
        ids = np.broadcast_to(np.arange(m, dtype=np.int64), (nq, m))
        return scores, np.ascontiguousarray(ids)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
    # argpartition picks arbitrary members of a tie at the cut; redo those rows exactly.
    tied = np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k)
    for row in tied:
        s = scores[row]
        above = np.flatnonzero(s > kth[row])
        equal = np.flatnonzero(s == kth[row])[: k - above.size]
        part[row] = np.concatenate([above, equal])
    ids = part.astype(np.int64)
    return np.take_along_axis(scores, part, axis=1), ids


# --------------------------------------------------------------------------- synthetic

_SYLLABLES = [
    "ka", "lo", "mi", "ren", "tu", "sa", "vo", "pel", "dri", "an", "om", "gus", "ti", "ne",
    "zor", "bu", "li", "ha", "qua", "ex", "fi", "mon", "ru", "sel", "da", "ko", "ve", "nis",
]  # fmt: skip


def _vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    words: set[str] = set()
    out: list[str] = []
    while len(out) < size:
        n = int(rng.integers(2, 4))
        word = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n))
        if word not in words:
            words.add(word)
            out.append(word)
    return out


def synthetic(n: int = 10_000, dim: int = 384, n_queries: int = 200, seed: int = 0) -> Dataset:
    """A synthetic dataset that behaves like real sentence embeddings, deterministic from ``seed``.

    The vectors follow a model of how embeddings are distributed, calibrated on
    the MiniLM vectors of ``pydocs`` (see :mod:`ragbench._synthetic`): a shared
    direction, power-law-sized topics (no fixed count: a larger corpus holds
    more), documents inside topics, passages varying in a low-rank subspace of
    their topic, L2-normalized float32. At ``n = 3274`` (seed 0) its intrinsic
    dimensionality, relative contrast, neighbour-similarity gap, hubness and
    covariance spectrum are within 15 % of pydocs-MiniLM's (``ragbench
    datasets --stats``). A query is drawn like a passage of a random corpus point's
    document with wider spread and a shared "question" offset, so it is near
    passages but never a copy of one. Each text is 12-20 words, ~85% drawn from
    its topic's 60-word list and the rest from a shared vocabulary, so text
    similarity follows vector similarity. Metadata gives the topic number as
    ``cluster`` (one dict shared per topic). ``corpus.attributes`` holds
    ``tenant``, ``category`` (follows the topics) and ``year``, drawn from a
    seed stream of their own (:func:`ragbench.attributes.synthetic_attributes`).
    ``default_embedder`` is ``"precomputed"``.
    """
    owner = "dataset 'synthetic'"
    n = positive_int(owner, "n", n)
    dim = positive_int(owner, "dim", dim, lo=2)
    n_queries = positive_int(owner, "n_queries", n_queries)
    seed = positive_int(owner, "seed", seed, lo=0)
    check_memory(
        _synthetic_bytes(n, dim, n_queries), f"{owner} with n={n}, dim={dim}, n_queries={n_queries}"
    )
    vec_seq, text_seq = np.random.SeedSequence([seed, 0x5A6B]).spawn(2)
    rng = np.random.default_rng(vec_seq)
    model = _synthetic.SyntheticModel.draw(rng, n, dim)
    labels, n_clusters = model.labels, model.n_topics
    vectors = model.points(model.docs, rng)
    query_docs = model.docs[rng.integers(0, n, n_queries)]
    query_labels = model.doc_topic[query_docs]
    query_vectors = model.points(query_docs, rng, spread=_synthetic.QUERY_SPREAD, query=True)
    words = _ClusterWords.draw(np.random.default_rng(text_seq), n_clusters)
    corpus_texts: list[str] = []
    for s in range(0, n, _CHUNK):
        corpus_texts.extend(words.texts(labels[s : s + _CHUNK]))
    width = max(7, len(str(n - 1)))
    qwidth = max(4, len(str(n_queries - 1)))
    meta = [{"cluster": str(c)} for c in range(n_clusters)]
    corpus = Corpus(
        [f"s{i:0{width}d}" for i in range(n)],
        corpus_texts,
        [meta[c] for c in labels.tolist()],
        attributes.synthetic_attributes(labels, model.docs, seed),
    )
    queries = Queries([f"q{i:0{qwidth}d}" for i in range(n_queries)], words.texts(query_labels))
    params = json.dumps({"n": n, "dim": dim, "n_queries": n_queries, "seed": seed}, sort_keys=True)
    # Everything is a function of the parameters, so hash those instead of ~GBs of arrays.
    return Dataset(
        f"synthetic-n{n}-d{dim}-q{n_queries}-s{seed}",
        corpus,
        queries,
        metric="ip",
        vectors=vectors,
        query_vectors_precomputed=query_vectors,
        source=f"ragbench synthetic generator ({_SYNTHETIC_VERSION}), {params}",
        corpus_hash=hashlib.sha256(f"{_SYNTHETIC_VERSION}:corpus:{params}".encode()).hexdigest(),
        queries_hash=hashlib.sha256(f"{_SYNTHETIC_VERSION}:queries:{params}".encode()).hexdigest(),
    )


_CHUNK = 65_536  # rows generated per step: bounded temporaries on 1M-row corpora


def _synthetic_bytes(n: int, dim: int, n_queries: int) -> int:
    """Estimated peak bytes of :func:`synthetic`, to refuse sizes that cannot fit first.

    Four float32 ``(n, dim)`` arrays at most (topic and document centres,
    the vectors, a temporary), the query vectors, ~1600 bytes of texts, ids and labels per
    corpus row and ~300 per query (tracemalloc peaks: n=20 000, dim 384: 140 MB,
    estimated 155 MB; n=50 000, dim 64: 128 MB, estimated 131 MB).
    """
    return 4 * n * dim * 4 + n * 1600 + n_queries * (dim * 4 + 300)


@dataclass(frozen=True, slots=True)
class _ClusterWords:
    """Synthetic texts: a shared vocabulary, 60 words per cluster, and the generator drawing them."""

    rng: np.random.Generator
    vocab: list[str]
    cluster_words: np.ndarray  # int (n_clusters, 60): indexes into vocab

    @classmethod
    def draw(cls, rng: np.random.Generator, n_clusters: int) -> _ClusterWords:
        vocab = _vocabulary(rng, 4096)
        return cls(rng, vocab, rng.integers(0, len(vocab), (n_clusters, 60)))

    def texts(self, rows: np.ndarray) -> list[str]:
        """One text of 12-20 words per cluster number in ``rows``, ~85% from the cluster's words."""
        rng, vocab = self.rng, self.vocab
        lengths = rng.integers(12, 21, rows.size)
        own = self.cluster_words[rows[:, None], rng.integers(0, 60, (rows.size, 20))]
        shared = rng.integers(0, len(vocab), (rows.size, 20))
        words = np.where(rng.random((rows.size, 20)) < 0.85, own, shared).tolist()
        return [
            " ".join([vocab[w] for w in row[:length]])
            for row, length in zip(words, lengths.tolist(), strict=True)
        ]


# --------------------------------------------------------------------------- loading


def _bundled() -> dict[str, Path]:
    root = datasets_dir()
    if not root.is_dir():
        return {}
    return {
        p.name: p
        for p in sorted(root.iterdir())
        if p.is_dir() and (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file()
    }


def _known_path() -> Path:
    return cache_dir() / _KNOWN_FILE


def _read_known() -> dict[str, dict[str, Any]]:
    """The datasets loaded from paths before; {} without a file.

    A file that exists but cannot be read as one JSON table (a FIFO,
    damaged or too deeply nested JSON) raises :class:`DatasetError`.
    """
    path = _known_path()
    fix = f"delete {path} (it only lists datasets loaded from paths before)"
    try:
        with open_regular(
            path, limit_bytes=SIDECAR_LIMIT, what="dataset list", error=DatasetError, os_errors=True
        ) as fh:
            data = json_loads(fh.read(), str(path), DatasetError)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror}); {fix}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text; {fix}") from None
    except DatasetError as exc:
        raise DatasetError(f"{exc}; {fix}") from None
    return data if isinstance(data, dict) else {}


def _remember(ds: Dataset, path: Path) -> None:
    """Record a dataset loaded from a path so ``names()`` lists it and ``load(name)`` finds it."""
    known = _read_known()
    entry = {"path": str(path), "n": len(ds.corpus), "n_queries": len(ds.queries)}
    if known.get(ds.name) == entry:
        return
    known[ds.name] = entry
    target = _known_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        log.warning("could not record dataset %s in %s: %s", ds.name, target, exc)


def names() -> list[str]:
    """Bundled dataset names, ``"synthetic"``, then datasets loaded from paths before."""
    out = list(_bundled()) + ["synthetic"]
    for name, entry in sorted(_read_known().items()):
        if name not in out and isinstance(entry, dict) and Path(str(entry.get("path"))).exists():
            out.append(name)
    return out


def describe() -> list[dict[str, Any]]:
    """One dict per bundled dataset: ``name``, ``size``, ``source``, ``description`` (+ extras)."""
    out: list[dict[str, Any]] = []
    for name, path in _bundled().items():
        info: dict[str, Any] = {"name": name, "path": str(path)}
        try:
            raw = read_regular(path / "meta.json", limit_bytes=SIDECAR_LIMIT, what="meta.json")
            meta = json.loads(raw.decode("utf-8"))
        except (RagbenchError, OSError, ValueError, RecursionError):
            meta = {}
        n_corpus = meta.get("n_corpus")
        n_queries = meta.get("n_queries")
        info["size"] = (
            f"{n_corpus} passages, {n_queries} queries" if n_corpus else "see corpus.jsonl"
        )
        info["source"] = meta.get("source", str(path))
        info["description"] = meta.get("description", "")
        for extra in ("licence", "python_version", "corpus_chars"):
            if extra in meta:
                info[extra] = meta[extra]
        out.append(info)
    d = SYNTHETIC_DEFAULTS
    out.append(
        {
            "name": "synthetic",
            "path": "",
            "size": f"parametric (default n={d['n']}, dim={d['dim']}, n_queries={d['n_queries']})",
            "source": "generated by ragbench from a seed",
            "description": "L2-normalized float32 vectors modelled on sentence embeddings "
            "(power-law topics, documents, low-rank passages; calibrated on pydocs-MiniLM) "
            "and topic-vocabulary texts; ships its own vectors",
        }
    )
    return out


def load(name_or_path: str | os.PathLike[str], **params: Any) -> Dataset:
    """Load a dataset by name or path.

    Names: ``"pydocs"`` (bundled, no parameters), ``"synthetic"`` (``n``,
    ``dim``, ``n_queries``, ``seed``), or a dataset loaded from a path earlier.
    Paths: see the module docstring; they accept ``metric`` to override what
    the file says, and ``drop_empty=True`` to drop passages and queries whose
    text is empty or only whitespace (logged, and listed in :attr:`Dataset.notes`)
    instead of raising :class:`DatasetError` naming the first one. Unknown names raise :class:`DatasetError` listing the known
    ones; unknown parameters raise :class:`ConfigError` naming them.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise DatasetError(f"dataset must be a name or a path, got {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    if text == "synthetic":
        check_params("dataset 'synthetic'", params, set(SYNTHETIC_DEFAULTS))
        return synthetic(**{**SYNTHETIC_DEFAULTS, **params})
    bundled = _bundled()
    if text in bundled:
        check_params(f"dataset {text!r}", params, set())
        raw = _formats.read_jsonl_folder(bundled[text])
        if text == "pydocs" and raw.corpus_fields is None:
            raw.corpus_attributes = {"category": attributes.pydocs_categories(raw.corpus_metadata)}
        ds = _from_raw(raw, source=f"bundled: {bundled[text]}")
        ds.shipped_dir = bundled[text]
        return ds
    known = _read_known()
    if text in known and not _formats.is_dataset_path(text):
        return _load_path(Path(str(known[text].get("path"))), params)
    if _formats.is_dataset_path(text):
        return _load_path(Path(text).expanduser(), params)
    raise DatasetError(
        f"unknown dataset {text!r}; known: {', '.join(names())}; or pass a path to an .hdf5, "
        ".fvecs/.bvecs, .npy or .jsonl file or a BEIR/texmex folder"
    )


def _load_path(path: Path, params: dict[str, Any]) -> Dataset:
    check_params(f"dataset {str(path)!r}", params, {"metric", "drop_empty"})
    drop_empty = bool_param(f"dataset {str(path)!r}", "drop_empty", params.get("drop_empty", False))
    raw = _formats.read_path(path, drop_empty=drop_empty)
    if "metric" in params:
        metric = params["metric"]
        if metric not in _formats.METRIC_NAMES:
            raise ConfigError(
                f"metric must be one of ip, cosine, l2 (or angular/euclidean/dot), got {metric!r}"
            )
        chosen = _formats.METRIC_NAMES[metric]
        if chosen != raw.metric and raw.ground_truth is not None:
            # Shipped neighbours were ranked under the file's metric, not this one.
            raw.ground_truth = None
            raw.notes.append(f"shipped ground truth dropped: metric overridden to {chosen}")
        raw.metric = chosen
    ds = _from_raw(raw, source=str(path))
    _remember(ds, path.resolve())
    return ds


def _from_raw(raw: _formats.RawDataset, source: str) -> Dataset:
    return Dataset(
        raw.name,
        Corpus(raw.corpus_ids, raw.corpus_texts, raw.corpus_metadata, _raw_attributes(raw)),
        Queries(raw.query_ids, raw.query_texts, raw.query_filters),
        metric=raw.metric,
        vectors=raw.vectors,
        query_vectors_precomputed=raw.query_vectors,
        ground_truth=raw.ground_truth,
        source=source,
        notes=raw.notes,
    )


def _raw_attributes(raw: _formats.RawDataset) -> dict[str, np.ndarray]:
    out = dict(raw.corpus_attributes)
    if raw.corpus_fields is not None:
        out.update(attributes.from_fields(raw.corpus_fields))
    return out


def spec_table(spec: str, **params: Any) -> dict[str, Any]:
    """The ``[dataset]`` config table for a name or path given on a command line.

    ``spec`` is a path when it looks like one (a separator, a suffix, or an
    existing file), else a dataset name; ``params`` that are not ``None``
    (``n``, ``dim``, ``n_queries``, ``seed``, ``metric``) are added.
    """
    table: dict[str, Any] = {"path" if _formats.is_dataset_path(spec) else "name": spec}
    table.update({k: v for k, v in params.items() if v is not None})
    return table


def from_table(table: Mapping[str, Any]) -> Dataset:
    """Load the dataset a ``[dataset]`` config table describes (``name`` or ``path``, plus parameters)."""
    params = dict(table)
    if "path" in params:
        params.pop("name", None)
        return load(params.pop("path"), **params)
    if "name" not in params:
        raise ConfigError("[dataset] needs a name (pydocs, synthetic, ...) or a path")
    return load(params.pop("name"), **params)

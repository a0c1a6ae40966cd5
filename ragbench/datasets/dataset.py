"""The dataset: a corpus, its queries, and the vectors and exact neighbours derived from them.

:class:`Dataset` holds :class:`Corpus` and :class:`Queries`; its vectors come
from shipped files (:mod:`ragbench.datasets.shipped`) or an embedder, cached
on disk (:mod:`ragbench.datasets.cache`), and its exact neighbours from
:func:`ragbench.datasets.neighbors.brute_force_neighbors`, cached the same way.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import attributes, progress
from ..errors import ConfigError, DatasetError, InputError
from ..judged import Judgments
from ..validate import check_k, check_metric
from .cache import ArrayCache, CacheEvent
from .neighbors import brute_force_neighbors, neighbour_problem
from .shipped import ShippedVectors, find_shipped

if TYPE_CHECKING:
    from ..embedders import Embedder

__all__ = ["Corpus", "Dataset", "Queries"]


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


class Dataset:
    """A corpus, its queries, optional shipped vectors/ground truth, and cached derivations.

    Attributes: ``name``; ``corpus`` (:class:`Corpus`); ``queries``
    (:class:`Queries`); ``metric`` (``"ip"``, ``"cosine"`` or ``"l2"``);
    ``vectors`` (float32 ``(n, d)`` or None); ``query_vectors_precomputed``
    (float32 ``(nq, d)`` or None); ``ground_truth`` (int64 ``(nq, K)`` or
    None); ``default_embedder`` (``"precomputed"`` when vectors ship, else
    ``"minilm"``); ``cache_events`` (list of :class:`CacheEvent`);
    ``source`` and ``notes`` (strings describing where it came from);
    ``qrels`` (judged answers, ``{query id: {corpus id: grade}}``, or None
    without any) and ``qrels_source`` (their file); :meth:`judgments` gives
    them by row, as :mod:`ragbench.judged` measures them.
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
        qrels: Mapping[str, Mapping[str, int]] | None = None,
        qrels_source: str = "",
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
        self.qrels = None if qrels is None else {q: dict(g) for q, g in qrels.items()}
        self.qrels_source = qrels_source
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

    # -- judged answers ----------------------------------------------------------

    def judgments(self) -> Judgments | None:
        """The judged answers by row (one grade mapping per query row), or None without qrels.

        Corpus ids are looked up once per call; judgments of ids this corpus
        lacks raise :class:`DatasetError` (the readers refuse them earlier).
        """
        if self.qrels is None:
            return None
        rows = {doc_id: i for i, doc_id in enumerate(self.corpus.ids)}
        grades: list[dict[int, int]] = []
        for qid in self.queries.ids:
            judged = self.qrels.get(qid, {})
            missing = [d for d in judged if d not in rows]
            if missing:
                raise DatasetError(
                    f"{self.qrels_source}: query {qid!r} judges {missing[0]!r}, not in the corpus"
                )
            grades.append({rows[d]: g for d, g in judged.items()})
        return Judgments(grades, self.qrels_source)

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
            from .. import embedders

            return embedders.create(embedder, **params)
        if params:
            raise ConfigError(
                "pass embedder parameters only with an embedder name, not an instance"
            )
        if embedder.name == "precomputed":
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
            check=lambda ids: neighbour_problem(
                ids, len(self.queries), k, len(self.corpus), padded=filters is not None
            ),
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
            qrels=self.qrels,
            qrels_source=self.qrels_source,
        )
        out.default_embedder = self.default_embedder
        out.shipped_dir = self.shipped_dir  # queries differ, so only a full set's vectors apply
        return out


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

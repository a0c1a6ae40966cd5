"""The vectors of the ``synthetic`` dataset: a model of how sentence embeddings are distributed.

The model is calibrated on the MiniLM vectors of the bundled ``pydocs`` corpus
with :mod:`ragbench.datastats`: at ``n = 3274`` and the default seed 0 every
statistic there is within 15 % of pydocs-MiniLM's (seeds 1-3 of the same law
miss on hubness, 0.73-0.89 against 1.09: at 3k it hangs on a few dense
topics). None of its parameters depends on ``n``:

1. A shared direction (every sentence embedding has a strong common
   component: the mean of pydocs' unit MiniLM vectors has norm 0.38).
2. Topics with power-law popularity: topic ``t = 0, 1, ...`` is drawn with
   ``P(topic >= t) = (1 + t / TOPIC_HEAD) ** -TOPIC_TAIL`` (a discrete Lomax
   law). There is no fixed number of topics: a larger corpus reaches further
   into the tail, so it holds more of them (roughly ``n ** (1 / (1 +
   TOPIC_TAIL))``, ~1 000 at 3k, ~6 000 at 100k) and its biggest topics grow,
   as in real collections. A topic's centre is the shared direction plus a
   Gaussian offset whose covariance spectrum decays as ``(i +
   SPECTRUM_OFFSET) ** -SPECTRUM_DECAY``: no few directions dominate, yet
   most variance sits in the top ~50, as in real embeddings. Topics differ in
   how tight they are (a log-normal spread factor, ``TIGHTNESS``): density
   varies, which is what gives real data its hubs.
3. Documents inside a topic, with the same law (``DOC_HEAD``, ``DOC_TAIL``),
   and passages inside a document: both vary inside the topic's own low-rank
   subspace (rank ``RANK``, axis widths decaying as ``j ** -WITHIN_DECAY``;
   one of ``N_BASES`` shared random bases per topic), plus a little
   isotropic noise. So locally the data has the intrinsic dimension of real
   embeddings (~11 over the 10-20 nearest), rising slowly at larger scales
   as neighbourhoods reach other topics (~14 over the 100 nearest), while
   globally it spans all ``dim`` directions (effective rank ~120 of 384).

Every point is L2-normalized. A query is made like a passage of a random
corpus point's document, with its within-document noise scaled by
``QUERY_SPREAD`` and a shared "question" offset added: questions are worded
unlike passages, so they sit near their passage but farther than the
passage's own neighbours do (pydocs: a question's nearest passage has
similarity 0.59 on average, a passage's nearest passage 0.78).

What moves with ``n`` (the same law, more draws; measured with
``ragbench datasets --stats synthetic --n ...``, and on random subsets of
pydocs for the real trend up to 3 274): the nearest neighbour gets closer, so
relative contrast grows (pydocs 1.79 / 2.06 / 2.26 at 818 / 1 637 / 3 274
passages; synthetic 1.86 / 2.06 / 2.28, then 3.0 at 30k and 3.2 at 100k); the
intrinsic dimension over the 10-20 nearest stays ~11-13 (a sparse subset sees
a larger scale: pydocs 14.2 -> 11.1 from 818 to 3 274, synthetic 14.0 ->
11.2); over the 100 nearest it falls (~10 at 100k) as they come to lie in one
topic's subspace; the 10th and 100th neighbours get closer together (gap 0.22
at 3k, 0.13 at 100k: the top 100 candidates look more alike, so re-scoring a
coarse index's candidates recovers less); the covariance spectrum and the
common direction stay put; queries find closer passages (mean nearest
similarity 0.60 -> 0.69), as pydocs' queries do on larger subsets.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from .. import attributes
from ..validate import check_memory, positive_int
from .dataset import Corpus, Dataset, Queries

__all__ = ["SYNTHETIC_DEFAULTS", "VERSION", "SyntheticModel", "synthetic"]

SYNTHETIC_DEFAULTS: dict[str, int] = {"n": 10_000, "dim": 384, "n_queries": 200, "seed": 0}

VERSION = "synthetic-v4"  # bump whenever the generated data changes: it keys caches
# Calibrated on pydocs-MiniLM (Nelder-Mead on the log-ratios of the datastats
# statistics at n = 3274, seeds 0 and 1); lengths are before normalization.
MEAN_NORM = 0.472  # length of the shared direction
TOPIC_SCALE = 0.664  # length of a topic centre's offset from the shared direction
SPECTRUM_DECAY = 2.285  # topic covariance eigenvalue i ~ (i + SPECTRUM_OFFSET) ** -SPECTRUM_DECAY
SPECTRUM_OFFSET = 10.71
TOPIC_HEAD = 81.2  # P(topic >= t) = (1 + t / TOPIC_HEAD) ** -TOPIC_TAIL, t = 0, 1, ...
TOPIC_TAIL = 0.839
TIGHTNESS = 0.484  # log-normal sigma of a topic's spread (documents and passages)
DOC_HEAD = 1.994  # the same law for the document inside a topic
DOC_TAIL = 1.851
DOC_SCALE = 0.2715  # length of a document's offset from its topic centre (in its subspace)
RANK = 14  # rank of a topic's subspace
WITHIN_DECAY = 0.688  # axis j of a topic's subspace has width ~ j ** -WITHIN_DECAY
WITHIN_SCALE = 0.718  # length of a passage's offset from its document centre
ISO_SCALE = 0.041  # length of the isotropic noise of a passage
N_BASES = 16  # shared subspace bases, one per topic (topic % N_BASES)
QUERY_SPREAD = 2.5  # a query's noise relative to a passage's
QUERY_SHIFT = 1.2  # length of the shared offset of questions from passages
_CHUNK = 65_536  # rows generated per step: bounded temporaries on 1M-row corpora
_MAX_LABEL = 1 << 40


@dataclass(frozen=True, slots=True)
class SyntheticModel:
    """The drawn parameters of one synthetic corpus: directions, topic and document centres.

    ``labels`` are the topic of every corpus point renumbered 0..n_topics-1
    (in order of first appearance in sorted topic order); ``docs`` index
    ``doc_centres``.
    """

    mean: np.ndarray  # float32 (dim,)
    question: np.ndarray  # float32 (dim,)
    topic_centres: np.ndarray  # float32 (n_topics, dim), mean included
    doc_centres: np.ndarray  # float32 (n_docs, dim), topic centre included
    doc_topic: np.ndarray  # int64 (n_docs,)
    doc_width: np.ndarray  # float32 (n_docs,): its topic's spread relative to the typical one
    bases: np.ndarray  # float32 (N_BASES, min(RANK, dim), dim), rows of total length ~1
    iso: np.float32  # uniform noise half-width... see points()
    labels: np.ndarray  # int64 (n,) topic of each corpus point
    docs: np.ndarray  # int64 (n,) document of each corpus point

    @property
    def n_topics(self) -> int:
        return int(self.topic_centres.shape[0])

    @classmethod
    def draw(cls, rng: np.random.Generator, n: int, dim: int) -> SyntheticModel:
        """Draw the model and the topic and document of each of ``n`` points."""
        mean = (_unit(rng.standard_normal(dim)) * MEAN_NORM).astype(np.float32)
        question = (_unit(rng.standard_normal(dim)) * QUERY_SHIFT).astype(np.float32)
        topics = _power_law(rng, n, TOPIC_HEAD, TOPIC_TAIL)
        docs = _power_law(rng, n, DOC_HEAD, DOC_TAIL)
        topic_ids, labels = np.unique(topics, return_inverse=True)
        pair = labels.astype(np.int64) * _MAX_LABEL + docs
        pair_ids, doc_of = np.unique(pair, return_inverse=True)
        doc_topic = pair_ids // _MAX_LABEL
        # The covariance's eigenvectors are coordinate axes (in a random order),
        # not a random basis: every index ragbench measures is rotation-invariant
        # (distances, random hyperplanes, k-means), and a draw costs no QR.
        widths = np.empty(dim)
        widths[rng.permutation(dim)] = (np.arange(1, dim + 1) + SPECTRUM_OFFSET) ** (
            -SPECTRUM_DECAY / 2
        )
        widths /= math.sqrt(math.fsum((widths**2).tolist()))
        g = rng.standard_normal((topic_ids.size, dim), dtype=np.float32)
        g *= (TOPIC_SCALE * widths).astype(np.float32)
        topic_centres = g + mean
        rank = min(RANK, dim)
        axis = np.arange(1, rank + 1, dtype=np.float64) ** -WITHIN_DECAY
        axis /= math.sqrt(math.fsum((axis**2).tolist()))
        # Gaussian rows of length ~1: nearly orthonormal in many dimensions, and
        # 64 of them cost a draw where 64 QR decompositions cost a second.
        bases = rng.standard_normal((N_BASES, rank, dim)) / math.sqrt(dim) * axis[:, None]
        bases = bases.astype(np.float32)
        # documents spread inside their topic's subspace, as passages do inside a document
        coords = rng.standard_normal((pair_ids.size, rank), dtype=np.float32)
        # some topics are tight, some loose: density varies, as between real topics
        tight = np.exp(TIGHTNESS * rng.standard_normal(topic_ids.size)).astype(np.float32)
        doc_width = tight[doc_topic]
        coords *= np.float32(DOC_SCALE) * doc_width[:, None]
        doc_centres = topic_centres[doc_topic]
        doc_centres += _low_rank(coords, doc_topic % N_BASES, bases)
        iso = np.float32(ISO_SCALE * math.sqrt(3.0 / dim))  # uniform(-iso, iso): length ISO_SCALE
        return cls(
            mean,
            question,
            topic_centres,
            doc_centres,
            doc_topic.astype(np.int64),
            doc_width,
            bases,
            iso,
            labels.astype(np.int64),
            doc_of.astype(np.int64),
        )

    def points(
        self,
        docs: np.ndarray,
        gen: np.random.Generator,
        *,
        spread: float = 1.0,
        query: bool = False,
    ) -> np.ndarray:
        """One L2-normalized float32 point in each document of ``docs`` (int64)."""
        dim = self.doc_centres.shape[1]
        out = np.empty((docs.size, dim), np.float32)
        for s in range(0, docs.size, _CHUNK):
            doc = docs[s : s + _CHUNK]
            coords = gen.standard_normal((doc.size, self.bases.shape[1]), dtype=np.float32)
            coords *= np.float32(WITHIN_SCALE * spread) * self.doc_width[doc][:, None]
            # Uniform instead of Gaussian isotropic noise: same variance, looks
            # the same to a neighbour search in many dimensions, ~7x cheaper.
            blk = gen.random((doc.size, dim), dtype=np.float32)
            blk -= np.float32(0.5)
            blk *= np.float32(2.0 * spread) * self.iso
            blk += self.doc_centres[doc]
            if query:
                blk += self.question
            blk += _low_rank(coords, self.doc_topic[doc] % N_BASES, self.bases)
            blk /= np.linalg.norm(blk, axis=1, keepdims=True)
            out[s : s + doc.size] = blk
        return out


def _power_law(rng: np.random.Generator, n: int, head: float, tail: float) -> np.ndarray:
    """``n`` labels 0, 1, ... with ``P(label >= t) = (1 + t / head) ** -tail`` (discrete Lomax)."""
    u = 1.0 - rng.random(n)  # (0, 1]
    return np.minimum(np.floor(head * (u ** (-1.0 / tail) - 1.0)), _MAX_LABEL - 1).astype(np.int64)


def _low_rank(coords: np.ndarray, which: np.ndarray, bases: np.ndarray) -> np.ndarray:
    """Row ``i``: ``coords[i] @ bases[which[i]]``, float32 ``(m, dim)``, the same bits on every CPU.

    A BLAS product would be faster, but each BLAS kernel (OpenBLAS picks one per
    CPU: AVX-512, AVX2, SSE3, NEON) sums in its own order with its own fused
    multiply-adds, so the seeded data differed in the last bits between CPUs.
    Here the sum over the rank runs one term at a time as separate numpy
    multiplies and adds: each is one IEEE-rounded operation per element, so
    the result does not depend on the vector width (tested with OpenBLAS and
    numpy's SIMD paths forced down, ``tests/datasets/test_datasets.py``).
    """
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(bases.shape[0] + 1))
    low = np.empty((coords.shape[0], bases.shape[2]), np.float32)  # rows in ``order``
    term = np.empty_like(low)
    for b in range(bases.shape[0]):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        if hi > lo:
            rows = coords[order[lo:hi]]
            out, tmp = low[lo:hi], term[lo:hi]
            np.multiply(rows[:, :1], bases[b, 0], out=out)
            for j in range(1, bases.shape[1]):
                np.multiply(rows[:, j : j + 1], bases[b, j], out=tmp)
                out += tmp
    result = np.empty_like(low)
    result[order] = low
    return result


def _unit(v: np.ndarray) -> np.ndarray:
    """``v`` over its length; the length from an exactly rounded sum, not a BLAS dot (CPU-dependent)."""
    out: np.ndarray = v / math.sqrt(math.fsum((v * v).tolist()))
    return out


# --------------------------------------------------------------------------- the dataset

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
    the MiniLM vectors of ``pydocs`` (see the top of this module): a shared
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
    model = SyntheticModel.draw(rng, n, dim)
    labels, n_clusters = model.labels, model.n_topics
    vectors = model.points(model.docs, rng)
    query_docs = model.docs[rng.integers(0, n, n_queries)]
    query_labels = model.doc_topic[query_docs]
    query_vectors = model.points(query_docs, rng, spread=QUERY_SPREAD, query=True)
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
        source=f"ragbench synthetic generator ({VERSION}), {params}",
        corpus_hash=hashlib.sha256(f"{VERSION}:corpus:{params}".encode()).hexdigest(),
        queries_hash=hashlib.sha256(f"{VERSION}:queries:{params}".encode()).hexdigest(),
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

"""The vectors of the ``synthetic`` dataset: a model of how sentence embeddings are distributed.

The model (calibrated on the MiniLM vectors of the bundled ``pydocs`` corpus
with :mod:`ragbench.datastats`; none of its parameters depends on ``n``):

1. A shared direction ``m`` (every sentence embedding has a strong common
   component: the mean of the unit vectors has norm ~0.4).
2. Topics with power-law popularity: a point's topic is
   ``floor(u ** (-1 / TOPIC_TAIL))`` for ``u`` uniform in (0, 1], so topic
   ``t`` is drawn with probability ~ ``t ** -(1 + TOPIC_TAIL)``. There is no
   fixed number of topics: a larger corpus reaches further into the tail, so
   it holds more topics (~ ``n ** (1 / (1 + TOPIC_TAIL))``) and its biggest
   topics grow, as in real collections. A topic's centre is drawn from a
   Gaussian whose covariance spectrum decays as a power law
   (``i ** -SPECTRUM_DECAY`` in a random orthonormal basis), which gives the
   global covariance spectrum of real embeddings (no few directions dominate,
   yet most variance sits in the top ~50).
3. Documents inside a topic, with the same kind of power law
   (``DOC_TAIL``): passages of one document sit closer to each other than to
   the rest of the topic, which is what makes real nearest neighbours stand
   out (relative contrast ~2) and the neighbour count of some points large
   (hubness).
4. Within a document a passage varies mostly inside a low-rank subspace
   (rank ``RANK``, axis widths decaying as ``j ** -WITHIN_DECAY``; one of
   ``N_BASES`` shared random bases per topic), plus a little isotropic noise:
   locally the data has the intrinsic dimension of real embeddings (~10-15),
   globally it spans all ``dim`` directions.

Every point is L2-normalized. A query is made like a point of a random corpus
point's document, with its within-document noise scaled by
``QUERY_SPREAD`` and a shared "question" offset added: questions are worded
unlike passages, so they sit nearer their passage than a random point but
clearly farther than the passage's own neighbours (mean similarity to the
nearest passage ~0.6 against ~0.78 between passages in pydocs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["VERSION", "SyntheticModel"]

VERSION = "synthetic-v3"  # bump whenever the generated data changes: it keys caches
MEAN_NORM = 0.55  # length of the shared direction
TOPIC_SCALE = 0.75  # length of a topic's offset from the mean
SPECTRUM_DECAY = (
    0.9  # eigenvalue i of the topic covariance ~ (i + SPECTRUM_OFFSET) ** -SPECTRUM_DECAY
)
SPECTRUM_OFFSET = 0.0
TOPIC_HEAD = 30.0  # P(topic >= t) = (1 + t / TOPIC_HEAD) ** -TOPIC_TAIL, t = 0, 1, ...
TOPIC_TAIL = 1.0
DOC_HEAD = 3.0  # the same law for the document inside a topic
DOC_TAIL = 1.2
DOC_SCALE = 0.45  # length of a document's offset from its topic
RANK = 12  # within-document subspace rank
WITHIN_DECAY = 0.5  # axis j of a within-document subspace has width ~ j ** -WITHIN_DECAY
WITHIN_SCALE = 0.45  # length of a passage's offset inside its document
ISO_SCALE = 0.12  # length of the isotropic noise
N_BASES = 64  # shared within-document bases, one per topic (topic % N_BASES)
QUERY_SPREAD = 1.5  # within-document noise of a query relative to a passage's
QUERY_SHIFT = 0.35  # length of the shared offset of questions from passages
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
        widths /= math.sqrt(float((widths**2).sum()))
        g = rng.standard_normal((topic_ids.size, dim), dtype=np.float32)
        g *= (TOPIC_SCALE * widths).astype(np.float32)
        topic_centres = g + mean
        rank = min(RANK, dim)
        axis = np.arange(1, rank + 1, dtype=np.float64) ** -WITHIN_DECAY
        axis /= math.sqrt(float((axis**2).sum()))
        # Gaussian rows of length ~1: nearly orthonormal in many dimensions, and
        # 64 of them cost a draw where 64 QR decompositions cost a second.
        bases = rng.standard_normal((N_BASES, rank, dim)) / math.sqrt(dim) * axis[:, None]
        bases = bases.astype(np.float32)
        # documents spread inside their topic's subspace, as passages do inside a document
        coords = rng.standard_normal((pair_ids.size, rank), dtype=np.float32)
        coords *= np.float32(DOC_SCALE)
        doc_centres = topic_centres[doc_topic]
        doc_centres += _low_rank(coords, doc_topic % N_BASES, bases)
        iso = np.float32(ISO_SCALE * math.sqrt(3.0 / dim))  # uniform(-iso, iso): length ISO_SCALE
        return cls(
            mean,
            question,
            topic_centres,
            doc_centres,
            doc_topic.astype(np.int64),
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
            coords *= np.float32(WITHIN_SCALE * spread)
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
    """Row ``i``: ``coords[i] @ bases[which[i]]``, float32 ``(m, dim)``; one product per basis."""
    import threadpoolctl

    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(bases.shape[0] + 1))
    low = np.empty((coords.shape[0], bases.shape[2]), np.float32)  # rows in ``order``
    # 64 small products: one BLAS thread does them fastest, and a BLAS pool
    # spinning on a busy machine made them ~20x slower
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        for b in range(bases.shape[0]):
            lo, hi = bounds[b], bounds[b + 1]
            if hi > lo:
                np.matmul(coords[order[lo:hi]], bases[b], out=low[lo:hi])
    out = np.empty_like(low)
    out[order] = low
    return out


def _unit(v: np.ndarray) -> np.ndarray:
    out: np.ndarray = v / np.linalg.norm(v)
    return out

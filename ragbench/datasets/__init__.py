"""Datasets: a corpus, its queries, and cached vectors and exact neighbours.

::

    ds = rb.datasets.load("pydocs")                       # bundled text corpus
    ds = rb.datasets.load("synthetic", n=10_000, dim=384, n_queries=200, seed=0)
    ds = rb.datasets.load("/data/sift")                   # field formats, see below
    X = ds.corpus_vectors("minilm")                       # float32 (n, 384), cached on disk
    truth = ds.exact_neighbors(10)                        # int64 (nq, 10)

Field formats (:mod:`ragbench.datasets.formats`): ann-benchmarks HDF5, texmex
``.fvecs``/``.bvecs`` (+ ``.ivecs`` ground truth), BEIR folders, ``.npy``
matrices and ragbench JSONL.

Vectors and neighbours are cached under ``$RAGBENCH_CACHE_DIR`` (default
``~/.cache/ragbench``): embedded vectors keyed by the distinct texts and the
embedder's fingerprint (not by the dataset's name, path, ids or row order),
neighbours by the dataset's content hash and the fingerprint; every entry is verified against a sidecar before it is used, and
each use is recorded in :attr:`Dataset.cache_events`.

The package, by concern: :mod:`~ragbench.datasets.catalogue` (names,
bundled data, loading), :mod:`~ragbench.datasets.dataset` (the records and
:class:`Dataset`), :mod:`~ragbench.datasets.synthetic_data` (the synthetic data
and its model), :mod:`~ragbench.datasets.formats` and
:mod:`~ragbench.datasets.texts` (field formats), :mod:`~ragbench.datasets.shipped`
(vectors shipped beside a dataset), :mod:`~ragbench.datasets.cache` (the
on-disk vector cache) and :mod:`~ragbench.datasets.neighbors` (the exact
neighbour kernel).
"""

from __future__ import annotations

from .cache import ArrayCache, CacheEvent, cache_dir
from .catalogue import datasets_dir, describe, from_table, load, names, spec_table
from .dataset import Corpus, Dataset, Queries
from .neighbors import brute_force_neighbors
from .shipped import ShippedVectors, find_shipped
from .synthetic_data import SYNTHETIC_DEFAULTS, synthetic

__all__ = [
    "SYNTHETIC_DEFAULTS",
    "ArrayCache",
    "CacheEvent",
    "Corpus",
    "Dataset",
    "Queries",
    "ShippedVectors",
    "brute_force_neighbors",
    "cache_dir",
    "datasets_dir",
    "describe",
    "find_shipped",
    "from_table",
    "load",
    "names",
    "spec_table",
    "synthetic",
]

# The public names say they belong to the package, as they did before it was split into
# modules (``ragbench.datasets.load.__module__``; pickles and reprs name the public path).
for _name in __all__:
    _obj = globals()[_name]
    if callable(_obj) and _obj.__module__.startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj

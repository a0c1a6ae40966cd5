"""Recall–latency frontiers (``sweep``) and cost as the corpus grows (``scale``).

Build parameters go to ``create``, query parameters to each ``search`` call;
a sweep is the cartesian product of both per index, skipping parameters an
index does not take; a parameter named ``INDEX.NAME`` (``lancedb.ef``) is that
index's alone, so engines with different knobs get their own values in one
sweep (:func:`~ragbench.sweeps.data.grid_of`). Every point is measured the same way:

- recall@k against exact search (tie-aware);
- latency per query from one query per call on one thread (never a batch
  time divided by N), reported as p50/p95/p99;
- batch throughput with all pinned threads;
- build time and index memory.

``rescore`` is a query parameter every index accepts here: ask the index for
``rescore`` candidates and re-score them exactly with the numba reranker, as
the pipeline's rerank stage would (LSH, MinHash LSH and the binary indexes
need it; the compressed ones of :mod:`ragbench.indexes.compressed` are meant
for it). Such a point reports recall before re-scoring (the index's own top
k) beside recall after it, and the bytes re-scoring reads per vector apart
from the index's own bytes per vector.

Recall is kept per query (``recall_per_query``) with its mean (``recall``)
and 10th percentile (``recall_p10``): a mean of 0.95 can hide queries at 0.5.

Filtered sweeps: with ``filter_selectivities`` the data carries, per
requested selectivity, one filter per query (:mod:`ragbench.attributes`) and
the exact filtered neighbours (:class:`FilterCase`); every query-parameter
point is then also measured at each selectivity with each filter strategy
the index has (``search(..., filter=mask, strategy=...)``), recall against the
filtered truth. Each such point carries ``strategy``, ``selectivity``,
``filter`` (achieved selectivity mean/min/max) and ``filter_cliff``: for its
(index, parameters, strategy) line, the selectivity below which recall falls
under ``recall_target`` or p50 grows more than 3× (see
:func:`ragbench.results.records.filter_cliffs`).

Both drivers split their work into independent units run by an executor
(:mod:`ragbench.executors`): in this process, in order (the default), or as
Ray tasks. A sweep unit is one (index, build parameters): built once, then
measured at every query-parameter point (:func:`sweep_unit`); a scale unit is
one (corpus size, index) (:func:`scale_unit`). Records come back as each
point finishes.

The package's parts: :mod:`~ragbench.sweeps.data` (the data and the grid),
:mod:`~ragbench.sweeps.measure` (one point), :mod:`~ragbench.sweeps.points`
(building an index, a point's fields), :mod:`~ragbench.sweeps.frontier` (sweeps) and
:mod:`~ragbench.sweeps.scale` (scale).
"""

from __future__ import annotations

from .data import FilterCase, SweepData, check_grid, index_param_names, synthetic_data
from .frontier import count_points, sweep_points, sweep_unit
from .measure import measure, recall_fields
from .points import bytes_fields
from .scale import SCALE_RESCORE as SCALE_RESCORE
from .scale import TUNING as TUNING
from .scale import scale_points, scale_unit, tune

__all__ = [
    "FilterCase",
    "SweepData",
    "bytes_fields",
    "check_grid",
    "count_points",
    "index_param_names",
    "measure",
    "recall_fields",
    "scale_points",
    "scale_unit",
    "sweep_points",
    "sweep_unit",
    "synthetic_data",
    "tune",
]

"""What the numbers mean: a few sentences under every table, derived from the records.

A table of per-stage percentiles answers "how long"; the reader still has to
work out "so what": which stage the time goes to, which of the things varied
is faster and by how much *beyond the noise*, and whether a load level was
beyond what the system (or the load generator) could do. Every function here
takes records (the dicts of :mod:`ragbench.results.records`; :func:`diff_reading`
takes :class:`ragbench.results.diff.DiffRow`-like rows) and returns lines of text;
nothing is typed in, every figure comes from the records:

- :func:`run_reading` (``run``, ``compare``, run records in ``report``): the
  dominant stage and the share of the rest; for each axis that varies
  between the rows (index, codec, ...), its choices ranked on the stages it
  touches, each step with a 95 % bootstrap interval
  (:func:`ragbench.intervals.ratio`), pooled over the other axes; a warning
  when the ranking is decided by noise; how the interleaved order was
  balanced; why retrieval reads slower after a model's forward pass; and a
  warning when rows retrieving differently are not at equal recall.
- :func:`sweep_reading`, :func:`scale_reading`: within each group of
  comparable sweep points (unfiltered; one filter, selectivity and
  strategy), the indexes ranked at a recall every one of them reaches,
  each one's cheapest point at the recall target, and each one's p50 / p99 at
  every recall target, interpolated on its frontier (:mod:`.isorecall`), with
  their ratio at equal recall; scale at the largest corpus.
- :func:`load_reading`: the dominant stage under load, the highest level each
  configuration sustained, and the levels at capacity.
- :func:`diff_reading`: the verdict in total and the largest sure change;
  :func:`saved_diff_reading` says the same of saved ``diff`` records.

:func:`reading` dispatches on record kinds, like :func:`ragbench.results.tables.render`.

The package, by record kind: :mod:`.common` (thresholds, phrases, rankings),
:mod:`.runs`, :mod:`.points` (sweep and scale), :mod:`.load` and :mod:`.diffs`.
``__all__`` holds the readings a user calls; the thresholds and phrases they
use are the modules' own (``from ragbench.results.reading.common import
within_noise``), as ``ragbench.reading`` (deprecated) still exports them.
"""

from __future__ import annotations

from ..records import records_of
from .common import Records
from .diffs import diff_reading, saved_diff_reading
from .load import load_reading
from .points import scale_reading, sweep_reading
from .runs import run_reading

__all__ = [
    "diff_reading",
    "load_reading",
    "reading",
    "run_reading",
    "saved_diff_reading",
    "scale_reading",
    "sweep_reading",
]


def reading(records: Records, *, stat: str = "p50") -> list[str]:
    """The reading of records of any kinds, kind by kind (run, sweep, scale, load, diff)."""
    lines: list[str] = []
    for kind, read in (
        ("run", lambda rs: run_reading(rs, stat=stat)),
        ("sweep", sweep_reading),
        ("scale", scale_reading),
        ("load", load_reading),
        ("diff", saved_diff_reading),
    ):
        of_kind = records_of(records, kind)
        if of_kind:
            lines += read(of_kind)
    return lines

"""Tables of result records: text tables, Markdown, CSV and JSON.

Everything here reads records (the dicts of :mod:`ragbench.results.records`), never a
live pipeline or index, so a saved results file renders exactly like the run
that wrote it. :func:`render` is the one entry point: it dispatches on each
record's ``kind`` (run, sweep, scale, load, stream, diff) and on the format
(``table``, ``md``, ``csv``, ``json``).

The package, by concern: :mod:`.cells` (cells and the plain-text table),
:mod:`.notes` (the lines under a table), :mod:`.runs` (run records, side by
side), :mod:`.points` (sweep and scale points), :mod:`.load` (load levels),
:mod:`.stream` (stream checkpoints), :mod:`.diffs` (saved diffs),
:mod:`.markdown` (flat rows for md, csv and json), :mod:`.listings`
(benchmark files, datasets) and :mod:`.dispatch` (:func:`render`).

``__all__`` holds what a user calls: :func:`render` and one table function per
record kind. The cells, notes and flat rows the tables are made of are the
modules' own (``from ragbench.results.tables.cells import text_table``); until
issue 30 the package exported them too, and ``ragbench.rendering`` (deprecated)
still does.
"""

from __future__ import annotations

from .diffs import diff_records_table
from .dispatch import FORMATS, render, render_checked
from .listings import benchmark_table, datasets_table, stats_table
from .load import load_table
from .points import filtered_sweep_table, scale_table, sweep_table
from .runs import compare_table, run_table
from .stream import stream_table

__all__ = [
    "FORMATS",
    "benchmark_table",
    "compare_table",
    "datasets_table",
    "diff_records_table",
    "filtered_sweep_table",
    "load_table",
    "render",
    "render_checked",
    "run_table",
    "scale_table",
    "stats_table",
    "stream_table",
    "sweep_table",
]

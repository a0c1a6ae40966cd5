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
"""

from __future__ import annotations

from ..records import caveats_of
from .cells import (
    NAN,
    cpu_cells,
    event_text,
    ms,
    ms_ci,
    num,
    pct_cell,
    plain_table,
    rich_table,
    stat_cells,
    text_table,
    with_ci,
)
from .diffs import diff_records_table
from .dispatch import FORMATS, render, render_checked
from .listings import benchmark_table, datasets_table, stats_table
from .load import INVALID_MARK, load_table
from .markdown import flat_cell, flat_rows
from .notes import (
    SETUP_LABELS,
    build_note,
    connection_note,
    filter_note,
    hardware_note,
    llm_note,
    retrieve_parts_note,
    simulated_note,
    stage_label,
)
from .points import filtered_sweep_table, params_text, scale_table, sweep_table
from .runs import STATS, compare_table, fixed_line, run_table, setup_summary, stopped_line
from .stream import stream_table

__all__ = [
    "FORMATS",
    "INVALID_MARK",
    "NAN",
    "SETUP_LABELS",
    "STATS",
    "benchmark_table",
    "build_note",
    "caveats_of",
    "compare_table",
    "connection_note",
    "cpu_cells",
    "datasets_table",
    "diff_records_table",
    "event_text",
    "filter_note",
    "filtered_sweep_table",
    "fixed_line",
    "flat_cell",
    "flat_rows",
    "hardware_note",
    "llm_note",
    "load_table",
    "ms",
    "ms_ci",
    "num",
    "params_text",
    "pct_cell",
    "plain_table",
    "render",
    "render_checked",
    "retrieve_parts_note",
    "rich_table",
    "run_table",
    "scale_table",
    "setup_summary",
    "simulated_note",
    "stage_label",
    "stat_cells",
    "stats_table",
    "stopped_line",
    "stream_table",
    "sweep_table",
    "text_table",
    "with_ci",
]

# the names these tables had when rendering was one module (kept for callers)
_plain_table = plain_table
_rich_table = rich_table

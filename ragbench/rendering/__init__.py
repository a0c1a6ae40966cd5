"""Deprecated: moved to :mod:`ragbench.results.tables` (issue 30); importing this name warns.

The names it exported are still here and its submodules (``ragbench.rendering.runs``, ...) are
those of the new package, for one release; then this package goes.
"""

from __future__ import annotations

from .._moved import warn_moved
from ..results.records import caveats_of
from ..results.tables.cells import (
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
from ..results.tables.diffs import diff_records_table
from ..results.tables.dispatch import FORMATS, render, render_checked
from ..results.tables.listings import benchmark_table, datasets_table, stats_table
from ..results.tables.load import INVALID_MARK, load_table
from ..results.tables.markdown import flat_cell, flat_rows
from ..results.tables.notes import (
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
from ..results.tables.points import filtered_sweep_table, params_text, scale_table, sweep_table
from ..results.tables.runs import (
    STATS,
    compare_table,
    fixed_line,
    run_table,
    setup_summary,
    stopped_line,
)
from ..results.tables.stream import stream_table

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

warn_moved(__name__, "ragbench.results.tables")

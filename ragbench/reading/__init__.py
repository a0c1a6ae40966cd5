"""Deprecated: moved to :mod:`ragbench.results.reading` (issue 30); importing this name warns.

The names it exported are still here and its submodules (``ragbench.reading.runs``, ...) are
those of the new package, for one release; then this package goes.
"""

from __future__ import annotations

from .._moved import warn_moved
from ..results.reading import reading
from ..results.reading.common import (
    DOMINANT_SHARE,
    SUGGESTED_REPEAT,
    SUSTAINED,
    Records,
    ranking,
    within_noise,
)
from ..results.reading.diffs import diff_reading, saved_diff_reading
from ..results.reading.load import load_reading
from ..results.reading.points import scale_reading, sweep_reading
from ..results.reading.runs import AXES, SAME_RECALL, dominant_stage, order_note, run_reading

__all__ = [
    "AXES",
    "SAME_RECALL",
    "DOMINANT_SHARE",
    "SUGGESTED_REPEAT",
    "SUSTAINED",
    "Records",
    "diff_reading",
    "dominant_stage",
    "load_reading",
    "order_note",
    "ranking",
    "reading",
    "run_reading",
    "saved_diff_reading",
    "scale_reading",
    "sweep_reading",
    "within_noise",
]

warn_moved(__name__, "ragbench.results.reading")

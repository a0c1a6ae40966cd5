"""The stated maxima of ``ragbench stream``'s options and runbooks (see :mod:`ragbench.live_writes`).

A module of its own, without numpy, so the CLI's help texts quote the same
numbers the checks use.
"""

from __future__ import annotations

from .threads import MAX_THREADS

__all__ = ["LIMITS", "MAX_SEARCHES", "MAX_STEP_COUNT", "number_text"]

#: The most searches one run may ask for: ``qps`` x ``duration``, or a runbook's in all
#: (each queued search holds its query until a searcher takes it).
MAX_SEARCHES = 10_000_000
#: The most a runbook step may insert, delete or search.
MAX_STEP_COUNT = 10_000_000
#: Option -> (lowest, highest) accepted; every bound is inclusive except ``initial``'s 0.
LIMITS: dict[str, tuple[float, float]] = {
    "initial": (0.0, 1.0),
    "insert_rate": (0.0, 1e6),  # per second
    "delete_rate": (0.0, 1e6),  # per second
    "qps": (0.0, 1e5),  # 0: as fast as the searchers go (runbooks)
    "duration": (0.0, 86_400.0),  # seconds: one day
    "fresh": (0.0, 1.0),
    "noise": (0.0, 100.0),  # times the vector's length; larger only overflows float32
    "checkpoints": (1, 1_000),  # each one runs every dataset query and a brute-force top-k
    "search_threads": (1, MAX_THREADS),
    "k": (1, 10_000),
}


def number_text(x: float) -> str:
    """A limit as the help texts and errors print it: ``1000000``, ``0.5``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"

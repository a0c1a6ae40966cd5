"""Quick mode of the benchmark gates, and how a gate needing an extra skips: ``RAGBENCH_BENCH_QUICK=1`` (``make bench-quick``, CI).

Fewer rounds and smaller data, the same assertions with the same bounds: every
gate still measures its ratio side by side, interleaved, as in a full run,
only over fewer samples (so a quick run is noisier, never laxer). A full run
(``make bench``) is what the figures in PERF.md come from.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

QUICK = os.environ.get("RAGBENCH_BENCH_QUICK", "") not in ("", "0")


def pick(full: int, quick: int) -> int:
    """``quick`` in quick mode, else ``full``."""
    return quick if QUICK else full


def env_n(var: str, full: int, quick: int) -> int:
    """A size from ``$var`` when set, else :func:`pick` of ``full`` and ``quick``."""
    raw = os.environ.get(var)
    return int(raw) if raw else pick(full, quick)


def need(module: str, extra: str = "") -> Any:
    """``module`` imported, for a gate that needs ``ragbench[extra]``.

    Skips only when the package is not installed at all (no import spec);
    an installed package that fails to import fails the gate, as it would
    fail a user. With ``RAGBENCH_BENCH_REQUIRE_EXTRAS=1`` (CI, where every
    extra is installed) a missing package fails too instead of skipping.
    """
    import pytest

    top = module.split(".")[0]
    if importlib.util.find_spec(top) is None:
        what = f"ragbench[{extra}]" if extra else "ragbench"
        message = f"{top} is not installed: needs pip install '{what}'"
        if os.environ.get("RAGBENCH_BENCH_REQUIRE_EXTRAS", "") not in ("", "0"):
            pytest.fail(message + " (RAGBENCH_BENCH_REQUIRE_EXTRAS is set)")
        pytest.skip(message, allow_module_level=True)
    return importlib.import_module(module)

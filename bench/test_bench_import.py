"""``import ragbench`` stays fast and light (target: ≤ 150 ms, no faiss/torch/numba/grpc;
docs/reference/performance-targets.md#import).

Each sample is a fresh interpreter; the figure reported is the median of
``import ragbench`` minus the median of an empty interpreter start, measured
alternately.

Run: ``.venv/bin/pytest bench/test_bench_import.py -s``
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from time import perf_counter_ns

from _quick import attempts, judge, pick, until_met

ROUNDS = pick(15, 7)


def _run(code: str) -> int:
    t0 = perf_counter_ns()
    subprocess.run([sys.executable, "-c", code], check=True)
    return perf_counter_ns() - t0


def test_import_time_and_weight() -> None:

    def measure() -> float:
        empty, full = [], []
        for _ in range(ROUNDS):
            empty.append(_run("pass"))
            full.append(_run("import ragbench"))
        return (statistics.median(full) - statistics.median(empty)) / 1e6

    runs = attempts(measure, until_met((float, 150.0, False)))
    added_ms = min((a.value for a in runs if a.quiet), default=runs[-1].value)
    heavy = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ragbench; print(','.join(m for m in "
            "('numpy', 'faiss', 'torch', 'numba', 'grpc', 'hnswlib', 'datasketch') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(
        f"\nimport ragbench: +{added_ms:.1f} ms over an empty interpreter "
        f"(median of {ROUNDS}; target ≤ 150 ms); heavy modules loaded: {heavy or 'none'}"
    )
    assert heavy == ""
    judge("ms import ragbench adds", runs, float, bound=150.0, higher_is_better=False, fmt=".1f")

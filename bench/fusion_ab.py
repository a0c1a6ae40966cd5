"""Interleaved A/B of ``reciprocal_rank_fusion``: this tree against another source tree.

For a change to the RRF call (issue 31's target, docs/reference/performance-targets.md#fusion):
the public call of the tree this file is in ("new") and of another tree ("old", e.g.
``git archive <commit> | tar -x -C DIR``) fuse the workload of ``bench/test_bench_fusion.py``
(two int64 lists of 100 ids out of 10 000, 30 shared) in one process, ``--calls`` calls a side
per round, the side that goes first alternating by round. Printed: each side's median and
lowest µs per call over the rounds, the median of the per-round ratios new/old, and the cores
other processes used meanwhile with the 1-minute load (``bench/_quick.py``'s ``Watch``). Not a
gate: a reading on a shared machine is busy unless the others stayed near 0; the bench judges
the target.

Run: ``.venv/bin/python bench/fusion_ab.py --old /tmp/rrf-old --rounds 61``
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _rrf_of(root: Path) -> Callable[..., Any]:
    """``root``'s ``reciprocal_rank_fusion``, called once so that its kernels are imported from
    ``root`` too; its ragbench modules are then dropped from ``sys.modules``, so the next tree
    imports its own (a kernel imported later would come from whatever ``ragbench`` is then)."""
    for mod in [m for m in sys.modules if m == "ragbench" or m.startswith("ragbench.")]:
        del sys.modules[mod]
    sys.path.insert(0, str(root))
    try:
        import ragbench.fusion

        where = Path(ragbench.fusion.__file__ or "").resolve()
        if not where.is_relative_to(root.resolve()):
            raise SystemExit(f"{root}: ragbench was imported from {where}")
        fuse: Callable[..., Any] = ragbench.fusion.reciprocal_rank_fusion
        ids = np.arange(3, dtype=np.int64)
        fuse(ids, ids)  # its kernels imported (lazily, by a relative import) from this tree
        kernels = sys.modules["ragbench.fusion._kernels"].__file__ or ""
        if not Path(kernels).resolve().is_relative_to(root.resolve()):
            raise SystemExit(f"{root}: the kernels were imported from {kernels}")
    finally:
        sys.path.remove(str(root))
    for mod in [m for m in sys.modules if m == "ragbench" or m.startswith("ragbench.")]:
        del sys.modules[mod]
    return fuse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="the other source tree")
    ap.add_argument("--rounds", type=int, default=61)
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()

    sys.path.insert(0, str(HERE))
    from _quick import Watch
    from test_bench_fusion import _lists

    a, b, _, _ = _lists()
    old, new = _rrf_of(args.old), _rrf_of(ROOT)
    for x, y in zip(old(a, b), new(a, b), strict=True):  # the same answer first
        assert x.tolist() == y.tolist()

    def per_call_us(fuse: Callable[..., Any]) -> float:
        t0 = perf_counter_ns()
        for _ in range(args.calls):
            fuse(a, b)
        return float((perf_counter_ns() - t0) / args.calls / 1e3)

    olds: list[float] = []
    news: list[float] = []
    with Watch() as watch:
        for r in range(args.rounds):
            if r % 2:
                olds.append(per_call_us(old))
                news.append(per_call_us(new))
            else:
                news.append(per_call_us(new))
                olds.append(per_call_us(old))
    ratio = statistics.median(n / o for n, o in zip(news, olds, strict=True))
    print(
        f"old {statistics.median(olds):.2f} µs (lowest {min(olds):.2f}), "
        f"new {statistics.median(news):.2f} µs (lowest {min(news):.2f}), "
        f"new/old per round: median {ratio:.3f}; "
        f"other processes {watch.others:.2f} cores, load {watch.load}"
    )


if __name__ == "__main__":
    main()

"""``ragbench report`` and ``ragbench diff`` grow linearly with the number of records
(docs/reference/performance-targets.md#report-linear).

Files of generated sweep points (each with 20 raw latency samples, four
indexes) are rendered through the command line in this process, stdout
discarded. Reported: the seconds for 8 000 and 30 000 records (report) and
2 000 and 8 000 (diff: a bootstrap interval per point dominates it); the
check is the ratio of the two sizes' times, measured side by side: linear
work gives ~3.75x (report) and ~4x (diff), the quadratic Pareto step that
was there gave ~14x. Target: ratio ≤ 6x.

Run: ``.venv/bin/pytest bench/test_bench_report.py -s``
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from time import perf_counter

from _quick import attempts, judge, pick, until_met

from ragbench.cli import main
from ragbench.results.records import new_record


def _write(path: Path, n: int) -> Path:
    rnd = random.Random(n)
    lines = []
    for i in range(n):
        fields = {
            "dataset": "synthetic", "n": 100_000, "dim": 64, "metric": "ip", "k": 10,
            "index": f"idx{i % 4}", "build": {"M": 16}, "query": {"ef": i},
            "recall": rnd.random(), "qps_single": rnd.random() * 1e5,
            "p50_us": 10.0, "p95_us": 12.0, "p99_us": 20.0, "qps_batch": 1e4,
            "build_s": 0.1, "memory_bytes": 1e6,
            "latency_ns": [rnd.randint(9_000, 30_000) for _ in range(20)],
        }  # fmt: skip
        rec = new_record("sweep", fields, env={"node": "n", "cpu": "c"})
        lines.append(json.dumps(rec, separators=(",", ":")) + "\n")
    path.write_text("".join(lines))  # one write: append_record's fsync per record is slow here
    return path


def _seconds(*argv: str) -> float:
    t0 = perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    assert code in (0, 1)
    return perf_counter() - t0


def test_report_and_diff_are_linear(tmp_path: Path) -> None:
    # quick mode: the same size ratios (3.75x, 4x) at half the sizes
    s = pick(2, 1)
    small, large = (
        _write(tmp_path / "8k.jsonl", 4_000 * s),
        _write(tmp_path / "30k.jsonl", 15_000 * s),
    )
    d_small, d_large = _write(tmp_path / "2k.jsonl", 1_000 * s), small

    def measure() -> tuple[float, float, float, float]:
        report_small = _seconds("report", str(small))
        report_large = _seconds("report", str(large))
        diff_small = _seconds("diff", str(d_small), str(d_small))
        diff_large = _seconds("diff", str(d_large), str(d_large))
        return report_small, report_large, diff_small, diff_large

    def report_of(v: tuple[float, float, float, float]) -> float:
        return v[1] / v[0]

    def diff_of(v: tuple[float, float, float, float]) -> float:
        return v[3] / v[2]

    runs = attempts(measure, until_met((report_of, 6.0, False), (diff_of, 6.0, False)))
    report_small, report_large, diff_small, diff_large = runs[-1].value
    report_ratio, diff_ratio = report_of(runs[-1].value), diff_of(runs[-1].value)
    print(
        f"\nreport: {4 * s}k records {report_small:.2f} s, {15 * s}k {report_large:.2f} s "
        f"(ratio {report_ratio:.2f}x, linear 3.75x); "
        f"diff: {s}k {diff_small:.2f} s, {4 * s}k {diff_large:.2f} s (ratio {diff_ratio:.2f}x, linear 4x)"
    )
    judge("report: 15k / 4k records", runs, report_of, bound=6.0, higher_is_better=False)
    judge("diff: 4k / 1k records", runs, diff_of, bound=6.0, higher_is_better=False)

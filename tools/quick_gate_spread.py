#!/usr/bin/env python3
"""Run the quick benchmark gates several times and record every gate's attempts, for the tripwire margins.

Usage: python tools/quick_gate_spread.py [--runs 5] [--out docs/findings/data/quick-gate-spread.jsonl] [-- PYTEST ARGS]

Each run is ``pytest bench`` exactly as ``make bench-quick`` runs it, but without
``--reruns`` (a gate's first try is what the spread is about) and with
``RAGBENCH_BENCH_TRIPWIRES=0``, so every gate is judged against its precise
target and prints what it measured. Every ``[gate]`` line a gate prints
(``bench/_quick.py``'s ``judge``) is parsed into one JSON line: the run, the
gate's label, its target and each attempt's value, whether the machine was
quiet during it and the floor where the gate has one. The lines are appended
to ``--out`` as each run ends, so an interrupted measurement keeps its runs.

The performance-targets page of the docs turns the file into each gate's
run-to-run spread and quick-mode margin (``<!-- gen: quick-margins -->``), and
``bench/_quick.py`` reads the margins from the same file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GATE = re.compile(
    r"^\[gate\] (?P<label>.+?): attempts (?P<attempts>.*?) \(target (?P<target>.+?)(?:; o:|\))"
)
ATTEMPT = re.compile(
    r"(?P<value>[-+]?(?:[0-9.]+(?:e[-+]?[0-9]+)?|nan|inf))(?P<busy>\*?)"
    r"\(o(?P<others>[0-9.]+),l(?P<load>[0-9.]+)(?:,floor (?P<floor>[^)]+))?\)"
)
TARGET = re.compile(r"^(?P<op>[≤≥<>]) (?P<bound>[-+0-9.e]+)")


def parse(stdout: str, run: int) -> list[dict[str, object]]:
    """One record per ``[gate]`` line of a pytest run's output."""
    out: list[dict[str, object]] = []
    for line in stdout.splitlines():
        m = GATE.match(line.strip())
        if not m:
            continue
        t = TARGET.match(m["target"])
        attempts = [
            {
                "value": float(a["value"]),
                "quiet": not a["busy"],
                "others": float(a["others"]),
                "load": float(a["load"]),
                **({"floor": float(a["floor"])} if a["floor"] else {}),
            }
            for a in ATTEMPT.finditer(m["attempts"])
        ]
        out.append(
            {
                "run": run,
                "gate": m["label"],
                "op": t["op"] if t else "",
                "target": float(t["bound"]) if t else None,
                "attempts": attempts,
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="docs/findings/data/quick-gate-spread.jsonl")
    ap.add_argument("--log-dir", default="", help="also keep each run's whole output here")
    ap.add_argument("pytest_args", nargs="*")
    args = ap.parse_args()
    out = ROOT / args.out
    out.unlink(missing_ok=True)
    env = dict(os.environ)
    cache = env.get("RAGBENCH_CACHE_DIR", str(Path.home() / ".cache" / "ragbench"))
    env.update(
        RAGBENCH_BENCH_QUICK="1",
        RAGBENCH_BENCH_REQUIRE_EXTRAS="1",
        RAGBENCH_BENCH_TRIPWIRES="0",
        RAGBENCH_BENCH_CACHE=env.get("RAGBENCH_BENCH_CACHE", f"{cache}/bench"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    cmd = [sys.executable, "-m", "pytest", "bench", "-p", "no:cacheprovider", "-q", "-s"]
    # the judging machinery's own tests print made-up gates ("x", "speed-up"): not measurements
    cmd += ["--benchmark-disable", "--ignore=bench/test_quick_gates.py", *args.pytest_args]
    for run in range(1, args.runs + 1):
        t0 = time.time()
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if args.log_dir:
            Path(args.log_dir, f"run{run}.log").write_text(res.stdout + res.stderr)
        records = parse(res.stdout, run)
        stamp = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
            "seconds": round(time.time() - t0, 1),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "exit": res.returncode,
        }
        with out.open("a", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps({**rec, **stamp}, ensure_ascii=False) + "\n")
        print(
            f"run {run}: {len(records)} gates, exit {res.returncode}, {stamp['seconds']} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every table names the machine it was measured on and how loaded it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.env import environment


def test_records_carry_the_load_average() -> None:
    env = environment()
    assert isinstance(env["load_avg"], list) and len(env["load_avg"]) == 3
    assert all(x >= 0 for x in env["load_avg"])


def _with_load(src: Path, dst: Path, loads: list[float]) -> None:
    lines = src.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        rec = json.loads(line)
        rec["env"] = {**rec["env"], "cores": 2, "cpu": "Test CPU", "cpu_flags": ["avx2", "fma"]}
        rec["env"]["load_avg"] = [loads[i % len(loads)], 0.0, 0.0]
        out.append(json.dumps(rec))
    dst.write_text("\n".join(out) + "\n")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_report_names_the_machine_and_a_busy_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "r.jsonl"
    out = _cli(
        capsys,
        *["compare", "--dataset", "pydocs", "--embed", "hashing", "--index", "flat,hnsw",
         "--queries", "8", "--warmup", "1", "--out", str(results)],
    )  # fmt: skip
    assert "machine: " in out
    quiet, busy = tmp_path / "quiet.jsonl", tmp_path / "busy.jsonl"
    _with_load(results, quiet, [0.25, 0.5])
    _with_load(results, busy, [1.5, 3.25])
    out = _cli(capsys, "report", str(quiet))
    assert "machine: Test CPU, 2 cores, AVX2; 1-min load average 0.2–0.5 when the rows" in out
    assert "other work shared" not in out
    out = _cli(capsys, "report", str(busy))
    assert "1-min load average 1.5–3.2 when the rows were written (≥ 2 cores: other work" in out

"""The command line's output piped into a reader that stops early (`ragbench report F | head`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "findings" / "data" / "make-run-pydocs.jsonl"
RAGBENCH = Path(sys.executable).parent / "ragbench"


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    # `ragbench report F | head -1`: the reader closes the pipe after one line; ragbench used to
    # print a BrokenPipeError traceback. Now it stops quietly with SIGPIPE's status, 141.
    err = tmp_path / "err.txt"
    script = f"{RAGBENCH} report {RECORDS} 2>{err} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    for _ in range(3):
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == "141", done
        assert err.read_text() == ""


def test_the_whole_output_read_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(RAGBENCH), "report", str(RECORDS)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "" and "machine:" in done.stdout

"""``--start-together DIR:N`` (issue 26): the processes of a pair begin their timed phase together.

Run as a user runs it: the console script, from a temp folder, two real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragbench.results.records import read_records

EXE = Path(sys.executable).with_name("ragbench")
COMPARE = ["compare", "-c", "hashing", "--index", "hnsw", "--queries", "20"]
GAP_S = 1.0  # the second process is launched this long after the first has announced itself


def launch(folder: Path, name: str, *args: str) -> tuple[subprocess.Popen[str], Path]:
    err = folder / f"{name}.err"
    with err.open("w") as stderr:  # the child keeps its own copy
        proc = subprocess.Popen(
            [str(EXE), *args],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
    return proc, err


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_for(path: Path, text: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 300
    while text not in (path.read_text() if path.exists() else ""):
        assert proc.poll() is None, path.read_text()
        assert time.monotonic() < deadline, f"{text!r} never printed"
        time.sleep(0.02)


def test_two_compares_launched_apart_start_their_timed_phase_together(tmp_path: Path) -> None:
    """The first waits for the second: it starts after the second announced, having waited the gap."""
    meet = tmp_path / "meet"  # not there yet: created by the first process
    first, first_err = launch(
        tmp_path, "a", *COMPARE, "--start-together", f"{meet}:2", "--out", "a.jsonl"
    )
    try:
        wait_for(first_err, "to start together", first)
        wait_for_pid = meet / str(first.pid)
        while not wait_for_pid.exists():
            assert first.poll() is None, first_err.read_text()
            time.sleep(0.02)
        time.sleep(GAP_S)
        assert first.poll() is None, "the first process did not wait for the second"
        second, second_err = launch(
            tmp_path, "b", *COMPARE, "--start-together", f"{meet}:2", "--out", "b.jsonl"
        )
        assert finish(second) == 0, second_err.read_text()
    finally:
        code = finish(first)
    assert code == 0, first_err.read_text()
    a = read_records(tmp_path / "a.jsonl")[0]["start_together"]
    b = read_records(tmp_path / "b.jsonl")[0]["start_together"]
    assert a["processes"] == b["processes"] == 2 and a["arrived"] >= 2 and b["arrived"] >= 2
    # ISO 8601 UTC, the same format: ordered as text
    assert a["announced"] < b["announced"] <= a["started"]
    # launched GAP_S after the first had announced, and set up before announcing: the first's
    # wait covers at least the gap, and is longer than the second's
    assert a["waited_s"] >= GAP_S and a["waited_s"] > b["waited_s"]
    assert "2 processes arrived; started after waiting" in first_err.read_text()


def test_a_lone_process_stops_after_the_bound_naming_who_arrived(tmp_path: Path) -> None:
    meet = tmp_path / "meet"
    proc, err = launch(
        tmp_path,
        "lone",
        *COMPARE,
        "--start-together",
        f"{meet}:2",
        "--start-timeout",
        "0.5",
        "--out",
        "lone.jsonl",
    )
    assert finish(proc) == 2, err.read_text()
    last = err.read_text().splitlines()[-1]
    assert last.startswith("ragbench: error: waited 0.5 s in") and "1 arrived" in last
    assert list(meet.iterdir()) == []  # its announcement withdrawn
    assert not (tmp_path / "lone.jsonl").exists()


def test_run_waits_too_and_a_stale_announcement_does_not_count(tmp_path: Path) -> None:
    """``ragbench run`` shares the option; a file left by an ended process is not a partner."""
    meet = tmp_path / "meet"
    meet.mkdir()
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    (meet / ended.stdout.strip()).write_text("left by a process that ended\n")
    proc, err = launch(
        tmp_path,
        "run",
        "run",
        "-c",
        "hashing",
        "--queries",
        "5",
        "--start-together",
        f"{meet}:2",
        "--start-timeout",
        "0.5",
    )
    assert finish(proc) == 2, err.read_text()
    assert "1 arrived" in err.read_text().splitlines()[-1]
    assert list(meet.iterdir()) == []


def test_run_records_that_it_started_together(tmp_path: Path) -> None:
    proc, err = launch(
        tmp_path,
        "run",
        "run",
        "-c",
        "hashing",
        "--queries",
        "5",
        "--start-together",
        f"{tmp_path / 'meet'}:1",
        "--out",
        "r.jsonl",
    )
    assert finish(proc) == 0, err.read_text()
    waited = read_records(tmp_path / "r.jsonl")[0]["start_together"]
    assert waited["processes"] == 1 and waited["dir"] == str(tmp_path / "meet")
    assert waited["announced"] <= waited["started"]


def test_ctrl_c_while_waiting_exits_130_and_withdraws(tmp_path: Path) -> None:
    meet = tmp_path / "meet"
    proc, err = launch(tmp_path, "c", *COMPARE, "--start-together", f"{meet}:2")
    try:
        wait_for(err, "to start together", proc)
        while not (meet / str(proc.pid)).exists():
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
    finally:
        code = finish(proc, timeout=60)
    assert code == 130, err.read_text()
    assert err.read_text().splitlines()[-1].startswith("ragbench: interrupted")
    assert list(meet.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "value"),
    [
        *(("compare", v) for v in ["meet:0", "meet:two", "meet:1.5", "meet", ":2", "meet:"]),
        *(("run", v) for v in ["meet:0", "meet"]),
    ],
)
def test_bad_values_are_one_line_and_exit_2(tmp_path: Path, command: str, value: str) -> None:
    args = COMPARE if command == "compare" else ["run", "-c", "hashing"]
    done = subprocess.run(
        [str(EXE), *args, "--start-together", value],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "--start-together" in lines[0] and "DIR:N" in lines[0], lines
    assert not (tmp_path / "meet").exists()


def test_a_folder_that_cannot_be_made_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder\n")
    done = subprocess.run(
        [str(EXE), *COMPARE, "--start-together", f"{tmp_path / 'file' / 'meet'}:2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "cannot make the folder" in lines[0], lines
    assert "setting up" not in done.stderr


@pytest.mark.parametrize("extra", [["--executor", "ray"], ["--rebuilds", "2"]])
def test_compare_refuses_it_where_there_is_no_single_timed_phase(
    tmp_path: Path, extra: list[str]
) -> None:
    done = subprocess.run(
        [str(EXE), *COMPARE, "--start-together", "meet:2", *extra],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "ragbench: error: --start-together is for one side-by-side run: not with "
        "--executor ray or --rebuilds above 1"
    ]
    assert not (tmp_path / "meet").exists()


def test_the_library_call_raises_its_own_errors(tmp_path: Path) -> None:
    """A service calling ragbench.together directly gets a class per cause, not the base one."""
    from ragbench.errors import ConfigError, StartTimeoutError
    from ragbench.together import start_together

    with pytest.raises(StartTimeoutError, match="1 arrived") as caught:
        start_together(tmp_path / "meet", 2, timeout_s=0.2)
    assert isinstance(caught.value, TimeoutError)
    assert list((tmp_path / "meet").iterdir()) == []  # its announcement withdrawn
    with pytest.raises(ConfigError, match="processes must be >= 1"):
        start_together(tmp_path / "meet", 0)
    (tmp_path / "file").write_text("not a folder\n")
    with pytest.raises(ConfigError, match="cannot announce"):
        start_together(tmp_path / "file" / "meet", 1)

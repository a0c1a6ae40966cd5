"""``ragbench load`` as a user runs it, when things go wrong: dead, stopped and interrupted workers.

Each test starts the console script in a child process (from a temporary
directory), waits for the first level's record in ``--out`` so the next
level is running, then kills (SIGKILL), stops (SIGSTOP) or interrupts
(SIGINT) it or one of its worker processes, and checks what a user sees: the
exit code, the table, stderr, the records kept, and that no process is left.
The time bounds checked are the ones ``load`` promises (a level ends by
duration + timeout + grace; Ctrl-C within 2 s), far below the hangs they
replace (indefinitely; 125 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SMALL = [
    "--dataset",
    "synthetic",
    "--set",
    "dataset.n=2000",
    "--set",
    "dataset.dim=16",
    "--set",
    'retrieve.backend="flat"',
    "--set",
    'serialize.backend="json"',
    "--warmup",
    "3",
]
DURATION_S = 1.5
TIMEOUT_S = 1.0


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if fields[0] != b"Z":
            parent[int(name)] = int(fields[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError):
        return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _records(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    text = out.read_text()
    whole = text[: text.rfind("\n") + 1]  # a record being appended right now is not one yet
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


class Load:
    """``ragbench load`` running in a child process, its output in files.

    ``group``: in a process group of its own, as a shell runs a command (a
    terminal's Ctrl-C then reaches every process of it: :meth:`ctrl_c`).
    """

    def __init__(
        self, tmp: Path, *args: str, group: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.out = tmp / "load.jsonl"
        self._stdout, self._stderr = tmp / "stdout.txt", tmp / "stderr.txt"
        exe = Path(sys.executable).with_name("ragbench")
        argv = [str(exe), "load", *SMALL, *args, "--out", str(self.out)]
        with open(self._stdout, "wb") as so, open(self._stderr, "wb") as se:
            self.proc = subprocess.Popen(
                argv, cwd=tmp, stdout=so, stderr=se, start_new_session=group, env=env
            )
        self.seen: set[int] = set()

    def ctrl_c(self) -> None:
        """SIGINT to the whole process group, as a terminal's Ctrl-C sends it."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def offload_processes(self) -> list[int]:
        """Pids of the asyncio workers' offload pool processes (the workers' own children)."""
        workers = set(self.workers())
        return sorted(
            p
            for p in _children(self.proc.pid)
            if p not in workers and "multiprocessing" in _cmdline(p) and _parent(p) in workers
        )

    def in_a_level(self) -> bool:
        """The load generator holds a level's shared board (``/dev/shm/psm_*``) open."""
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
                with contextlib.suppress(OSError):
                    if "/psm_" in os.readlink(f"/proc/{self.proc.pid}/fd/{fd}"):
                        return True
        return False

    def first_level_done(self) -> None:
        """Wait until the first level's record is written: the second level is running."""
        _wait_for(
            lambda: len(_records(self.out)) >= 1 or self.proc.poll() is not None,
            240,
            "the first load level",
        )
        assert self.proc.poll() is None, self.stderr
        self.seen = set(_children(self.proc.pid))

    def workers(self) -> list[int]:
        """Pids of the worker processes (spawned by multiprocessing, not its resource tracker)."""
        return sorted(
            p
            for p in _children(self.proc.pid)
            if "multiprocessing" in _cmdline(p)
            and "resource_tracker" not in _cmdline(p)
            and _parent(p) == self.proc.pid
        )

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    @property
    def stdout(self) -> str:
        return self._stdout.read_text()

    @property
    def stderr(self) -> str:
        return self._stderr.read_text()

    def no_process_left(self, within_s: float = 5.0) -> None:
        """Every process the run started has ended (the resource tracker may take a moment)."""
        _wait_for(lambda: not any(_alive(p) for p in self.seen), within_s, f"{self.seen} to end")


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., Load]]:
    runs: list[Load] = []

    def start(*args: str, **how: Any) -> Load:
        runs.append(Load(tmp_path, *args, **how))
        return runs[-1]

    yield start
    for run in runs:  # never leave one behind, whatever failed
        for pid in [run.proc.pid, *_children(run.proc.pid), *run.seen]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.proc.wait(timeout=10)


def _levels(*args: str) -> list[str]:
    return [
        "--duration",
        str(DURATION_S),
        "--timeout",
        str(TIMEOUT_S),
        *args,
    ]


#: A progress line (``... 0/1 items (0 %), 10 s``), printed when a step is slow.
_PROGRESS = re.compile(r" \d+/\d+ \w+ \(\d+ %\), ")


def _lines(run: Load) -> list[str]:
    """stderr's lines, less the progress lines of a slow step (start-up on a busy machine)."""
    return [line for line in run.stderr.splitlines() if not _PROGRESS.search(line)]


def _counts_add_up(rec: dict[str, Any]) -> None:
    total = rec["completed"] + rec["timed_out"] + rec["rejected"] + rec["failed"]
    assert total == rec["scheduled"], rec


@pytest.mark.integration
def test_a_worker_killed_mid_level_fails_its_requests_and_exits_1(started) -> None:
    run = started(*_levels("--qps", "100,100,100", "--worker-kind", "process", "--workers", "2"))
    run.first_level_done()
    victim = run.workers()[1]
    time.sleep(0.3)
    os.kill(victim, signal.SIGKILL)
    code = run.wait(timeout=60)
    assert code == 1, run.stderr
    recs = _records(run.out)
    assert len(recs) == 2  # the first level, and the one the worker died in; no third
    first, hit = recs
    assert first["dead_workers"] == [] and first["failed"] == 0
    _counts_add_up(hit)
    # the dead worker always held a request (serving it or waiting for its arrival)
    assert hit["failed"] >= 1 and hit["completed"] > 0
    assert len(hit["dead_workers"]) == 1
    assert not hit["generator_ok"] and f"pid {victim}" in hit["generator_note"]
    assert "SIGKILL" in hit["generator_note"]
    # the table of both levels is printed, the level marked invalid; one line on stderr
    assert "offered QPS" in run.stdout and "INVALID" in run.stdout
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert f"pid {victim}" in run.stderr
    run.no_process_left()


@pytest.mark.integration
def test_a_stopped_worker_ends_the_level_at_its_deadline_and_is_killed(started) -> None:
    run = started(*_levels("--qps", "100,100,100", "--worker-kind", "process", "--workers", "2"))
    run.first_level_done()
    victim = run.workers()[0]
    time.sleep(0.3)
    os.kill(victim, signal.SIGSTOP)
    # a stopped worker never answers: without the watchdog (the level's end + timeout + grace,
    # then the kill) the run would wait on it for ever, and this wait would time out
    code = run.wait(timeout=60)
    assert code == 1, run.stderr
    recs = _records(run.out)
    assert len(recs) == 2
    hit = recs[1]
    _counts_add_up(hit)
    assert len(hit["stuck_workers"]) == 1 and hit["failed"] >= 1
    assert not hit["generator_ok"] and f"pid {victim}" in hit["generator_note"]
    assert "SIGSTOP" in hit["generator_note"]
    assert "INVALID" in run.stdout and "Traceback" not in run.stderr
    assert not _alive(victim)
    run.no_process_left()


@pytest.mark.integration
def test_a_worker_stopped_for_a_moment_marks_its_level_invalid(started, tmp_path: Path) -> None:
    from ragbench.results.plots import figure

    # levels of 30 and 50 requests: one request started late is over their p99
    run = started(
        *["--duration", "1", "--timeout", "1", "--qps", "30,50", "--workers", "2"],
        "--plot",
        str(tmp_path / "load.png"),
    )
    run.first_level_done()
    victims = run.workers()
    time.sleep(0.3)
    for victim in victims:  # each was waiting for the arrival it had taken
        os.kill(victim, signal.SIGSTOP)
    time.sleep(0.3)
    for victim in victims:
        os.kill(victim, signal.SIGCONT)
    code = run.wait(timeout=60)
    assert code == 0, run.stderr
    ok, late = _records(run.out)
    _counts_add_up(late)
    # the requests they were waiting for started ~300 ms late with a worker idle (the first
    # level may be invalid too on a busy machine: its own dispatch delays are then late)
    assert ok["generator_ok"] == (ok["generator_note"] is None)
    assert not late["generator_ok"] and "dispatch delay" in late["generator_note"]
    assert late["dead_workers"] == [] and late["stuck_workers"] == []
    (row,) = [line for line in run.stdout.splitlines() if "│" in line and " 50.0 ✗ " in line]
    assert "INVALID: at 50.0 " in run.stdout
    # the plot: hollow markers at the invalid levels only, a legend entry saying what they mean
    ax = figure([ok, late]).axes[0]
    hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "white"]
    invalid = {r["offered_qps"] for r in (ok, late) if not r["generator_ok"]}
    assert {float(x) for ln in hollow for x in ln.get_xdata()} == invalid
    assert any("did not keep up" in t.get_text() for t in ax.get_legend().get_texts())
    assert (tmp_path / "load.png").read_bytes()[:4] == b"\x89PNG"
    run.no_process_left()


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["thread", "process", "asyncio"])
def test_ctrl_c_ends_load_at_once_with_130_and_keeps_the_records(started, kind: str) -> None:
    run = started(
        "--duration",
        "1",
        "--qps",
        "50,50,50,50,50,50,50,50",
        "--worker-kind",
        kind,
        "--workers",
        "2",
    )
    run.first_level_done()
    time.sleep(0.4)
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    code = run.wait(timeout=30)
    took = time.monotonic() - sent
    assert code == 130, run.stderr
    # the CLI's grace is 1.5 s; this bound only tells "ended" from "hung" on a loaded machine
    assert took < 6.0, took
    assert _lines(run) == ["ragbench: interrupted; records already written are kept"]
    recs = _records(run.out)
    assert 1 <= len(recs) < 8 and all(r["completed"] == r["scheduled"] for r in recs)
    assert "offered QPS" in run.stdout  # the finished levels' table
    run.no_process_left()


@pytest.mark.integration
def test_overload_ends_in_time_and_every_request_is_counted_once(started) -> None:
    # flat over 2 000 x 16 serves ~5-10k requests a second on one worker: 100k is 10-20x
    run = started(
        "--duration",
        "1",
        "--timeout",
        "1",
        "--qps",
        "100000",
        "--worker-kind",
        "process",
        "--workers",
        "1",
    )
    code = run.wait(timeout=300)
    assert code == 0, run.stderr
    (rec,) = _records(run.out)
    assert rec["scheduled"] == 100_000
    _counts_add_up(rec)
    assert rec["rejected"] > 50_000 and rec["completed"] > 1_000 and rec["failed"] == 0
    # the level ends by duration + timeout + 1 s, however many arrivals were turned away
    assert rec["window_s"] < 1.0 + 1.0 + 1.0
    assert rec["achieved_qps"] == pytest.approx(rec["completed"] / rec["window_s"])


# ---------------------------------------------------------------- asyncio workers and start-up

ASYNC = ("--worker-kind", "asyncio", "--offload", "process", "--concurrency", "4")


def _one_fault_line(run: Load, *named: str) -> None:
    """stderr is one line (beside slow steps' progress lines), no traceback, naming ``named``."""
    lines = _lines(run)
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    for what in named:
        assert what in lines[0], run.stderr


@pytest.mark.integration
def test_an_asyncio_worker_killed_mid_level_is_named_and_exits_1(started) -> None:
    run = started(*_levels("--qps", "100,100,100", "--workers", "2", *ASYNC))
    run.first_level_done()
    victim = run.workers()[1]
    time.sleep(0.3)
    os.kill(victim, signal.SIGKILL)
    code = run.wait(timeout=60)
    assert code == 1, run.stderr
    recs = _records(run.out)
    assert len(recs) == 2  # the level it died in is kept; no third
    hit = recs[1]
    _counts_add_up(hit)
    # its tasks each held a request (served or waited for): failed; the other worker went on
    assert hit["failed"] >= 1 and hit["completed"] > 0
    assert len(hit["dead_workers"]) == 1
    assert not hit["generator_ok"] and f"pid {victim}" in hit["generator_note"]
    assert "SIGKILL" in hit["generator_note"]
    assert "offered QPS" in run.stdout and "INVALID" in run.stdout
    _one_fault_line(run, f"pid {victim}")
    run.no_process_left()


@pytest.mark.integration
def test_a_killed_offload_process_fails_the_level_visibly(started) -> None:
    run = started(*_levels("--qps", "100,100,100", "--workers", "1", *ASYNC))
    run.first_level_done()
    victim = run.offload_processes()[0]
    (worker,) = run.workers()
    time.sleep(0.3)
    os.kill(victim, signal.SIGKILL)
    code = run.wait(timeout=60)
    # a broken pool fails every request sent to it: the level says so and the run stops
    assert code == 1, run.stderr
    recs = _records(run.out)
    assert len(recs) == 2
    first, hit = recs
    assert first["failed"] == 0 and first["dead_workers"] == []
    _counts_add_up(hit)
    assert hit["failed"] >= 1 and hit["dead_workers"] == [0]
    assert not hit["generator_ok"]
    note = hit["generator_note"]
    assert f"offload process {victim} died (killed by SIGKILL)" in note
    assert "requests failed with it" in note
    assert "INVALID" in run.stdout
    # the worker by its own pid (it was named by the offload process's)
    _one_fault_line(run, f"worker 0 (pid {worker}) offload process {victim}")
    run.no_process_left()


@pytest.mark.integration
def test_a_stopped_offload_process_is_killed_with_its_worker(started) -> None:
    # two workers on two cores: one offload process each, so the victim is sent every one of
    # its worker's requests (with several, it might hold none)
    run = started(*_levels("--qps", "100,100,100", "--workers", "2", *ASYNC))
    run.first_level_done()
    victim = run.offload_processes()[0]
    time.sleep(0.3)
    os.kill(victim, signal.SIGSTOP)
    # the request it holds never comes back: the watchdog ends the level and kills the worker
    code = run.wait(timeout=60)
    assert code == 1, run.stderr
    recs = _records(run.out)
    assert len(recs) == 2
    hit = recs[1]
    _counts_add_up(hit)
    assert len(hit["stuck_workers"]) == 1 and hit["failed"] >= 1
    assert f"its process {victim} stopped (SIGSTOP)" in hit["generator_note"]
    _one_fault_line(run, f"its process {victim} stopped")
    assert not _alive(victim)  # killed, not left behind stopped
    run.no_process_left()


def _first_worker(run: Load) -> int:
    """A worker process as soon as it exists (it is still starting: importing, setting up)."""
    _wait_for(lambda: bool(run.workers()) or run.proc.poll() is not None, 120, "a worker")
    assert run.proc.poll() is None, run.stderr
    return run.workers()[0]


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["process", "asyncio"])
def test_a_worker_stopped_during_start_up_fails_the_run_at_the_deadline(started, kind) -> None:
    run = started(
        *_levels("--qps", "50", "--workers", "1", "--worker-kind", kind),
        "--startup-timeout",
        "8",
    )
    victim = _first_worker(run)
    os.kill(victim, signal.SIGSTOP)
    run.seen = {victim}
    # before the start-up deadline, a stopped worker hung load for ever (the watchdog
    # covered levels only): this wait would time out. The 8 s deadline or the 5 s a worker
    # may stay stopped (below), whichever comes first on a busy machine, ends it
    code = run.wait(timeout=90)
    assert code == 1, run.stderr
    _one_fault_line(run, f"(pid {victim})", "SIGSTOP", "killed")
    assert _records(run.out) == []
    assert not _alive(victim)
    run.no_process_left()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("kind", ["process", "asyncio"])
def test_a_worker_stopped_during_start_up_is_failed_long_before_the_deadline(started, kind) -> None:
    """With the default 600 s deadline a worker stopped while starting hung load 10 minutes;
    stopped for 5 s (STOPPED_LIMIT_S), it fails the start at once."""
    run = started(*_levels("--qps", "50", "--workers", "1", "--worker-kind", kind))
    victim = _first_worker(run)
    os.kill(victim, signal.SIGSTOP)
    run.seen = {victim}
    code = run.wait(timeout=90)  # old code: still waiting for the 600 s deadline
    assert code == 1, run.stderr
    _one_fault_line(run, f"(pid {victim}) cannot finish start-up: it has been stopped")
    assert not _alive(victim)
    run.no_process_left()


@pytest.mark.slow
@pytest.mark.integration
def test_an_offload_process_killed_while_it_starts_is_a_fault_not_bad_input(started) -> None:
    """The worker's pool broke during set-up: 'failed to set up: BrokenProcessPool', exit 2,
    the code for a configuration's fault. Now exit 1, the worker named by its pid."""
    run = started(*_levels("--qps", "50", "--workers", "1", *ASYNC))
    _wait_for(
        lambda: bool(run.offload_processes()) or run.proc.poll() is not None,
        120,
        "an offload process",
    )
    assert run.proc.poll() is None, run.stderr
    (worker,) = run.workers()
    os.kill(run.offload_processes()[0], signal.SIGKILL)
    run.seen = {worker}
    code = run.wait(timeout=90)
    assert code == 1, run.stderr
    _one_fault_line(run, f"asyncio worker 0 (pid {worker}) failed to start: BrokenProcessPool")
    run.no_process_left()


@pytest.mark.slow
@pytest.mark.integration
def test_an_offload_process_stopped_while_it_starts_is_not_left_behind(started) -> None:
    """Stopped before its initializer tied it to its worker (PR_SET_PDEATHSIG), an offload
    process outlived everything, stopped, a child of init, holding load's stderr open (a
    caller reading it to its end hung); the start waited for the 600 s deadline."""
    run = started(*_levels("--qps", "50", "--workers", "1", *ASYNC))
    _wait_for(
        lambda: bool(run.offload_processes()) or run.proc.poll() is not None,
        120,
        "an offload process",
    )
    assert run.proc.poll() is None, run.stderr
    victim = run.offload_processes()[0]
    os.kill(victim, signal.SIGSTOP)
    run.seen = {victim, *run.workers()}
    code = run.wait(timeout=90)
    assert code == 1, run.stderr
    _one_fault_line(run, f"its process {victim} has been stopped (SIGSTOP)", "killed")
    run.no_process_left()
    assert not _alive(victim)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["process", "asyncio"])
def test_a_worker_killed_during_start_up_is_named_and_exits_1(started, kind) -> None:
    run = started(*_levels("--qps", "50", "--workers", "2", "--worker-kind", kind))
    victim = _first_worker(run)
    os.kill(victim, signal.SIGKILL)
    code = run.wait(timeout=90)
    assert code == 1, run.stderr  # not 2: nothing was wrong with the input
    _one_fault_line(run, f"(pid {victim}) died during start-up (killed by SIGKILL)")
    run.no_process_left()


@pytest.mark.integration
def test_kill_9_of_load_leaves_no_asyncio_worker_or_offload_process(started) -> None:
    # levels of 30 s: a worker that outlived load would still be serving one when checked
    run = started("--duration", "30", "--qps", "50", "--workers", "2", *ASYNC)
    _wait_for(lambda: run.in_a_level() or run.proc.poll() is not None, 240, "the first level")
    assert run.proc.poll() is None, run.stderr
    run.seen = set(_children(run.proc.pid))
    assert len(run.offload_processes()) >= 2
    run.proc.kill()
    run.wait(timeout=10)
    run.no_process_left()


@pytest.mark.integration
def test_ctrl_c_during_asyncio_start_up_is_130_one_line_and_leaves_nothing(started) -> None:
    run = started(*_levels("--qps", "50", "--workers", "2", *ASYNC), group=True)
    # the offload pools are starting: each worker waits for its pool processes' set-up
    _wait_for(
        lambda: bool(run.offload_processes()) or run.proc.poll() is not None, 240, "offload pools"
    )
    run.seen = set(_children(run.proc.pid))
    assert not _records(run.out)
    run.ctrl_c()
    code = run.wait(timeout=30)
    assert code == 130, run.stderr
    # every process of the group got the SIGINT: none prints a traceback (BrokenPipeError)
    assert _lines(run) == ["ragbench: interrupted; records already written are kept"]
    run.no_process_left()


def _postgres_under(folder: str) -> list[int]:
    """``postgres`` processes whose command line names ``folder`` (their data folder's parent)."""
    return [
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit()
        and os.path.basename(_cmdline(int(p)).split(" ")[0]) == "postgres"
        and folder in _cmdline(int(p))
    ]


@pytest.mark.integration
def test_kill_9_of_load_leaves_no_postgres_of_its_asyncio_workers(started, tmp_path: Path) -> None:
    import shutil
    import tempfile

    # a folder the unprivileged server user can traverse (pytest's tmp_path is 0700)
    folder = tempfile.mkdtemp(prefix="rb-h28-pg-", dir="/tmp")
    os.chmod(folder, 0o711)
    try:
        env = dict(os.environ, TMPDIR=folder)
        args = ("--duration", "30", "--qps", "20", "--workers", "1", "--index", "pgvector")
        run = started(*args, *ASYNC, env=env)
        _wait_for(lambda: run.in_a_level() or run.proc.poll() is not None, 300, "the level")
        assert run.proc.poll() is None, run.stderr
        servers = _postgres_under(folder)
        assert len(servers) >= 2  # the worker's and its offload processes' own servers
        run.seen = set(_children(run.proc.pid))
        run.proc.kill()
        run.wait(timeout=10)
        # each server's keeper stops it when its worker's pipe closes (fast shutdown)
        _wait_for(lambda: not _postgres_under(folder), 30, "no postgres left")
        # (the data folders; load's own temporary index folder goes only when load can act)
        _wait_for(
            lambda: not [f for f in os.listdir(folder) if f.startswith("ragbench-pg-")],
            30,
            f"the servers' folders removed: {os.listdir(folder)}",
        )
        run.no_process_left()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.integration
def test_ctrl_c_mid_level_of_asyncio_workers_ends_them_without_a_traceback(started) -> None:
    # a level of 6 s: longer than the 1.5 s Ctrl-C grace, so a worker left serving it would
    # send its reply to a parent already gone (a BrokenPipeError traceback, on the same stderr)
    run = started("--duration", "6", "--qps", "50", "--workers", "2", *ASYNC, group=True)
    _wait_for(lambda: run.in_a_level() or run.proc.poll() is not None, 240, "the first level")
    assert run.proc.poll() is None, run.stderr
    run.seen = set(_children(run.proc.pid))
    time.sleep(0.5)
    run.ctrl_c()
    assert run.wait(timeout=30) == 130, run.stderr
    run.no_process_left(within_s=20)
    assert _lines(run) == ["ragbench: interrupted; records already written are kept"]


@pytest.mark.integration
def test_an_offload_process_stopped_in_a_pool_of_two_is_not_left_behind(started) -> None:
    # one worker on two cores: two offload processes; the stopped one may hold a request of
    # the level (then its worker is stuck: exit 1) or none (the other serves them all: exit 0)
    run = started(*_levels("--qps", "100,100", "--workers", "1", *ASYNC))
    run.first_level_done()
    victim = run.offload_processes()[0]
    time.sleep(0.3)
    os.kill(victim, signal.SIGSTOP)
    code = run.wait(timeout=60)
    recs = _records(run.out)
    assert len(recs) == 2, run.stderr
    _counts_add_up(recs[1])
    if code == 1:
        assert recs[1]["stuck_workers"] == [0]
        _one_fault_line(run, f"its process {victim} stopped (SIGSTOP)")
    else:
        assert code == 0 and recs[1]["failed"] == 0, run.stderr
    # either way it is killed at the end, not left behind stopped
    assert not _alive(victim)
    run.no_process_left()


@pytest.mark.integration
def test_an_asyncio_worker_killed_in_a_closed_loop_level_is_named_and_exits_1(started) -> None:
    run = started(*_levels("--concurrency", "2,2,2", "--workers", "2", "--worker-kind", "asyncio"))
    run.first_level_done()
    victim = run.workers()[0]
    time.sleep(0.3)
    os.kill(victim, signal.SIGKILL)
    code = run.wait(timeout=60)
    assert code == 1, run.stderr
    recs = _records(run.out)
    assert len(recs) == 2
    hit = recs[1]
    _counts_add_up(hit)
    # its two clients' requests went with it (one failed request each); the other loop's went on
    assert hit["failed"] >= 2 and hit["completed"] > 0 and len(hit["dead_workers"]) == 1
    assert f"pid {victim}" in hit["generator_note"] and "SIGKILL" in hit["generator_note"]
    _one_fault_line(run, f"pid {victim}")
    run.no_process_left()


@pytest.mark.slow
@pytest.mark.integration
def test_kill_9_of_load_leaves_an_index_folder_the_next_load_removes(
    started, tmp_path: Path
) -> None:
    """The indexes worker processes load live in a TMPDIR folder a kill -9 cannot remove (one
    index file per configuration, the whole corpus's size); it was left for good."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    run = started(*_levels("--qps", "50,50,50", "--workers", "1"), env=env)
    _wait_for(lambda: run.in_a_level() or run.proc.poll() is not None, 240, "the first level")
    assert run.proc.poll() is None, run.stderr
    run.seen = set(_children(run.proc.pid))
    run.proc.kill()
    run.wait(timeout=30)
    run.no_process_left()
    (left,) = [p.name for p in tmp.iterdir() if p.name.startswith("ragbench-index-")]
    later = started(*_levels("--qps", "50", "--workers", "1"), env=env)
    assert later.wait(timeout=240) == 0, later.stderr
    assert not (tmp / left).exists(), "the killed load's index folder is still there"
    assert not [p for p in tmp.iterdir() if p.name.startswith("ragbench-index-")]

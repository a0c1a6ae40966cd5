"""Issue 27: the sweep's memory column does not move with what other processes on the machine do.

A shared library's proportional set size divides each page by the number of processes mapping
it, so another Python process starting inside the measured window used to shrink the reading by
megabytes (a flat index of 1 MB read 0.27 MB beside another test suite). The neighbour here is
such a process, started between the two readings and not below this one (its launcher exits).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbench import procstat
from ragbench.cli import main
from ragbench.sweeps import memory

#: The neighbour: maps the libraries a sweep has mapped, says it is ready, waits to be killed.
NEIGHBOUR = "import sys, time, numpy, faiss; open(sys.argv[1], 'w').close(); time.sleep(120)"
#: Starts the neighbour and exits at once, so the neighbour is not a descendant of the test.
LAUNCH = (
    "import subprocess, sys; d = subprocess.DEVNULL; "
    "print(subprocess.Popen([sys.executable, '-c', *sys.argv[1:]], "
    "stdin=d, stdout=d, stderr=d).pid)"
)


@pytest.fixture
def neighbour(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """A call starts one neighbour and returns once it has mapped numpy and faiss."""
    pids: list[int] = []

    def start() -> None:
        ready = tmp_path / f"ready-{len(pids)}"
        argv = [sys.executable, "-c", LAUNCH, NEIGHBOUR, str(ready)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
        pids.append(int(out.stdout))
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert time.monotonic() < deadline, "the neighbour did not start"
            time.sleep(0.05)
        assert pids[-1] not in procstat.descendants(os.getpid())

    yield start
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _reading() -> procstat.Mappings:
    procstat.trim_heap()
    reading = procstat.mappings()
    assert reading is not None
    return reading


def test_a_process_starting_elsewhere_does_not_move_the_reading(neighbour) -> None:
    import faiss  # noqa: F401  (mapped before the baseline, as the sweep's engine is)

    before = _reading()
    neighbour()
    held = np.ones(1_000_000)  # 8 MB of anonymous memory, every page touched
    after = _reading()
    assert 0.95 * held.nbytes <= procstat.held_bytes(before, after) <= 1.1 * held.nbytes


def test_a_file_mapped_in_the_window_counts_the_pages_read(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(4 << 20))
    before = _reading()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        total = sum(data[i] for i in range(0, len(data), mmap.PAGESIZE))  # every page read
        after = _reading()
    assert total >= 0
    assert 0.95 * (4 << 20) <= procstat.held_bytes(before, after) <= 1.1 * (4 << 20)


def _smaps(
    lib_pss_kb: int, extra: str = "", *, heap_kb: int = 600, cow_kb: int = 16
) -> list[bytes]:
    text = f"""\
55d1dc382000-55d1dc400000 rw-p 00000000 00:00 0                          [heap]
Rss:                 {heap_kb} kB
Pss:                 {heap_kb} kB
Anonymous:           {heap_kb} kB
7f72c7e07000-7f72c7f5d000 r-xp 00026000 fe:00 339380                     /usr/lib/libc.so.6
Rss:                 804 kB
Pss:                  {lib_pss_kb} kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
7f72c7f5d000-7f72c7f61000 rw-p 0017b000 fe:00 339380                     /usr/lib/libc.so.6
Rss:                  {cow_kb} kB
Pss:                  {cow_kb} kB
Anonymous:            {cow_kb} kB
7f0000000000-7f0000100000 rw-s 00000000 00:01 1025                       /dev/zero (deleted)
Rss:                 100 kB
Pss:                  50 kB
Anonymous:             0 kB
{extra}"""
    return [line.encode() + b"\n" for line in text.splitlines()]


def _planted(lib_pss_kb: int, extra: str = "", **kb: int) -> procstat.Mappings:
    anon = [0]
    files: dict[tuple[int, bytes, bytes], tuple[int, int]] = {}
    procstat._add_mappings(7, _smaps(lib_pss_kb, extra, **kb), anon, files)
    return procstat.Mappings(anon[0], files)


def test_held_bytes_counts_anonymous_shared_and_new_files_only() -> None:
    new_file = """\
7f1000000000-7f1000200000 r--s 00000000 fe:00 4242                       /tmp/index.bin
Rss:                2048 kB
Pss:                2048 kB
Anonymous:             0 kB
"""
    before = _planted(31)
    # the library's PSS halves (another process mapped it): nothing held
    assert procstat.held_bytes(before, _planted(15)) == 0
    # a data file mapped in the window: its PSS; the library's sharing still does not count
    assert procstat.held_bytes(before, _planted(62, new_file)) == 2048 * 1024
    # the heap grows 300 kB, the library's copied-on-write pages 16 kB, its PSS halves: 316 kB
    grown = _planted(15, heap_kb=900, cow_kb=32)
    assert procstat.held_bytes(before, grown) == (300 + 16) * 1024
    # against an empty baseline everything is new: heap, shared anonymous memory (its PSS,
    # 50 kB of 100), the library's two mappings by their PSS (31 + 16 kB)
    empty = procstat.Mappings(0, {})
    assert procstat.held_bytes(empty, before) == (600 + 50 + 31 + 16) * 1024


@pytest.mark.slow  # a sweep with its throw-away build, and a neighbour importing faiss (~8 s)
def test_sweep_memory_holds_while_another_process_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, neighbour
) -> None:
    real_build = memory.build_index

    def build_beside_a_neighbour(*args: Any, **kwargs: Any) -> Any:
        neighbour()  # inside the measured window: after the baseline, before the reading
        return real_build(*args, **kwargs)

    monkeypatch.setattr(memory, "build_index", build_beside_a_neighbour)
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "4000", "--dim", "64", "--queries", "20"]
    assert main([*argv, "--index", "flat", "--out", str(out)]) == 0
    (rec,) = [json.loads(line) for line in out.read_text().splitlines() if line]
    # the exact index holds the float vectors, 4000 x 64 x 4 bytes (the heap moves a little)
    assert rec["memory_bytes"] >= 0.8 * 4000 * 64 * 4
    assert rec["memory_method"] == procstat.METHOD

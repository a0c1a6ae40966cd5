"""What the operating system says about processes: another process's CPU time, resident memory.

Two readings the benchmarks make the same way for every engine:

- :func:`process_cpu_ns`: the CPU time (ns) a process has used so far, all
  its threads, read from its process CPU clock (``clock_gettime`` on the
  clock Linux derives from a pid), else ``/proc/<pid>/schedstat``. pgvector
  reads its server backend's with it, beside the calling thread's own.
- :func:`resident_bytes`: the proportional set size (PSS, ``/proc/<pid>/smaps_rollup``)
  of this process and every process below it (a database server ragbench
  started). PSS splits a page shared by N processes N ways, so the sum over
  a server's postmaster and backends counts their shared buffers once.

Linux only: on other systems, or when ``/proc`` cannot be read, both give ``None``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import time

__all__ = [
    "METHOD",
    "METHOD_COLD",
    "METHOD_TEXT",
    "descendants",
    "process_cpu_ns",
    "resident_bytes",
    "trim_heap",
]

#: How :func:`resident_bytes` counts, for records and table headers.
METHOD = "pss-delta"
#: :data:`METHOD` when the engine's one-time costs could not be taken into the baseline.
METHOD_COLD = "pss-delta-cold"
#: What memory measured by :data:`METHOD` is (``ragbench.sweeps.memory``), for table headers.
METHOD_TEXT = (
    "PSS of ragbench's process and its child processes (a database server) after the build "
    "(or load) and one batch search, minus before (after a throw-away build of the engine)"
)


def _cpu_clock(pid: int) -> int:
    # Linux's CPUCLOCK_SCHED for a whole process: ~pid << 3 | 2 (kernel posix-cpu-timers)
    return ((~pid) << 3) | 2


def process_cpu_ns(pid: int) -> int | None:
    """CPU time (ns, user + system, every thread) process ``pid`` has used; ``None`` if unreadable."""
    try:
        return time.clock_gettime_ns(_cpu_clock(pid))
    except (OSError, AttributeError, OverflowError):
        pass
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """The pids of every process below ``pid`` (children, their children, ...), from ``/proc``."""
    parent: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # gone meanwhile
        # the command may hold spaces and parentheses: fields follow the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        with contextlib.suppress(ValueError, IndexError):
            parent.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = parent.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _pss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def resident_bytes(pid: int | None = None) -> int | None:
    """PSS (bytes) of ``pid`` (default: this process) plus every process below it.

    ``None`` when ``pid``'s own cannot be read; a descendant that ended or
    cannot be read counts 0.
    """
    root = os.getpid() if pid is None else pid
    own = _pss_bytes(root)
    if own is None:
        return None
    return own + sum(_pss_bytes(p) or 0 for p in descendants(root))


def trim_heap() -> None:
    """Give freed heap memory back to the system (glibc ``malloc_trim``; a no-op elsewhere).

    Before and after a reading of :func:`resident_bytes`, so pages the
    allocator keeps after a free are not counted as held.
    """
    name = ctypes.util.find_library("c")
    if not name:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)

"""What the operating system says about processes: another process's CPU time, resident memory.

Readings the benchmarks make the same way for every engine:

- :func:`process_cpu_ns`: the CPU time (ns) a process has used so far, all
  its threads, read from its process CPU clock (``clock_gettime`` on the
  clock Linux derives from a pid), else ``/proc/<pid>/schedstat``. pgvector
  reads its server backend's with it, beside the calling thread's own.
- :func:`mappings` and :func:`held_bytes`: the memory this process and every
  process below it (a database server ragbench started) came to hold between
  two readings, from ``/proc/<pid>/smaps`` mapping by mapping. Anonymous
  memory and shared memory count by their proportional set size (PSS splits
  a page shared by N processes N ways, so the sum over a server's postmaster
  and backends counts its shared buffers once). A file-backed mapping counts
  by its PSS only if its file was not mapped by that process at the first
  reading (an index's memory-mapped data file, a server started in between);
  of a file mapped already (libpython, libc, numpy's and an engine's ``.so``
  files) only its copied-on-write (anonymous) pages count. The PSS of such a
  file moves whenever another process on the machine maps or unmaps it, so
  counting it would make the difference depend on the rest of the machine.
- :func:`resident_bytes`: the PSS of this process and every process below it
  (``/proc/<pid>/smaps_rollup``), whole.

Linux only: on other systems, or when ``/proc`` cannot be read, each gives ``None``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import os
import time
from collections.abc import Iterable

__all__ = [
    "METHOD",
    "METHOD_COLD",
    "METHOD_TEXT",
    "OLD_METHODS",
    "OLD_METHOD_TEXT",
    "Mappings",
    "descendants",
    "held_bytes",
    "mappings",
    "process_cpu_ns",
    "resident_bytes",
    "trim_heap",
]

#: How :func:`held_bytes` counts, for records and table headers.
METHOD = "pss-delta-new-files"
#: :data:`METHOD` when the engine's one-time costs could not be taken into the baseline.
METHOD_COLD = "pss-delta-new-files-cold"
#: What memory measured by :data:`METHOD` is (``ragbench.sweeps.memory``), for table headers.
METHOD_TEXT = (
    "PSS of ragbench's process and its child processes (a database server) after the build "
    "(or load) and one batch search, minus before (after a throw-away build of the engine); "
    "anonymous and shared memory, and files mapped in between (files mapped before, such as "
    "libraries: their copied-on-write pages only)"
)
#: The methods of records from before :data:`METHOD` (committed findings keep them).
OLD_METHODS = frozenset({"pss-delta", "pss-delta-cold"})
#: What memory measured by an :data:`OLD_METHODS` method is, for the tables of those records.
OLD_METHOD_TEXT = (
    "PSS of ragbench's process and its child processes (a database server) after the build "
    "(or load) and one batch search, minus before (after a throw-away build of the engine), "
    "every mapping whole (method pss-delta: shared libraries' PSS moved with other processes "
    "on the machine)"
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


#: Names the kernel gives shared-memory mappings that have an inode (a shared anonymous mapping,
#: System V and POSIX shared memory, a memfd): counted like anonymous memory.
_SHMEM = (b"/dev/zero", b"/SYSV", b"/memfd:", b"/dev/shm/")


#: (pid, device, inode) of a mapped file -> (PSS bytes, anonymous bytes) of its mappings.
_Files = dict[tuple[int, bytes, bytes], tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Mappings:
    """One reading of :func:`mappings`, to be compared with :func:`held_bytes`.

    ``anon``: PSS bytes of the anonymous and shared-memory mappings of every
    process read. ``files``: per (pid, device, inode) of a mapped file,
    (PSS bytes, anonymous bytes) summed over that process's mappings of it.
    """

    anon: int
    files: _Files


def _smaps(pid: int, anon: list[int], files: _Files) -> bool:
    """Add ``pid``'s mappings (``/proc/<pid>/smaps``) to ``anon``, ``files``; ``False``: unreadable."""
    try:
        with open(f"/proc/{pid}/smaps", "rb") as fh:
            _add_mappings(pid, fh, anon, files)
    except OSError:
        return False
    return True


def _add_mappings(pid: int, lines: Iterable[bytes], anon: list[int], files: _Files) -> None:
    # line by line: the reading allocates next to nothing, so it does not measure itself
    key: tuple[int, bytes, bytes] | None = None
    for line in lines:
        head, _, rest = line.partition(b" ")
        if not head.endswith(b":"):  # a mapping: start-end perms offset dev inode [path]
            parts = rest.split(maxsplit=4)
            inode = parts[3] if len(parts) > 3 else b"0"
            shared_memory = len(parts) > 4 and parts[4].startswith(_SHMEM)
            key = None if inode == b"0" or shared_memory else (pid, parts[2], inode)
        elif head == b"Pss:" or (head == b"Anonymous:" and key is not None):
            with contextlib.suppress(ValueError, IndexError):
                n = int(rest.split()[0]) * 1024
                if key is None:
                    anon[0] += n
                else:
                    pss, anonymous = files.get(key, (0, 0))
                    files[key] = (pss + n, anonymous) if head == b"Pss:" else (pss, anonymous + n)


def mappings(pid: int | None = None) -> Mappings | None:
    """The mappings of ``pid`` (default: this process) and every process below it.

    ``None`` when ``pid``'s own cannot be read; a descendant that ended or
    cannot be read counts nothing.
    """
    root = os.getpid() if pid is None else pid
    anon = [0]
    files: _Files = {}
    if not _smaps(root, anon, files):
        return None
    for p in descendants(root):
        _smaps(p, anon, files)
    return Mappings(anon[0], files)


def held_bytes(before: Mappings, after: Mappings) -> int:
    """Bytes the process tree came to hold from ``before`` to ``after`` (:data:`METHOD`).

    Anonymous and shared memory by PSS; a file by its PSS if ``before`` did
    not have it mapped in that process, else by its anonymous pages only.
    May be negative (memory freed).
    """
    old = before.files.keys()

    def total(reading: Mappings) -> int:
        files = reading.files.items()
        return reading.anon + sum(anon if key in old else pss for key, (pss, anon) in files)

    return total(after) - total(before)


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

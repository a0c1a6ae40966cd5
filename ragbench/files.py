"""Files ragbench reads and writes, checked the same way everywhere.

- :func:`read_regular` / :func:`open_regular`: read only a regular file (never
  a FIFO, a device like ``/dev/zero``, a directory), and at most
  ``limit_bytes`` of it. The file is opened with ``O_NONBLOCK`` so opening a
  FIFO returns at once instead of waiting for a writer, then checked with
  ``fstat`` (the very file opened, not a name that could be swapped).
- :func:`check_writable`: before any work, whether an output path can be
  written: its folder exists and a probe file can be created in it (root
  writes into a mode-0555 folder, so permissions alone would not tell), or
  the existing file opens for appending. Nothing is created or changed.
- :func:`replace_bytes`: write a whole file (a chart) through a temporary
  file renamed over it, so a failed write leaves the old file, or none.
- :func:`append_bytes`: append to a file so that a failed write (a full disk,
  an interrupt in the middle) leaves the file as it was, even with other
  processes appending to it at the same time: the append holds an exclusive
  ``flock`` on the file, notes its size, writes, and truncates back to that
  size (still holding the lock) when the write fails.

Every problem raises the :class:`~ragbench.errors.RagbenchError` subclass the
caller names (``error=``), with a message that names the file and what it is.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
import tempfile
from os import PathLike
from pathlib import Path

from .errors import ConfigError, DatasetError, RagbenchError

__all__ = [
    "CONFIG_LIMIT",
    "DATA_LIMIT",
    "RESULTS_LIMIT",
    "SIDECAR_LIMIT",
    "append_bytes",
    "replace_bytes",
    "check_writable",
    "open_regular",
    "read_regular",
]

MiB = 1 << 20
#: Size limits per kind of file (bytes).
CONFIG_LIMIT = 1 * MiB
SIDECAR_LIMIT = 16 * MiB
RESULTS_LIMIT = 2048 * MiB
DATA_LIMIT = (
    64 * 1024 * MiB
)  # dataset files and shipped vectors: the point is refusing FIFOs and devices

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _size_text(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n} bytes"


def open_regular(
    path: str | PathLike[str],
    *,
    limit_bytes: int | None,
    what: str,
    error: type[Exception] = DatasetError,
    os_errors: bool = False,
) -> io.BufferedReader:
    """``path`` opened for binary reading, after checking it is a regular file of at most ``limit_bytes``.

    Opened with ``O_NONBLOCK`` (a FIFO then opens at once instead of waiting
    for a writer) and checked with ``fstat`` on the open descriptor, so
    nothing can swap the file between the check and the read. Raises
    ``error`` naming ``what`` and the path when it is not a regular file or
    too large (``limit_bytes=None``: no limit), and when it is missing or
    unreadable -- unless ``os_errors``, when that ``OSError`` propagates.
    """
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if os_errors:
            raise
        raise error(f"cannot read {what} {p}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {p} is {_kind(st.st_mode)}, not a regular file; give a file")
        if limit_bytes is not None and st.st_size > limit_bytes:
            raise error(
                f"{what} {p} is {_size_text(st.st_size)}, over the {_size_text(limit_bytes)} "
                f"a {what} may have"
            )
        os.set_blocking(fd, True)
        return io.open(fd, "rb")  # noqa: UP020 - typed as the BufferedReader it is
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | PathLike[str],
    *,
    limit_bytes: int,
    what: str,
    error: type[RagbenchError] = DatasetError,
) -> bytes:
    """The bytes of a regular file of at most ``limit_bytes`` (see :func:`open_regular`).

    A file that grows past the limit while it is read is refused too.
    """
    with open_regular(path, limit_bytes=limit_bytes, what=what, error=error) as fh:
        try:
            # read(n) allocates n bytes: ask for what the file holds (+1 to see it grow), then chunks
            chunks = [fh.read(min(limit_bytes, os.fstat(fh.fileno()).st_size) + 1)]
            got = len(chunks[0])
            while got <= limit_bytes and (more := fh.read(min(limit_bytes + 1 - got, MiB))):
                chunks.append(more)
                got += len(more)
            data = b"".join(chunks)
        except OSError as exc:
            raise error(f"cannot read {what} {os.fspath(path)}: {exc.strerror}") from None
    if len(data) > limit_bytes:
        raise error(f"{what} {os.fspath(path)} is over the {_size_text(limit_bytes)} it may have")
    return data


def check_writable(
    path: str | PathLike[str], what: str, *, error: type[RagbenchError] = ConfigError
) -> None:
    """Raise ``error`` unless ``path`` can be written (appended to, or created), changing nothing.

    A missing folder is not created: it is refused, named. An existing path
    must open for appending (a directory or a FIFO without a reader does
    not); a new one needs a folder a probe file can be created in and removed.
    """
    p = Path(path)
    if p.exists() or p.is_symlink():
        if p.is_dir():
            raise error(f"{what} {p} is a directory; give a file name")
        try:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        except OSError as exc:
            raise error(f"cannot write {what} {p}: {exc.strerror}") from None
        os.close(fd)
        return
    folder = p.parent
    if not folder.is_dir():
        problem = "is not a directory" if folder.exists() else "does not exist"
        raise error(f"cannot write {what} {p}: the folder {folder} {problem} (create it first)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".ragbench-probe-", dir=folder)
    except OSError as exc:
        raise error(
            f"cannot write {what} {p}: cannot create a file in {folder} ({exc.strerror})"
        ) from None
    os.close(fd)
    os.unlink(probe)


def append_bytes(path: str | PathLike[str], data: bytes) -> None:
    """Append ``data`` to ``path`` (created if missing) and flush it to disk, all or nothing.

    Safe with other processes appending to the same file: a regular file is
    appended to under an exclusive ``flock`` (every ragbench append takes it),
    so no two appends interleave and the size noted under the lock is the size
    before *this* write. When a write fails (``OSError`` such as a full disk,
    or an interrupt between two partial writes) the file is truncated back to
    that size, or removed if this call created it and nothing else was written
    to it, still under the lock; then the exception is raised.
    """
    p = os.fspath(path)
    fd, created = _open_locked(p)
    try:  # closing the descriptor releases the lock
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        try:
            view = memoryview(data)
            while view:  # one write on a local disk; a short write is continued, never left
                view = view[os.write(fd, view) :]
            if regular:
                os.fsync(fd)
        except BaseException:
            if regular:
                _undo(fd, p, st.st_size, created and st.st_size == 0)
            raise
    finally:
        os.close(fd)


_APPEND = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


def _open_locked(p: str) -> tuple[int, bool]:
    """(descriptor open for appending to ``p``, whether this call created the file).

    A regular file is returned locked. A file removed while this call waited
    for the lock (a failed first append by another process removes the file
    it created) is opened again, so nothing is written to a removed file.
    """
    for _ in range(100):
        created = False
        try:
            fd = os.open(p, _APPEND | os.O_CREAT | os.O_EXCL, 0o666)
            created = True
        except FileExistsError:
            try:
                fd = os.open(p, _APPEND | (os.O_CREAT if os.path.islink(p) else 0), 0o666)
            except FileNotFoundError:  # removed between the two opens: try again
                continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return fd, False  # /dev/full, a FIFO: nothing to lock or truncate
            _lock(fd)
            if os.fstat(fd).st_nlink > 0:
                return fd, created
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # removed while this call waited for the lock: open the new one
    raise OSError(f"cannot append to {p}: it was removed and created again 100 times")


if sys.platform == "win32":  # pragma: no cover - no flock; one O_APPEND write each

    def _lock(fd: int) -> None:
        """No lock on Windows."""

else:
    import fcntl

    def _lock(fd: int) -> None:
        """Take an exclusive lock on ``fd`` (released when it is closed), waiting for it.

        A file system without locks (some network mounts) is appended to
        unlocked rather than not at all.
        """
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise


def _undo(fd: int, path: str, size: int, remove: bool) -> None:
    """Put a file back as it was before a failed append (best effort: the first error is raised)."""
    try:
        if remove:
            os.unlink(path)
        else:
            os.ftruncate(fd, size)
    except OSError:
        pass


def replace_bytes(path: str | PathLike[str], data: bytes) -> None:
    """Write ``data`` as the whole of ``path``: through a temporary file in its folder, renamed over it.

    A failed write (``OSError``, raised) leaves the file as it was. A path that
    is not a regular file (``/dev/stdout``, ``/dev/full``) is written directly.
    """
    p = Path(path)
    if p.exists() and not p.is_file():
        with open(p, "wb") as fh:
            fh.write(data)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

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
  an interrupt in the middle) leaves the file as it was: its size is noted
  before, and it is truncated back when the write fails.

Every problem raises the :class:`~ragbench.errors.RagbenchError` subclass the
caller names (``error=``), with a message that names the file and what it is.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
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

    When a write fails (``OSError`` such as a full disk, or an interrupt
    between two partial writes) a regular file is truncated back to its size
    before, or removed if this call created it, and the exception is raised.
    """
    p = os.fspath(path)
    existed = os.path.lexists(p)
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if regular:
                os.fsync(fd)
        except BaseException:
            if regular:
                _undo(fd, p, st.st_size, existed)
            raise
    finally:
        os.close(fd)


def _undo(fd: int, path: str, size: int, existed: bool) -> None:
    """Put a file back as it was before a failed append (best effort: the first error is raised)."""
    try:
        if existed:
            os.ftruncate(fd, size)
        else:
            os.unlink(path)
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

"""Shared test set-up: an isolated cache directory and offline model loading."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test session gets its own ragbench cache unless CI chose one."""
    if "RAGBENCH_CACHE_DIR" not in os.environ:
        os.environ["RAGBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("ragbench-cache"))


@pytest.fixture(autouse=True)
def _pytester_runs_outside_xdist(request: pytest.FixtureRequest) -> None:
    """A pytester subprocess is a user's own pytest run, not one of this run's xdist workers.

    ``make test`` runs the suite in two xdist workers; each sets ``PYTEST_XDIST_WORKER``,
    which a pytester subprocess inherits, and pytest-benchmark then disables itself there
    ("benchmarks are automatically disabled because xdist plugin is active") and writes no
    ``--benchmark-json`` file.
    """
    if "pytester" in request.fixturenames:
        mp = request.getfixturevalue("monkeypatch")
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            mp.delenv(name, raising=False)


@pytest.fixture(scope="session", autouse=True)
def _shared_postgres():  # type: ignore[no-untyped-def]
    """Stop the PostgreSQL server tests/pgshared.py may have started."""
    yield
    import pgshared

    pgshared.stop()


class SocketWatch:
    """Helpers for tests of clients and servers that hold connections per thread.

    ``now()`` is this process's open sockets (``socket:[inode]`` from
    /proc/self/fd); ``leaked(before)`` the ones opened since ``before`` still
    open after waiting up to ``limit`` s (servers and grpc close their ends a
    moment after the client); ``server_connections(port)`` counts established
    TCP connections whose server end is ``port`` (/proc/net/tcp, tcp6);
    ``in_threads`` runs work in threads that stay parked (holding their
    connections) while ``while_parked`` looks.
    """

    @staticmethod
    def now() -> set[str]:
        found = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:"):
                found.add(target)
        return found

    def leaked(self, before: set[str], limit: float = 10.0) -> set[str]:
        end = time.monotonic() + limit
        while (left := self.now() - before) and time.monotonic() < end:
            time.sleep(0.02)
        return left

    @staticmethod
    def server_connections(port: int) -> int:
        count = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    lines = f.readlines()[1:]
            except FileNotFoundError:
                continue
            for line in lines:
                fields = line.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    count += 1
        return count

    @staticmethod
    def in_threads(
        n: int, work: Callable[[int], Any], while_parked: Callable[[], Any] | None = None
    ) -> tuple[list[Any], Any]:
        """Run ``work(t)`` in ``n`` threads at once; return their results and ``while_parked()``.

        ``while_parked`` runs once every thread has finished its work but before
        any of them ends (so their connections are still theirs). The first
        error of a thread is raised here.
        """
        out: list[Any] = [None] * n
        errors: list[BaseException] = []
        done = threading.Barrier(n + 1)
        release = threading.Event()

        def run(t: int) -> None:
            try:
                out[t] = work(t)
            except BaseException as exc:
                errors.append(exc)
            finally:
                with contextlib.suppress(threading.BrokenBarrierError):
                    done.wait(120)
                release.wait(120)

        threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(n)]
        for thread in threads:
            thread.start()
        try:
            done.wait(600)
            parked = while_parked() if while_parked is not None else None
        finally:
            release.set()
            for thread in threads:
                thread.join(60)
        if errors:
            raise errors[0]
        return out, parked


@pytest.fixture
def sockets() -> SocketWatch:
    """Open-socket, server-connection and parked-thread helpers (see :class:`SocketWatch`)."""
    return SocketWatch()

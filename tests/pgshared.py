"""One PostgreSQL server shared by the tests that build many ``pgvector`` indexes.

Started on first use (ragbench's own :class:`~ragbench.indexes.pgvector._server.EmbeddedServer`,
the server ``pgvector`` starts for itself) and stopped at the end of the session
(``conftest.py``); each index then connects with ``dsn=`` and keeps to a table of its
own. Tests of ragbench starting and stopping its own server create indexes without it.
"""

from __future__ import annotations

from typing import Any

_server: Any = None


def dsn() -> str:
    """A libpq connection string to the shared server (started on first call)."""
    global _server
    if _server is None or not _server.alive:
        from ragbench.indexes.pgvector._server import EmbeddedServer

        _server = EmbeddedServer()
    info = _server.conninfo()
    return " ".join(f"{key}={value}" for key, value in info.items())


def params(name: str) -> dict[str, Any]:
    """Build params that put a PostgreSQL index (``pgvector``, ``pg-fts``: a ``dsn`` build
    parameter) on the shared server; ``{}`` for others."""
    import ragbench as rb

    takes_dsn = "dsn" in getattr(rb.indexes.registry.factory(name), "build_defaults", {})
    return {"dsn": dsn()} if takes_dsn else {}


def stop() -> None:
    global _server
    server, _server = _server, None
    if server is not None:
        server.stop()

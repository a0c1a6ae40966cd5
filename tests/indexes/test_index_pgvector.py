"""Engine-specific behaviour of the ``pgvector`` backend: PostgreSQL + pgvector, a real server.

Most tests put their indexes on one server shared by the session (``dsn=``,
tests/pgshared.py); the lifetime tests let ragbench start and stop its own,
in child processes where the question is what is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pgshared
import psutil
import psycopg
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.errors import ConfigError, DimensionError, IndexServerError, NotBuiltError
from ragbench.indexes.pgvector import _server
from ragbench.indexes.pgvector.dsn import redact, redact_message
from ragbench.results.tables.notes import retrieve_parts_note
from ragbench.timing import Parts

N, DIM, NQ = 3000, 32, 20
ROOT = Path(__file__).resolve().parents[2]


def _data(seed: int, n: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


X = _data(1, N)
Q = _data(2, NQ)


def _truth(metric: str, k: int, allow: np.ndarray | None = None) -> np.ndarray:
    x, q = X.astype(np.float64), Q.astype(np.float64)
    s = -((q**2).sum(1)[:, None] - 2 * q @ x.T + (x**2).sum(1)) if metric == "l2" else q @ x.T
    if allow is not None:
        s[:, ~allow] = -np.inf
    return np.argsort(-s, axis=1)[:, :k]


def _recall(ids: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(a) & set(b)) for a, b in zip(ids.tolist(), truth.tolist(), strict=True))
    return hits / truth.size


def shared(**params):  # type: ignore[no-untyped-def]
    return rb.indexes.create("pgvector", dim=DIM, dsn=pgshared.dsn(), **params)


def _tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT relname FROM pg_class WHERE relkind IN ('r', 'i')").fetchall()
    return {r[0] for r in rows}


def _our_postgres(marker: str) -> list[psutil.Process]:
    """``postgres`` processes whose command line names a folder under ``marker``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and any(marker in part for part in cmd):
            found.append(proc)
    return found


# -- scores, storage, index types ---------------------------------------------------------


@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
def test_scores_follow_the_ragbench_convention(metric: str) -> None:
    """<#> negated ip, <=> cosine distance and <-> L2 distance become ragbench's scores."""
    index = rb.indexes.create("pgvector", dim=DIM, metric=metric, dsn=pgshared.dsn())
    index.build(X * np.float32(2.0) if metric == "cosine" else X)
    ids, scores = index.search(Q, 10, ef=200)
    assert _recall(ids, _truth(metric, 10)) >= 0.95
    exact = (X[ids] @ Q[:, :, None])[:, :, 0]
    want = exact if metric != "l2" else -np.square(X[ids] - Q[:, None, :]).sum(-1)
    np.testing.assert_allclose(scores, want, atol=2e-5)
    assert (scores[:, :-1] >= scores[:, 1:]).all()


@pytest.fixture(scope="module")
def exact_table():  # type: ignore[no-untyped-def]
    index = shared(index="flat")
    index.build(X)
    yield index
    index.close()


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(st.integers(0, NQ - 1), min_size=1, max_size=3),
    stride=st.integers(1, 3),
    k=st.integers(1, 25),
    allowed=st.one_of(st.none(), st.sets(st.integers(0, N - 1), min_size=1, max_size=40)),
)
def test_the_one_search_path_is_the_exact_search(exact_table, rows, stride, k, allowed) -> None:
    """pgvector's search (one plain path: Conn.timed_rows) on a flat table is the exact
    top-k, for query rows read through a stride, any k, and filters that leave fewer rows
    than k (pads)."""
    wide = np.zeros((len(rows), DIM * stride), dtype=np.float32)
    wide[:, ::stride] = Q[rows]
    queries = wide[:, ::stride]  # non-contiguous rows
    allow = None
    if allowed is not None:
        allow = np.zeros(N, dtype=bool)
        allow[sorted(allowed)] = True
    ids, scores = exact_table.search(queries, k, filter=allow)
    exact = Q[rows].astype(np.float64) @ X.astype(np.float64).T
    if allow is not None:
        exact[:, ~allow] = -np.inf
    for r in range(len(rows)):
        found = min(k, N if allow is None else int(allow.sum()))
        want = np.argsort(-exact[r], kind="stable")[:found]
        assert ids[r, :found].tolist() == want.tolist()
        np.testing.assert_allclose(scores[r, :found], exact[r, want], rtol=1e-5, atol=1e-6)
        assert (ids[r, found:] == -1).all() and np.isneginf(scores[r, found:]).all()


@pytest.mark.parametrize(("storage", "floor"), [("halfvec", 0.95), ("bit", 0.5)])
def test_quantized_storage_is_rescored_exactly(storage: str, floor: float) -> None:
    index = shared(storage=storage)
    index.build(X)
    full = shared()
    full.build(X)
    assert index.memory_bytes() != full.memory_bytes()
    ids, scores = index.search(Q, 10, ef=200, rescore=8)
    # re-scored on the float4 rows: exact inner products, sorted
    np.testing.assert_allclose(scores, (X[ids] @ Q[:, :, None])[:, :, 0], atol=2e-5)
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    # 32 sign bits rank coarsely (measured 0.68 with rescore=8); halfvec ~1.0
    assert _recall(ids, _truth("ip", 10)) >= floor
    wider, _ = index.search(Q, 10, ef=400, rescore=40)
    assert _recall(wider, _truth("ip", 10)) >= _recall(ids, _truth("ip", 10))
    with pytest.raises(ConfigError, match="rescore"):
        full.search(Q, 10, rescore=4)  # plain vector storage has nothing to re-score


def test_ivfflat_probes() -> None:
    index = shared(index="ivfflat", lists=30)
    index.build(X)
    assert set(index.query_params) == {"nprobe", "iterative_scan"}
    every, _ = index.search(Q, 10, nprobe=30)
    assert _recall(every, _truth("ip", 10)) == 1.0  # every list: exact
    one, _ = index.search(Q, 10, nprobe=1)
    assert _recall(one, _truth("ip", 10)) < 1.0
    with pytest.raises(ConfigError, match="ef"):
        index.search(Q, 10, ef=40)
    with pytest.raises(ConfigError, match="strict_order"):
        index.search(Q, 10, iterative_scan="strict_order")  # hnsw only
    with pytest.raises(ConfigError, match="lists=5000 is larger than the corpus"):
        shared(index="ivfflat", lists=5000).build(X)


def test_the_plan_uses_the_vector_index() -> None:
    """The search statement (ORDER BY the distance alias) is answered by the HNSW index."""
    index = shared()
    index.build(X)
    index.search(Q[:1], 10)
    conn = index._conn().conn
    vec = "[" + ",".join(f"{v:.4f}" for v in Q[0]) + "]"
    sql = index._sql[()].replace("%b", f"'{vec}'::vector", 1).replace("%b", "10")
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, prepare=False).fetchall())
    assert "Index Scan using" in plan and "hnsw" not in "seq", plan


def test_settings_are_sent_once_per_value_and_ef_covers_k() -> None:
    index = shared()
    index.build(X)
    c = None
    for ef, k, want in ((40, 10, "40"), (40, 100, "100"), (300, 10, "300"), (40, 10, "40")):
        index.search(Q[:2], k, ef=ef)
        c = index._conn()
        shown = c.conn.execute("SHOW hnsw.ef_search", prepare=False).fetchone()[0]
        assert shown == want == c.gucs["hnsw.ef_search"]
    ids, _ = index.search(Q[:2], 150, ef=40)  # ef below k: raised to k, a full row
    assert (ids >= 0).all()


@pytest.mark.parametrize("prepare", [True, False])
def test_prepare_is_pinned(prepare: bool) -> None:
    """prepare=True prepares from the first execution, False never (psycopg's 5 is not used)."""
    index = shared(prepare=prepare)
    index.build(X)
    conn = index._conn().conn
    count = "SELECT count(*) FROM pg_prepared_statements"
    assert conn.execute(count, prepare=False).fetchone()[0] == 0
    index.search(Q[:1], 10)
    assert conn.execute(count, prepare=False).fetchone()[0] == (1 if prepare else 0)
    for _ in range(8):
        index.search(Q[:1], 10)
    assert conn.execute(count, prepare=False).fetchone()[0] == (1 if prepare else 0)
    assert index.info()["prepare"] is prepare


def test_filters_are_where_clauses_and_iterative_scans_fill_them() -> None:
    index = shared()
    index.build(X)
    allow = np.zeros(N, dtype=bool)
    allow[::50] = True  # 2 %
    truth = _truth("ip", 10, allow)
    for kw in ({}, {"iterative_scan": "strict_order"}, {"iterative_scan": "relaxed_order"}):
        ids, scores = index.search(Q, 10, filter=allow, strategy="in-graph", **kw)
        found = ids[ids >= 0]
        assert allow[found].all()
        assert (scores[:, :-1] >= scores[:, 1:]).all()
        if kw:
            assert (ids >= 0).all() and _recall(ids, truth) >= 0.9
    per_query = [np.flatnonzero(allow)[i : i + 5] for i in range(NQ)]
    ids, _ = index.search(Q, 10, filter=per_query)
    for row, allowed in zip(ids, per_query, strict=True):
        assert set(row[:5].tolist()) == set(allowed.tolist()) and (row[5:] == -1).all()


def test_last_parts_split_the_search() -> None:
    index = shared()
    index.build(X)
    assert index.last_parts() is None
    t0 = time.perf_counter_ns()
    index.search(Q[:1], 10)
    wall = time.perf_counter_ns() - t0
    parts = index.last_parts()
    assert isinstance(parts, Parts) and list(parts) == ["send", "server", "decode"]
    send, server, decode = parts.ns
    assert send > 0 and server > 0 and decode > 0
    assert send + server + decode <= wall
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(index.last_parts()))
    thread.start()
    thread.join()
    assert seen == [None]  # per thread


def test_a_connection_per_thread() -> None:
    index = shared()
    index.build(X)
    want, _ = index.search(Q, 10)
    got: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(4)

    def work(t: int) -> None:
        barrier.wait()
        for _ in range(5):
            got[t] = index.search(Q, 10)[0]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all((ids == want).all() for ids in got.values())
    assert index.info()["connections"] == 5  # the building thread's and four more
    backends = {c.conn.info.backend_pid for c in [index._conn()]}
    assert len(backends) == 1


# -- an existing server: dsn= -------------------------------------------------------------


def test_dsn_leaves_the_server_as_it_found_it() -> None:
    dsn = pgshared.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS someone_elses (x int)")
        conn.execute("INSERT INTO someone_elses VALUES (7)")
    before = _tables(dsn)
    a, b = shared(), shared(index="ivfflat", lists=10)
    a.build(X)
    b.build(X[:500])
    a.add(X[:10], ids=np.arange(5000, 5010))
    a.delete([5003])
    assert a.info()["table"] != b.info()["table"]
    assert a.info()["table"] in _tables(dsn)
    a.close()
    b.close()
    assert _tables(dsn) == before
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT x FROM someone_elses").fetchall() == [(7,)]
    with pytest.raises(NotBuiltError):
        a.search(Q, 1)


def test_table_names_are_checked() -> None:
    for bad in ("Items", "1abc", "a-b", 'x"; DROP TABLE someone_elses; --', "", "a" * 52, 3):
        with pytest.raises(ConfigError, match="table="):
            shared(table=bad)
    index = shared(table="rbtest_items")
    index.build(X[:100])
    # the same name again: refused at creation, before any data
    with pytest.raises(ConfigError, match="already exists"):
        shared(table="rbtest_items")
    index.close()
    with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # the last close dropped ragbench's
        conn.execute("CREATE TABLE rbtest_wide (id int8, embedding vector(7))")
    try:
        with pytest.raises(DimensionError, match=r"vector\(7\).*dim=32"):
            shared(table="rbtest_wide")
    finally:
        with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
            conn.execute("DROP TABLE rbtest_wide")


def test_bad_servers_fail_at_creation() -> None:
    with pytest.raises(ConfigError, match="cannot connect"):
        rb.indexes.create("pgvector", dim=DIM, dsn="postgresql://u:secret@127.0.0.1:1/db")
    try:
        rb.indexes.create("pgvector", dim=DIM, dsn="postgresql://u:secret@127.0.0.1:1/db")
    except ConfigError as exc:
        assert "secret" not in str(exc)  # the password is not echoed
    empty = tempfile.mkdtemp()
    os.chmod(empty, 0o755)  # readable by the server's user when we are root
    os.mkdir(os.path.join(empty, "extension"), 0o755)  # PostgreSQL 18 looks in <path>/extension
    try:
        no_ext = pgshared.dsn() + f" options='-c extension_control_path={empty}'"
        with pytest.raises(ConfigError, match="no pgvector extension"):
            rb.indexes.create("pgvector", dim=DIM, dsn=no_ext)
    finally:
        shutil.rmtree(empty)
    with pytest.raises(ConfigError, match="dsn must be"):
        rb.indexes.create("pgvector", dim=DIM, dsn="")
    with pytest.raises(ConfigError, match="2 \\* M"):
        rb.indexes.create("pgvector", dim=DIM, M=32, ef_construction=40)
    with pytest.raises(ConfigError, match="storage="):
        rb.indexes.create("pgvector", dim=DIM, storage="int8")
    with pytest.raises(ConfigError, match="prepare"):
        rb.indexes.create("pgvector", dim=DIM, prepare="yes")


def _libpq_quoted(value: str) -> str:
    """``value`` as libpq writes a quoted keyword value: in single quotes, ``\\`` and ``'`` escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# a password of at least 6 characters, any printable ones (blanks, quotes, @ : / \\ included)
_PASSWORDS = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="\x7f"),
    min_size=6,
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(password=_PASSWORDS, user=st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True))
def test_redact_never_shows_any_part_of_a_password(password: str, user: str) -> None:
    forms = [
        f"host=127.0.0.1 port=1 user={user} password={_libpq_quoted(password)} dbname=d",
        f"password={_libpq_quoted(password)}",
        f"host=h sslpassword={_libpq_quoted(password)} user={user}",
        f"postgresql://{user}:{password}@127.0.0.1:1/d",
        f"postgres://{user}:{password}@h1:5432,h2:5433/d?sslmode=require",
    ]
    if not any(c.isspace() or c in "'\\" for c in password):  # libpq's bare values
        forms.append(f"host=h password={password} user={user}")
    for dsn in forms:
        assume(password not in dsn.replace(password, "", 1))  # a password that is only there
        shown = redact(dsn)
        assert password not in shown and "***" in shown
        # no 6-character piece of it either (what the old redaction left: "*** Secret Phrase'")
        pieces = {password[i : i + 6] for i in range(len(password) - 5)}
        assert not [p for p in pieces if p in shown and p not in dsn.replace(password, "")]
        # a driver's message naming a misread part of it (libpq takes "@" for the host's start)
        said = redact_message(f"cannot connect to {dsn}: host '{password[2:]}@h' unknown", dsn)
        assert not [p for p in pieces if p in said and p not in dsn.replace(password, "")]


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=1 user=u password='a b\\' Secret Phrase' dbname=d",
        "postgresql://pwuser:p@ss@Secret@127.0.0.1:1/d",
    ],
)
def test_cli_errors_show_no_part_of_a_dsn_password(tmp_path: Path, dsn: str) -> None:
    cfg = tmp_path / "pg.toml"
    cfg.write_text(
        '[dataset]\nname = "synthetic"\nn = 300\ndim = 16\nn_queries = 10\n'
        '[embed]\nbackend = "hashing"\n'
        f'[retrieve]\nbackend = "pgvector"\ndsn = {json.dumps(dsn)}\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "ragbench", "run", "-c", str(cfg), "--queries", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "cannot connect" in line and "***" in line
    for piece in ("Secret", "Phrase", "p@ss", "ss@"):
        assert piece not in line


def test_pipeline_config_dsn_reaches_pgvector_only() -> None:
    cfg = {
        "dataset": {"name": "synthetic", "n": 300, "dim": 16, "n_queries": 10},
        "run": {"queries": 5, "warmup": 1, "k": 5, "k_candidates": 20},
        "retrieve": {"backend": "pgvector", "dsn": pgshared.dsn(), "search": {"ef": 40}},
        "rerank": {"backend": "numpy"},
    }
    before = _tables(pgshared.dsn())
    with rb.Pipeline.from_config(cfg) as pipe:
        report = pipe.run()
        assert report.info["index"]["server"] == "dsn"
        # each request's retrieve split into send/server/decode, inside its retrieve time
        j = pipe.stage_names.index("retrieve")
        wall, _ = pipe.stage_samples()
        parts = np.array([r.retrieve_parts for r in pipe._records])
        assert parts.shape == (5, 3) and (parts > 0).all()
        assert (parts.sum(axis=1) <= wall[:, j]).all()
        split = report.info["retrieve_parts"]
        assert split["server"]["p50_ns"] == int(np.median(parts[:, 1]))
        record = report.to_records()[0]
        note = retrieve_parts_note(record)
        assert note is not None and "send" in note and "server" in note and "decode" in note
        assert retrieve_parts_note({"info": {}}) is None
        # and, in OpenTelemetry traces, three spans nested in the retrieve span
        trace = pipe.trace_of(pipe._records[0], wall[0], 1.0, False)
        spans = trace["inner"]["retrieve"]
        assert [s.name for s in spans] == ["retrieve.send", "retrieve.server", "retrieve.decode"]
        assert [s.end_ns - s.start_ns for s in spans] == parts[0].tolist()
    hnsw = dict(cfg, retrieve={"backend": "hnsw", "dsn": pgshared.dsn()})
    rb.Pipeline.from_config(hnsw).close()  # hnsw takes no dsn: not passed to it
    bad = dict(cfg, retrieve={"backend": "pgvector", "dsn": "postgresql://x@127.0.0.1:1/d"})
    with pytest.raises(ConfigError, match="cannot connect"):
        rb.Pipeline.from_config(bad)  # at creation: before any dataset is embedded
    import gc

    gc.collect()
    assert _tables(pgshared.dsn()) == before


# -- ragbench's own server: root, lifetime, faults ----------------------------------------


def test_server_user_choice() -> None:
    assert _server.server_user(euid=1000) is None  # not root: run as ourselves
    if os.geteuid() == 0:
        uid, gid = _server.server_user(euid=0)  # type: ignore[misc]
        import pwd

        assert pwd.getpwuid(uid).pw_name in (_server.PG_USER, "nobody")
        assert uid != 0 and gid != 0


def test_own_server_runs_unprivileged_and_stops_on_close() -> None:
    index = rb.indexes.create("pgvector", dim=DIM)
    index.build(X[:500])
    folder = index._state.server.folder
    procs = _our_postgres(folder)
    assert procs, "no postgres process with our data folder"
    owner = {p.uids().real for p in procs}
    assert owner == ({os.geteuid()} if os.geteuid() != 0 else owner - {0}) and 0 not in owner
    info = index.info()
    assert info["server"] == "embedded" and info["server_start_seconds"] > 0
    assert rb.env.environment()["engines"]["pgvector"] == info["pgvector_version"]
    index.close()
    assert not _our_postgres(folder) and not os.path.exists(folder)


def test_a_dead_server_is_an_index_server_error() -> None:
    index = rb.indexes.create("pgvector", dim=DIM)
    index.build(X[:500])
    folder = index._state.server.folder
    os.kill(index._state.server.pid, signal.SIGKILL)  # the postmaster
    deadline = time.monotonic() + 10
    with pytest.raises(IndexServerError, match="PostgreSQL server"):
        while time.monotonic() < deadline:
            index.search(Q[:1], 5)
            time.sleep(0.05)
    index.close()
    for _ in range(100):
        if not _our_postgres(folder):
            break
        time.sleep(0.05)
    assert not _our_postgres(folder)
    index.build(X[:200])  # a new server
    assert index.search(Q[:1], 3)[0].shape == (1, 3)
    index.close()


def _run_child(code: str, tmp: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, TMPDIR=tmp, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE
    )


@pytest.fixture
def folder_tmp():  # type: ignore[no-untyped-def]
    """A TMPDIR the unprivileged server user can traverse (pytest's tmp_path is 0700)."""
    path = tempfile.mkdtemp(prefix="rb-pgtest-", dir="/tmp")
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("ending", ["exit", "exception", "sigkill"])
def test_no_postgres_outlives_a_process(folder_tmp: str, ending: str) -> None:
    """A normal exit, an uncaught exception and SIGKILL all leave no postgres behind."""
    code = f"""
        import os, signal, sys, numpy as np, ragbench as rb
        idx = rb.indexes.create("pgvector", dim=8)
        idx.build(np.random.default_rng(0).random((300, 8), dtype=np.float32))
        idx.search(np.ones((1, 8), np.float32), 3)
        print(idx._state.server.folder, flush=True)
        if {ending!r} == "exception":
            raise RuntimeError("a failed run")
        if {ending!r} == "sigkill":
            sys.stdin.read() if False else None
            os.kill(os.getpid(), signal.SIGKILL)
    """
    child = _run_child(code, folder_tmp)
    out, _ = child.communicate(timeout=120)
    server_folder = out.decode().strip()
    assert server_folder.startswith(folder_tmp), out
    assert child.returncode == {"exit": 0, "exception": 1, "sigkill": -9}[ending]
    for _ in range(300):  # the watchdog stops the server on its stdin's EOF
        if not _our_postgres(folder_tmp) and not os.path.exists(server_folder):
            break
        time.sleep(0.05)
    assert not _our_postgres(folder_tmp)
    assert not os.path.exists(server_folder)


def test_ctrl_c_on_the_cli_leaves_no_postgres(folder_tmp: str, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    env = dict(os.environ, TMPDIR=folder_tmp, PYTHONPATH=str(ROOT))
    argv = [
        sys.executable, "-m", "ragbench", "compare", "--index", "pgvector",
        "--dataset", "synthetic", "--n", "2000", "--dim", "16", "--rerank", "none",
        "--queries", "1000000", "--warmup", "0", "--out", str(out),
    ]  # fmt: skip
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _our_postgres(folder_tmp):
            assert child.poll() is None, child.communicate()
            time.sleep(0.1)
        assert _our_postgres(folder_tmp), "the server never started"
        time.sleep(2.0)  # into the measured requests
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0 and b"Traceback" not in err, err
    for _ in range(300):
        if not _our_postgres(folder_tmp):
            break
        time.sleep(0.05)
    assert not _our_postgres(folder_tmp)
    assert not [p for p in os.listdir(folder_tmp) if p.startswith("ragbench-pg-")]


def test_a_server_dying_mid_run_stops_the_run_with_a_record(
    folder_tmp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", folder_tmp)  # the server's folder goes there
    cfg = {
        "dataset": {"name": "synthetic", "n": 1000, "dim": 16, "n_queries": 50},
        "run": {"queries": 200000, "warmup": 0, "k": 5, "k_candidates": 20},
        "retrieve": {"backend": "pgvector"},
        "rerank": {"backend": "none"},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        pipe.setup()
        postmaster = [p for p in _our_postgres(folder_tmp) if p.ppid() != os.getpid()]
        postmaster = [p for p in postmaster if p.parent() and p.parent().name() != "postgres"]
        assert len(postmaster) == 1
        killer = threading.Timer(1.0, os.kill, (postmaster[0].pid, signal.SIGKILL))
        killer.start()
        report = pipe.run()
        killer.join()
    assert report.error is not None and "IndexServerError" in report.error
    assert 0 < report.samples_ns.shape[0] < 200000
    assert "IndexServerError" in json.dumps(report.to_records())


@pytest.mark.skipif(os.geteuid() != 0, reason="as a non-root user every test here takes this path")
def test_the_non_root_path(folder_tmp: str) -> None:
    """As a user that is not root, ragbench starts PostgreSQL as itself (no user switch).

    Run in a user namespace (``unshare --user``), where this process is uid
    65534 while keeping access to the interpreter under /root (0700 here, so
    ``ragbench-pg`` itself cannot run it); postgres checks ``geteuid()`` and
    the data folder's owner, both 65534 there.
    """
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to run the non-root path as root")
    code = """
        import os, numpy as np, ragbench as rb
        from ragbench.indexes.pgvector import _server
        assert os.geteuid() != 0 and _server.server_user() is None
        idx = rb.indexes.create("pgvector", dim=8)
        idx.build(np.random.default_rng(0).random((300, 8), dtype=np.float32))
        ids, _ = idx.search(np.ones((1, 8), np.float32), 3)
        print(os.geteuid(), ids.shape, idx.info()["server_user"], flush=True)
        idx.close()
    """
    env = dict(
        os.environ, TMPDIR=folder_tmp, PYTHONPATH=str(ROOT),
        RAGBENCH_CACHE_DIR=os.path.join(folder_tmp, "cache"),
    )  # fmt: skip
    done = subprocess.run(
        ["unshare", "--user", sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    euid, *shape, user = done.stdout.decode().split()
    assert euid != "0" and shape == ["(1,", "3)"] and user == "self"
    assert not _our_postgres(folder_tmp)
    assert not [p for p in os.listdir(folder_tmp) if p.startswith("ragbench-pg-")]


def test_the_split_travels_with_a_record_between_processes() -> None:
    from ragbench.pipeline import RequestRecord
    from ragbench.workers.processes import pack_record, unpack_record

    rec = RequestRecord([1, 5], None, None, np.arange(3), 10, 4, 2, retrieve_parts=(1, 2, 1))
    back = unpack_record(pack_record(rec))
    assert back is not None and back.retrieve_parts == (1, 2, 1)
    plain = unpack_record(pack_record(rec._replace(retrieve_parts=None)))
    assert plain is not None and plain.retrieve_parts is None


# -- the package: old module paths, the one search loop -----------------------------------


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("pgvector_index", "index", "PgvectorIndex"),
        ("pgfts_index", "fts", "PgFtsIndex"),
        ("pghybrid_index", "hybrid", "PgHybridIndex"),
    ],
)
def test_the_old_module_paths_still_import_with_a_warning(old: str, new: str, name: str) -> None:
    """The three backends live in ragbench.indexes.pgvector; the old modules warn for a release."""
    import importlib

    sys.modules.pop(f"ragbench.indexes.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"ragbench.indexes.pgvector.{new}"):
        module = importlib.import_module(f"ragbench.indexes.{old}")
    cls = getattr(importlib.import_module(f"ragbench.indexes.pgvector.{new}"), name)
    assert getattr(module, name) is cls is getattr(rb.indexes.pgvector, name)
    backend = {"index": "pgvector", "fts": "pg-fts", "hybrid": "pg-hybrid"}[new]
    assert rb.indexes.registry.factory(backend) is cls


class _Cursor:
    """A cursor answering each statement with ``answers[i]`` rows (an exception: raised)."""

    def __init__(self, answers: list[Any], seen: list[int]) -> None:
        self.answers, self.seen, self.i = answers, seen, 0

    def execute(self, stmt: Any, args: Any, prepare: bool = False) -> None:
        self.answer = self.answers[self.i]
        self.i += 1
        if isinstance(self.answer, Exception):
            raise self.answer

    def fetchall(self) -> Any:
        return self.answer


def test_timed_rows_runs_one_statement_per_row_watched_and_timed() -> None:
    """The one search loop of pgvector, pg-fts and pg-hybrid (Conn.timed_rows)."""
    from ragbench.indexes.pgvector._connection import Conn

    seen: list[int] = []
    cursor = _Cursor([[(3, 0.5)], [], [(1, 0.1), (2, 0.2)]], seen)
    conn = type("C", (), {"cursor": lambda self, binary: cursor})()
    c = Conn(conn, 60.0)
    put: dict[int, Any] = {}
    args: list[int] = []

    def args_of(r: int) -> list[Any]:
        args.append(r)
        return [r]

    def put_rows(r: int, rows: list[Any]) -> None:
        put[r] = rows
        seen.append(c.since)  # watched while its statement ran

    send, server, decode = c.timed_rows("SELECT", 3, args_of, put_rows)
    assert args == [0, 1, 2] and put == {0: [(3, 0.5)], 2: [(1, 0.1), (2, 0.2)]}  # no rows: no put
    assert min(send, server, decode) > 0 and all(seen) and c.since == 0
    failing = Conn(type("C", (), {"cursor": lambda self, binary: _Cursor([OSError()], [])})(), 1)
    with pytest.raises(OSError):
        failing.timed_rows("SELECT", 1, args_of, put_rows)
    assert failing.since == 0  # out of the watchdog's sight however the loop ends


# -- attribute columns: filters as WHERE clauses --------------------------------------------


def _attrs(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    score = rng.random(n)
    score[::10] = np.nan  # NULL in the table: no filter allows it (as numpy's comparisons)
    names = np.asarray(["plain", "it's", 'say "hi"', "a\\b", "x'); DROP TABLE t; --"])
    return {
        "tenant": rng.integers(0, 20, n),
        "year": rng.integers(1990, 2020, n),
        "score": score,
        "category": names[rng.integers(0, names.size, n)],
    }


ATTRS = _attrs(N)
SPECS = [
    {"tenant": 3},
    {"tenant": [1, 4, 9]},
    {"year": [2000, 2004]},
    {"year": [2000.5, 2004.2]},  # an int column's bounds rounded inwards, as numpy compares
    {"score": [0.25, 0.5]},
    {"category": ["it's", 'say "hi"']},
    {"category": "a\\b", "tenant": [0, 1, 2, 3, 4, 5]},
    {"category": "x'); DROP TABLE t; --"},
]


def _statements(index: Any) -> list[str]:
    rows = index._conn().conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    return [r[0] for r in rows]


def test_where_filters_give_the_exact_filtered_neighbours_on_a_flat_table() -> None:
    """Every kind of spec, sent as SQL on typed columns, equals the allow-list path and exact."""
    from ragbench.attributes import mask_of

    index = shared(index="flat")
    index.set_attributes(ATTRS)
    index.build(X)
    assert index.filter_path == "where"
    assert index.info()["attribute_columns"] == {
        "tenant": "int64", "year": "int64", "score": "float64", "category": "str",
    }  # fmt: skip
    for spec in SPECS:
        allow = mask_of(ATTRS, spec)
        where_ids, where_s = index.search(Q, 10, where=spec)
        mask_ids, mask_s = index.search(Q, 10, filter=allow)
        np.testing.assert_array_equal(where_ids, mask_ids, err_msg=str(spec))
        np.testing.assert_array_equal(where_s, mask_s)
        truth = _truth("ip", 10, allow)
        for row, want in zip(where_ids, truth, strict=True):
            got = row[row >= 0]
            assert got.tolist() == want[: min(10, int(allow.sum()))].tolist(), spec
    assert index.filter_paths == {"where": NQ * len(SPECS), "ids": NQ * len(SPECS)}
    with pytest.raises(rb.errors.InputError, match="allow-list is empty"):
        index.search(Q, 10, where={"category": "no such value"})  # as an empty mask
    # one prepared statement per filter shape, on typed columns, values as parameters
    texts = _statements(index)
    assert any('"tenant" = ANY($2)' in t for t in texts)
    assert any('"year" BETWEEN $2 AND $3' in t for t in texts)
    assert any('"category" = ANY($2) AND "tenant" = ANY($3)' in t for t in texts)
    assert any("id = ANY($2)" in t for t in texts)
    assert not any("DROP" in t or "it's" in t for t in texts)
    assert len(texts) == len(set(texts)) <= 8
    assert index.info()["table"] in _tables(pgshared.dsn())  # the injected text was a value


def test_where_per_query_specs_and_bad_specs() -> None:
    from ragbench.attributes import filters_from_specs

    index = shared(index="flat")
    index.set_attributes(ATTRS)
    index.build(X)
    specs = [SPECS[i % len(SPECS)] for i in range(NQ)]
    filters = filters_from_specs(ATTRS, specs)
    ids, _ = index.search(Q, 10, where=specs)
    want, _ = index.search(Q, 10, filter=filters.masks)
    np.testing.assert_array_equal(ids, want)
    with pytest.raises(ConfigError, match="where= has 2 filters for 20 queries"):
        index.search(Q, 10, where=specs[:2], filter=filters.masks)
    with pytest.raises(ConfigError, match="'colour' is not one of"):
        index.search(Q, 10, where={"colour": "red"})
    with pytest.raises(rb.errors.DatasetError, match="not a value"):
        index.search(Q, 10, where={"tenant": "many"})


def test_where_on_hnsw_with_iterative_scans_keeps_recall() -> None:
    from ragbench.attributes import mask_of

    index = shared(attribute_index=True)
    index.set_attributes(ATTRS)
    index.build(X)
    spec = {"tenant": [2, 5], "year": [1990, 2010]}  # ~7 % of the rows
    allow = mask_of(ATTRS, spec)
    truth = _truth("ip", 10, allow)
    for scan in ("strict_order", "relaxed_order"):
        ids, scores = index.search(Q, 10, where=spec, iterative_scan=scan)
        assert allow[ids[ids >= 0]].all()
        assert (scores[:, :-1] >= scores[:, 1:]).all()
        assert _recall(ids, truth) >= 0.9, scan
    with psycopg.connect(pgshared.dsn()) as conn:
        rows = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (index.info()["table"],)
        ).fetchall()
    defs = " ".join(r[0] for r in rows)
    for col in ATTRS:
        assert f"btree ({col})" in defs
    assert "hnsw" in defs and index.info()["attribute_index"] is True


def test_without_attribute_columns_the_allow_list_runs() -> None:
    index = shared()
    index.build(X)
    assert index.filter_path == "ids" and index.info()["attribute_columns"] == {}
    with pytest.raises(ConfigError, match="set_attributes before build"):
        index.search(Q, 10, where={"tenant": 3})
    allow = ATTRS["tenant"] == 3
    ids, _ = index.search(Q, 10, where={"tenant": 3}, filter=allow)  # the mask decides
    np.testing.assert_array_equal(ids, index.search(Q, 10, filter=allow)[0])
    assert index.filter_paths == {"where": 0, "ids": 2 * NQ}
    with pytest.raises(ConfigError, match="taken by the table's own columns"):
        index.set_attributes({"embedding": np.zeros(N)})
    with pytest.raises(ConfigError, match="has 5 rows, not"):
        index.set_attributes({"a": np.zeros(N), "b": np.zeros(5)})
    index.set_attributes({"tenant": ATTRS["tenant"][:10]})
    with pytest.raises(ConfigError, match="attribute columns have 10 rows, the corpus 3000"):
        index.build(X)


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAGBENCH_CACHE_DIR=str(cwd / "cache"))
    exe = [sys.executable, "-m", "ragbench"]
    return subprocess.run(exe + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_cli_run_and_compare_filter_through_where(tmp_path: Path) -> None:
    """From a folder outside the repo: the records say the WHERE path ran, recall is exact."""
    cfg = tmp_path / "pg.toml"
    cfg.write_text(
        textwrap.dedent(f"""
        [dataset]
        name = "synthetic"
        n = 1500
        dim = 16
        n_queries = 20
        [run]
        queries = 20
        warmup = 0
        k = 5
        k_candidates = 10
        [retrieve]
        backend = "pgvector"
        dsn = "{pgshared.dsn()}"
        filter = {{ attribute = "tenant", selectivity = 0.05 }}
        [retrieve.build]
        index = "flat"
        [rerank]
        backend = "none"
        """)
    )
    done = _cli(["run", "-c", str(cfg), "--out", "run.jsonl"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    done = _cli(
        ["compare", "-c", str(cfg), "--filter-selectivity", "0.2,0.02", "--out", "cmp.jsonl"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for name in ("run.jsonl", "cmp.jsonl")
               for line in (tmp_path / name).read_text().splitlines()]  # fmt: skip
    assert len(records) == 3
    for rec in records:
        assert rec["info"]["filter"]["path"] == "where"
        assert rec["info"]["index"]["attribute_columns"]["tenant"] == "int64"
        assert rec["recall_at_k"] == 1.0  # flat: exact among the allowed rows
    sel = sorted(r["info"]["filter"]["achieved_mean"] for r in records[1:])
    assert sel[0] < 0.05 < sel[1]


def _cfg(tmp_path: Path, retrieve: str) -> Path:
    cfg = tmp_path / "pg.toml"
    cfg.write_text(
        textwrap.dedent("""
        [dataset]
        name = "synthetic"
        n = 600
        dim = 16
        n_queries = 20
        [run]
        queries = 10
        warmup = 0
        k = 5
        k_candidates = 10
        [rerank]
        backend = "none"
        """)
        + retrieve
    )
    return cfg


def test_cli_load_threads_each_open_a_connection(tmp_path: Path) -> None:
    """Under ``load`` with thread workers: one connection per worker thread, in the record."""
    retrieve = f'[retrieve]\nbackend = "pgvector"\ndsn = "{pgshared.dsn()}"\n'
    cfg = _cfg(tmp_path, retrieve)
    args = ["load", "-c", str(cfg), "--worker-kind", "thread", "--workers", "3"]
    done = _cli([*args, "--concurrency", "3", "--duration", "1", "--out", "l.jsonl"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (rec,) = [json.loads(line) for line in (tmp_path / "l.jsonl").read_text().splitlines()]
    assert rec["workers"] == 3 and rec["worker_kind"] == "thread"
    # the set-up thread's connection and one per worker thread (each searched)
    assert rec["index_connections"] == 4
    _assert_load_split(rec, done.stdout)


def _assert_load_split(rec: dict[str, Any], table: str) -> None:
    """A load level carries retrieve's send/server/decode split, and its table prints it."""
    parts = rec["retrieve_parts"]
    assert set(parts) == {"send", "server", "decode"}
    assert all(p["p50_ns"] > 0 and p["mean_ns"] > 0 for p in parts.values())
    # the parts are inside retrieve (each request's parts add up to at most its retrieve time);
    # medians do not add exactly, so the sum of theirs is only bounded loosely by retrieve's
    assert sum(p["p50_ns"] for p in parts.values()) / 1e3 <= 2 * rec["stage_p50_us"]["retrieve"]
    assert "retrieve send/server/decode: the split of the retrieve stage" in table, table


def test_cli_bad_servers_and_names_are_one_line_exit_2(tmp_path: Path) -> None:
    """Each refused before any dataset is embedded: one line on stderr, exit 2, no traceback."""
    with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # a server that has it already
        conn.execute("CREATE TABLE IF NOT EXISTS rbcli_wide (id int8, embedding vector(7))")
    empty = tempfile.mkdtemp()
    os.chmod(empty, 0o755)
    os.mkdir(os.path.join(empty, "extension"), 0o755)
    no_ext = pgshared.dsn() + f" options='-c extension_control_path={empty}'"
    cases = {
        "cannot connect to postgresql://u:***@127.0.0.1:1/db": 'dsn = "postgresql://u:pw@127.0.0.1:1/db"',
        "is not a plain table name": f'dsn = "{pgshared.dsn()}"\n[retrieve.build]\ntable = "Bad-Name"',
        "holds vector(7) rows": f'dsn = "{pgshared.dsn()}"\n[retrieve.build]\ntable = "rbcli_wide"',
    }
    cases["no pgvector extension"] = f"dsn = {json.dumps(no_ext)}"  # a TOML basic string
    try:
        for want, line in cases.items():
            cfg = _cfg(tmp_path, f'[retrieve]\nbackend = "pgvector"\n{line}\n')
            done = _cli(["run", "-c", str(cfg)], tmp_path)
            assert done.returncode == 2, (want, done.stderr[-2000:])
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and want in lines[0], (want, done.stderr[-2000:])
            assert "Traceback" not in done.stderr and "pw@" not in done.stderr
            assert not (tmp_path / "cache" / "arrays").exists()  # nothing embedded or cached
    finally:
        shutil.rmtree(empty)
        with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
            conn.execute("DROP TABLE rbcli_wide")


def test_cli_load_processes_each_open_their_own_index_and_connection(tmp_path: Path) -> None:
    """Under ``load`` with process workers each worker has its own table and connection."""
    retrieve = f'[retrieve]\nbackend = "pgvector"\ndsn = "{pgshared.dsn()}"\n'
    cfg = _cfg(tmp_path, retrieve)
    tables_q = "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'ragbench\\_%'"
    seen: list[tuple[set[str], int]] = []
    stop = threading.Event()
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
        "AND pid <> pg_backend_pid()"
    )

    def watch() -> None:
        with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
            while not stop.is_set():
                tables = {r[0] for r in conn.execute(tables_q).fetchall()}
                tables = {t for t in tables if t.split("_")[1] != str(os.getpid())}  # not ours
                seen.append((tables, int(conn.execute(query).fetchone()[0])))
                time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        args = ["load", "-c", str(cfg), "--worker-kind", "process", "--workers", "2"]
        done = _cli([*args, "--concurrency", "2", "--duration", "2", "--out", "p.jsonl"], tmp_path)
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr[-2000:]
    (rec,) = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert rec["workers"] == 2 and rec["worker_kind"] == "process"
    _assert_load_split(rec, done.stdout)  # the split crosses the process boundary too
    # the two worker processes' tables (each its own index) at once, each connected
    pids = {int(name.split("_")[1]) for tables, _ in seen for name in tables}
    tables = max(len(t) for t, _ in seen)
    assert len(pids) >= 2 and tables >= 2
    assert max(n for _, n in seen) >= tables
    with psycopg.connect(pgshared.dsn()) as conn:
        left = {r[0] for r in conn.execute(tables_q).fetchall()}
    assert not left & {name for tables, _ in seen for name in tables}  # dropped at the end


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
def test_the_index_cache_refuses_pgvector_and_says_so(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a saved pgvector index rebuilds it on the server: the cache skips pgvector.

    Two builds of the same recipe through the drivers' build path (every build
    cached: RAGBENCH_INDEX_CACHE_MIN_S=0) each build for real (``cached: false``,
    nothing written under the cache); hnsw says ``deterministic: false``, while
    an hnswlib index in the same setup is cached and comes back as it was.
    """
    from ragbench.indexes import builds

    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(builds.CACHE_MIN_ENV, "0")
    records = []
    for _ in range(2):
        index = shared(index=kind)
        try:
            done = builds.build(index, X)
            assert done.index is index and done.load_ns == 0 and done.build_ns > 0
            records.append(dict(index.info()["build"]))
            assert index.search(Q, 5)[0].shape == (NQ, 5)
        finally:
            index.close()
    for record in records:
        assert record["cached"] is False and "load_s" not in record
        assert record["deterministic"] is (kind == "flat")
    assert not (tmp_path / "indexes").exists()
    other = rb.indexes.create("hnsw", dim=DIM)
    builds.build(other, X)  # the same cache path does cache a backend that can
    again = builds.build(rb.indexes.create("hnsw", dim=DIM), X)
    assert again.index.info()["build"]["cached"] is True
    assert np.array_equal(again.index.search(Q, 5)[0], other.search(Q, 5)[0])


def test_sweep_filters_reach_pgvector_as_where_clauses() -> None:
    """A filtered sweep point sends each query's spec (SQL on the attribute columns), not ids."""
    from ragbench import datasets, sweeps

    ds = datasets.load("synthetic", n=2000, dim=16, n_queries=12, seed=4)
    data = sweeps.SweepData.from_dataset(
        ds, k=5, filter_selectivities=(0.05,), filter_table={"attribute": "tenant"}
    )
    assert set(data.attributes) == set(ds.corpus.attributes)
    from ragbench.sweeps.points import build_index

    index, _ = build_index("pgvector", data, {"index": "flat", "dsn": pgshared.dsn()})
    try:
        case = data.filter_cases[0]
        point = sweeps.measure(index, data, 5, {}, case=case, strategy="in-graph")
        assert point["filter"]["path"] == "where"
        # 12 queries, each timed and checked (2 calls), plus the point's one untimed warm-up search
        assert index.filter_paths["where"] == 2 * 12 + 1 and index.filter_paths["ids"] == 0
        assert point["recall"] == 1.0 and point["filter_violations"] == 0  # flat: exact
        post = sweeps.measure(index, data, 5, {}, case=case, strategy="post")
        assert post["filter"]["path"] == "post"
        assert index.filter_paths["ids"] == 0
    finally:
        index.close()


# -- faults, second attack: silent servers, kill -9 in initdb, what a dsn= run leaves ----------


def _postmaster(marker: str) -> psutil.Process | None:
    """The postmaster of a server whose folder is under ``marker`` (its parent is no postgres)."""
    for proc in _our_postgres(marker):
        with contextlib.suppress(psutil.Error):
            if "-k" in proc.cmdline():  # the server's socket folder: not initdb's bootstrap
                return proc
    return None


def _signal_server(postmaster: psutil.Process, sig: int) -> None:
    """``sig`` to a server's postmaster and every child (each child is a session of its own)."""
    with contextlib.suppress(psutil.Error):
        for proc in [postmaster, *postmaster.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)


def _gone(marker: str, seconds: float = 30.0) -> bool:
    """No postgres or initdb process and no server folder under ``marker``, within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        procs = _our_postgres(marker) + _our_initdb(marker)
        folders = [p for p in os.listdir(marker) if p.startswith("ragbench-pg-")]
        if not procs and not folders:
            return True
        time.sleep(0.05)
    return False


def _our_initdb(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["name"] == "initdb" and any(marker in part for part in cmd):
            found.append(proc)
    return found


def test_a_server_that_stops_answering_ends_the_run_naming_the_timeout(
    folder_tmp: str, tmp_path: Path
) -> None:
    """The finding: a server stopped with SIGSTOP hung ``run`` forever (no statement or socket timeout)."""
    cfg = _cfg(
        tmp_path,
        '[retrieve]\nbackend = "pgvector"\n[retrieve.build]\nstatement_timeout = 1\n'
        "build_timeout = 5\nconnect_timeout = 2\n",
    )
    text = cfg.read_text().replace("queries = 10\n", "queries = 1000000\n")
    cfg.write_text(text)
    env = dict(os.environ, TMPDIR=folder_tmp, PYTHONPATH=str(ROOT))
    env["RAGBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    argv = [sys.executable, "-m", "ragbench", "run", "-c", str(cfg), "--out", "run.jsonl"]
    child = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stopped = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (stopped := _postmaster(folder_tmp)) is None:
            assert child.poll() is None, child.communicate()
            time.sleep(0.05)
        assert stopped is not None, "the server never started"
        time.sleep(3.0)  # into the measured requests (or the build: build_timeout covers it)
        _signal_server(stopped, signal.SIGSTOP)  # the postmaster and every backend
        out, err = child.communicate(timeout=90)  # hung forever before
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        gone = _gone(folder_tmp)  # asserted below, once no server is left either way
        if stopped is not None:
            _signal_server(stopped, signal.SIGCONT)
            _signal_server(stopped, signal.SIGKILL)
    text = out.decode() + err.decode()
    assert child.returncode == 1 and "Traceback" not in text, text[-3000:]
    assert "STOPPED EARLY: IndexServerError" in text, text[-3000:]
    assert "did not answer within" in text and "statement_timeout=1 s" in text, text[-3000:]
    assert gone, "a server, initdb or folder outlived the run"
    (rec,) = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert "did not answer within" in rec["error"]


def test_the_watchdog_gives_up_on_a_silent_dsn_server_and_close_does_not_hang() -> None:
    """Searches, writes and the close's DROP TABLE on a stopped server: each bounded."""
    server = _server.EmbeddedServer()
    try:
        info = server.conninfo()
        dsn = " ".join(f"{key}={value}" for key, value in info.items())
        index = rb.indexes.create(
            "pgvector", dim=DIM, dsn=dsn, index="flat", statement_timeout=0.5, connect_timeout=1
        )
        index.build(X[:300])
        _signal_server(psutil.Process(server.pid), signal.SIGSTOP)
        with pytest.raises(IndexServerError, match=r"did not answer within 0.5 s"):
            index.search(Q[:1], 3)
        with pytest.raises(IndexServerError, match=r"cannot connect .*timeout"):
            index.add(X[:2], ids=np.arange(9000, 9002))  # a new connection: connect_timeout
        index.close()  # the DROP TABLE gives up too (the docs say what may be left)
    finally:
        server.stop()  # SIGCONT, then its immediate shutdown
    assert not server.alive and not os.path.exists(server.folder)


def test_kill_9_during_initdb_leaves_no_folder_no_process_no_segment(folder_tmp: str) -> None:
    """The finding: initdb ran before the watchdog existed; a killed ragbench left its ~40 MB folder."""

    def segments(creators: set[int]) -> list[str]:
        """Segments that a process of ``creators`` made and nothing is attached to."""
        with open("/proc/sysvipc/shm", encoding="ascii") as fh:
            rows = [line.split() for line in fh.readlines()[1:]]
        return [" ".join(r[:8]) for r in rows if int(r[4]) in creators and int(r[6]) == 0]

    creators: set[int] = set()
    code = """
        import numpy as np, ragbench as rb
        idx = rb.indexes.create("pgvector", dim=8)
        idx.build(np.random.default_rng(0).random((300, 8), dtype=np.float32))
    """
    child = _run_child(code, folder_tmp)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _our_initdb(folder_tmp):
            assert child.poll() is None, child.communicate()
            time.sleep(0.005)
        assert _our_initdb(folder_tmp), "initdb never started"
        time.sleep(0.3)  # into initdb's bootstrap (its postgres child holds shared memory)
        for proc in _our_initdb(folder_tmp):
            with contextlib.suppress(psutil.Error):
                creators |= {proc.pid} | {p.pid for p in proc.children(recursive=True)}
        child.kill()
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert _gone(folder_tmp), os.listdir(folder_tmp)
    assert creators, "no initdb process seen"
    assert not segments(creators), "a shared-memory segment outlived initdb"


def _boot_backends(marker: str) -> list[psutil.Process]:
    """initdb's bootstrap backends (``postgres --boot``) for a folder under ``marker``."""
    found = []
    for proc in _our_initdb(marker):
        with contextlib.suppress(psutil.Error):
            found += [p for p in proc.children(recursive=True) if "--boot" in p.cmdline()]
    return found


def _shared_memory(procs: list[psutil.Process]) -> set[str]:
    """The dynamic shared memory ``procs`` have mapped: POSIX segments or the data folder's."""
    out: set[str] = set()
    for proc in procs:
        with contextlib.suppress(OSError, psutil.Error):
            for line in Path(f"/proc/{proc.pid}/maps").read_text().splitlines():
                path = line.split(maxsplit=5)[-1]
                if path.startswith("/dev/shm/PostgreSQL.") or "/pg_dynshmem/" in path:
                    out.add(path.removesuffix(" (deleted)"))
    return out


def test_kill_9_in_initdb_bootstrap_leaves_no_posix_segment(folder_tmp: str) -> None:
    """initdb's bootstrap backends took POSIX segments (/dev/shm/PostgreSQL.N, initdb's
    default): a kill -9 during initdb left one or more there each time (3 of 3; 31 had
    piled up on the dev machine). They use the data folder's files now, removed with it."""
    code = """
        import numpy as np, ragbench as rb
        idx = rb.indexes.create("pgvector", dim=8)
        idx.build(np.random.default_rng(0).random((300, 8), dtype=np.float32))
    """
    child = _run_child(code, folder_tmp)
    mapped: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not mapped:
            assert child.poll() is None, child.communicate()
            mapped = _shared_memory(_boot_backends(folder_tmp))
            time.sleep(0.005)
        assert mapped, "no bootstrap backend with shared memory seen"
        child.kill()
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert _gone(folder_tmp), os.listdir(folder_tmp)
    left = sorted(path for path in mapped if os.path.exists(path))
    assert not left, f"shared memory outlived initdb: {left}"


def test_a_full_disk_in_initdb_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    """TMPDIR on an 8 MB tmpfs: initdb's "No space left on device" was inside a line of its
    whole output; it is now said first, with the folder and what initdb needs."""
    mount = tempfile.mkdtemp(prefix="rb-pgfull-", dir="/tmp")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0711", "tmpfs", mount],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        os.rmdir(mount)
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    try:
        cfg = _cfg(tmp_path, '[retrieve]\nbackend = "pgvector"\n')
        env = dict(os.environ, TMPDIR=mount, PYTHONPATH=str(ROOT))
        env["RAGBENCH_CACHE_DIR"] = str(tmp_path / "cache")
        proc = subprocess.run(
            [sys.executable, "-m", "ragbench", "run", "-c", str(cfg)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        (line,) = [x for x in proc.stderr.splitlines() if x.startswith("ragbench: error:")]
        assert line.startswith(
            f"ragbench: error: index 'pgvector': initdb failed (1): no space left on device "
            f"in {mount} (the embedded server's folder is made in the temporary directory"
        ), line
        assert _gone(mount), os.listdir(mount)
    finally:
        subprocess.run(["umount", mount], check=False)
        os.rmdir(mount)


def _database(name: str, *, vector: bool) -> str:
    """A fresh database on the shared server (the pgvector extension in it or not); its dsn."""
    with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    dsn = pgshared.dsn().replace("dbname=postgres", f"dbname={name}")
    if vector:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
    return dsn


def _extension(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchall()


def test_catalog_names_are_refused_and_tables_are_schema_qualified() -> None:
    """The finding: table=pg_class passed and left public.pg_class and the extension behind."""
    dsn = _database("rbtest_catalog", vector=False)
    for bad in ("pg_class", "pg_anything"):
        with pytest.raises(ConfigError, match="starts with pg_"):
            rb.indexes.create("pgvector", dim=DIM, dsn=dsn, table=bad)
    with pytest.raises(ConfigError, match=r"system relation \(information_schema.tables\)"):
        rb.indexes.create("pgvector", dim=DIM, dsn=dsn, table="tables")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA rb_elsewhere")
    index = rb.indexes.create(
        "pgvector", dim=DIM, dsn=dsn + " options='-c search_path=rb_elsewhere'", table="items"
    )
    index.build(X[:200])
    assert index.info()["schema"] == "rb_elsewhere"
    assert index.search(Q[:1], 3)[0].shape == (1, 3)
    with psycopg.connect(dsn) as conn:
        where = conn.execute("SELECT relnamespace::regnamespace::text FROM pg_class "
                             "WHERE relname = 'items'").fetchall()  # fmt: skip
    assert where == [("rb_elsewhere",)]
    index.close()
    assert "items" not in _tables(dsn) and not _extension(dsn)


def test_two_runs_sharing_a_dsn_leave_no_extension() -> None:
    """The finding: the run that created the extension could not drop it (the other used it)."""
    dsn = _database("rbtest_shared_ext", vector=False)
    a = rb.indexes.create("pgvector", dim=DIM, dsn=dsn, index="flat")
    b = rb.indexes.create("pgvector", dim=DIM, dsn=dsn, index="flat")
    a.build(X[:100])  # creates the extension
    b.build(X[:100])  # finds it
    a.close()  # b still uses it: stays
    assert _extension(dsn)
    b.close()  # the last ragbench user: dropped
    assert not _extension(dsn)
    # an extension that was there before ragbench stays
    dsn = _database("rbtest_their_ext", vector=True)
    c = rb.indexes.create("pgvector", dim=DIM, dsn=dsn, index="flat")
    c.build(X[:100])
    c.close()
    assert _extension(dsn)


def _role_dsn(dsn: str, role: str) -> str:
    with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            conn.execute(f"CREATE ROLE {role} LOGIN")
    return dsn.replace("user=postgres", f"user={role}")


def test_a_role_without_privileges_is_a_config_error_naming_it_before_any_data(
    tmp_path: Path,
) -> None:
    """The finding: "the PostgreSQL server failed", after embedding and starting the server."""
    no_ext = _role_dsn(_database("rbtest_noext", vector=False), "rbtest_plain")
    cfg = _cfg(tmp_path, f'[retrieve]\nbackend = "pgvector"\ndsn = "{no_ext}"\n')
    done = _cli(["run", "-c", str(cfg)], tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "role 'rbtest_plain' may not CREATE EXTENSION vector in database 'rbtest_noext'" in line
    assert "permission denied" in line and "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / "arrays").exists()  # nothing embedded
    assert not _extension(no_ext)  # the trial was rolled back
    has_ext = _role_dsn(_database("rbtest_hasext", vector=True), "rbtest_plain")
    with pytest.raises(ConfigError, match="role 'rbtest_plain' lacks the CREATE privilege on "
                       "schema 'public'"):  # fmt: skip
        rb.indexes.create("pgvector", dim=DIM, dsn=has_ext)
    with psycopg.connect(has_ext.replace("user=rbtest_plain", "user=postgres"),
                         autocommit=True) as conn:  # fmt: skip
        conn.execute("GRANT CREATE ON SCHEMA public TO rbtest_plain")
    index = rb.indexes.create("pgvector", dim=DIM, dsn=has_ext, index="flat")
    index.build(X[:100])
    index.close()
    assert not [t for t in _tables(has_ext) if t.startswith("ragbench_")]


def test_records_keep_no_dsn_password(tmp_path: Path) -> None:
    """The finding: records kept the DSN as given, password included (config and index params)."""
    secret = "Sekret-Phrase-91"
    dsn = pgshared.dsn() + f" password={secret}"  # the shared server trusts: any password works
    cfg = _cfg(tmp_path, f'[retrieve]\nbackend = "pgvector"\ndsn = "{dsn}"\n')
    done = _cli(["run", "-c", str(cfg), "--out", "run.jsonl"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "run.jsonl").read_text()
    assert secret not in text and secret[:6] not in text
    (rec,) = [json.loads(line) for line in text.splitlines()]
    assert rec["config"]["retrieve"]["dsn"].endswith("password=***")
    assert rec["info"]["index"]["params"]["dsn"].endswith("password=***")
    assert secret not in done.stdout + done.stderr


def test_a_killed_run_leaves_one_table_that_says_whose_it_is(tmp_path: Path) -> None:
    """kill -9 cannot drop anything: the table left is named and commented as the docs say."""
    code = f"""
        import os, signal, numpy as np, ragbench as rb
        idx = rb.indexes.create("pgvector", dim=8, dsn={pgshared.dsn()!r}, index="flat")
        idx.build(np.random.default_rng(0).random((50, 8), dtype=np.float32))
        print(idx.info()["table"], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
    child = _run_child(code, str(tmp_path))
    out, _ = child.communicate(timeout=120)
    table = out.decode().strip()
    assert child.returncode == -9 and table.startswith(f"ragbench_{child.pid}_"), out
    with psycopg.connect(pgshared.dsn(), autocommit=True) as conn:
        (note,) = conn.execute(
            "SELECT obj_description(%s::regclass, 'pg_class')", (f"public.{table}",)
        ).fetchone()
        assert f"ragbench run, pid {child.pid} on " in note
        conn.execute(f"DROP TABLE public.{table}")  # the docs' recipe for leftovers

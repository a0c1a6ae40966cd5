"""The lexical backends (bm25, tantivy): their scores are BM25's, bad texts are named, filters
hold, writes are tantivy's only, and a pipeline records their search parts.

The shared contract (shapes, padding, k errors, save/load, unknown parameters)
is tests/indexes/test_indexes.py, which takes every registered backend.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter

import numpy as np
import pgshared
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.cli import main
from ragbench.errors import (
    ConfigError,
    IndexServerError,
    InputError,
    NotBuiltError,
    UnsupportedOperationError,
)
from ragbench.timing import Parts

LEXICAL = [n for n in rb.indexes.names() if n in ("bm25", "tantivy", "pg-fts")]


def create(name: str, **params):
    """A lexical index; pg-fts on the session's shared PostgreSQL server."""
    return rb.indexes.create(name, **pgshared.params(name), **params)


CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a fox and a hound",
    "dogs chase cats around the garden",
    "",
    "brown bread and butter",
    "über café naïve 東京 tokyo station",
    "the fox the fox the fox",
]


def words(text: str) -> list[str]:
    """The test's own tokenizing for stopwords=none: lower-cased runs of >= 2 word characters."""
    import re

    return re.findall(r"(?u)\b\w\w+\b", text.lower())


def tantivy_words(text: str) -> list[str]:
    """Tantivy's simple tokenizer, lower-cased: runs of letters and digits, one character too."""
    import re

    return re.findall(r"[^\W_]+", text.lower())


def bm25(
    query: str, corpus: list[str], k1: float, b: float, tokens=words, boost: float = 1.0
) -> np.ndarray:
    """BM25 of every text, float64 ``(n,)``: idf ``ln(1 + (N - df + 0.5) / (df + 0.5))`` times
    ``boost * tf / (tf + k1 (1 - b + b dl / avgdl))`` (Lucene: boost 1; Tantivy: ``k1 + 1``)."""
    docs = [Counter(tokens(t)) for t in corpus]
    lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
    avgdl, n = lengths.mean(), len(docs)
    out = np.zeros(n)
    for term in set(tokens(query)):
        df = sum(term in d for d in docs)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d[term]
            if tf:
                out[i] += boost * idf * tf / (tf + k1 * (1 - b + b * lengths[i] / avgdl))
    return out


@pytest.mark.parametrize(
    ("name", "params", "reference"),
    [
        ("bm25", {"stopwords": "none", "k1": 1.2}, {"k1": 1.2, "b": 0.75}),
        # Tantivy's own constants (k1 1.2, b 0.75) and its tokenizer's words
        ("tantivy", {"stopwords": "none"}, {"k1": 1.2, "b": 0.75, "boost": 2.2}),
    ],
)
def test_scores_are_bm25(name, params, reference) -> None:
    corpus = [t for t in CORPUS if t]  # bm25s counts an empty text as one (empty) word
    index = rb.indexes.create(name, **params)
    index.build(corpus)
    queries = ["the fox", "brown dog", "tokyo 東京 café"]
    ids, scores = index.search(queries, 5)
    for row, query in enumerate(queries):
        tokens = tantivy_words if name == "tantivy" else words
        ref = bm25(query, corpus, tokens=tokens, **reference)
        hits = np.flatnonzero(ref > 0)
        want = hits[np.argsort(-ref[hits], kind="stable")][:5]
        got = ids[row][ids[row] >= 0]
        assert sorted(got.tolist()) == sorted(want.tolist())
        np.testing.assert_allclose(scores[row, : got.size], ref[got], rtol=2e-6)
    parts = index.last_parts()  # the last search, named (ragbench.timing.Parts)
    assert isinstance(parts, Parts) and list(parts) == ["tokenize", "score", "decode"]
    assert min(parts.ns) >= 0 and parts.total > 0


@pytest.mark.parametrize("name", LEXICAL)
def test_corpus_without_a_word_is_named(name) -> None:
    index = create(name)
    with pytest.raises(InputError, match="none of the 3 corpus texts has a word"):
        index.build(["", "   ", "!!"])
    with pytest.raises(InputError, match="none of the 2 corpus texts has a word.*stop"):
        index.build(["the and of", "a an the"])


@pytest.mark.parametrize("name", LEXICAL)
def test_stop_words_and_unknown_words_return_pads(name) -> None:
    index = create(name)
    index.build(CORPUS)
    ids, scores = index.search(["the and of a", "zzzunknown", "", "fox"], 3)
    assert (ids[:3] == -1).all() and np.isneginf(scores[:3]).all()
    assert ids[3, 0] >= 0  # the same call still answers a query with a word


@pytest.mark.parametrize("name", LEXICAL)
def test_non_ascii_and_mixed_scripts(name) -> None:
    index = create(name)
    index.build(CORPUS)
    for query in ("東京", "Über", "CAFÉ naïve", 'tokyo AND ( "station:'):
        ids, _ = index.search([query], 2)
        assert ids[0, 0] == 5, query  # the one text holding these words
    assert {2, 5} <= set(index.search(["東京 dogs"], 3)[0][0].tolist())  # one word of each script


@pytest.mark.parametrize("name", LEXICAL)
def test_filters_never_return_a_disallowed_text(name) -> None:
    index = create(name)
    index.build(CORPUS)
    assert isinstance(index, rb.indexes.FilteredIndex)
    everything, _ = index.search(["fox"], 4)
    assert set(everything[0][everything[0] >= 0].tolist()) == {0, 1, 6}
    mask = np.zeros(len(CORPUS), dtype=bool)
    mask[[1, 2]] = True
    ids, _ = index.search(["fox", "fox"], 4, filter=mask)
    assert (ids[:, 0] == 1).all() and (ids[:, 1:] == -1).all()
    per_query, _ = index.search(["fox", "fox"], 4, filter=[np.array([6]), np.array([0, 3])])
    assert per_query[:, 0].tolist() == [6, 0] and (per_query[:, 1:] == -1).all()
    with pytest.raises(ConfigError, match="strategy 'post'"):
        index.search(["fox"], 2, filter=mask, strategy="post")


@pytest.mark.slow
def test_bm25_refuses_writes_by_its_class(capsys) -> None:
    index = rb.indexes.create("bm25")
    index.build(CORPUS)
    assert not rb.indexes.declares(type(index), rb.indexes.WritableIndex)
    assert "bm25" not in rb.indexes.writable_backends()
    with pytest.raises(UnsupportedOperationError, match="bm25s cannot add"):
        index.add(["more text"])
    assert main(["stream", "--index", "bm25", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "index 'bm25' cannot add rows after its build; use one of flat" in err
    assert "Traceback" not in err
    assert main(["stream", "--index", "tantivy", "--duration", "1"]) == 2
    assert "'tantivy' reads texts" in capsys.readouterr().err


def test_bm25_stemmer_and_parameters() -> None:
    plain = rb.indexes.create("bm25")
    plain.build(CORPUS)
    stemmed = rb.indexes.create("bm25", stemmer="english")
    stemmed.build(CORPUS)
    # "dog" is a word of text 0 and, stemmed, of text 2 ("dogs")
    assert set(plain.search(["dog"], 3)[0][0].tolist()) == {0, -1}
    assert set(stemmed.search(["dog"], 3)[0][0].tolist()) == {0, 2, -1}
    for bad, match in (
        ({"stemmer": "klingon"}, "not a PyStemmer algorithm"),
        ({"stopwords": "xx"}, "not a list bm25s ships"),
        ({"b": 1.5}, r"b must be a number in \[0, 1\]"),
        ({"backend": "jax"}, "backend 'jax' is not one of numpy, numba"),
    ):
        with pytest.raises(ConfigError, match=match):
            rb.indexes.create("bm25", **bad)


@pytest.mark.parametrize("name", ["tantivy", "pg-fts"])
def test_writes_while_searching(name) -> None:
    index = create(name)
    index.build(CORPUS)
    assert rb.indexes.can_delete(index)
    stop, errors = threading.Event(), []

    def search() -> None:
        while not stop.is_set():
            try:
                _, scores = index.search(["fox"], 3)
                assert np.isfinite(scores[0, 0]) and (np.diff(scores[0]) <= 0).all()
            except Exception as exc:  # any failure in a reader fails the test
                errors.append(exc)
                return

    readers = [threading.Thread(target=search) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        new = index.add(["a fox in the snow", "no match here"])
        index.delete([0])
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not errors
    assert new.tolist() == [7, 8] and index.ntotal == 8 and index.id_bound == 9
    found, _ = index.search(["fox snow"], 5)
    assert 7 in found[0].tolist() and 0 not in found[0].tolist()
    with pytest.raises(InputError, match="id 0 is not in the index"):
        index.delete([0])
    with pytest.raises(UnsupportedOperationError, match="changed by add"):
        index.save("/tmp/never-written.rbi")
    index.close()


@pytest.mark.slow
def test_pg_fts_own_server_is_stopped_at_close() -> None:
    index = rb.indexes.create("pg-fts")
    index.build(CORPUS)
    server = index._state.server
    assert server is not None and server.alive and os.path.isdir(server.folder)
    info = index.info()
    assert info["server"] == "embedded" and info["metric"] == "ts_rank_cd"
    index.close()
    assert not server.alive and not os.path.exists(server.folder)


def test_pg_fts_unreachable_server_is_named() -> None:
    index = rb.indexes.create("pg-fts", dsn="host=/nonexistent-ragbench port=1 user=x dbname=x")
    with pytest.raises(IndexServerError, match="index 'pg-fts': cannot connect to host="):
        index.build(CORPUS)
    assert index.ntotal == 0


def test_pipeline_records_the_search_parts() -> None:
    config = {
        "dataset": {"name": "synthetic", "n": 300, "dim": 16, "n_queries": 10},
        "retrieve": {"backend": "bm25"},
        "rerank": {"backend": "none"},
    }
    with rb.Pipeline.from_config(config) as pipe:
        report = pipe.run(queries=10, warmup=1)
        parts = report.info["retrieve_parts"]
        assert list(parts) == ["tokenize", "score", "decode"]
        assert all(p["p50_ns"] > 0 for p in parts.values())
        assert report.info["index"]["search_parts"] == ["tokenize", "score", "decode"]
        # OpenTelemetry: the retrieve span's children carry the same names
        wall, _ = pipe.stage_samples()
        spans = pipe.trace_of(pipe._records[0], wall[0], 1.0, False)["inner"]["retrieve"]
        names = [s.name for s in spans]
        assert names == ["retrieve.tokenize", "retrieve.score", "retrieve.decode"]


def test_run_table_names_the_lexical_split(tmp_path, capsys) -> None:
    """``ragbench run``'s table says whose parts tokenize/score/decode are (not a client's)."""
    config = tmp_path / "bm25.toml"
    config.write_text(
        '[dataset]\nname = "synthetic"\nn = 200\ndim = 16\nn_queries = 6\n'
        '[run]\nqueries = 6\nwarmup = 1\n[retrieve]\nbackend = "bm25"\n'
        '[rerank]\nbackend = "none"\n'
    )
    assert main(["run", "-c", str(config)]) == 0
    printed = capsys.readouterr().out
    split = [line for line in printed.splitlines() if "retrieve p50 split" in line]
    assert len(split) == 1, printed
    assert "(the lexical engine: query words, scoring, hits to arrays): tokenize" in split[0]
    assert "client" not in split[0]


@pytest.mark.slow
def test_pydocs_run_is_judged(tmp_path, capsys) -> None:
    """``ragbench run`` with bm25 candidates on the bundled pydocs: its qrels judge the run."""
    config = tmp_path / "bm25.toml"
    config.write_text(
        '[dataset]\nname = "pydocs"\n[run]\nqueries = 20\nwarmup = 1\n'
        '[embed]\nbackend = "hashing"\n[retrieve]\nbackend = "bm25"\n[rerank]\nbackend = "none"\n'
    )
    out = tmp_path / "run.jsonl"
    assert main(["run", "-c", str(config), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "judged answers (" in printed and "nDCG@10" in printed
    assert "bm25/none" in printed and "tokenize" in printed
    judged = json.loads(out.read_text().splitlines()[-1])["judged"]
    assert judged["qrels"].endswith("qrels.tsv") and 0.0 < judged["ndcg_at_10"] <= 1.0


@pytest.mark.slow
def test_bm25_numba_backend_answers_as_numpy() -> None:
    """The numba backend (compiled at its first build: tens of seconds here) ranks as numpy."""
    queries = ["the fox", "brown dog", "tokyo 東京 café", "the and", "fox"]
    plain = rb.indexes.create("bm25")
    plain.build(CORPUS)
    jit = rb.indexes.create("bm25", backend="numba")
    jit.build(CORPUS)
    assert jit.info()["params"]["backend"] == "numba"
    ids, scores = plain.search(queries, 4)
    jit_ids, jit_scores = jit.search(queries, 4)
    np.testing.assert_allclose(jit_scores, scores, rtol=1e-6)
    for row in range(len(queries)):  # equal scores may come in either order
        assert set(jit_ids[row].tolist()) == set(ids[row].tolist())
    mask = np.zeros(len(CORPUS), dtype=bool)
    mask[[1, 6]] = True
    assert set(jit.search(["fox"], 3, filter=mask)[0][0].tolist()) == {1, 6, -1}


_TANTIVY: list = []  # one index for every example (built on first use)


def _tantivy_index():
    if not _TANTIVY:
        index = rb.indexes.create("tantivy")
        index.build(CORPUS)
        _TANTIVY.append(index)
    return _TANTIVY[0]


_QUERY_WORDS = sorted({w for t in CORPUS for w in tantivy_words(t)} | {"zebra", "the", "and"})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(_QUERY_WORDS), max_size=6).map(" ".join) | st.text(max_size=30),
    st.integers(1, len(CORPUS)),
)
def test_tantivy_fast_path_returns_what_the_plain_path_returns(query: str, k: int) -> None:
    """One unfiltered query (``_search_one``, the measured fast path) gives exactly the
    arrays of the plain per-query loop (``_search_each``): ids, scores, dtypes, shapes,
    and the three timed parts are kept; full rows (k hits) and padded ones both."""
    index = _tantivy_index()
    plain_ids, plain_scores = index._search_each([query], k, None)
    for call in (lambda: index._search_one(query, k), lambda: index.search([query], k)):
        index._local.parts = None
        ids, scores = call()
        assert ids.dtype == plain_ids.dtype and scores.dtype == plain_scores.dtype
        assert ids.shape == plain_ids.shape == (1, k)
        assert ids.tolist() == plain_ids.tolist()
        assert scores.tobytes() == plain_scores.tobytes()  # bit for bit, -inf pads too
        parts = index.last_parts()
        assert parts is not None and min(parts.ns) >= 0


_BM25: list = []  # one index for every example (built on first use)


def _bm25_index():
    if not _BM25:
        index = rb.indexes.create("bm25")
        index.build(CORPUS)
        _BM25.append(index)
    return _BM25[0]


_BM25_WORDS = sorted({w for t in CORPUS for w in words(t)} | {"zebra", "the", "and"})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(_BM25_WORDS), max_size=6).map(" ".join) | st.text(max_size=30),
    st.integers(1, len(CORPUS)),
)
def test_bm25_fast_path_returns_what_the_plain_path_returns(query: str, k: int) -> None:
    """One unfiltered query (``_search_one``, the measured fast path, which hands back bm25s's
    own arrays when the k scores are all hits) gives exactly the arrays of the plain path
    (``_search_parts``): ids, scores bit for bit, dtypes, shapes, C order; full rows, padded
    rows and rows of pads; and a later search never changes an answer already returned."""
    index = _bm25_index()
    plain_ids, plain_scores = index._search_parts([query], k, None)
    for call in (lambda: index._search_one(query, k), lambda: index.search([query], k)):
        index._local.parts = None
        ids, scores = call()
        assert (ids.dtype, scores.dtype) == (plain_ids.dtype, plain_scores.dtype)
        assert ids.shape == scores.shape == plain_ids.shape == (1, k)
        assert ids.flags.c_contiguous and scores.flags.c_contiguous
        assert ids.tolist() == plain_ids.tolist()
        assert scores.tobytes() == plain_scores.tobytes()  # bit for bit, -inf pads too
        parts = index.last_parts()
        assert parts is not None and min(parts.ns) >= 0
        kept = ids.copy(), scores.copy()
        index.search(["fox brown dog"], k)
        assert ids.tolist() == kept[0].tolist() and scores.tobytes() == kept[1].tobytes()


_TEXT = st.sampled_from(["fox", "the brown fox", "", "the and", "東京 tokyo"]) | st.text(
    max_size=12
)
_QUERIES = st.one_of(
    _TEXT.map(lambda t: [t]),  # the common route
    _TEXT,  # one string is one query
    _TEXT.map(lambda t: (t,)),
    st.lists(_TEXT, min_size=2, max_size=3),
    st.just([]),
    st.sampled_from([[b"fox"], [None], ["fox", 3], [["fox"]], 7, None, b"fox"]),
)
_KS = st.one_of(
    st.integers(-1, len(CORPUS) + 1),
    st.booleans(),
    st.integers(1, len(CORPUS)).map(np.int64),
    st.sampled_from([2.0, 2.5, "3", None]),
)


def _outcome(call):
    """``("ok", ids list, scores bytes, dtypes)`` or ``("error", type, message)``."""
    try:
        ids, scores = call()
    except Exception as exc:  # the checked route's errors are the outcome compared
        return ("error", type(exc), str(exc))
    return ("ok", ids.tolist(), scores.tobytes(), ids.dtype, scores.dtype, ids.shape)


_ROUTE_EDGES = [
    (["fox"], 2),  # the common route
    ([b"fox"], 2),  # not a str
    ([None], 2),
    ("fox", 2),  # a str, not a list
    (("fox",), 2),
    (["fox"], True),  # a bool, not an int
    (["fox"], np.int64(2)),
    (["fox"], 0),
    (["fox"], len(CORPUS) + 1),
    (["fox"], 2.0),
]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["bm25", "tantivy"]), _QUERIES, _KS)
def test_search_answers_and_refuses_as_the_checked_route(name, queries, k) -> None:
    """search() takes a request's search (one text in a list, no filter, k an int in range)
    straight to ``_search_one`` without its checks: for every input it answers exactly what
    the checked route answers, and refuses every bad input with the checked route's error
    (type and message: a non-string query, k < 1, k too large, a bool or float k...)."""
    _same_as_the_checked_route(name, queries, k)


@pytest.mark.parametrize(("queries", "k"), _ROUTE_EDGES)
@pytest.mark.parametrize("name", ["bm25", "tantivy"])
def test_search_route_edges(name, queries, k) -> None:
    """The inputs next to the common route (each fails one of its conditions) take the checked
    route: the same answer, or the same ragbench error."""
    _same_as_the_checked_route(name, queries, k)


def _same_as_the_checked_route(name, queries, k) -> None:
    index = _bm25_index() if name == "bm25" else _tantivy_index()
    got = _outcome(lambda: index.search(queries, k))
    want = _outcome(lambda: index._search_checked(queries, k, {}, index._space))
    assert got == want
    if got[0] == "error":
        assert issubclass(got[1], rb.errors.RagbenchError), got


def test_lexical_ab_reads_two_trees_and_refuses_different_answers(tmp_path) -> None:
    """bench/lexical_ab.py (the A/B behind issue 31's commits) times two source trees in one
    process: a copy of this tree answers as this one and gets its ratios printed; a copy whose
    bm25 has another k1 answers differently and is refused before anything is timed."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "bench", "lexical_ab.py")
    same, other = tmp_path / "same", tmp_path / "other"
    for tree in (same, other):
        shutil.copytree(
            os.path.join(root, "ragbench"),
            tree / "ragbench",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    bm25_py = other / "ragbench" / "indexes" / "bm25_index.py"
    bm25_py.write_text(bm25_py.read_text().replace('"k1": 1.5,', '"k1": 0.9,', 1))

    def ab(tree):
        return subprocess.run(
            [sys.executable, script, "bm25", "--old", str(tree), "--rounds", "2", "--queries", "5"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip

    done = ab(same)
    assert done.returncode == 0, done.stderr
    assert (
        "new/old" in done.stdout
        and "new/raw" in done.stdout
        and "2 rounds x 5 queries" in done.stdout
    )
    refused = ab(other)
    assert (
        refused.returncode != 0 and "answer" in refused.stderr and "differently" in refused.stderr
    )


def test_tantivy_folder_goes_at_close_and_at_exit(tmp_path) -> None:
    index = rb.indexes.create("tantivy")
    index.build(CORPUS)
    folder = index._folder
    assert folder is not None and os.path.isdir(folder)
    index.close()
    assert not os.path.exists(folder)
    for search in (lambda: index.search(["fox"], 1), lambda: index.search("fox", 1)):
        with pytest.raises(NotBuiltError, match="call build"):  # was a TypeError of None
            search()
    script = (
        "import ragbench as rb\n"
        "index = rb.indexes.create('tantivy')\n"
        "index.build(['a cat', 'a dog'])\n"
        "print(index._folder)\n"  # never closed: the interpreter's exit removes it
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    left = done.stdout.strip()
    assert left.startswith(tempfile.gettempdir()) and not os.path.exists(left)


@pytest.mark.slow
def test_load_records_name_the_lexical_parts(tmp_path) -> None:
    out = tmp_path / "load.jsonl"
    args = ["load", "--dataset", "synthetic", "--n", "400", "--dim", "16", "--index", "bm25"]
    args += ["--concurrency", "2", "--duration", "1", "--worker-kind", "thread", "--out", str(out)]
    assert main(args) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    parts = [r["retrieve_parts"] for r in records if r.get("retrieve_parts")]
    assert parts and all(list(p) == ["tokenize", "score", "decode"] for p in parts)

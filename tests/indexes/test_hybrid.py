"""The hybrid index: a dense and a lexical side fused by rank, through the index and a run.

The fused lists are checked against fusions written here from each side's own search; the
run goes through the ``ragbench run`` command with a config file, as a user runs it.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pgshared
import pytest

import ragbench as rb
from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.indexes.hybrid_index import Pair
from ragbench.timing import Parts

DIM = 16
RNG = np.random.default_rng(7)
VECTORS = RNG.standard_normal((120, DIM)).astype(np.float32)
TEXTS = [f"passage {i} about topic{i % 7} and subject{i % 11}" for i in range(120)]
QUERIES = Pair(VECTORS[:4] + 0.1, ["topic3 subject5", "the of and", "topic1", "nothing here zz"])


def rrf(first: list[int], second: list[int], k_rrf: float, k: int) -> list[int]:
    """Reciprocal rank fusion written out: 1 / (k_rrf + rank) summed, best first, ties by id."""
    fused: dict[int, float] = {}
    for ranked in (first, second):
        for rank, i in enumerate([i for i in ranked if i >= 0], 1):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k_rrf + rank)
    return sorted(fused, key=lambda i: (-fused[i], i))[:k]


def minmax_sum(first, second, alpha: float, k: int) -> list[int]:
    """alpha * min-max(first) + (1 - alpha) * min-max(second), best first, ties by id."""

    def norm(ids, scores):
        keep = ids >= 0
        ids, scores = ids[keep].tolist(), scores[keep].astype(np.float64).tolist()
        if not ids:
            return {}
        low, high = min(scores), max(scores)
        return {
            i: 1.0 if high == low else (s - low) / (high - low)
            for i, s in zip(ids, scores, strict=True)
        }

    a, b = norm(*first), norm(*second)
    fused = {i: alpha * a.get(i, 0.0) + (1 - alpha) * b.get(i, 0.0) for i in {**a, **b}}
    return sorted(fused, key=lambda i: (-fused[i], i))[:k]


@pytest.fixture(scope="module")
def sides():
    dense = rb.indexes.create("flat", dim=DIM, metric="ip")
    dense.build(VECTORS)
    lexical = rb.indexes.create("bm25", metric="ip")
    lexical.build(TEXTS)
    return dense.search(QUERIES.vectors, 20), lexical.search(QUERIES.texts, 20)


@pytest.mark.parametrize("concurrent", [False, True])
def test_rrf_is_the_fusion_of_the_two_sides(sides, concurrent) -> None:
    (d_ids, _), (l_ids, _) = sides
    index = rb.indexes.create("hybrid", dim=DIM, metric="ip", k_rrf=30, concurrent=concurrent)
    index.build(Pair(VECTORS, TEXTS))
    ids, _ = index.search(QUERIES, 10)
    for row in range(len(QUERIES)):
        want = rrf(d_ids[row, :10].tolist(), l_ids[row, :10].tolist(), 30.0, 10)
        assert ids[row].tolist() == want
    # a query of only stop words: the lexical side has nothing, the dense side's order stays
    assert (l_ids[1] == -1).all() and ids[1].tolist() == d_ids[1, :10].tolist()
    parts = index.last_parts()
    assert isinstance(parts, Parts) and list(parts) == ["dense", "lexical", "fuse"]
    info = index.info()
    assert info["retrievers"].startswith("concurrent" if concurrent else "sequential")
    lexical_threads = [t for t in threading.enumerate() if "hybrid-lexical" in t.name]
    assert bool(lexical_threads) == concurrent
    index.close()
    assert not [t for t in threading.enumerate() if t in lexical_threads and t.is_alive()]


def test_weighted_is_the_normalised_sum(sides) -> None:
    (d_ids, d_scores), (l_ids, l_scores) = sides
    index = rb.indexes.create(
        "hybrid", dim=DIM, metric="ip", fusion="weighted", alpha=0.3, candidates=20
    )
    index.build(Pair(VECTORS, TEXTS))
    ids, _ = index.search(QUERIES, 10)
    for row in range(len(QUERIES)):
        want = minmax_sum((d_ids[row], d_scores[row]), (l_ids[row], l_scores[row]), 0.3, 10)
        assert ids[row].tolist() == want
    assert index.metric == "weighted" and index.rescore_metric == "ip"


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"alpha": 1.5}, r"alpha must be in \[0, 1\]"),
        ({"alpha": -0.1}, r"alpha must be in \[0, 1\]"),
        ({"k_rrf": -1}, "k_rrf must be a finite number >= 0"),
        ({"fusion": "max"}, "fusion 'max' is not one of rrf, weighted"),
        ({"dense": "bm25"}, "dense='bm25' must be an index of vectors"),
        ({"dense_search": {"ef": 0}}, "ef"),
    ],
)
def test_bad_parameters_are_named(params, match) -> None:
    with pytest.raises(ConfigError, match=match):
        rb.indexes.create("hybrid", dim=DIM, metric="ip", **{"dense": "hnsw", **params})


def test_run_records_the_parts_and_how_the_retrievers_ran(tmp_path, capsys) -> None:
    config = tmp_path / "hybrid.toml"
    config.write_text(
        '[dataset]\nname = "synthetic"\nn = 400\ndim = 16\nn_queries = 12\n'
        "[run]\nqueries = 12\nwarmup = 1\n"
        '[retrieve]\nbackend = "hybrid"\n'
        'build = { dense = "hnsw", concurrent = true, dense_search = { ef = 32 } }\n'
        '[rerank]\nbackend = "numba"\n'
    )
    out = tmp_path / "run.jsonl"
    assert main(["run", "-c", str(config), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "retrieve p50 split (the two retrievers and the fusion): dense " in printed
    assert "client" not in printed
    record = json.loads(out.read_text().splitlines()[-1])
    info = record["info"]
    assert list(info["retrieve_parts"]) == ["dense", "lexical", "fuse"]
    assert info["index"]["retrievers"].startswith("concurrent")
    assert info["index"]["dense_index"]["backend"] == "hnsw"
    assert info["index"]["lexical_index"]["backend"] == "bm25"


@pytest.mark.slow
def test_sweep_names_why_it_cannot_build_hybrid(capsys) -> None:
    args = ["sweep", "--dataset", "synthetic", "--n", "300", "--dim", "8", "--index", "hybrid"]
    assert main([*args, "--queries", "5"]) == 2
    err = capsys.readouterr().err
    assert "ragbench sweep times indexes of vectors or of texts" in err and "Traceback" not in err


@pytest.mark.slow
def test_index_file_saves_and_loads_the_pair(tmp_path) -> None:
    """``[retrieve] index_file`` (what ``ragbench load`` gives process workers): the first run
    saves the hybrid index with its data's fingerprint, the second loads it and checks it."""
    path = tmp_path / "hybrid.rbi"
    config = {
        "dataset": {"name": "synthetic", "n": 300, "dim": 16, "n_queries": 8},
        "retrieve": {"backend": "hybrid", "index_file": str(path)},
        "rerank": {"backend": "none"},
    }
    setups = []
    for _ in range(2):
        with rb.Pipeline.from_config(config) as pipe:
            record = pipe.run(queries=8, warmup=0).to_record()
        assert record["info"]["index"]["ntotal"] == 300 and path.exists()
        setups.append(record["setup_s"])
    assert "index_save" in setups[0] and "index_load" in setups[1]
    fingerprint = rb.indexes.data_fingerprint
    pair = Pair(VECTORS, TEXTS)
    assert fingerprint(pair) == fingerprint(Pair(VECTORS.copy(), list(TEXTS)))
    assert fingerprint(pair) != fingerprint(Pair(VECTORS, [*TEXTS[:-1], "changed"]))
    assert fingerprint(pair) != fingerprint(Pair(VECTORS + 1, TEXTS))


def test_builds_promise_what_both_sides_promise() -> None:
    plain = rb.indexes.create("hybrid", dim=DIM)
    assert plain.build_deterministic and plain.build_cacheable
    on_server = rb.indexes.create("hybrid", dim=DIM, lexical="pg-fts")  # no server until build
    assert on_server.build_deterministic and not on_server.build_cacheable
    graph = rb.indexes.create("hybrid", dim=DIM, dense="pgvector")  # pgvector's hnsw levels
    assert not graph.build_deterministic


@pytest.mark.slow
def test_pg_hybrid_fuses_in_one_statement_as_rrf_of_its_two_searches() -> None:
    """pg-hybrid's one SQL statement: RRF (written here) of the exact vector ranks and of
    pg-fts's ranks on the same rows, the server's split recorded as send/server/decode."""
    params = pgshared.params("pg-hybrid")
    index = rb.indexes.create("pg-hybrid", dim=DIM, metric="ip", k_rrf=30, **params)
    index.build(Pair(VECTORS, TEXTS))
    words = rb.indexes.create("pg-fts", **pgshared.params("pg-fts"))
    words.build(TEXTS)
    dense = rb.indexes.create("flat", dim=DIM, metric="ip")
    dense.build(VECTORS)
    try:
        ids, _ = index.search(QUERIES, 10)
        d_ids, _ = dense.search(QUERIES.vectors, 10)
        l_ids, _ = words.search(QUERIES.texts, 10)
        for row in range(len(QUERIES)):
            want = rrf(d_ids[row].tolist(), l_ids[row].tolist(), 30.0, 10)
            assert ids[row].tolist() == want
        parts = index.last_parts()
        assert isinstance(parts, Parts) and list(parts) == ["send", "server", "decode"]
        assert index.metric == "rrf" and index.info()["search_parts"] == [
            "send",
            "server",
            "decode",
        ]
    finally:
        index.close()
        words.close()


def test_numba_reranker_rescores_lexical_only_candidates_in_its_stage() -> None:
    """hybrid + the numba reranker: a candidate only the lexical side found gets its vector.

    The rerank stage hands the reranker the corpus vectors of every row and the fused
    candidate ids; the reranker reads each candidate's row itself, inside the stage's
    call, so the fetch of a lexical-only candidate's vector is rerank time. Checked here:
    with ``k = k_candidates`` every candidate comes back re-scored by its own vector (the
    inner product written here), the lexical-only ones too, by the stages up to rerank.
    """
    n_cand = 12
    config = {
        "dataset": {"name": "synthetic", "n": 300, "dim": 16, "n_queries": 6},
        "run": {"k": n_cand, "k_candidates": n_cand},
        "retrieve": {"backend": "hybrid", "metric": "ip", "build": {"dense": "flat"}},
        "rerank": {"backend": "numba"},
    }
    lexical_only = 0
    with rb.Pipeline.from_config(config) as pipe:
        pipe.setup()
        corpus = pipe.built.embedding.corpus
        names = [stage.name for stage in pipe.stages]
        assert names[names.index("retrieve") + 1] == "rerank"
        for i in range(6):
            ctx = pipe.context(i)
            for stage in pipe.stages[: names.index("rerank") + 1]:
                stage(ctx)
            query = ctx.query_vector[0].astype(np.float64)
            exact = corpus.astype(np.float64) @ query
            dense_top = set(np.argsort(-exact, kind="stable")[:n_cand].tolist())
            candidates = [c for c in ctx.candidate_ids.tolist() if c >= 0]
            lexical_only += len(set(candidates) - dense_top)
            assert sorted(ctx.hit_ids.tolist()) == sorted(candidates)
            np.testing.assert_allclose(ctx.hit_scores, exact[ctx.hit_ids], rtol=1e-5, atol=1e-5)
    assert lexical_only > 0  # the fusion did bring rows the dense side did not find

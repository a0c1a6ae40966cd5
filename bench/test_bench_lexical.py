"""The lexical backends' wrappers against the libraries' own calls (issue 31's targets).

Targets (docs/reference/performance-targets.md#lexical): ``bm25``'s ``search`` at most 1.05x
bm25s's own ``Tokenizer.tokenize`` + ``BM25.retrieve`` on the same query (the same tokenizer
object, the same token ids, the same retrieve arguments: what a bm25s user writes; bm25s
returns numpy arrays); ``tantivy``'s ``search`` at most 1.05x Tantivy's own calls for the same
query, returning numpy arrays as the engine targets' raw sides do: the index's analyzer, the
OR of term queries, ``Searcher.search``, the hits' rows read from the ``pos`` fast field, and
the rows and scores as arrays by the cheapest conversion there is (one ``zip``, ``np.fromiter``
with a count: ~2.3 us an array of 100, timeit). Tantivy hands back Python tuples; a user who
feeds the hits to numpy code (a re-scorer, a fusion) writes that conversion too; a raw side
without it would charge the wrapper for the binding's Python objects. What the wrappers add: argument checks, the ``-1``/``-inf`` padding, dropping
non-hits, the timed parts.

Workload: the bundled pydocs corpus (its passages' texts) and its queries, one query per
call as a request sends it, k = 100. Each round runs every query through both sides,
alternating which goes first; the figure is the median per-query time over the rounds.

Run: ``.venv/bin/pytest bench/test_bench_lexical.py -s -p no:cacheprovider`` (prints each
attempt's wrapper and raw µs per query and the ratio judged).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns

import numpy as np
from _quick import attempts, judge, need, pick, until_met

need("bm25s", "lexical")
need("tantivy", "lexical")

import ragbench as rb  # noqa: E402

ROUNDS = pick(21, 7)
K = 100
BOUND = 1.05
PYDOCS = Path(__file__).resolve().parent.parent / "datasets" / "pydocs"


def _texts(name: str) -> list[str]:
    with open(PYDOCS / name, encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]


CORPUS = _texts("corpus.jsonl")
QUERIES = _texts("queries.jsonl")[: pick(200, 60)]


def _per_query_us(fn: Callable[[str], object]) -> float:
    t0 = perf_counter_ns()
    for q in QUERIES:
        fn(q)
    return (perf_counter_ns() - t0) / len(QUERIES) / 1e3


def _measure(wrapper: Callable[[str], object], raw: Callable[[str], object]) -> tuple[float, float]:
    """(wrapper µs, raw µs) per query: medians over interleaved rounds."""
    ws, rs = [], []
    for r in range(ROUNDS):
        if r % 2:
            rs.append(_per_query_us(raw))
            ws.append(_per_query_us(wrapper))
        else:
            ws.append(_per_query_us(wrapper))
            rs.append(_per_query_us(raw))
    return statistics.median(ws), statistics.median(rs)


def _gate(label: str, wrapper: Callable[[str], object], raw: Callable[[str], object]) -> None:
    for q in QUERIES[:5]:  # warm both paths
        wrapper(q)
        raw(q)
    runs = attempts(
        lambda: _measure(wrapper, raw), until_met((lambda v: v[0] / v[1], BOUND, False))
    )
    for a in runs:
        wrapper_us, raw_us = a.value
        print(
            f"\n{label}: wrapper {wrapper_us:.1f} µs, raw {raw_us:.1f} µs per query, "
            f"wrapper / raw {wrapper_us / raw_us:.3f}"
        )
    judge(
        f"{label}: wrapper / raw", runs, lambda v: v[0] / v[1], bound=BOUND, higher_is_better=False
    )


def test_bm25_wrapper_against_bm25s_retrieve() -> None:
    index = rb.indexes.create("bm25")
    index.build(CORPUS)
    tokenizer, retriever = index._tokenizer, index._retriever
    kwargs = index.retrieve_kwargs()

    def raw(q: str) -> object:
        tokens = tokenizer.tokenize(
            [q], update_vocab=False, return_as="ids", show_progress=False, allow_empty=False
        )
        return retriever.retrieve(tokens, k=K, **kwargs) if tokens[0] else None

    def wrapper(q: str) -> object:
        return index.search([q], K)

    docs, _ = raw(QUERIES[0])
    ids, _ = wrapper(QUERIES[0])
    assert ids[0][ids[0] >= 0].tolist() == docs[0][: int((ids[0] >= 0).sum())].tolist()
    _gate("bm25 (bm25s numpy) k=100", wrapper, raw)


def test_tantivy_wrapper_against_its_searcher() -> None:
    index = rb.indexes.create("tantivy")
    index.build(CORPUS)
    tv, _, schema, analyzer = index._engine
    searcher, should = index._searcher, tv.Occur.Should

    def raw(q: str) -> object:
        words = analyzer.analyze(q)
        if not words:
            return []
        query = tv.Query.boolean_query(
            [(should, tv.Query.term_query(schema, "body", w)) for w in words]
        )
        hits = searcher.search(query, K, count=False).hits
        if not hits:
            return []
        n = len(hits)
        hit_scores, addresses = zip(*hits, strict=True)
        rows = np.fromiter(searcher.fast_field_values("pos", addresses), np.int64, n)
        return rows, np.fromiter(hit_scores, np.float32, n)

    def wrapper(q: str) -> object:
        return index.search([q], K)

    ids, scores = wrapper(QUERIES[0])
    rows, raw_scores = raw(QUERIES[0])
    assert ids[0][ids[0] >= 0].tolist() == rows.tolist()
    assert scores[0][: rows.size].tolist() == raw_scores.tolist()
    _gate("tantivy k=100", wrapper, raw)
    index.close()

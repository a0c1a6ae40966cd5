"""Interleaved A/B of a lexical wrapper's search: this tree against another source tree.

For a change to ``bm25``'s or ``tantivy``'s search (issue 31's targets,
docs/reference/performance-targets.md#lexical): the wrapper of the tree this file is in
("new"), the wrapper of another tree ("old", e.g. ``git archive <commit> | tar -x -C DIR``) and
the raw side of ``bench/test_bench_lexical.py`` (the same calls, copied here) search the pydocs
queries one per call, k = 100, in one process. Every query runs the three in an order that
rotates with the query and the round, so none is always first or always after the same one.
Printed: each side's median µs per query over the rounds and the medians of the per-round
ratios new/old, old/raw, new/raw, with the 1-minute load before and after. Not a gate: a
reading on a shared machine is busy; the bench judges the target on a quiet one.

Run: ``.venv/bin/python bench/lexical_ab.py tantivy --old /tmp/lex-old --rounds 150``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent.parent
PYDOCS = HERE / "datasets" / "pydocs"
K = 100


def _texts(name: str) -> list[str]:
    with open(PYDOCS / name, encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]


def _built(root: Path, name: str, corpus: list[str]) -> Any:
    """An index ``name`` of ``root``'s ragbench, built on ``corpus`` (that tree's modules are
    dropped from ``sys.modules`` afterwards, so the next tree imports its own)."""
    for mod in [m for m in sys.modules if m == "ragbench" or m.startswith("ragbench.")]:
        del sys.modules[mod]
    sys.path.insert(0, str(root))
    try:
        import ragbench

        if not Path(ragbench.__file__ or "").resolve().is_relative_to(root.resolve()):
            raise SystemExit(f"{root}: ragbench was imported from {ragbench.__file__}")
        index = ragbench.indexes.create(name)
        index.build(corpus)
    finally:
        sys.path.remove(str(root))
    return index


def _raw(name: str, index: Any) -> Callable[[str], object]:
    """The raw side of bench/test_bench_lexical.py for ``name``, on ``index``'s engine objects."""
    if name == "bm25":
        tokenizer, retriever = index._tokenizer, index._retriever
        kwargs = index.retrieve_kwargs()

        def bm25_raw(q: str) -> object:
            tokens = tokenizer.tokenize(
                [q], update_vocab=False, return_as="ids", show_progress=False, allow_empty=False
            )
            return retriever.retrieve(tokens, k=K, **kwargs) if tokens[0] else None

        return bm25_raw
    tv, _, schema, analyzer = index._engine
    searcher, should = index._searcher, tv.Occur.Should

    def tantivy_raw(q: str) -> object:
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

    return tantivy_raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("index", choices=["bm25", "tantivy"])
    parser.add_argument("--old", type=Path, required=True, help="the other source tree")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    corpus, queries = _texts("corpus.jsonl"), _texts("queries.jsonl")[: args.queries]
    old = _built(args.old, args.index, corpus)
    new = _built(HERE, args.index, corpus)
    for q in queries:  # the same answers, bit for bit
        (a_ids, a_scores), (b_ids, b_scores) = old.search([q], K), new.search([q], K)
        if a_ids.tolist() != b_ids.tolist() or a_scores.tobytes() != b_scores.tobytes():
            raise SystemExit(f"old and new answer {q!r} differently")
    names = ["old", "new", "raw"]
    sides: list[Callable[[str], object]] = [
        lambda q: old.search([q], K),
        lambda q: new.search([q], K),
        _raw(args.index, new),
    ]
    per_round: dict[str, list[float]] = {n: [] for n in names}
    load0, perf = os.getloadavg()[0], time.perf_counter_ns
    for r in range(args.rounds):
        total = [0, 0, 0]
        for j, q in enumerate(queries):
            first = (r + j) % 3
            for i in (first, (first + 1) % 3, (first + 2) % 3):
                t0 = perf()
                sides[i](q)
                total[i] += perf() - t0
        for i, n in enumerate(names):
            per_round[n].append(total[i] / len(queries) / 1e3)

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(per_round[a], per_round[b], strict=True))

    us = ", ".join(f"{n} {statistics.median(per_round[n]):.1f}" for n in names)
    print(
        f"{args.index}: {us} us per query; new/old {ratio('new', 'old'):.3f}, "
        f"old/raw {ratio('old', 'raw'):.3f}, new/raw {ratio('new', 'raw'):.3f} "
        f"(medians over {args.rounds} rounds x {len(queries)} queries, k {K}); "
        f"load {load0:.2f} -> {os.getloadavg()[0]:.2f} (busy)"
    )


if __name__ == "__main__":
    main()

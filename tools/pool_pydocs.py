"""Pool the pydocs passages to be judged: the top 10 of two different retrievers per query.

The judgments in ``datasets/pydocs/qrels.tsv`` were made by reading every passage this pool
lists for a query. Two retrievers that fail in different ways make the pool:

- ``bm25``: lexical, bm25s (Lucene's BM25 variant, k1=1.5, b=0.75) over bm25s's own
  lower-casing tokenizer with its English stop words, no stemming;
- ``minilm``: exact inner-product search over the shipped all-MiniLM-L6-v2 vectors
  (``vectors-minilm-*.npy``, widened to float32 unit rows as ragbench loads them).

Writes ``datasets/pydocs/pool.tsv``: ``query-id  corpus-id  bm25-rank  minilm-rank`` (a rank
is 1..10, empty when that retriever did not return the passage), sorted by query then by the
best rank. Deterministic: run it twice and the file is byte-identical.

    .venv/bin/python tools/pool_pydocs.py [--depth 10]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent / "datasets" / "pydocs"


def _read_jsonl(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _bm25_top(corpus: list[str], queries: list[str], depth: int) -> list[list[int]]:
    """Row indexes of each query's top ``depth`` passages by BM25 (ties by bm25s's order)."""
    import bm25s

    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False
    )
    tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False)
    docs, _scores = retriever.retrieve(tokens, k=depth, show_progress=False, n_threads=1)
    return [[int(i) for i in row] for row in docs]


def _unit_rows(path: Path) -> np.ndarray:
    rows = np.load(path).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _dense_top(depth: int) -> list[list[int]]:
    """Row indexes of each query's exact top ``depth`` by MiniLM inner product (stable order)."""
    corpus = _unit_rows(HERE / "vectors-minilm-corpus.npy")
    queries = _unit_rows(HERE / "vectors-minilm-queries.npy")
    scores = queries @ corpus.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    return [[int(i) for i in row] for row in order]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--out", type=Path, default=HERE / "pool.tsv")
    args = parser.parse_args()
    corpus = _read_jsonl(HERE / "corpus.jsonl")
    queries = _read_jsonl(HERE / "queries.jsonl")
    lexical = _bm25_top([d["text"] for d in corpus], [q["text"] for q in queries], args.depth)
    dense = _dense_top(args.depth)
    lines = ["query-id\tcorpus-id\tbm25-rank\tminilm-rank"]
    for q, lex, den in zip(queries, lexical, dense, strict=True):
        ranks: dict[int, list[str]] = {}
        for rank, row in enumerate(lex, 1):
            ranks.setdefault(row, ["", ""])[0] = str(rank)
        for rank, row in enumerate(den, 1):
            ranks.setdefault(row, ["", ""])[1] = str(rank)
        best = sorted(ranks, key=lambda r: (min(int(x) for x in ranks[r] if x), r))
        lines += [f"{q['id']}\t{corpus[r]['id']}\t{ranks[r][0]}\t{ranks[r][1]}" for r in best]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(
        f"{len(lines) - 1} pooled (query, passage) pairs for {len(queries)} queries -> {args.out}"
    )


if __name__ == "__main__":
    main()

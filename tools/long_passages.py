#!/usr/bin/env python3
"""A text-folder dataset of long passages, built from the shipped pydocs corpus (nothing downloaded).

Usage: python tools/long_passages.py OUT_DIR [--join 12] [--passages 40] [--queries 30]
                                     [--measure RESULTS.jsonl]

The embed stage is timed in three parts (tokenize, forward, pool). A pydocs
query is a dozen tokens, so tokenizing it is small beside the forward pass;
this folder asks what tokenizing costs on long texts, where the fast
tokenizer reads every character but MiniLM's forward pass stops at 256
tokens (texts are truncated there). The findings page
docs/findings/2026-12-02-query-embedder.md times it with ``ragbench compare``.

- ``corpus/pNNNN.txt``: ``--passages`` files, each ``--join`` consecutive
  pydocs passages (datasets/pydocs/corpus.jsonl in its order) joined by blank
  lines: a few thousand characters, well past 256 tokens;
- ``queries.jsonl``: ``--queries`` texts as long as a passage, each ``--join``
  consecutive pydocs passages starting half-way through one corpus file, so
  each overlaps two of them (a "find the documents like this text" request,
  or a long chat history as the query). The corpus is kept small: what is
  timed is each query's embed stage; the corpus is embedded once, at set-up.

OUT_DIR is created; one this tool made before (it holds ``.long-passages``) is
replaced, any other non-empty folder is refused. ``--measure RESULTS.jsonl`` then
runs :data:`COMPARE` on it (printed first), appending its records to RESULTS.jsonl:
``make findings`` does that (docs/findings/commands.toml).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "datasets" / "pydocs" / "corpus.jsonl"
MARKER = ".long-passages"
#: The comparison of the findings page: each MiniLM runtime on the long texts, exact search
#: (``flat``, so the index adds little), no re-ranking; ``--dataset`` and ``--out`` follow.
COMPARE = (
    "compare --embed minilm --embed-runtime torch,onnx,onnx-int8 --index flat --rerank none --set prompt.max_tokens=8192 "
    "--queries 30 --warmup 5"
)


def pydocs_passages(source: Path = SOURCE) -> list[str]:
    """The shipped pydocs passages' texts, in the file's order."""
    with source.open(encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]


def long_texts(passages: list[str], join: int, start: int = 0) -> list[str]:
    """Every run of ``join`` consecutive passages from ``start`` on, joined by blank lines."""
    return [
        "\n\n".join(passages[i : i + join]) for i in range(start, len(passages) - join + 1, join)
    ]


def build(
    out: Path, *, join: int = 12, passages: int = 40, queries: int = 30, source: Path = SOURCE
) -> None:
    """Write the folder (see the module docstring) to ``out``."""
    if join < 2 or passages < 2 or queries < 1:
        raise SystemExit(
            "long_passages: --join and --passages must be at least 2, --queries at least 1"
        )
    if out.exists():
        if not (out / MARKER).is_file() and any(out.iterdir()):
            raise SystemExit(f"long_passages: {out} is not empty and was not made by this tool")
        shutil.rmtree(out)
    texts = pydocs_passages(source)[: (passages + 1) * join]
    corpus = long_texts(texts, join)[:passages]
    overlapping = long_texts(texts, join, start=join // 2)[: passages - 1]
    step = max(1, len(overlapping) // queries)
    chosen = overlapping[::step][:queries]
    (out / "corpus").mkdir(parents=True)
    for i, text in enumerate(corpus):
        (out / "corpus" / f"p{i:04d}.txt").write_text(text + "\n", encoding="utf-8")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i, text in enumerate(chosen):
            fh.write(json.dumps({"id": f"q{i:03d}", "text": text}) + "\n")
    (out / MARKER).write_text(
        f"made by tools/long_passages.py from {SOURCE.relative_to(ROOT)}: --join {join} "
        f"--passages {passages} --queries {queries}\n",
        encoding="utf-8",
    )


def measure(folder: Path, results: Path) -> int:
    """``ragbench`` :data:`COMPARE` on ``folder``, records appended to ``results``; its exit status."""
    argv = ["ragbench", *shlex.split(COMPARE), "--dataset", str(folder), "--out", str(results)]
    print("$ " + shlex.join(argv), flush=True)
    return subprocess.run([sys.executable, "-m", *argv], check=False).returncode


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write")
    parser.add_argument("--join", type=int, default=12, help="pydocs passages per long passage")
    parser.add_argument("--passages", type=int, default=40, help="long passages to write")
    parser.add_argument("--queries", type=int, default=30, help="long queries to write")
    parser.add_argument("--measure", type=Path, help="then run the comparison, records here")
    opts = parser.parse_args(args)
    build(opts.out, join=opts.join, passages=opts.passages, queries=opts.queries)
    print(f"long_passages: wrote {opts.out}", flush=True)
    return measure(opts.out, opts.measure) if opts.measure else 0


if __name__ == "__main__":
    sys.exit(main())

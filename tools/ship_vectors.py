"""Regenerate the vectors shipped with a bundled dataset (default: pydocs, MiniLM).

Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python tools/ship_vectors.py              # embed (~2 min for pydocs)
    HF_HUB_OFFLINE=1 .venv/bin/python tools/ship_vectors.py --reuse-cache

It embeds the corpus and the queries with the embedder (the shipped files are
never read), or with ``--reuse-cache`` takes the vectors from ragbench's disk
cache when an entry made by the same embedder fingerprint from the same texts
verifies (the cache key and its sidecar carry both), and writes
``datasets/<name>/vectors-<embedder>-{corpus,queries}.npy`` (float16) and
``vectors-<embedder>.json``: the embedder fingerprint, the texts' content
hashes, and each array's dtype, shape and sha256. Commit all three files with
any change of the corpus, the queries or the embedder's model package;
``tests/datasets/test_shipped_vectors.py`` re-embeds a sample and fails if they drift.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="pydocs")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--reuse-cache", action="store_true", help="use verified cached vectors")
    parser.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from ragbench import datasets, embedders
    from ragbench.datasets.shipped import write_shipped

    ds = datasets.load(args.dataset)
    folder = ds.shipped_dir
    if folder is None:
        parser.error(f"{args.dataset!r} is not a bundled dataset folder")
    ds.shipped_dir = None  # never derive the shipped files from themselves
    emb = embedders.create(args.embedder)
    re_embed = not args.reuse_cache
    corpus = ds.corpus_vectors(emb, re_embed=re_embed)
    queries = ds.query_vectors(emb, re_embed=re_embed)
    for ev in ds.cache_events:
        state = "cache hit" if ev.hit else "embedded"
        print(f"{ev.what}: {state} in {ev.seconds:.1f}s [{ev.path}]", file=sys.stderr)
    side = write_shipped(
        Path(folder),
        args.embedder,
        emb.fingerprint,
        (ds.corpus_hash, ds.queries_hash),
        {"corpus": corpus, "queries": queries},
        dtype=args.dtype,
    )
    size = sum(p.stat().st_size for p in Path(folder).glob(f"vectors-{args.embedder}-*.npy"))
    print(f"wrote {side} and its arrays ({size / 1e6:.2f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

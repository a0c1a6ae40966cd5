"""Issue 27: the engines table names each row's index family (LanceDB's IVF-HNSW over scalar
codes sat in a table described as one kind of graph)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ragbench import indexes
from ragbench.results.tables.notes import FAMILIES, index_family

ROOT = Path(__file__).resolve().parents[2]


def test_every_built_in_backend_has_a_family_and_its_defaults_are_the_backends_own() -> None:
    # built in: made by ragbench itself (another test may have registered an example backend
    # of its own, e.g. tests/index_contract.py's sq8-example: a plug-in reads as its name)
    built_in = [
        n for n in indexes.names() if indexes.registry.factory(n).__module__.startswith("ragbench.")
    ]
    assert "lancedb" in built_in and "hnsw" in built_in
    for name in built_in:
        assert name in FAMILIES, f"add the index family of {name!r} to FAMILIES"
        entry = FAMILIES[name]
        if isinstance(entry, tuple):
            key, kinds = entry
            cls = indexes.registry.factory(name)
            assert cls.build_defaults[key] == kinds["default"], name  # type: ignore[attr-defined]


def test_a_family_set_by_a_build_parameter_and_re_scoring() -> None:
    assert index_family("hnsw", {"M": 16}, {"ef": 40}) == "HNSW graph"
    assert index_family("lancedb") == "exact scan"  # its default index_type
    ivf = index_family("lancedb", {"index_type": "ivf_hnsw_sq"}, {"refine_factor": 2})
    assert (
        ivf == "IVF partitions, an HNSW graph in each, scalar codes; re-scored on the full vectors"
    )
    assert index_family("lancedb", {"index_type": "ivf_hnsw_sq"}, {"refine_factor": 0}) == (
        "IVF partitions, an HNSW graph in each, scalar codes"
    )
    assert index_family("pgvector", {"index": "ivfflat"}) == "IVF lists"
    assert index_family("somebody-elses") == "somebody-elses"  # a plug-in without an entry


def test_the_100k_engines_table_names_lancedbs_family_beside_the_graphs() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_hooks as hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    data = ROOT / "docs" / "findings"
    table = hooks.engines_markdown(ROOT / "docs", "findings/data/vectordb-compare-100k.jsonl")
    rows = {
        ln.split(" | ")[0].strip("| `"): ln.split(" | ")[1]
        for ln in table.splitlines()
        if ln.startswith("| `")
    }
    text = (data / "data/vectordb-compare-100k.jsonl").read_text(encoding="utf-8")
    runs = [json.loads(ln) for ln in text.splitlines() if ln]
    for rec in runs:
        backend = rec["config"]["retrieve"]["backend"]
        if backend == "lancedb":
            assert rows[rec["label"]].startswith("IVF partitions, an HNSW graph in each")
        else:
            assert rows[rec["label"]] == "HNSW graph", rec["label"]

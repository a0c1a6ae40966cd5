"""Judged answers as a user meets them (issue 31): qrels read, measured and printed by the CLI.

A small BEIR folder made in ``tmp_path`` (distinct passages, graded qrels)
goes through ``ragbench datasets --stats``, ``compare``, ``sweep`` and
``load``; the nDCG@10 a compare reports is checked against trec_eval's
(``pytrec_eval``) on an exact ranking computed here. Synthetic data says
"no judged answers". Bad qrels are one line and exit 2.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

import ragbench as rb
from ragbench.cli import main
from ragbench.results.records import read_records

WORDS = " ".join(f"w{i}" for i in range(40))
PYDOCS_QRELS = Path(__file__).resolve().parents[2] / "datasets" / "pydocs" / "qrels.tsv"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # click's usage errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _beir(folder: Path, qrels: str | None = None) -> Path:
    """120 distinct passages, 10 queries, graded qrels for 8 of them (BEIR layout)."""
    words = WORDS.split()
    rng = np.random.default_rng(9)  # seeded: no tied scores near any top 10 (asserted below)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(120):
            text = " ".join(rng.choice(words, size=3 + i)) + f" note{i}"  # one length each
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in range(10):
            text = " ".join(rng.choice(words, size=3))
            f.write(json.dumps({"_id": f"q{q}", "text": text}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    if qrels is None:
        lines = ["query-id\tcorpus-id\tscore"]
        for q in range(8):
            for j in range(1 + q % 3):
                lines.append(f"q{q}\td{q + 16 * j}\t{1 + j % 2}")
            lines.append(f"q{q}\td{(q * 11 + 5) % 120}\t0")
        qrels = "\n".join(lines) + "\n"
    (folder / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _beir(tmp_path_factory.mktemp("judged") / "tiny-beir")


def _expected_ndcg(folder: Path) -> np.ndarray:
    """trec_eval's nDCG@10 per judged query of an exact ip ranking of the hashing vectors."""
    ds = rb.datasets.load(folder)
    X, Q = ds.corpus_vectors("hashing"), ds.query_vectors("hashing")
    scores = Q @ X.T
    run = {}
    for q, qid in enumerate(ds.queries.ids):
        top = np.argsort(-scores[q], kind="stable")[:10]
        # no ties near the cut: any exact search gives this order
        assert np.all(np.diff(np.sort(scores[q])[::-1][:11]) < -1e-6), qid
        run[qid] = {ds.corpus.ids[r]: float(10 - i) for i, r in enumerate(top)}
    qrels = ds.qrels or {}
    got = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    judged = [qid for qid in ds.queries.ids if any(g >= 1 for g in qrels.get(qid, {}).values())]
    return np.asarray([got[qid]["ndcg_cut_10"] for qid in judged])


def test_compare_reports_ndcg_equal_to_trec_eval(
    capsys: pytest.CaptureFixture[str], beir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "compare.jsonl"
    code, text, err = cli(
        capsys, "compare", "--dataset", str(beir), "--embed", "hashing", "--index", "flat",
        "--rerank", "numpy", "--queries", "10", "--warmup", "0", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "nDCG@10" in text and "MRR@10" in text and "R@100" in text
    assert "8 of 10 queries judged" in text and "R@100 is on the 10 results returned" in text
    (rec,) = read_records(out)
    judged = rec["judged"]
    assert judged["queries"] == 8 and judged["measured"] == 10 and judged["depth"] == 10
    expected = _expected_ndcg(beir)
    per = np.asarray(judged["per_query"]["ndcg_at_10"], dtype=np.float64)
    assert np.isnan(per[8:]).all()  # q8, q9: no judgments
    np.testing.assert_allclose(per[:8], expected, rtol=0, atol=1e-9)
    assert judged["ndcg_at_10"] == pytest.approx(float(expected.mean()), abs=1e-9)
    low, high = judged["ndcg_at_10_ci"]
    assert low <= judged["ndcg_at_10"] <= high and low < high
    # the flat formats: one column per measure, never the per-query lists
    code, text, err = cli(capsys, "report", str(out), "--format", "json")
    assert code == 0, err
    (row,) = json.loads(text)
    assert row["ndcg_at_10"] == judged["ndcg_at_10"] and row["judged_depth"] == 10
    assert "per_query" not in text


def test_run_table_and_report_show_the_judged_line(
    capsys: pytest.CaptureFixture[str], beir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'[dataset]\npath = "{beir}"\n[embed]\nbackend = "hashing"\n[retrieve]\nbackend = "flat"\n'
        '[rerank]\nbackend = "numpy"\n[run]\nqueries = 10\nwarmup = 0\n'
    )
    out = tmp_path / "run.jsonl"
    code, text, err = cli(capsys, "run", "-c", str(cfg), "--out", str(out))
    assert code == 0, err
    assert "judged answers (" in text and "nDCG@10 " in text
    code, again, err = cli(capsys, "report", str(out))
    assert code == 0, err
    (rec,) = read_records(out)
    low, high = rec["judged"]["ndcg_at_10_ci"]
    cell = f"{rec['judged']['ndcg_at_10']:.3f} [{low:.3f}–{high:.3f}]"
    assert f"nDCG@10 {cell}" in text  # the run's line
    assert "nDCG@10" in again and cell in again  # the saved record's table: a column


def test_sweep_records_carry_judged_answers(
    capsys: pytest.CaptureFixture[str], beir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep.jsonl"
    code, text, err = cli(
        capsys, "sweep", "--dataset", str(beir), "--embed", "hashing", "--index", "flat",
        "--queries", "10", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "nDCG@10" in text
    (point,) = read_records(out)
    assert point["judged"]["queries"] == 8
    assert point["judged"]["ndcg_at_10"] == pytest.approx(float(_expected_ndcg(beir).mean()))


@pytest.mark.slow  # ~6 s: a load generator and its worker start and run for 0.3 s
def test_load_records_carry_judged_answers(
    capsys: pytest.CaptureFixture[str], beir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "load.jsonl"
    code, text, err = cli(
        capsys, "load", "--dataset", str(beir), "--embed", "hashing", "--index", "flat,lsh",
        "--rerank", "numpy", "--concurrency", "1", "--duration", "0.3", "--warmup", "1",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "nDCG@10" in text and "answer quality: nDCG@10 " in text  # columns and the reading
    levels = read_records(out)
    assert len(levels) == 2
    for level in levels:
        assert level["judged"]["qrels"].endswith("test.tsv") and level["judged"]["queries"] >= 1


def test_synthetic_tables_say_no_judged_answers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "syn.jsonl"
    code, text, err = cli(
        capsys, "compare", "--dataset", "synthetic", "--n", "400", "--dim", "8", "--index", "flat",
        "--rerank", "numpy", "--queries", "5", "--warmup", "0", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "answer quality: no judged answers in these records (no qrels for synthetic" in text
    assert "nDCG@10" not in text  # no empty column
    assert "judged" not in read_records(out)[0]


def test_datasets_stats_counts_judgments(capsys: pytest.CaptureFixture[str], beir: Path) -> None:
    code, text, err = cli(
        capsys, "datasets", "--stats", str(beir), "--embed", "hashing", "--sample", "20"
    )
    assert code == 0, err
    row = next(ln for ln in text.splitlines() if "judged queries" in ln)
    assert "8 of 10 (8 with a relevant passage)" in row
    row = next(ln for ln in text.splitlines() if "judgments per query" in ln)
    # judgments per judged query: 1 + q % 3 graded ones and one grade 0, for q = 0..7
    counts = [2 + q % 3 for q in range(8)]
    assert f"{min(counts)} / {np.median(counts):g} / {max(counts)}" in row


BAD = {
    "negative grade": ("q0\td1\t-1\n", r"test\.tsv:2: negative grade -1"),
    "unknown passage": ("q0\td999\t1\n", r"test\.tsv:2: corpus id 'd999' is not in the corpus"),
    "unknown query": ("q77\td1\t1\n", r"test\.tsv:2: query id 'q77' is not in the queries"),
    "two grades": ("q0\td1\t1\nq0\td1\t2\n", r"test\.tsv:3: \('q0', 'd1'\) judged 2 here and 1 at"),
    "not an integer": ("q0\td1\thigh\n", r"test\.tsv:2: grade 'high' is not an integer"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_qrels_are_one_line_naming_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    body, message = BAD[case]
    folder = _beir(tmp_path / "bad", "query-id\tcorpus-id\tscore\n" + body)
    code, text, err = cli(capsys, "datasets", "--stats", str(folder), "--embed", "hashing")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(message, lines[0]), lines[0]


def test_non_utf8_qrels_name_the_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = _beir(tmp_path / "latin", "query-id\tcorpus-id\tscore\n")
    (folder / "qrels" / "test.tsv").write_bytes(
        b"query-id\tcorpus-id\tscore\nq0\td1\t1\nq1\td\xe9\t1\n"
    )
    code, _, err = cli(capsys, "datasets", "--stats", str(folder), "--embed", "hashing")
    assert code == 2 and "test.tsv:3: not UTF-8: byte 0xe9" in err


def test_same_pair_twice_with_the_same_grade_is_read_once(tmp_path: Path) -> None:
    folder = _beir(tmp_path / "dup", "query-id\tcorpus-id\tscore\nq0\td1\t2\nq0\td1\t2\n")
    assert rb.datasets.load(folder).qrels == {"q0": {"d1": 2}}


def test_other_qrels_layouts(tmp_path: Path) -> None:
    """relevant on queries.jsonl (list or graded object), qrels.csv and qrels.tsv beside the corpus."""
    folder = _beir(tmp_path / "rel")
    (folder / "qrels" / "test.tsv").unlink()
    (folder / "qrels").rmdir()
    rows = [json.loads(ln) for ln in (folder / "queries.jsonl").read_text().splitlines()]
    rows[0]["relevant"] = ["d0", "d16"]
    rows[1]["relevant"] = {"d1": 2, "d2": 0}
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = rb.datasets.load(folder)
    assert ds.qrels == {"q0": {"d0": 1, "d16": 1}, "q1": {"d1": 2, "d2": 0}}
    assert ds.qrels_source.endswith("queries.jsonl (relevant)")
    # a qrels file beside it as well: two sources are refused, not merged
    (folder / "qrels.csv").write_text("query_id,doc_id,grade\nq3,d3,2\nq4,d5,1\n")
    with pytest.raises(rb.errors.DatasetError, match="keep one source"):
        rb.datasets.load(folder)
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "relevant"}) + "\n" for r in rows)
    )
    assert rb.datasets.load(folder).qrels == {"q3": {"d3": 2}, "q4": {"d5": 1}}
    (folder / "qrels.csv").unlink()
    (folder / "qrels.tsv").write_text("q3 0 d3 1\nq3 0 d4 0\n")  # TREC's four columns
    assert rb.datasets.load(folder).qrels == {"q3": {"d3": 1, "d4": 0}}


@pytest.mark.slow  # ~2.5 s: the statistics of 3 274 MiniLM vectors
def test_pydocs_judged_answers_are_counted(capsys: pytest.CaptureFixture[str]) -> None:
    """pydocs ships datasets/pydocs/qrels.tsv (issue 31): ``datasets --stats`` counts it."""
    ds = rb.datasets.load("pydocs")
    judgments = ds.judgments()
    assert judgments is not None and ds.qrels_source == str(PYDOCS_QRELS)
    lines = [ln.split("\t") for ln in PYDOCS_QRELS.read_text("utf-8").splitlines()[1:] if ln]
    assert sum(judgments.counts()) == len({(q, d) for q, d, _ in lines})
    judged = len({q for q, _, _ in lines})
    expect = f"{judged} of {len(ds.queries.ids)}"
    code, text, err = cli(capsys, "datasets", "--stats", "pydocs", "--sample", "50")
    assert code == 0, err
    row = next(ln for ln in text.splitlines() if "judged queries" in ln)
    assert expect in row


@pytest.mark.slow  # two compares and two sweep builds: ~10 s on this shared machine
def test_rebuilds_merge_judged_answers_over_builds(
    capsys: pytest.CaptureFixture[str], beir: Path, tmp_path: Path
) -> None:
    """--rebuilds N: the mean of the builds' nDCG@10, the envelope of their intervals (as recall)."""
    for command, extra in (("compare", ["--rerank", "none", "--warmup", "0"]), ("sweep", [])):
        out = tmp_path / f"{command}.jsonl"
        code, _, err = cli(
            capsys, command, "--dataset", str(beir), "--embed", "hashing", "--index", "hnsw",
            "--queries", "10", "--rebuilds", "2", "--out", str(out), *extra,
        )  # fmt: skip
        assert code == 0, err
        (rec,) = read_records(out)
        judged = rec["judged"]
        assert judged["rebuilds"] == 2 and len(judged["ndcg_at_10_builds"]) == 2
        assert judged["ndcg_at_10"] == pytest.approx(np.mean(judged["ndcg_at_10_builds"]))
        low, high = judged["ndcg_at_10_ci"]
        assert low <= min(judged["ndcg_at_10_builds"]) and max(judged["ndcg_at_10_builds"]) <= high
        # compare pools both builds' requests; a sweep point keeps one value per query
        per = judged["per_query"]["ndcg_at_10"]
        assert len(per) == (20 if command == "compare" else 10)


def test_choosing_a_beir_split(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = _beir(tmp_path / "splits", "query-id\tcorpus-id\tscore\nq0\td1\t1\n")
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td5\t2\n")
    assert rb.datasets.load(folder).qrels == {"q0": {"d1": 1}}  # test.tsv first
    assert rb.datasets.load(folder, qrels="dev").qrels == {"q2": {"d5": 2}}
    (folder / "qrels" / "test.tsv").unlink()
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td5\t1\n")
    with pytest.raises(rb.errors.DatasetError, match=r"several qrels files \(dev.tsv, train.tsv\)"):
        rb.datasets.load(folder)
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'[dataset]\npath = "{folder}"\n[embed]\nbackend = "hashing"\n[retrieve]\n'
        'backend = "flat"\n[rerank]\nbackend = "numpy"\n[run]\nqueries = 4\nwarmup = 0\n'
    )
    out = tmp_path / "run.jsonl"
    code, _, err = cli(
        capsys, "run", "-c", str(cfg), "--set", "dataset.qrels=train", "--out", str(out)
    )
    assert code == 0, err
    assert read_records(out)[0]["judged"]["qrels"].endswith("train.tsv")

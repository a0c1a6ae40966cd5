"""Judged answers (issue 31): ragbench's nDCG@10, MRR@10 and recall@100 against trec_eval's.

``pytrec_eval`` (pytrec-eval-terrier, the dev extra) is the independent
computation: the same run and qrels go through both, and every per-query
value agrees to 1e-9.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrec_eval

from ragbench import judged
from ragbench.errors import InputError
from ragbench.results import schema as record_schema
from ragbench.results.reading.judged import judged_reading
from ragbench.results.schema import JudgedAnswers, RecordError, SweepRecord, read_struct


def _random_case(
    seed: int, nq: int = 40, n: int = 500, depth: int = 100
) -> tuple[np.ndarray, judged.Judgments]:
    """A run of ``nq`` ranked lists of ``depth`` distinct rows and graded judgments (0-3)."""
    rng = np.random.default_rng(seed)
    ranked = np.stack([rng.permutation(n)[:depth] for _ in range(nq)]).astype(np.int64)
    grades = []
    for q in range(nq):
        # judge some returned rows (so the measures are not all 0) and some others
        near, deep = ranked[q][:15], ranked[q]
        picks = [rng.choice(near, 5, replace=False), rng.choice(deep, 5), rng.choice(n, 4)]
        judged_rows = np.concatenate(picks)
        g = {int(r): int(rng.integers(0, 4)) for r in judged_rows}
        g[int(ranked[q][rng.integers(0, depth)])] = int(rng.integers(1, 4))  # one relevant at least
        grades.append(g)
    return ranked, judged.Judgments(grades, "test")


def _trec(ranked: np.ndarray, judgments: judged.Judgments, measures: set[str], depth: int):  # type: ignore[no-untyped-def]
    qrels = {
        f"q{q}": {f"d{r}": g for r, g in judgments.grades[q].items()} for q in range(len(judgments))
    }
    # strictly decreasing scores: trec_eval ranks by score (ties by doc id), not by list order
    run = {
        f"q{q}": {f"d{int(r)}": float(depth - i) for i, r in enumerate(ranked[q][:depth])}
        for q in range(ranked.shape[0])
    }
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ndcg_mrr_recall_equal_trec_eval(seed: int) -> None:
    ranked, judgments = _random_case(seed)
    ours = judged.scores(ranked, np.arange(ranked.shape[0]), judgments)
    full = _trec(ranked, judgments, {"ndcg_cut.10", "recall.100"}, 100)
    # trec_eval's recip_rank has no cut-off: MRR@10 is it on the first 10 results
    top10 = _trec(ranked, judgments, {"recip_rank"}, 10)
    for q in range(ranked.shape[0]):
        assert ours["ndcg_at_10"][q] == pytest.approx(full[f"q{q}"]["ndcg_cut_10"], abs=1e-9)
        assert ours["recall_at_100"][q] == pytest.approx(full[f"q{q}"]["recall_100"], abs=1e-9)
        assert ours["mrr_at_10"][q] == pytest.approx(top10[f"q{q}"]["recip_rank"], abs=1e-9)
    # the case exercises the measures: most queries strictly between 0 and 1
    for name in judged.MEASURES:
        v = ours[name]
        assert np.count_nonzero((v > 0) & (v < 1)) > len(v) // 2, name


def test_hand_computed_case() -> None:
    """One list worked by hand: grades 2 at place 2 and 1 at place 4, a relevant one unfound."""
    grades = {7: 2, 9: 1, 11: 1, 5: 0}
    ranked = np.array([[5, 7, 3, 9, -1]], dtype=np.int64)
    got = judged.scores(ranked, [0], judged.Judgments([grades], "hand"))
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert got["ndcg_at_10"][0] == pytest.approx(dcg / idcg, abs=1e-12)
    assert got["mrr_at_10"][0] == pytest.approx(1 / 2)
    assert got["recall_at_100"][0] == pytest.approx(2 / 3)  # on the 5 places returned


def test_unjudged_and_zero_only_queries_do_not_count() -> None:
    judgments = judged.Judgments([{1: 1}, {}, {2: 0}], "t")
    ranked = np.array([[1, 2], [1, 2], [1, 2], [3, 1]], dtype=np.int64)
    rows = np.array([0, 1, 2, 0])
    per = judged.scores(ranked, rows, judgments)
    assert np.isnan(per["ndcg_at_10"][1]) and np.isnan(per["ndcg_at_10"][2])
    out = judged.summary(per, rows, judgments, returned=2)
    # query 0 asked twice (1.0 and 1/log2(3)): its mean is one value, the only judged query
    assert out["queries"] == 1 and out["measured"] == 3 and out["depth"] == 2
    assert out["ndcg_at_10"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert out["mrr_at_10"] == pytest.approx(0.75)
    assert judgments.judged_rows().tolist() == [0]


def test_repeated_rows_and_pads_rank_nothing() -> None:
    judgments = judged.Judgments([{4: 1}], "t")
    per = judged.scores(np.array([[-1, 3, 3, 4]]), [0], judgments)
    assert per["mrr_at_10"][0] == pytest.approx(1 / 4)  # the pad and the repeat keep their places


def test_bad_shapes_are_input_errors() -> None:
    judgments = judged.Judgments([{1: 1}], "t")
    with pytest.raises(InputError, match="query rows outside"):
        judged.scores(np.array([[1]]), [3], judgments)
    with pytest.raises(InputError, match="one query row each"):
        judged.scores(np.array([1, 2]), [0], judgments)


def _answers(value: float, low: float, high: float, queries: int = 30) -> JudgedAnswers:
    return JudgedAnswers(ndcg_at_10=value, ndcg_at_10_ci=[low, high], queries=queries)


def test_reading_says_whether_ndcg_differs_beyond_the_intervals() -> None:
    apart = judged_reading([("a", _answers(0.7, 0.65, 0.75)), ("b", _answers(0.5, 0.45, 0.55))])
    assert apart == [
        "answer quality: nDCG@10 highest a 0.700, lowest b 0.500: apart beyond their 95 % "
        "intervals (30 judged queries)"
    ]
    close = judged_reading([("a", _answers(0.6, 0.5, 0.7)), ("b", _answers(0.55, 0.45, 0.65))])
    assert "intervals overlap, so 30 judged queries do not tell them apart" in close[0]
    assert judged_reading([("a", _answers(0.6, 0.5, 0.7)), ("b", None)]) == []  # one judged row


def test_record_schema_types_the_judged_object() -> None:
    per = judged.scores(np.array([[1, 2]]), [0], judged.Judgments([{1: 2}], "q.tsv"))
    answers = judged.summary(per, [0], judged.Judgments([{1: 2}], "q.tsv"), returned=2)
    rec = {"schema": "ragbench.sweep/1", "kind": "sweep", "judged": answers}
    typed = read_struct(rec, SweepRecord)
    assert typed.judged is not None and typed.judged.ndcg_at_10 == 1.0 and typed.judged.depth == 2
    with pytest.raises(RecordError, match="judged"):
        read_struct({**rec, "judged": {**answers, "ndcg_at_10": "high"}}, SweepRecord)
    props = record_schema.records_schema("run")["$defs"]["RunRecord"]["properties"]
    assert "judged" in props


def test_merge_builds_means_envelope_and_per_query() -> None:
    judgments = judged.Judgments([{1: 1}, {2: 1}], "t")
    rows = np.array([0, 1])
    first = judged.summary(
        judged.scores(np.array([[1, 2], [2, 1]]), rows, judgments), rows, judgments, returned=2
    )
    second = judged.summary(
        judged.scores(np.array([[2, 1], [2, 1]]), rows, judgments), rows, judgments, returned=2
    )
    merged = judged.merge_builds([first, second], pool="mean")
    assert merged is not None and merged["rebuilds"] == 2
    assert merged["ndcg_at_10_builds"] == [first["ndcg_at_10"], second["ndcg_at_10"]]
    assert merged["ndcg_at_10"] == pytest.approx((first["ndcg_at_10"] + second["ndcg_at_10"]) / 2)
    lows = [first["ndcg_at_10_ci"][0], second["ndcg_at_10_ci"][0]]
    assert merged["ndcg_at_10_ci"][0] == min(lows)
    # query 0: reciprocal rank 1 in the first build, 1/2 in the second
    assert merged["per_query"]["mrr_at_10"] == [0.75, 1.0]
    pooled = judged.merge_builds([first, second], pool="concat")
    assert pooled is not None and len(pooled["per_query"]["mrr_at_10"]) == 4
    assert judged.merge_builds([None, None], pool="mean") is None


def test_the_note_names_the_qrels_file_by_its_folder_not_the_machines_path() -> None:
    from ragbench.results.tables.judged import judged_note

    judged = JudgedAnswers(
        ndcg_at_10=0.5,
        ndcg_at_10_ci=[0.4, 0.6],
        queries=3,
        qrels="/home/someone/data/pydocs/qrels.tsv",
    )
    note = judged_note([judged], "pydocs")
    assert "judged answers in pydocs/qrels.tsv (" in note and "/home/someone" not in note

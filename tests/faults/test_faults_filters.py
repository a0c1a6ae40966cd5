"""Filters under faults (issue 28): padded filtered truth is cached, an empty filter is one
empty answer (not an aborted run), and a 0/1 integer array is never guessed to be a mask."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ragbench as rb
from ragbench import datasets
from ragbench.errors import InputError


def _dataset(folder: Path) -> Path:
    """60 passages with tenant = i % 4 and year = 2000 + i % 10; q0 allows 3 rows (d3, d23,
    d43), q1 none (no tenant 99), q2 half, q3 all."""
    rng = np.random.default_rng(0)
    rows = [
        {
            "id": f"d{i}",
            "text": " ".join(f"w{int(w)}" for w in rng.integers(0, 30, 8)),
            "tenant": i % 4,
            "year": 2000 + i % 10,
        }
        for i in range(60)
    ]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    queries = [
        {"id": "q0", "text": "w1 w2 w3", "filter": {"tenant": 3, "year": 2003}},
        {"id": "q1", "text": "w4 w5 w6", "filter": {"tenant": 99}},
        {"id": "q2", "text": "w7 w8", "filter": {"tenant": [0, 1]}},
        {"id": "q3", "text": "w9 w10"},
    ]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    return folder


def test_padded_filtered_truth_is_read_from_the_cache(tmp_path: Path) -> None:
    # q0 allows 3 rows and q1 none, so with k=5 the truth holds -1 pads; the old check
    # refused them and every run recomputed (and rewarned about) the entry.
    path = _dataset(tmp_path)
    events = []
    for _ in range(2):
        ds = datasets.load(path)
        qf = ds.query_filters({"from": "queries"})
        truth = ds.exact_neighbors(5, embedder="hashing", filters=qf)
        events.append(ds.cache_events[-1])
    assert (truth[0, 3:] == -1).all() and (truth[1] == -1).all() and (truth[0, :3] >= 0).all()
    assert events[0].what.startswith("exact_neighbors") and not events[0].hit
    assert events[1].hit and events[1].note == "", events[1]


def test_a_pad_before_an_id_is_still_refused() -> None:
    from ragbench.datasets.neighbors import neighbour_problem

    ok = np.array([[3, -1, -1], [-1, -1, -1]])
    assert neighbour_problem(ok, 2, 3, 10, padded=True) == ""
    assert "pad before" in neighbour_problem(np.array([[-1, 3, 4]]), 1, 3, 10, padded=True)
    assert "outside" in neighbour_problem(np.array([[-2, 3, 4]]), 1, 3, 10, padded=True)
    assert "outside" in neighbour_problem(ok, 2, 3, 10)  # unfiltered truth has no pads


def _run_cli(tmp_path: Path, backend: str, out: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "filtered.toml"
    config.write_text(
        f'[dataset]\npath = "{tmp_path}"\n[embed]\nbackend = "hashing"\n'
        f'[retrieve]\nbackend = "{backend}"\nfilter = {{from = "queries"}}\n'
        'filter_strategy = "pre"\n'
        "[run]\nqueries = 4\nwarmup = 1\nk = 5\nk_candidates = 5\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "ragbench", "run", "-c", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )


@pytest.mark.parametrize("backend", ["flat", "hnsw"])
def test_a_query_whose_filter_matches_nothing_does_not_abort_the_run(
    tmp_path: Path, backend: str
) -> None:
    # Old code: 'ragbench: error: filter: the allow-list is empty (the mask is all False)',
    # exit 2, after the whole set-up, naming no query.
    _dataset(tmp_path)
    out = tmp_path / "run.jsonl"
    res = _run_cli(tmp_path, backend, out)
    assert res.returncode == 0, res.stderr
    assert "1 query (row 1) matches no row: empty results, recall 1.00" in res.stdout
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["info"]["filter"]["empty_rows"] == [1]
    assert len(rec["recall"]) == 4


def test_an_empty_filter_gives_an_empty_answer_through_the_api(tmp_path: Path) -> None:
    path = _dataset(tmp_path)
    cfg = {
        "dataset": {"path": str(path)},
        "embed": {"backend": "hashing"},
        "retrieve": {"backend": "flat", "filter": {"from": "queries"}, "filter_strategy": "pre"},
        "run": {"queries": 4, "warmup": 0, "k": 5, "k_candidates": 5},
    }
    with rb.Pipeline(cfg) as p:
        p.run()
        assert (p.serve(1).hit_ids == -1).all()  # k places, all pads
        got = p.serve(0).hit_ids
        assert sorted(got[got >= 0].tolist()) == [3, 23, 43]  # the 3 rows q0 allows


@pytest.mark.parametrize("name", ["flat", "hnsw"])
def test_a_0_1_integer_array_one_per_id_is_refused_as_ambiguous(name: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 16)).astype(np.float32)
    idx = rb.indexes.create(name, dim=16, metric="l2")
    idx.build(x)
    mask = rng.random(200) < 0.3
    # Old code: read as the ids {0, 1} and answered rows 0 and 1 only.
    for cast in (mask.astype(np.int8), mask.astype(np.int64), mask.astype(np.uint8).tolist()):
        with pytest.raises(InputError, match=r"could be a mask or ids; pass a bool mask"):
            idx.search(x[:3], 5, filter=cast)
        with pytest.raises(InputError, match=r"filter\[0\]: an integer array"):
            idx.search(x[:1], 5, filter=[np.asarray(cast)])
    # Either explicit form is taken, and they agree.
    by_mask, _ = idx.search(x[:3], 5, filter=mask, strategy="pre")
    by_ids, _ = idx.search(x[:3], 5, filter=np.flatnonzero(mask), strategy="pre")
    assert np.array_equal(by_mask, by_ids) and mask[by_mask[by_mask >= 0]].all()
    # Ids that happen to be only 0s and 1s, fewer than one per id, are still ids.
    ids, _ = idx.search(x[:1], 5, filter=np.array([0, 1, 1]), strategy="pre")
    assert set(ids[ids >= 0].tolist()) == {0, 1}


@pytest.mark.parametrize("backend", ["flat", "hnsw", "lancedb"])
def test_a_sweep_point_answers_a_filter_matching_no_row_empty(backend: str) -> None:
    """A sweep point searched every filter as given: one allowing no row raised an
    InputError ('the allow-list is empty') and ended the sweep. Now it is answered as a run
    answers it: not searched, empty, recall 1.00 (nothing to find), named in empty_rows."""
    from ragbench.attributes import QueryFilters
    from ragbench.sweeps import FilterCase, SweepData, measure

    ds = datasets.load("synthetic", n=600, dim=8, n_queries=6, seed=4)
    data = SweepData.from_dataset(
        ds, k=5, n_queries=6, filter_selectivities=[0.2], filter_table={"attribute": "tenant"}
    )
    case = data.filter_cases[0]
    masks, specs, truth = case.filters.masks.copy(), list(case.filters.specs), case.truth.copy()
    masks[2], specs[2], truth[2] = False, {"tenant": []}, -1  # query 2's filter allows nothing
    filters = QueryFilters(masks, specs, masks.mean(axis=1), case.filters.requested)
    index = rb.indexes.create(backend, dim=8, metric=data.metric)
    index.build(data.vectors)
    try:
        for strategy in ("pre", "post"):
            point = measure(
                index, data, 5, {}, case=FilterCase(0.2, filters, truth), strategy=strategy
            )
            assert point["recall_per_query"][2] == 1.0
            assert point["filter"]["empty_rows"] == [2]
            assert point["filter_violations"] == 0 and point["queries"] == 6
    finally:
        getattr(index, "close", lambda: None)()

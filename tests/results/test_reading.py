"""The lines under every table (ragbench.results.reading), on hand-built records with known answers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from ragbench import intervals
from ragbench.results import reading
from ragbench.results.diff import DiffRow, verdict
from ragbench.results.report import Report
from ragbench.settings import load_config

N = 201  # requests per hand-built run
STAGES = ["embed", "retrieve", "rerank", "serialize", "transport", "deserialize", "prompt"]
# a third below, a third at, a third above: the nearest-rank p50 is the centre exactly
WOBBLE = np.tile([-1, 0, 1], N // 3)


def run_record(
    label: str,
    stage_ns: Mapping[str, float],
    *,
    codec: str = "json",
    index: str = "hnsw",
    embedder: str = "hashing",
    wobble: tuple[str, ...] = (),
    repetition: np.ndarray | None = None,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A run record whose stage ``s`` takes ``stage_ns[s]`` ns in every request (± 1 µs in ``wobble``)."""
    cfg = load_config(
        {
            "retrieve": {"backend": index},
            "serialize": {"backend": codec},
            "generate": {"backend": "none"},
        }
    )
    cols = []
    for s in STAGES:
        col = np.full(N, stage_ns.get(s, 0), dtype=np.int64)
        cols.append(col + 1000 * WOBBLE if s in wobble else col)
    return Report(
        label=label,
        config=cfg,
        stage_names=list(STAGES),
        samples_ns=np.stack(cols, axis=1),
        recall=np.ones(N),
        payload_bytes=np.full(N, 1000),
        wire_bytes=np.zeros(N, dtype=np.int64),
        prompt_tokens=np.full(N, 100),
        setup_ns={},
        dataset={"name": "hand-built"},
        info={"embedder": embedder, **(info or {})},
        repetition=repetition,
    ).to_record()


EVEN = {"embed": 9_700_000, "retrieve": 100_000, "rerank": 50_000, "serialize": 50_000}
EVEN |= {"transport": 50_000, "deserialize": 25_000, "prompt": 25_000}  # 10 ms in all


def test_the_dominant_stage_and_the_share_of_the_rest() -> None:
    lines = reading.run_reading([run_record("one", EVEN)])
    assert lines[0] == (
        "embed is 97.0 % of the time before first token; the other 6 stages share 3.0 %, "
        "most of it retrieve 1.0 %, rerank 0.5 %, serialize 0.5 %"
    )


def test_no_dominant_stage_names_the_largest() -> None:
    rec = run_record("flat", {"retrieve": 400_000, "rerank": 300_000, "serialize": 300_000})
    assert reading.run_reading([rec])[0] == (
        "retrieve is the largest stage at 40.0 % of the time before first token; "
        "the other 6 stages share 60.0 %, most of it rerank 30.0 %, serialize 30.0 %"
    )
    assert reading.runs.dominant_stage([rec]) is None
    assert reading.runs.dominant_stage([run_record("one", EVEN)]) == "embed"


def test_the_varied_codec_is_ranked_with_its_interval_and_its_share_of_the_total() -> None:
    # serialize + deserialize: json 100 + 12 = 112 µs, protobuf 90 + 10 = 100 µs: 1.12×
    json_rec = run_record(
        "json", {**EVEN, "serialize": 100_000, "deserialize": 12_000}, wobble=("serialize",)
    )
    proto = run_record(
        "protobuf",
        {**EVEN, "serialize": 90_000, "deserialize": 10_000},
        codec="protobuf",
        wobble=("serialize",),
    )
    lines = reading.run_reading([json_rec, proto])
    line = next(x for x in lines if x.startswith("codec ("))
    m = re.match(
        r"codec \(serialize \+ deserialize p50\): protobuf 1\.12× faster than json "
        r"\[(\d\.\d\d), (\d\.\d\d)\]; fastest to slowest codec: 12\.0 µs, 0\.1 % of the time",
        line,
    )
    assert m, line
    low, high = float(m[1]), float(m[2])
    assert 1.0 < low <= 1.12 <= high
    assert not any(x.startswith("WARNING") for x in lines)


def test_a_verdict_decided_by_noise_is_flagged() -> None:
    a = run_record("json", EVEN, wobble=("serialize",))
    b = run_record("orjson", EVEN, codec="orjson", wobble=("serialize",))
    lines = reading.run_reading([a, b])
    assert "within noise" in next(x for x in lines if x.startswith("codec ("))
    assert "WARNING: the codecs' differences are within noise; run with --repeat 5" in lines
    total = next(x for x in lines if "end to end" in x)
    assert total.startswith(
        "WARNING: end to end (total p50) the rows' differences are within noise"
    )
    assert "embed's own p50 alone is ±" in total  # embed dominates these rows


def test_two_axes_are_each_pooled_over_the_other() -> None:
    recs = [
        run_record(f"{i}/{c}", {**EVEN, "retrieve": r, "serialize": s}, index=i, codec=c)
        for i, r in (("hnsw", 100_000), ("lsh", 200_000))
        for c, s in (("json", 60_000), ("protobuf", 30_000))
    ]
    lines = reading.run_reading(recs)
    index = next(x for x in lines if x.startswith("index ("))
    codec = next(x for x in lines if x.startswith("codec ("))
    assert index.startswith(
        "index (retrieve p50, pooled over the other choices): hnsw 2.00× faster than lsh"
    )
    assert codec.startswith(
        "codec (serialize + deserialize p50, pooled over the other choices): protobuf 1.55× faster than json"
    )  # (60 + 25) / (30 + 25)
    # totals: hnsw/protobuf 9.98 ms, lsh/json 10.11 ms
    assert any(
        x.startswith("end to end (total p50): hnsw/protobuf fastest, lsh/json slowest, 1.01×")
        for x in lines
    )


def test_a_model_embedder_explains_the_cold_retrieval() -> None:
    rec = run_record(
        "hnsw/json", {**EVEN, "retrieve": 236_000, "embed": 9_000_000}, embedder="minilm"
    )
    note = next(x for x in reading.run_reading([rec]) if x.startswith("note:"))
    assert "embed stage (minilm) runs a model's forward pass" in note
    assert "(retrieve p50 here: hnsw 236 µs)" in note
    assert "`ragbench sweep` times search calls alone" in note
    fast = run_record("hnsw/json", {**EVEN, "embed": 10_000}, embedder="precomputed")
    assert not any(x.startswith("note:") for x in reading.run_reading([fast]))


def test_the_order_note_says_what_was_balanced() -> None:
    orders = [
        {
            "design": "balanced",
            "seed": 4,
            "configurations": 2,
            "positions": [10, 10],
            "query_offset": o,
        }
        for o in (0, 10)
    ]
    recs = [run_record(str(o["query_offset"]), EVEN, info={"order": o}) for o in orders]
    note = reading.runs.order_note(recs)
    assert note.startswith("order: balanced (seed 4) -- each of the 2 configurations ran 10 times")
    assert "offsets 0, 10" in note
    same = [{**o, "design": "same-query"} for o in orders]
    recs = [run_record(str(i), EVEN, info={"order": o}) for i, o in enumerate(same)]
    assert reading.runs.order_note(recs).startswith("order: same-query")
    apart = [{**r, "interleaved": False} for r in recs]
    assert reading.runs.order_note(apart).startswith("order: not interleaved")


# ---------------------------------------------------------------- sweeps, scale, load, diff


def point(index: str, recall: float, p50_ns: float, **query: Any) -> dict[str, Any]:
    lat = (p50_ns + WOBBLE).tolist()
    return {
        "kind": "sweep",
        "index": index,
        "recall": recall,
        "p50_us": p50_ns / 1e3,
        "query": query,
        "latency_ns": lat,
    }


def test_sweep_ranks_indexes_at_a_recall_all_reach() -> None:
    recs = [
        point("hnsw", 0.90, 50_000, ef=16),
        point("hnsw", 0.99, 80_000, ef=64),
        point("lsh", 0.95, 200_000, rescore=100),
    ]
    lines = reading.sweep_reading(recs)
    assert lines[0].startswith(
        "unfiltered: fastest point per index at recall ≥ 0.950 (the best all reach): hnsw ef=64 2.50× faster than lsh rescore=100 ["
    )
    # records without a recall target: the default one, said so
    assert lines[1] == (
        "unfiltered: cheapest point per index reaching recall ≥ 0.9, the default target "
        "(records without --recall-target): hnsw ef=16 (recall 0.900, p50 50.0 µs); "
        "lsh rescore=100 (recall 0.950, p50 200 µs)"
    )
    assert lines[-1].startswith("these times are retrieval alone")
    assert "WITHOUT a warm-up search" in lines[-1]  # the hand-built points say none


def load_record(label: str, offered: float, achieved: float, delay_us: float, **extra: Any) -> dict:
    return {
        "kind": "load",
        "label": label,
        "mode": "open",
        "offered_qps": offered,
        "achieved_qps": achieved,
        "dispatch_delay_p99_us": delay_us,
        "stage_share": {"retrieve": 0.8, "rerank": 0.2},
        **extra,
    }


def test_load_names_sustained_levels_and_capacity() -> None:
    recs = [
        load_record("hnsw", 100, 99.5, 50),
        load_record("hnsw", 1000, 600, 90),
        load_record("lsh", 100, 100, 20_000),
        load_record("lsh", 50, 50, 10, generator_ok=False, generator_note="sender CPU at 100 %"),
    ]
    lines = reading.load_reading(recs)
    assert lines[0] == (
        "retrieve is 80.0 % of each request's wall time at the lowest load level; "
        "the other stages share 20.0 %"
    )
    assert lines[1] == "highest offered rate sustained: hnsw 100 QPS, lsh none of the levels"
    assert "hnsw @ 1,000: achieved 600 of 1,000 QPS offered" in lines[2]
    assert "lsh @ 100: dispatch delay p99 20,000 µs > the 10,000 µs between arrivals" in lines[2]
    assert "lsh @ 50: sender CPU at 100 %" in lines[2]


def row(part: str, value: float, low: float, high: float, key: str = "hnsw/json") -> DiffRow:
    iv = intervals.Interval(value, low, high)
    return DiffRow(key, part, 1.0, value, iv, verdict(iv, 0.05))


def test_diff_says_the_total_verdict_and_the_largest_sure_change() -> None:
    lines = reading.diff_reading(
        [
            row("total", 0.8, 0.75, 0.85),
            row("retrieve", 0.5, 0.45, 0.55),
            row("rerank", 1.01, 0.98, 1.04),
        ]
    )
    assert lines == [
        "hnsw/json: B 1.25× faster than A [1.18, 1.33]; the largest sure change is retrieve: "
        "B 2.00× faster than A [1.82, 2.22]"
    ]
    lines = reading.diff_reading([row("total", 1.01, 0.97, 1.05)])
    assert lines[0] == "hnsw/json: no detectable difference (B / A 1.01 [0.97, 1.05])"
    assert lines[1].startswith("WARNING: no sure difference anywhere")


# ---------------------------------------------------------------- the chart


@pytest.mark.parametrize(("embed", "panels"), [(9_700_000, 2), (100_000, 1)])
def test_the_chart_gets_a_panel_without_a_dominant_stage(embed: int, panels: int, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from ragbench.results.plots import figure, pyplot

    recs = [
        run_record(c, {**EVEN, "embed": embed, "serialize": s}, codec=c)
        for c, s in (("json", 60_000), ("protobuf", 30_000))
    ]
    fig = figure(recs)
    try:
        assert len(fig.axes) == panels
        if panels == 2:
            rest = fig.axes[1]
            assert "embed dominates" in rest.get_title()
            # the second panel's scale is the other stages', not embed's
            assert rest.get_xlim()[1] < 1_000  # µs: the other stages sum to < 400 µs
            assert fig.axes[0].get_xlim()[1] > 9_000
        fig.savefig(tmp_path / "chart.png")
    finally:
        pyplot().close(fig)


# ---------------------------------------------------------------- from the command line


def test_every_command_prints_its_reading(tmp_path, capsys) -> None:
    from ragbench.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[dataset]\nname = "synthetic"\nn = 1000\ndim = 16\nn_queries = 20\n'
        '[run]\nqueries = 15\nwarmup = 1\n[retrieve]\nbackend = "flat"\n'
    )
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    outputs = []
    for argv in (
        ["run", "-c", str(cfg), "--out", str(a)],
        ["run", "-c", str(cfg), "--out", str(b)],
        ["report", str(a)],
        ["diff", str(a), str(b)],
        [
            "sweep",
            "--n",
            "1000",
            "--dim",
            "16",
            "--index",
            "hnsw",
            "--param",
            "ef=16,32",
            "--queries",
            "20",
        ],
    ):
        code = main(argv)
        captured = capsys.readouterr()
        assert code in (0, 1), captured.err  # diff exits 1 on a sure regression
        outputs.append(captured.out)
    run_out, _, report_out, diff_out, sweep_out = outputs
    share = re.compile(
        r"^\w+ (is|is the largest stage at) \d+\.\d % of the time before first token", re.M
    )
    assert share.search(run_out) and share.search(report_out)
    assert re.search(r"^flat/\S+: (B |no detectable difference)", diff_out, re.M)
    assert "these times are retrieval alone" in sweep_out


def test_compare_says_when_the_candidate_depth_decides_recall(tmp_path, capsys) -> None:
    """Exact re-scoring of 100 candidates: recall is the depth's; without re-scoring, the index's."""
    import json

    from ragbench.cli import main

    syn = ["--dataset", "synthetic", "--n", "2000", "--dim", "32", "--queries", "20"]
    out = tmp_path / "c.jsonl"
    assert main(["compare", *syn, "--index", "hnsw,flat,lsh", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    depth = {r["config"]["run"]["k_candidates"] for r in recs}
    assert depth == {100}  # compare's default: every index's top 100 re-scored by numba
    line = next(x for x in stdout.splitlines() if x.startswith("recall@10 is after"))
    assert "re-scored each index's top 100 candidates exactly" in line
    for r in recs:
        assert f"{r['label']} {r['recall_at_k']:.3f}" in line
    recalls = [r["recall_at_k"] for r in recs]
    same = max(recalls) - min(recalls) <= reading.runs.SAME_RECALL
    assert ("the candidate depth k_candidates=100, not the index, decides it" in line) == same

    # the index's own top k, no re-scoring: recall is the index's, and nothing is said
    argv = ["compare", *syn, "--index", "hnsw,flat", "--rerank", "none", "--k-candidates", "10"]
    assert main(argv) == 0
    assert "recall@10 is after" not in capsys.readouterr().out


def test_the_candidate_depth_note_names_equal_recalls() -> None:
    recs = []
    for name, recall in (("hnsw", 0.996), ("lsh", 0.990)):
        rec = run_record(name, EVEN, index=name)
        rec["recall_at_k"] = recall
        rec["config"]["rerank"] = {"backend": "numba"}
        recs.append(rec)
    (line,) = [x for x in reading.run_reading(recs) if x.startswith("recall@")]
    assert "(hnsw 0.996, lsh 0.990)" in line
    assert "k_candidates=100, not the index, decides it" in line
    recs[1]["recall_at_k"] = 0.95
    (line,) = [x for x in reading.run_reading(recs) if x.startswith("recall@")]
    assert "decides it" not in line

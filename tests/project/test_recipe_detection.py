"""``tools/recipe_detection.py``: the CI job it reads from the docs and the counts it reports."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "recipe_detection", ROOT / "tools" / "recipe_detection.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recipe_detection"] = module
    spec.loader.exec_module(module)
    return module


def test_the_documented_job_runs_each_pair_at_once_and_diffs_them_paired() -> None:
    tool = _tool()
    steps = tool.ci_steps()
    # both processes of a pair pinned to one CPU, their timed phases started together
    assert tool.design(steps) == "side by side on one CPU"
    assert tool.job_name(steps) == "side by side on one CPU, started together"
    assert {"RUNS", "QUERIES", "REPEAT"} <= set(steps[0].env)
    assert "ragbench diff base.jsonl head.jsonl --paired" in steps[-1].script
    at_once = [tool.Step("b", {}, "for i in 1 2; do a & b; wait; done")]
    assert tool.design(at_once) == "side by side"
    one_then_other = "for i in 1 2; do a 2>&1 && b >&2; done"
    assert tool.design([tool.Step("b", {}, one_then_other)]) == "alternated"
    pinned = "for i in 1 2; do taskset -c 0 a & taskset -c 0 b; wait; done"
    assert tool.design([tool.Step("b", {}, pinned)]) == "side by side on one CPU"
    assert tool.job_name([tool.Step("b", {}, "a & b; wait")]) == "side by side"


def _rec(kind: str, passed: bool, runs: int = 3, prefix_of: int | None = None) -> dict:
    return {
        "kind": kind,
        "passed": passed,
        "design": "side by side",
        "runs": runs,
        "queries": 400,
        "repeat": 2,
        "prefix_of": prefix_of,
        "load_before": 2.0,
        "load_after": 9.5,
        "seconds": 120.0 if prefix_of is None else 240.0,
        # the planted stage's ratio [value, low, high] per index
        "stage_ratio": {"hnsw": [1.2, 1.1 + passed / 10, 1.4], "lsh": [1.2, 1.15, 1.3]}
        if kind == "planted"
        else {"hnsw": [1.0, 0.9 + passed / 100, 1.1], "lsh": [1.0, 0.95, 1.05]},
        "slowdown": 0.2 if kind == "planted" else 0.0,
        "when": "2026-12-02T04:30:00Z",
        "diff_py_commit": "abc1234",
        "diff_py_edited": False,
    }


def test_the_summary_counts_each_job_size_apart(tmp_path: Path) -> None:
    recs = [_rec("aa", True), _rec("aa", False), _rec("aa", True)]
    recs += [_rec("planted", True), _rec("planted", False), _rec("aa", False, 2, prefix_of=3)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = {(r["runs"], r["prefix_of"]): r for r in _tool().summary(path)}
    assert set(rows) == {(3, None), (2, 3)}
    full = rows[3, None]
    assert (full["aa_passed"], full["aa_trials"], full["caught"], full["planted_trials"]) == (
        2,
        3,
        1,
        2,
    )
    assert (full["load_min"], full["load_max"], full["slowdown"]) == (2.0, 9.5, 0.2)
    assert (rows[2, 3]["aa_passed"], rows[2, 3]["aa_trials"]) == (0, 1)
    table = _tool().summary_markdown(path)
    assert "| side by side | 3 | 400 × 2 | 2 of 3 | 1 of 2 (20%) | 2.0–9.5 | 2.0 min |" in table
    assert "| side by side | 2 (the first 2 of 3) | 400 × 2 | 0 of 1 | 0 of 0 (0%) | " in table
    assert "| 2.0–9.5 | 4.0 min (its job) |" in table  # a prefix: the job it is cut from
    # the nearest the stage's interval came to the threshold: a planted miss's 1.1, an A/A's 0.95
    assert "| 2.0 min | 1.100 / 0.950 | — |" in table  # no pair ratios recorded: a dash


def test_the_summary_shows_how_far_the_a_a_pairs_drifted(tmp_path: Path) -> None:
    """The A/A pairs' lowest and highest head/base ratio over every index; planted ones ignored."""
    recs = [
        {**_rec("aa", True), "pair_ratios": {"hnsw": [0.98, 1.03], "lsh": [0.99, 1.01]}},
        {**_rec("aa", True), "pair_ratios": {"hnsw": [0.62, 1.0], "lsh": [1.0, 1.42]}},
        {**_rec("planted", True), "pair_ratios": {"hnsw": [1.2, 3.5], "lsh": [0.1, 1.2]}},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (row,) = _tool().summary(path)
    assert (row["aa_pair_min"], row["aa_pair_max"]) == (0.62, 1.42)
    assert "| 1.150 / 0.950 | 0.62–1.42 |" in _tool().summary_markdown(path)


def test_the_docs_marker_renders_the_counts_of_the_committed_results(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(_rec("aa", True)) + "\n" + json.dumps(_rec("planted", True)) + "\n")
    table = hooks.expand("<!-- gen: detection r.jsonl -->\n", tmp_path)
    assert "| side by side | 3 | 400 × 2 | 1 of 1 | 1 of 1 (20%) |" in table
    page = ROOT / "docs" / "how-to" / "comparing-runs.md"
    marker = "<!-- gen: detection ../findings/data/recipe-detection.jsonl -->"
    assert marker in page.read_text(encoding="utf-8")
    finding = ROOT / "docs" / "findings" / "2026-12-02-ci-recipe.md"
    assert "<!-- gen: detection data/recipe-detection.jsonl -->" in finding.read_text("utf-8")
    # the job the page shows was measured as it stands (its sizes changed: measure again)
    committed = ROOT / "docs" / "findings" / "data" / "recipe-detection.jsonl"
    assert "**this one**" in _tool().summary_markdown(committed)


def test_the_earlier_designs_drop_the_pinning_or_the_start_barrier_and_count_apart(
    tmp_path: Path,
) -> None:
    """``--two-cpus``/``--apart``: the page's job without its taskset or --start-together."""
    tool = _tool()
    page = tool.ci_steps()
    assert tool.variant(page) == page
    two_cpus = tool.variant(page, pinned=False)
    assert tool.job_name(two_cpus) == "side by side, started together"
    apart = tool.variant(page, together=False)
    assert tool.job_name(apart) == "side by side on one CPU"
    old = tool.variant(page, pinned=False, together=False)
    assert tool.job_name(old) == "side by side"
    bench = next(s.script for s in old if "bench()" in s.script)
    assert "taskset" not in bench and "--start-together" not in bench
    assert '"$head/.venv/bin/python" -m ragbench compare' in bench
    assert bench.count("bench ../base base.jsonl") == bench.count("bench . head.jsonl") == 2
    with pytest.raises(ValueError, match="taskset"):  # not the page's job: nothing to drop
        tool.variant(old)
    recs = [
        _rec("aa", True),
        _rec("planted", True),
        {**_rec("planted", False), "start_together": True},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = {r["design"]: r for r in tool.summary(path)}
    assert set(rows) == {"side by side", "side by side, started together"}
    assert (rows["side by side"]["caught"], rows["side by side"]["planted_trials"]) == (1, 1)
    together = rows["side by side, started together"]
    assert (together["caught"], together["planted_trials"], together["aa_trials"]) == (0, 1, 0)
    assert "| side by side, started together | 3 | 400 × 2 | 0 of 0 | 0 of 1 (20%) |" in (
        tool.summary_markdown(path)
    )

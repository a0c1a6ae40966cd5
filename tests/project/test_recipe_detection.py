"""``tools/recipe_detection.py``: the CI job it reads from the docs and the counts it reports."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

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
    assert tool.design(steps) == "side by side"
    assert {"RUNS", "QUERIES", "REPEAT"} <= set(steps[0].env)
    assert "ragbench diff base.jsonl head.jsonl --paired" in steps[-1].script
    at_once = [tool.Step("b", {}, "for i in 1 2; do a & b; wait; done")]
    assert tool.design(at_once) == "side by side"
    one_then_other = "for i in 1 2; do a 2>&1 && b >&2; done"
    assert tool.design([tool.Step("b", {}, one_then_other)]) == "alternated"


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
    assert "| 2.0 min | 1.100 / 0.950 |" in table


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


def test_start_together_adds_the_option_to_the_one_compare_command_and_counts_apart(
    tmp_path: Path,
) -> None:
    """``--start-together``: both sides' compare processes meet per pair; its trials are another job."""
    tool = _tool()
    steps = tool.started_together(tool.ci_steps())
    bench = next(s.script for s in steps if "bench()" in s.script)
    assert bench.count('--start-together "$head/.start-together/$i:2" --out "$head/$2"') == 1
    assert bench.count("bench ../base base.jsonl") == bench.count("bench . head.jsonl") == 2
    assert tool.design(steps) == "side by side"
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

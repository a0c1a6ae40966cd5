"""Issue 27, the readings: one memory method for every engine, pgvector's server CPU beside the
client's, intervals on the iso-recall figures, the machine named in every findings page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbench.cli import main
from ragbench.results import reading

SYN = ["--dataset", "synthetic", "--n", "3000", "--dim", "32", "--queries", "20"]


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.mark.slow  # three builds, each with its throw-away build (6 s)
def test_sweep_memory_is_one_method_for_every_engine(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "4000", "--dim", "64", "--queries", "20"]
    code = main([*argv, "--index", "flat,hnsw,ivf", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    recs = _records(out)
    assert {r["memory_method"] for r in recs} == {"pss-delta-new-files"}
    flat = next(r for r in recs if r["index"] == "flat")
    # the exact index holds the float vectors (4000 x 64 x 4 bytes; PSS is read in pages and
    # the heap moves a little: 0.8 of them at least), where its own accounting is the file
    assert flat["memory_bytes"] >= 0.8 * 4000 * 64 * 4
    assert all(r["engine_bytes"] > 0 for r in recs)  # each engine's own accounting kept beside
    assert "memory MB: PSS of ragbench's process and its child processes" in text


@pytest.mark.slow  # a sweep with its throw-away build (5 s)
def test_rescoring_reads_are_added_to_the_memory_column(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SYN, "--index", "flat", "--param", "rescore=50"]
    assert main([*argv, "--out", str(out)]) == 0
    (rec,) = _records(out)
    assert rec["rescore_bytes"] == 3000 * 32 * 4  # the float vectors re-scoring reads from
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "flat" in ln and "│" in ln)
    assert f"+ {3000 * 32 * 4 / 1e6:.1f}" in row


def _point(**extra: Any) -> dict[str, Any]:
    base = {
        "kind": "sweep",
        "index": "pgvector",
        "dataset": "d",
        "n": 10,
        "dim": 4,
        "metric": "ip",
        "k": 1,
        "build": {},
        "query": {"ef": 10},
        "recall": 1.0,
        "p50_us": 1000.0,
        "p99_us": 1000.0,
        "cpu_p50_us": 300.0,
        "cpu_ns": [300_000] * 5,
        "latency_ns": [1_000_000] * 5,
    }
    return base | extra


def test_the_wall_vs_cpu_warning_counts_the_servers_cpu() -> None:
    # wall 1000 µs: the client thread's CPU alone is 300 (3.3x, a warning on the old code);
    # with the server's 500 per query it is 800 (1.25x): the server worked, nobody waited
    with_server = _point(server_cpu_ns=[500_000] * 5, server_cpu_p50_us=500.0)
    lines = reading.sweep_reading([with_server])
    assert not any("wall time inflated" in ln for ln in lines)
    alone = reading.sweep_reading([_point()])
    assert any("wall time inflated" in ln for ln in alone)


@pytest.mark.slow
def test_pgvector_records_its_servers_cpu_per_query_and_its_memory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "2000", "--dim", "16", "--queries", "10"]
    assert main([*argv, "--index", "pgvector", "--param", "ef=20", "--out", str(out)]) == 0
    (rec,) = _records(out)
    assert len(rec["server_cpu_ns"]) == 10 and sum(rec["server_cpu_ns"]) > 0
    assert rec["server_cpu_p50_us"] > 0
    assert rec["memory_method"] == "pss-delta-new-files" and rec["memory_bytes"] > 0
    assert " srv" in capsys.readouterr().out


def _sampled(recall: float, latencies: list[float]) -> Any:
    from ragbench.results.reading.isorecall import Point

    lat = np.asarray(latencies, dtype=np.float64)
    p50 = float(np.sort(lat)[int(np.ceil(0.5 * lat.size)) - 1])  # nearest rank
    p99 = float(np.sort(lat)[int(np.ceil(0.99 * lat.size)) - 1])
    return Point(recall, p50, p99, lat, np.full(lat.size, recall))


def test_the_interpolated_latency_carries_its_interval_computed_by_hand() -> None:
    from ragbench.results.reading.isorecall import at_recall, ratio_interval

    # planted: every query at recall 0.9 takes 100 µs; at recall 1.0 half take 200, half 400
    # (nearest-rank p50 200). At 0.95, halfway: 150 µs. A resample of the 100 queries holds
    # 50 or more of the 200 µs ones about half the time (p50 200) and otherwise not (p50 400):
    # so every resample reads 150 or 250, and the 95 % interval is [150, 250].
    below = _sampled(0.9, [100.0] * 100)
    above = _sampled(1.0, [200.0] * 50 + [400.0] * 50)
    at = at_recall([below, above], 0.95)
    assert at.how == "interpolated" and at.p50_us == pytest.approx(150.0)
    assert at.p50_ci == pytest.approx((150.0, 250.0))
    # another engine, every query 290 µs at 0.9 and 310 at 1.0: 300 at 0.95, no spread of its
    # own; the ratio 300 / 150 = 2.0, and its interval 300 / 250 .. 300 / 150
    other = at_recall([_sampled(0.9, [290.0] * 100), _sampled(1.0, [310.0] * 100)], 0.95)
    assert other.p50_ci == pytest.approx((300.0, 300.0))
    assert ratio_interval(other, at) == pytest.approx((1.2, 2.0))


def test_the_sweep_reading_and_the_engines_table_show_the_intervals(tmp_path: Path) -> None:
    import importlib.util
    import sys

    recs = []
    for name, lats in (("hnsw", ([100.0] * 100, [200.0] * 50 + [400.0] * 50)),
                       ("usearch", ([290.0] * 100, [310.0] * 100))):  # fmt: skip
        for recall, lat in zip((0.9, 1.0), lats, strict=True):
            p = _sampled(recall, lat)
            recs.append(
                _point(index=name, query={"ef": int(recall * 100)}, recall=recall)
                | {"p50_us": p.p50_us, "p99_us": p.p99_us, "cpu_p50_us": None, "cpu_ns": None}
                | {"latency_ns": [int(x * 1e3) for x in lat], "recall_per_query": [recall] * 100}
                | {"recall_targets": [0.95]}
            )
    (line,) = [ln for ln in reading.sweep_reading(recs) if "at recall 0.95" in ln]
    assert "hnsw 150 µs [150–250]" in line and "(2.00× [1.20–2.00] hnsw)" in line
    path = tmp_path / "sweep.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("docs_hooks_t", root / "tools" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    sys.modules["docs_hooks_t"] = hooks
    spec.loader.exec_module(hooks)
    table = hooks._iso_recall_markdown(recs, "hnsw", ["sweep.jsonl"])
    assert "150 [150–250]" in table and "(2.00× [1.20–2.00])" in table


def _hooks() -> Any:
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("docs_hooks_m", root / "tools" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    sys.modules["docs_hooks_m"] = hooks
    spec.loader.exec_module(hooks)
    return hooks


def _first_machine(path: Path) -> str | None:
    """``CPU, N cores, SIMD`` of the first record in ``path`` that names one, read here."""
    from ragbench.results.tables.notes import simd_level

    if path.suffix == ".jsonl":
        for line in path.read_text().splitlines():
            env = json.loads(line).get("env") or {}
            if env.get("cpu"):
                flags = env.get("cpu_flags") or []
                return f"{env['cpu']}, {env.get('cores')} cores, {simd_level(flags)}"
        return None
    doc = json.loads(path.read_text())
    cpu = ((doc.get("machine_info") or {}).get("cpu") or {}) if isinstance(doc, dict) else {}
    if not cpu.get("brand_raw"):
        return None
    return f"{cpu['brand_raw']}, {cpu.get('count')} cores, {simd_level(cpu.get('flags') or [])}"


def test_every_findings_page_names_its_machine_from_the_records() -> None:
    root = Path(__file__).resolve().parents[2] / "docs" / "findings"
    hooks = _hooks()
    pages = sorted(p for p in root.glob("*.md") if p.name != "index.md")
    assert pages
    for page in pages:
        text = page.read_text()
        out = hooks.with_machine(text, root)
        assert "**Measured on** (from the records): " in out, page.name
        # right under the page's title
        title = out.index("\n", out.index("# "))
        assert out[title:].lstrip().startswith("**Measured on**"), page.name
        for data in hooks._page_data_files(text, root):
            machine = _first_machine(data)
            assert machine is None or machine in out, (page.name, data.name)


def test_a_findings_page_on_two_machines_says_so(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    intel = {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "cpu_flags": ["avx2"]}
    amd = {"cpu": "AMD EPYC", "cores": 4, "cpu_flags": ["avx2", "avx512f"], "load_avg": [3.5]}
    (data / "a.jsonl").write_text(json.dumps({"kind": "run", "env": intel}) + "\n")
    (data / "b.jsonl").write_text(json.dumps({"kind": "run", "env": amd}) + "\n")
    page = "# A finding\n\n<!-- gen: report data/a.jsonl -->\n\n<!-- gen: reproduce b.jsonl -->\n"
    out = _hooks().with_machine(page, tmp_path)
    assert out.startswith("# A finding\n\n**Measured on** (from the records): ")
    assert "Intel(R) Xeon(R) Processor, 2 cores, AVX2 (`a.jsonl`)" in out
    assert "AMD EPYC, 4 cores, AVX-512 (`b.jsonl`)" in out
    assert "1-min load average 3.5" in out and "more than one machine" in out


def test_the_engines_table_names_its_memory_method_in_the_header() -> None:
    hooks = _hooks()
    measured = hooks._engine_columns([{"memory_method": "pss-delta-new-files"}] * 2)
    assert "memory MB (PSS delta, new files)" in measured
    whole = hooks._engine_columns([{"memory_method": "pss-delta"}] * 2)
    assert "memory MB (PSS delta)" in whole  # committed records keep the method they were read by
    older = hooks._engine_columns([{"memory_bytes": 1}])
    assert "memory MB (each engine's own accounting)" in older
    footer = hooks._memory_text([_point(memory_bytes=10, memory_method="pss-delta-new-files")])
    assert footer.startswith("memory MB: PSS of ragbench's process and its child processes")
    assert "files mapped in between" in footer
    old = hooks._memory_text([_point(memory_bytes=10, memory_method="pss-delta")])
    assert "every mapping whole (method pss-delta" in old
    mixed = [_point(memory_bytes=1, memory_method=m) for m in ("pss-delta", "pss-delta-new-files")]
    assert "MIXED methods" in hooks._memory_text(mixed)

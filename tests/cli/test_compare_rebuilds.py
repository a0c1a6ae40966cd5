"""``ragbench compare --rebuilds N`` (issue #20), run as a user runs it: the console script, in a temp folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from ragbench import intervals
from ragbench.indexes import builds
from ragbench.results.rebuilds import seeded_build
from ragbench.results.records import read_records
from ragbench.settings.params import HnswBuild

#: two indexes whose recall depends on the build seed at this size (hnsw M=4 ef=4, ivf nprobe=1)
ARGS = [
    "compare",
    "--dataset",
    "synthetic",
    "--n",
    "3000",
    "--dim",
    "16",
    "--index",
    "hnsw+M=4+ef=4,ivf+nprobe=1",
    "--rerank",
    "none",
    "--codec",
    "json",
    "--transport",
    "inproc",
    "--queries",
    "60",
    "--warmup",
    "5",
]


def ragbench(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script in ``folder``, no index cached (every build is a build)."""
    exe = Path(sys.executable).with_name("ragbench")
    env = {**os.environ, builds.CACHE_MIN_ENV: "1e9"}
    return subprocess.run(
        [str(exe), *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same comparison without --rebuilds, with --rebuilds 1 and with --rebuilds 3."""
    folder = tmp_path_factory.mktemp("compare-rebuilds")
    out: dict[str, Any] = {}
    for name, extra in (
        ("plain", []),
        ("one", ["--rebuilds", "1"]),
        ("three", ["--rebuilds", "3"]),
    ):
        proc = ragbench(folder, *ARGS, *extra, "--out", f"{name}.jsonl")
        assert proc.returncode == 0, proc.stderr
        out[name] = read_records(folder / f"{name}.jsonl")
        out[f"{name}_stdout"] = proc.stdout
    return out


def bootstrap_ci(per_request: list[float]) -> tuple[float, float]:
    iv = intervals.bootstrap(np.asarray(per_request, dtype=np.float64), "mean")
    return iv.low, iv.high


def test_three_builds_per_configuration_merged_into_one_record(runs) -> None:
    plain, three = runs["plain"], runs["three"]
    assert [r["label"] for r in three] == [r["label"] for r in plain]
    seeds = {"hnsw": [100, 101, 102], "ivf": [1234, 1235, 1236]}
    for one, rec in zip(plain, three, strict=True):
        assert rec["rebuilds"] == 3
        backend = rec["config"]["retrieve"]["backend"]
        assert rec["info"]["index"]["build"]["seeds"] == seeds[backend]
        builds_recall = rec["recall_builds"]
        assert len(builds_recall) == 3
        # build 0 is the one-build run's build: deterministic, the same recall to the last digit
        assert builds_recall[0] == one["recall_at_k"]
        assert rec["recall_at_k"] == pytest.approx(np.mean(builds_recall))
        assert rec["recall_build_spread"] == pytest.approx(max(builds_recall) - min(builds_recall))
        # every build's requests pooled
        assert rec["requests"] == 3 * one["requests"] == 3 * 60
        assert all(len(v) == 180 for v in rec["samples_ns"].values())
        assert len(rec["recall"]) == 180 and rec["repeats"] == one["repeats"] == 1
        assert len(set(rec["repetition"])) == 3  # intervals resample the builds
        # the interval: the envelope of the builds', so at least as wide as one build's
        low, high = rec["recall_ci"]
        one_low, one_high = bootstrap_ci(one["recall"])
        assert low <= one_low and high >= one_high
        assert low <= min(builds_recall) <= max(builds_recall) <= high
    # the seeds took effect: ivf nprobe=1 on another k-means finds other neighbours
    assert any(len(set(r["recall_builds"])) > 1 for r in three)
    assert "3 builds per point (seed + i)" in runs["three_stdout"]
    for rec in three:  # the table's recall cell carries the envelope, as the footer says
        low, high = rec["recall_ci"]
        cell = f"{rec['recall_at_k']:.3f} [{low:.3f}–{high:.3f}]"
        assert cell in runs["three_stdout"], runs["three_stdout"]


def test_one_build_is_the_plain_comparison(runs) -> None:
    for plain, one in zip(runs["plain"], runs["one"], strict=True):
        assert set(one) == set(plain)
        assert "rebuilds" not in one and "recall_builds" not in one and "recall_ci" not in one
        assert one["recall"] == plain["recall"] and one["requests"] == plain["requests"]
        assert one["info"]["index"]["build"]["seed"] == plain["info"]["index"]["build"]["seed"]
    assert "builds per point" not in runs["one_stdout"]


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_a_bad_count_is_one_line_and_exit_2(tmp_path: Path, bad: str) -> None:
    proc = ragbench(tmp_path, *ARGS, "--rebuilds", bad)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "--rebuilds" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_seeded_build_moves_the_seed_and_keeps_the_kind() -> None:
    assert seeded_build("hnsw", {"M": 4}, 0) == {"M": 4}
    assert seeded_build("hnsw", {"M": 4}, 2) == {"M": 4, "seed": 102}  # hnsw's default is 100
    assert seeded_build("hnsw", {"seed": 7}, 1) == {"seed": 8}  # a given seed is the base
    typed = seeded_build("hnsw", HnswBuild(M=4), 1)
    assert isinstance(typed, HnswBuild) and msgspec.to_builtins(typed) == {"M": 4, "seed": 101}
    assert seeded_build("flat", {}, 3) == {}  # no seed: the same index every build
    assert seeded_build(None, {}, 3) == {}


def test_ctrl_c_between_builds_keeps_the_builds_done(tmp_path: Path) -> None:
    """Ctrl-C during build 2 of 40: the builds measured so far are merged and written, marked cut."""
    import signal
    import time

    exe = Path(sys.executable).with_name("ragbench")
    out, err = tmp_path / "c.jsonl", tmp_path / "err.txt"
    env = {**os.environ, builds.CACHE_MIN_ENV: "1e9"}
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [str(exe), *ARGS, "--rebuilds", "40", "--out", str(out)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 300
            while "build 2 of 40 measured" not in err.read_text():
                assert proc.poll() is None, err.read_text()
                assert time.monotonic() < deadline, "the builds never got going"
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert code == 130, err.read_text()
    assert err.read_text().splitlines()[-1].startswith("ragbench: interrupted")
    recs = read_records(out)
    assert [r["label"] for r in recs] == ["hnsw+M=4+ef=4", "ivf+nprobe=1"]
    for r in recs:
        # at least the two builds announced, never all 40
        assert 2 <= r["rebuilds"] < 40 and len(r["recall_builds"]) == r["rebuilds"]
        assert any("of 40 builds" in c for c in r["caveats"])
        assert r["recall_ci"][0] <= r["recall_at_k"] <= r["recall_ci"][1]

"""Issue 27: one ``sweep`` runs engines with different knobs, each on its own values, round by round.

``--param INDEX.NAME=...`` / ``--build INDEX.NAME=...`` give one index its own values
(ragbench.sweeps.data.grid_of): the vector-database sweeps at 100k and on pydocs had been three
commands each (LanceDB's ``ef`` grid apart), so their engines were measured minutes apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.sweeps.data import check_grid, grid_of

SYN = ["sweep", "--dataset", "synthetic", "--n", "3000", "--dim", "32", "--queries", "20"]


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_a_scoped_value_replaces_the_unscoped_one_for_its_index_only() -> None:
    given = {"ef": [10, 20], "lancedb.ef": [20, 40], "nprobes": [10], "hnsw.M": [8]}
    lancedb = {"ef", "nprobes", "refine_factor"}
    assert grid_of("lancedb", lancedb, given) == {"ef": [20, 40], "nprobes": [10]}
    assert grid_of("hnsw", {"ef", "M"}, given) == {"ef": [10, 20], "M": [8]}
    assert grid_of("chroma", {"ef"}, given) == {"ef": [10, 20]}


@pytest.mark.parametrize(
    ("indexes", "query", "words"),
    [
        # unscoped: a name none of the indexes takes
        (["hnsw", "lancedb"], {"nprobe": [1]}, ["'nprobe'", "none of hnsw, lancedb"]),
        # scoped to an index that does not take it, though another one does
        (["hnsw", "lancedb"], {"hnsw.nprobes": [10]}, ["'hnsw.nprobes'", "hnsw has no"]),
        # scoped to an index the sweep does not name
        (["hnsw", "chroma"], {"lancedb.ef": [20]}, ["'lancedb.ef'", "not among"]),
        (["hnsw"], {".ef": [20]}, ["'.ef'", "INDEX.NAME"]),
    ],
)
def test_a_parameter_no_index_named_takes_is_refused_by_name(
    indexes: list[str], query: dict[str, list[int]], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        check_grid(indexes, 32, "ip", {}, query)
    for word in words:
        assert word in str(err.value)


def test_the_cli_refuses_a_scoped_parameter_its_index_lacks_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.jsonl"
    argv = [*SYN, "--index", "hnsw,lancedb", "--param", "hnsw.nprobes=10", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'hnsw.nprobes'" in err[0], err
    assert not out.exists()  # refused before any data was made or any index built


@pytest.mark.slow  # three small engines, each built once (~10 s)
def test_engines_with_different_knobs_run_their_own_values_round_by_round(
    tmp_path: Path,
) -> None:
    """hnswlib on ``ef``, faiss IVF on ``nprobe``, LanceDB on its own ``ef`` (it refuses one
    under k x refine_factor = 20, so the shared 10 cannot be its) in one command: each engine
    measures exactly its values, and the file, written as points finish, goes round by round."""
    out = tmp_path / "s.jsonl"
    argv = [*SYN, "--index", "hnsw,ivf,lancedb", "--param", "ef=10,20,40"]
    argv += ["--param", "nprobe=1,4,16", "--param", "lancedb.ef=20,40"]
    argv += ["--build", "lancedb.index_type=ivf_hnsw_sq", "--param", "lancedb.nprobes=4"]
    argv += ["--param", "lancedb.refine_factor=2", "--out", str(out)]
    assert main(argv) == 0
    recs = _records(out)
    assert [r["index"] for r in recs] == ["hnsw", "ivf", "lancedb"] * 2 + ["hnsw", "ivf"]
    times = [r["time"] for r in recs]
    assert times == sorted(times)  # measured in the order the file holds them
    asked = {name: [r["query"] for r in recs if r["index"] == name] for name in ("hnsw", "ivf")}
    assert asked == {
        "hnsw": [{"ef": 10}, {"ef": 20}, {"ef": 40}],
        "ivf": [{"nprobe": 1}, {"nprobe": 4}, {"nprobe": 16}],
    }
    lance = [r for r in recs if r["index"] == "lancedb"]
    assert [r["query"] for r in lance] == [
        {"ef": e, "nprobes": 4, "refine_factor": 2} for e in (20, 40)
    ]
    assert {r["build"]["index_type"] for r in lance} == {"ivf_hnsw_sq"}
    assert all("index_type" not in r["build"] for r in recs if r["index"] != "lancedb")
    assert all(r.get("grid") is None for r in recs)  # every knob was given: nothing chosen

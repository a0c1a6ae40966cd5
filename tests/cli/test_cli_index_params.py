"""``--index NAME+KEY=VALUE``: per-index parameters in one interleaved ``compare``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.cli.configs import configurations
from ragbench.cli.pipelines import compare
from ragbench.errors import ConfigError

SYN = ["--dataset", "synthetic", "--n", "2000", "--dim", "32"]


def _combos(*argv: str) -> list[tuple[dict, str | None]]:
    ctx = compare.make_context("compare", list(argv))
    return [(cfg.to_dict(), label) for cfg, label in configurations(ctx.params, {})[0]]


def test_keys_go_to_search_or_build_by_the_backend_and_only_to_that_index() -> None:
    combos = _combos(*SYN, "--index", "hnsw+ef=20+M=8,flat,hnsw+build.seed=3+search.ef=99")
    assert [label for _, label in combos] == [
        "hnsw+ef=20+M=8",
        "flat",
        "hnsw+build.seed=3+search.ef=99",
    ]
    first, second, third = (cfg["retrieve"] for cfg, _ in combos)
    assert first["backend"] == "hnsw"
    assert (first["search"], first["build"]) == ({"ef": 20}, {"M": 8})
    assert (second["backend"], second["search"], second["build"]) == ("flat", {}, {})
    assert (third["search"], third["build"]) == ({"ef": 99}, {"seed": 3})


def test_set_params_still_apply_to_every_index_and_the_item_wins() -> None:
    combos = _combos(*SYN, "--index", "faiss-hnsw,hnsw+ef=20", "--set", "retrieve.build.seed=5")
    assert [cfg["retrieve"]["build"] for cfg, _ in combos] == [{"seed": 5}, {"seed": 5}]
    assert combos[1][0]["retrieve"]["search"] == {"ef": 20}
    # an index in the list that does not take the parameter is refused, named
    with pytest.raises(ConfigError, match="retrieve.build: unknown key 'seed' for backend 'flat'"):
        _combos(*SYN, "--index", "flat,hnsw+ef=20", "--set", "retrieve.build.seed=5")


def test_a_compare_runs_each_index_with_its_own_parameters(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.jsonl"
    argv = ["compare", *SYN, "--embed", "hashing", "--index", "hnsw+ef=10,hnsw+ef=200"]
    code = main(
        [*argv, "--k-candidates", "10", "--rerank", "none", "--queries", "20", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in recs] == ["hnsw+ef=10", "hnsw+ef=200"]
    assert [r["config"]["retrieve"]["search"]["ef"] for r in recs] == [10, 200]
    assert recs[1]["recall_at_k"] >= recs[0]["recall_at_k"]


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("hnsw+ef", "expected NAME+KEY=VALUE"),
        ("hnsw+other.x=1", "expected NAME+KEY=VALUE"),
        ("hnsw+bogus=1", "bogus"),
        ("nosuch+ef=1", "nosuch"),
    ],
)
def test_bad_items_are_one_line_and_exit_2(capsys, item: str, needle: str) -> None:
    code = main(
        ["compare", *SYN, "--embed", "hashing", "--index", f"flat,{item}", "--queries", "2"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert "Traceback" not in err


def test_an_embedded_engine_split_reaches_the_record_and_the_md_report(
    tmp_path: Path, capsys
) -> None:
    """LanceDB's ``last_parts()`` is a mapping: the run used to crash building the record."""
    out = tmp_path / "r.jsonl"
    argv = ["compare", *SYN, "--embed", "hashing", "--index", "hnsw,lancedb+nprobes=4"]
    code = main(
        [*argv, "--k-candidates", "10", "--rerank", "none", "--queries", "12", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    hnsw, lance = [json.loads(line) for line in out.read_text().splitlines()]
    assert "retrieve_parts" not in hnsw["info"]
    parts = lance["info"]["retrieve_parts"]
    assert list(parts) == ["send", "server", "decode"]
    assert sum(p["p50_ns"] for p in parts.values()) > 0
    assert main(["report", "--format", "md", str(out)]) == 0
    head, _, *rows = capsys.readouterr().out.strip().splitlines()
    cols = [c.strip() for c in head.strip("|").split("|")]
    for col in ("recall_p10", "index_build_s", "retrieve_send_p50_us", "retrieve_server_p50_us"):
        assert col in cols
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    at = cols.index("retrieve_server_p50_us")
    assert cells[0][at] == ""  # hnsw: no split
    assert float(cells[1][at].replace(",", "")) == pytest.approx(
        parts["server"]["p50_ns"] / 1e3, rel=0.01
    )
    # the md report rounds the build time to the digits it shows (15.484 s reads 15.5, 0.0448 s
    # reads 0.04): the cell is the value to within half a unit of its last shown digit, whatever
    # the build took (abs=0.01 failed on builds of 10 s or more, 3 digits on builds under 0.1 s)
    build_s = lance["setup_s"]["index_build"]
    shown = cells[1][cols.index("index_build_s")].replace(",", "")
    last_digit = 10.0 ** -len(shown.partition(".")[2])
    assert float(shown) == pytest.approx(build_s, abs=0.5 * last_digit + 1e-12)
    ratio = cols.index("retrieve_x_first")
    assert cells[0][ratio] == "1.00"
    want = lance["summary"]["retrieve"]["p50_us"] / hnsw["summary"]["retrieve"]["p50_us"]
    assert float(cells[1][ratio].replace(",", "")) == pytest.approx(want, rel=0.01)


def _config_file(tmp_path: Path) -> Path:
    """A config naming hnsw with its build/search parameters and numba with one of its own."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[dataset]\nname = "synthetic"\nn = 2000\ndim = 32\n'
        '[embed]\nbackend = "hashing"\ndim = 32\n'
        "[run]\nk_candidates = 10\n"
        '[retrieve]\nbackend = "hnsw"\nbuild = { M = 8, ef_construction = 40 }\n'
        "search = { ef = 30 }\n"
        '[rerank]\nbackend = "numba"\nparallel = false\n'
        '[serialize]\nbackend = "protobuf"\nshape = "columnar"\n'
        '[transport]\nbackend = "http"\ntimeout = 7.5\n'
    )
    return cfg


def test_with_a_config_file_another_index_or_reranker_starts_from_its_own_defaults(
    tmp_path: Path, capsys
) -> None:
    """``-c FILE --index hnsw,lsh``: hnsw keeps the file's M/ef, lsh gets none of them (it exited 2)."""
    out = tmp_path / "r.jsonl"
    argv = ["compare", "-c", str(_config_file(tmp_path)), "--index", "hnsw,lsh,flat"]
    argv += ["--rerank", "numba,numpy", "--transport", "inproc", "--queries", "5", "--warmup", "1"]
    code = main([*argv, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    recs = {r["label"]: r["config"] for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(recs) == sorted(
        f"{i}/{r}" for i in ("hnsw", "lsh", "flat") for r in ("numba", "numpy")
    )
    for label, cfg in recs.items():
        index, rerank = label.split("/")
        own = index == "hnsw"  # the index the file names keeps its parameters
        assert cfg["retrieve"]["backend"] == index
        assert cfg["retrieve"]["build"] == ({"M": 8, "ef_construction": 40} if own else {})
        assert cfg["retrieve"]["search"] == ({"ef": 30} if own else {})
        assert ("parallel" in cfg["rerank"]) == (rerank == "numba"), cfg["rerank"]
        assert cfg["serialize"]["shape"] == "columnar"  # a payload setting every codec takes
        assert cfg["transport"] == {"backend": "inproc"}  # not http's timeout


def test_set_still_reaches_every_index_of_a_config_files_list(tmp_path: Path) -> None:
    cfg = str(_config_file(tmp_path))
    combos = _combos("-c", cfg, "--index", "hnsw,faiss-hnsw", "--set", "retrieve.build.seed=5")
    # --set's build table replaces the file's (as in run); faiss-hnsw gets only what --set gave
    assert [c["retrieve"]["build"] for c, _ in combos] == [{"seed": 5}, {"seed": 5}]
    assert [c["retrieve"]["search"] for c, _ in combos] == [{"ef": 30}, {}]
    with pytest.raises(ConfigError, match="retrieve.build: unknown key 'seed' for backend 'lsh'"):
        _combos("-c", cfg, "--index", "hnsw,lsh", "--set", "retrieve.build.seed=5")


def test_with_a_config_file_another_embedder_or_transport_starts_from_its_defaults(
    tmp_path: Path,
) -> None:
    cfg = str(_config_file(tmp_path))
    [(one, _)] = _combos("-c", cfg, "--embed", "minilm")
    assert one["embed"] == {"backend": "minilm", "re_embed": False}  # not hashing's dim
    [(kept, _)] = _combos("-c", cfg, "--embed", "hashing")
    assert kept["embed"]["dim"] == 32
    combos = _combos("-c", cfg, "--transport", "inproc,http,grpc+reply=stream")
    transports = [c["transport"] for c, _ in combos]
    assert transports[0] == {"backend": "inproc"}
    assert transports[1]["timeout"] == 7.5  # the file's http keeps its timeout
    assert transports[2] == {"backend": "grpc", "reply": "stream"}

"""``--payload-shape`` / ``[serialize] shape``: configurations, labels, records, far side, bad values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ragbench as rb
from ragbench.cli import main
from ragbench.cli.configs import configurations
from ragbench.cli.pipelines import compare
from ragbench.errors import ConfigError

SYN = ["--dataset", "synthetic", "--n", "2000", "--dim", "32"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _combos(*argv: str) -> tuple[list[tuple[dict, str | None]], set[str]]:
    ctx = compare.make_context("compare", list(argv))
    combos, varying = configurations(ctx.params, {})
    return [(cfg.to_dict(), label) for cfg, label in combos], varying


def test_payload_shape_is_an_axis_next_to_the_codec() -> None:
    combos, varying = _combos(
        *SYN, "--index", "flat,hnsw", "--codec", "protobuf", "--payload-shape", "row,columnar"
    )
    assert [label for _, label in combos] == [
        "flat/row",
        "flat/columnar",
        "hnsw/row",
        "hnsw/columnar",
    ]
    assert [cfg["serialize"]["shape"] for cfg, _ in combos] == ["row", "columnar"] * 2
    assert varying == {"retrieve", "payload_shape"}
    combos, _ = _combos(
        *SYN, "--index", "flat,hnsw", "--codec", "protobuf,json", "--payload-shape", "row,columnar"
    )
    assert "hnsw/protobuf/columnar" in [label for _, label in combos]
    assert len(combos) == 8


def test_without_the_option_nothing_changes() -> None:
    combos, varying = _combos(*SYN, "--codec", "protobuf,json")
    assert all("shape" not in cfg["serialize"] for cfg, _ in combos)
    assert [label for _, label in combos] == ["protobuf", "json"]
    # one shape given: fixed for every row, named in the "same in every row" line, not the labels
    combos, varying = _combos(*SYN, "--codec", "protobuf,json", "--payload-shape", "columnar")
    assert [label for _, label in combos] == ["protobuf", "json"]
    assert all(cfg["serialize"]["shape"] == "columnar" for cfg, _ in combos)
    assert varying == {"serialize"}


def test_config_shape_reaches_the_codec() -> None:
    cfg = {"dataset": {"name": "synthetic", "n": 500, "dim": 8}, "serialize": {"shape": "columnar"}}
    with rb.Pipeline.from_config(cfg) as pipe:
        assert pipe.components.codec.shape == "columnar"
        assert pipe.describe() == "hnsw/numba/protobuf/columnar/inproc"
    with pytest.raises(ConfigError, match="unknown shape 'rows'.*row, columnar"):
        rb.Pipeline.from_config({"serialize": {"shape": "rows"}})


def test_compare_shapes_through_a_real_far_side(tmp_path: Path, capsys) -> None:
    """The far side (an HTTP server in a child process) decodes with the same shape, or the
    run would stop early: a row decoder refuses a columnar msgspec-json document."""
    out = tmp_path / "shapes.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "flat",
        "--codec",
        "protobuf,msgspec-json",
        "--payload-shape",
        "row,columnar",
        "--transport",
        "http",
        "--with-embeddings",
        "--queries",
        "8",
        "--warmup",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    labels = ["protobuf/row", "protobuf/columnar", "msgspec-json/row", "msgspec-json/columnar"]
    assert [r["label"] for r in recs] == labels
    for label in labels:
        assert label in stdout
    assert "payload_shape" not in stdout.split("same in every row:")[1].splitlines()[0]
    for r in recs:
        assert not r.get("error")
        assert r["requests"] == 8
        assert r["config"]["serialize"]["shape"] == r["label"].split("/")[1]
        assert r["info"]["payload_shape"] == r["label"].split("/")[1]
        assert "deserialize" in r["stages"]
    by = {r["label"]: r for r in recs}
    # 10 hits x 32-d float32 travel in both shapes: base64 in JSON, raw in protobuf
    for codec in ("protobuf", "msgspec-json"):
        row = by[f"{codec}/row"]["payload_bytes"]
        col = by[f"{codec}/columnar"]["payload_bytes"]
        assert min(row) > 10 * 32 * 4 and min(col) > 10 * 32 * 4


def test_fixed_shape_shows_in_the_same_in_every_row_line(capsys) -> None:
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "flat",
        "--codec",
        "protobuf,msgpack",
        "--payload-shape",
        "columnar",
        "--queries",
        "5",
        "--warmup",
        "1",
    )
    assert code == 0, err
    assert "payload_shape=columnar" in stdout


def test_run_payload_shape(tmp_path: Path, capsys) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[dataset]\nname = "synthetic"\nn = 1000\ndim = 16\n[run]\nqueries = 5\nwarmup = 1\n'
    )
    out = tmp_path / "r.jsonl"
    code, stdout, err = cli(
        capsys, "run", "-c", str(config), "--payload-shape", "columnar", "--out", str(out)
    )
    assert code == 0, err
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["config"]["serialize"]["shape"] == "columnar"
    assert rec["label"] == "hnsw/numba/protobuf/columnar/inproc"
    assert rec["info"]["payload_shape"] == "columnar"
    assert rec["label"] in stdout


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compare", *SYN, "--payload-shape", "row,columns"], "columns"),
        (["compare", *SYN, "--payload-shape", "row,"], "--payload-shape"),
        (["compare", *SYN, "--codec", "json", "--set", 'serialize.shape="wide"'], "wide"),
        (["load", *SYN, "--qps", "10", "--payload-shape", "tall"], "tall"),
        (["run", "-c", "bench/configs/default.toml", "--payload-shape", "tall"], "tall"),
    ],
)
def test_bad_payload_shape_is_one_line_and_exit_2(capsys, argv, needle) -> None:
    code, _, err = cli(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0] and "Traceback" not in err

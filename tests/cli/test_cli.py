from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench.cli import main

SYN = ["--dataset", "synthetic", "--n", "2000", "--dim", "32"]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_record(rec: dict) -> None:
    assert rec["schema"] == "ragbench.run/1"
    for stage in (
        "embed",
        "retrieve",
        "rerank",
        "serialize",
        "transport",
        "deserialize",
        "prompt",
        "generate",
    ):
        assert stage in rec["stages"], stage
    samples = np.array([rec["samples_ns"][s] for s in rec["stages"]]).T
    assert samples.shape == (rec["requests"], len(rec["stages"]))
    assert rec["requests"] > 0
    assert rec["env"]["cores"] >= 1


def test_compare_synthetic_side_by_side(tmp_path: Path, capsys) -> None:
    out = tmp_path / "res.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "flat,hnsw",
        "--codec",
        "json,protobuf",
        "--queries",
        "25",
        "--warmup",
        "2",
        "--out",
        str(out),
    )
    assert code == 0, err
    for label in ("flat/json", "flat/protobuf", "hnsw/json", "hnsw/protobuf"):
        assert label in stdout
    recs = read(out)
    assert [r["label"] for r in recs] == [
        "flat/json",
        "flat/protobuf",
        "hnsw/json",
        "hnsw/protobuf",
    ]
    for rec in recs:
        check_record(rec)
    assert all(r["recall_at_k"] == 1.0 for r in recs if r["label"].startswith("flat"))
    assert all(r["recall_at_k"] > 0.8 for r in recs)


def test_compare_pydocs_with_hashing_embedder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "res.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        "--dataset",
        "pydocs",
        "--embed",
        "hashing",
        "--index",
        "flat,lsh",
        "--rerank",
        "numba,python",
        "--queries",
        "30",
        "--warmup",
        "2",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = read(out)
    assert len(recs) == 4
    for rec in recs:
        check_record(rec)
        assert rec["dataset"]["name"] == "pydocs"
    flat = [r for r in recs if r["label"].startswith("flat/")]
    assert all(r["recall_at_k"] == 1.0 for r in flat)
    assert "pydocs" in stdout


def test_run_and_report(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[dataset]\nname = "synthetic"\nn = 1000\ndim = 16\nn_queries = 20\n'
        '[run]\nqueries = 15\nwarmup = 1\n[retrieve]\nbackend = "flat"\n[serialize]\nbackend = "json"\n'
    )
    out = tmp_path / "r.jsonl"
    code, stdout, err = cli(capsys, "run", "-c", str(cfg), "--out", str(out))
    assert code == 0, err
    assert "before first token" in stdout
    code, _, err = cli(
        capsys, "run", "-c", str(cfg), "--out", str(out), "--set", 'serialize.backend="protobuf"'
    )
    assert code == 0, err
    assert len(read(out)) == 2  # appended, not overwritten
    for fmt, needle in (
        ("table", "flat"),
        ("md", "| label"),
        ("csv", "label,"),
        ("json", '"label"'),
    ):
        code, stdout, err = cli(capsys, "report", str(out), "--format", fmt)
        assert code == 0, err
        assert needle in stdout
    png = tmp_path / "p.png"
    code, stdout, err = cli(capsys, "report", str(out), "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compare", *SYN, "--index", "nope"], "nope"),
        (["compare", *SYN, "--codec", "xml"], "xml"),
        (["compare", *SYN, "--k-candidates", "ten"], "ten"),
        (["compare", "--dataset", "no-such-dataset"], "no-such-dataset"),
        (["compare", *SYN, "--set", "retrieve.bogus=1"], "bogus"),
        (["run", "-c", "/nonexistent.toml"], "nonexistent"),
        (["report", "/nonexistent.jsonl"], "nonexistent"),
        (["compare", "--frobnicate"], "frobnicate"),
        (["compare", *SYN, "--k-candidates", "10,inf"], "inf"),
        (["compare", "--n", "2k", "--index", "flat,lsh", "--codec", "json,xml"], "xml"),
        (["compare", *SYN, "--set", "retrieve"], "TABLE.KEY=VALUE"),
        (["sweep", "--index", "hnsw", "--n", "10x"], "10x"),
        (["sweep", "--index", "hnsw", "--param", "ef"], "NAME=V1,V2"),
        (["sweep", "--index", "hnsw", "--param", "bogus=1"], "bogus"),
        (["sweep", "--index", "no-such", "--n", "1k"], "no-such"),
        (["scale", "--index", "flat", "--n", "1k,inf"], "inf"),
        (["scale", "--index", "flat", "--n", "1k", "--build", "hnsw.M=8"], "hnsw"),
        (["scale", "--index", "flat", "--n", "1k", "--recall", "1.5"], "--recall"),
        (["load", "--qps", "10,inf"], "inf"),
        (["load", "--qps", "nan"], "nan"),
        (["load", "--qps", "10", "--duration", "0"], "--duration"),
        (["load", "--qps", "10", "--set", 'rerank.backend="no-such"'], "no-such"),
        (["stub-llm", "--port", "70000"], "70000"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle) -> None:
    code, stdout, err = cli(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err


def test_malformed_results_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": "ragbench.run/1", "kind": "run"}\nnot json\n')
    code, _, err = cli(capsys, "report", str(bad))
    # the cut line 2 is skipped and named in a warning; the whole line 1 is not a record
    assert code == 2 and "skipped 1 line(s)" in err and "(line 2;" in err
    assert "bad.jsonl:1: run record lacks field 'stages'" in err


def test_every_combination_is_checked_before_any_set_up(capsys, monkeypatch) -> None:
    from ragbench import datasets

    def no_loading(*a, **k):
        raise AssertionError("a dataset was loaded before the configs were checked")

    monkeypatch.setattr(datasets, "load", no_loading)
    monkeypatch.setattr(datasets.catalogue, "load", no_loading)  # from_table calls it
    code, _, err = cli(capsys, "compare", *SYN, "--index", "flat,hnsw", "--codec", "json,xml")
    assert code == 2 and "xml" in err and "AssertionError" not in err


@pytest.mark.parametrize(
    "command",
    ["", "datasets", "run", "compare", "sweep", "scale", "load", "report", "stub-llm"],
)
def test_help_everywhere(capsys, command) -> None:
    code, stdout, _ = cli(capsys, *([command] if command else []), "--help")
    assert code == 0
    assert "Usage" in stdout


def test_console_script_exits_2_without_traceback() -> None:
    exe = Path(sys.executable).with_name("ragbench")
    proc = subprocess.run(
        [str(exe), "compare", "--index", "nope", *SYN], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_datasets_lists_bundled(capsys) -> None:
    code, stdout, err = cli(capsys, "datasets")
    assert code == 0, err
    assert "pydocs" in stdout and "synthetic" in stdout


def test_compare_rerankers_show_the_sort_share(tmp_path: Path, capsys) -> None:
    out = tmp_path / "rr.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "flat",
        "--rerank",
        "numba,numpy,python",
        "--k-candidates",
        "500",
        "--queries",
        "20",
        "--warmup",
        "2",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = {r["label"]: r for r in read(out)}
    assert set(recs) == {"numba", "numpy", "python"}  # labels name only what varies
    assert (
        "same in every row:" in stdout
        and "retrieve=flat" in stdout
        and "k_candidates=500" in stdout
    )
    for rec in recs.values():
        assert (
            rec["recall_at_k"] == 1.0
        )  # every reranker returns the exact top k of exact candidates
        assert 0.0 < rec["summary"]["rerank"]["share"] < 1.0


def test_k_candidates_sweep_raises_recall_after_rerank_for_lsh(tmp_path: Path, capsys) -> None:
    out = tmp_path / "kc.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "lsh,minhash-lsh",
        "--k-candidates",
        "10,100,1000",
        "--queries",
        "30",
        "--warmup",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    recall = {r["label"]: r["recall_at_k"] for r in read(out)}
    for index in ("lsh", "minhash-lsh"):
        r10, r100, r1000 = (recall[f"{index}/kc={kc}"] for kc in (10, 100, 1000))
        assert r10 <= r100 <= r1000, (index, r10, r100, r1000)
    assert recall["lsh/kc=1000"] > recall["lsh/kc=10"]
    assert recall["lsh/kc=1000"] > 0.9


def test_compare_stat_option_and_wire_bytes_column(tmp_path: Path, capsys) -> None:
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "flat",
        "--codec",
        "json",
        "--transport",
        "inproc,http",
        "--queries",
        "10",
        "--warmup",
        "1",
        "--stat",
        "p99",
    )
    assert code == 0, err
    assert "p99 µs per stage" in stdout and "wire B" in stdout
    assert "inproc" in stdout and "http" in stdout
    code, _, err = cli(capsys, "compare", *SYN, "--stat", "p42")
    assert code == 2 and "p42" in err


@pytest.mark.integration
def test_stub_llm_command_serves_openai_streaming_on_loopback() -> None:
    import http.client
    import signal

    exe = Path(sys.executable).with_name("ragbench")
    with subprocess.Popen(
        [str(exe), "stub-llm", "--port", "0", "--base-ms", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "simulated" in line and "http://127.0.0.1:" in line, line
            port = int(line.rsplit(":", 1)[1].split("/")[0])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(
                "POST",
                "/v1/chat/completions",
                body=json.dumps(
                    {
                        "model": "x",
                        "stream": True,
                        "max_tokens": 2,
                        "messages": [{"role": "user", "content": "hi"}],
                    }
                ),
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            body = resp.read().decode()
            conn.close()
            assert resp.status == 200
            assert resp.getheader("X-Ragbench-Stub") == "simulated"
            assert body.rstrip().endswith("data: [DONE]")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_compare_on_a_users_own_jsonl_corpus(tmp_path: Path, capsys) -> None:
    words = [
        "index",
        "vector",
        "query",
        "token",
        "latency",
        "payload",
        "chunk",
        "embedding",
        "server",
        "cache",
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": " ".join(words[(i + j) % 10] for j in range(12))})
            + "\n"
            for i in range(300)
        )
    )
    (tmp_path / "queries.jsonl").write_text(
        "".join(
            json.dumps({"id": f"q{i}", "text": f"{words[i % 10]} {words[(i + 3) % 10]}"}) + "\n"
            for i in range(20)
        )
    )
    out = tmp_path / "r.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        "--dataset",
        str(corpus),
        "--embed",
        "hashing",
        "--index",
        "flat,hnsw",
        "--queries",
        "20",
        "--warmup",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = read(out)
    assert [r["dataset"]["n"] for r in recs] == [300, 300]
    assert recs[0]["recall_at_k"] == 1.0


@pytest.mark.parametrize(
    ("index", "setting", "named"),
    [
        ("lsh", "retrieve.search.ef=128", "retrieve.search: unknown key 'ef' for backend 'lsh'"),
        (
            "hnsw,lsh",
            "retrieve.search.ef=128",
            "retrieve.search: unknown key 'ef' for backend 'lsh'",
        ),
        ("hnsw,flat", "retrieve.build.M=8", "retrieve.build: unknown key 'M' for backend 'flat'"),
    ],
)
def test_compare_refuses_a_set_parameter_a_combination_does_not_take(
    index: str, setting: str, named: str
) -> None:
    exe = Path(sys.executable).with_name("ragbench")
    proc = subprocess.run(
        [str(exe), "compare", "--index", index, "--set", setting],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert named in proc.stderr and proc.stdout == ""


def test_compare_applies_a_set_parameter_to_every_index() -> None:
    from ragbench.cli.configs import configurations
    from ragbench.cli.pipelines import compare

    ctx = compare.make_context(
        "compare", ["--index", "faiss-hnsw,hnsw", "--set", "retrieve.search.ef=32"]
    )
    combos, varying = configurations(ctx.params, {})
    assert [(c.retrieve.backend, c.to_dict()["retrieve"]["search"]) for c, _ in combos] == [
        ("faiss-hnsw", {"ef": 32}),
        ("hnsw", {"ef": 32}),
    ]
    assert varying == {"retrieve"}

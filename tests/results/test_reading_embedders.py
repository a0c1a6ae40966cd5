"""The reading ranks embedder configurations against MiniLM on torch (issue 29), through
`ragbench report` on hand-built records whose stage times are known."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_reading import EVEN, run_record

from ragbench.cli import main

REST = sum(v for k, v in EVEN.items() if k != "embed")  # every stage but embed, ns


def _runtime(label: str, runtime: str, embed_ns: int, **agreement: float) -> dict[str, object]:
    info: dict[str, object] = {"embedder_info": {"runtime": runtime, "query_only": True}}
    if agreement:
        info["embed_agreement"] = {"reference": "minilm torch", "k": 10, **agreement}
    rec = run_record(label, EVEN | {"embed": embed_ns}, embedder="minilm", info=info)
    return dict(rec)


def _report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], records: list[dict[str, object]]
) -> list[str]:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert main(["report", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def test_each_runtime_against_torch_on_embed_and_the_whole_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch_ns, int8_ns, onnx_ns = 8_000_000, 2_000_000, 4_000_000
    lines = _report(
        tmp_path,
        capsys,
        [
            _runtime("torch", "torch", torch_ns),
            _runtime("int8", "onnx-int8", int8_ns, top_k_mean=0.93, top_k_min=0.6),
            _runtime("onnx", "onnx", onnx_ns, top_k_mean=1.0, top_k_min=1.0),
        ],
    )
    found = [line for line in lines if re.match(r"minilm:\S+: embed ", line)]
    # fastest first; every request's stages are constant, so the intervals are the point
    whole = (torch_ns + REST) / (int8_ns + REST)
    saved = 100 * (torch_ns - int8_ns) / (torch_ns + REST)
    assert found[0] == (
        f"minilm:onnx-int8+query-only: embed {torch_ns / int8_ns:.2f}× faster than minilm:torch "
        f"[{torch_ns / int8_ns:.2f}, {torch_ns / int8_ns:.2f}], whole request {whole:.2f}× faster "
        f"than minilm:torch [{whole:.2f}, {whole:.2f}], {saved:.1f} % of minilm:torch's time "
        "before first token saved; top-10 agreement 0.93 (min 0.60)"
    )
    assert found[1].startswith(f"minilm:onnx+query-only: embed {torch_ns / onnx_ns:.2f}× faster")
    assert len(found) == 2


def test_a_slower_configuration_and_no_torch_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _report(
        tmp_path,
        capsys,
        [_runtime("a", "onnx", 3_000_000), _runtime("b", "openvino", 6_000_000)],
    )
    # without torch the slowest on embed is the reference: openvino, 2x slower than onnx
    found = [line for line in lines if line.startswith("minilm:onnx+query-only: embed")]
    assert found and "embed 2.00× faster than minilm:openvino+query-only" in found[0]
    assert "agreement" not in found[0]  # the records carry none


def test_agreement_once_per_embedder_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agree = {"top_k_mean": 0.9, "top_k_min": 0.5, "cosine_mean": 0.99, "cosine_p1": 0.98}
    rows = [_runtime(f"int8/{i}", "onnx-int8", 2_000_000, **agree) for i in ("flat", "hnsw")]
    rows[1]["config"]["retrieve"]["backend"] = "hnsw"  # type: ignore[index]
    lines = _report(tmp_path, capsys, [_runtime("torch", "torch", 8_000_000), *rows])
    found = [line for line in lines if "against minilm torch" in line]
    assert found == [
        "minilm:onnx-int8+query-only: against minilm torch: top-10 agreement 0.90 (min 0.50 "
        "over queries), query cosine mean 0.9900, p1 0.9800"
    ]

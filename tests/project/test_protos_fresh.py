"""The committed generated protobuf code matches what protos/ generates now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gen_protos():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "tools" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) regenerates the code")
    gen = _gen_protos()
    written = gen.generate(tmp_path)
    assert sorted(p.name for p in written) == sorted(gen.GENERATED)
    for path in written:
        committed = gen.OUT_DIR / path.name
        assert committed.exists(), f"{committed} missing: run python tools/gen_protos.py"
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed.relative_to(ROOT)} is stale: run python tools/gen_protos.py"
        )


def test_generated_module_is_the_schema() -> None:
    from ragbench.codecs._pb import retrieval_pb2

    descriptor = retrieval_pb2.DESCRIPTOR
    assert descriptor.name == "ragbench/v1/retrieval.proto"
    assert descriptor.package == "ragbench.v1"
    hit = descriptor.message_types_by_name["Hit"]
    assert [f.name for f in hit.fields] == ["doc_id", "score", "text", "metadata", "embedding"]
    assert hit.fields_by_name["score"].type == hit.fields_by_name["score"].TYPE_DOUBLE
    assert hit.fields_by_name["embedding"].has_presence

"""The committed generated protobuf code matches what protos/ generates now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
    message = descriptor.message_types_by_name["RetrievalResult"]
    assert list(descriptor.message_types_by_name) == ["RetrievalResult"]
    assert [f.name for f in message.fields] == [
        "query_id",
        "query",
        "doc_ids",
        "scores",
        "texts",
        "metadata_counts",
        "metadata_keys",
        "metadata_values",
        "embedding_dims",
        "embeddings",
    ]
    fields = message.fields_by_name
    assert fields["scores"].type == fields["scores"].TYPE_DOUBLE
    assert fields["embedding_dims"].type == fields["embedding_dims"].TYPE_SINT32
    assert fields["embeddings"].type == fields["embeddings"].TYPE_BYTES
    # Field 3 (the row-shaped draft's `repeated Hit hits`) must never be reused.
    assert 3 not in message.fields_by_number

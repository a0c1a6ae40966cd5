from __future__ import annotations

import subprocess
import sys

import pytest

import ragbench as rb
from ragbench._registry import Registry
from ragbench.errors import ConfigError, UnknownBackendError

KINDS = [rb.indexes, rb.rerankers, rb.codecs, rb.embedders, rb.transports, rb.generators]


@pytest.mark.parametrize("kind", KINDS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_unknown_backend_lists_known_names(kind) -> None:
    with pytest.raises(UnknownBackendError) as info:
        kind.create("no-such-backend")
    assert isinstance(info.value, ValueError)
    for name in kind.names():
        assert name in str(info.value)


def test_design_names_are_registered() -> None:
    assert {"flat", "hnsw", "faiss-hnsw", "ivf", "lsh", "minhash-lsh"} <= set(rb.indexes.names())
    assert {"numba", "numpy", "python"} <= set(rb.rerankers.names())
    # A pipeline's rerank = "none" is no rerank stage, not a reranker.
    assert "none" not in rb.rerankers.names()
    assert {"json", "orjson", "msgspec-json", "msgpack", "protobuf"} <= set(rb.codecs.names())
    assert {"minilm", "hashing", "precomputed"} <= set(rb.embedders.names())
    assert {"inproc", "http", "grpc"} <= set(rb.transports.names())
    assert {"none", "stub", "openai"} <= set(rb.generators.names())


def test_register_callable_and_lazy_string() -> None:
    reg: Registry[object] = Registry("things", {})
    reg.register("dict", dict)
    reg.register("ordered", "collections:OrderedDict")
    assert reg.create("dict", a=1) == {"a": 1}
    assert type(reg.create("ordered")).__name__ == "OrderedDict"
    assert reg.names() == ["dict", "ordered"]
    with pytest.raises(ConfigError):
        reg.register("bad", "not-a-target")
    with pytest.raises(ConfigError):
        reg.register("", dict)


def test_listing_names_imports_nothing_heavy() -> None:
    code = (
        "import sys, ragbench as rb\n"
        "for kind in (rb.indexes, rb.rerankers, rb.codecs, rb.embedders, rb.transports, rb.generators):\n"
        "    kind.names()\n"
        "heavy = [m for m in ('numpy', 'faiss', 'torch', 'numba', 'grpc', 'hnswlib', 'sentence_transformers') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_entry_point_plugins_are_discovered(tmp_path, monkeypatch) -> None:
    dist = tmp_path / "ragbench_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ragbench-plugin-demo\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[ragbench.codecs]\ndemo-codec = collections:OrderedDict\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[object] = Registry("codecs", {"json": "json:JSONDecoder"})
    assert "demo-codec" in reg.names()
    assert type(reg.create("demo-codec")).__name__ == "OrderedDict"


def test_unregister_removes_and_unknown_is_an_error() -> None:
    reg: Registry[object] = Registry("things", {"a": "collections:OrderedDict"})
    reg.unregister("a")
    assert "a" not in reg
    with pytest.raises(UnknownBackendError):
        reg.unregister("a")

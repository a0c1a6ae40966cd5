"""Retriever → LLM payload encodings behind one :class:`Codec` protocol.

Every codec turns a :class:`ragbench.RetrievalResult` into bytes and back:
``codec.decode(codec.encode(r)) == r``. Bad payloads raise
:class:`ragbench.errors.DecodeError`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .._registry import Registry
from ..types import RetrievalResult

__all__ = ["Codec", "create", "names", "register", "registry"]


@runtime_checkable
class Codec(Protocol):
    name: str
    content_type: str
    max_payload_bytes: int

    def encode(self, result: RetrievalResult) -> bytes: ...
    def decode(self, payload: bytes) -> RetrievalResult: ...


registry: Registry[Codec] = Registry(
    "codecs",
    {
        "json": "ragbench.codecs.json_codecs:StdlibJsonCodec",
        "orjson": "ragbench.codecs.json_codecs:OrjsonCodec",
        "msgspec-json": "ragbench.codecs.json_codecs:MsgspecJsonCodec",
        "msgpack": "ragbench.codecs.msgpack_codec:MsgpackCodec",
        "protobuf": "ragbench.codecs.protobuf_codec:ProtobufCodec",
    },
)
create = registry.create
names = registry.names
register = registry.register

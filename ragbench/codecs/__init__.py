"""Retriever → LLM payload encodings behind one :class:`Codec` protocol.

Every codec turns a :class:`ragbench.RetrievalResult` into bytes and back:
``codec.decode(codec.encode(r)) == r``. Bad payloads raise
:class:`ragbench.errors.DecodeError`. The built-in codecs take
``shape="row" | "columnar"`` (:data:`SHAPES`): the schema message they write, and
``library_round_trip(result)``: a call running the library's own encode and decode of the
payload on native objects built beforehand (not part of the protocol: a codec of another
project need not have it).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .._registry import Registry
from ..types import RetrievalResult

__all__ = ["SHAPES", "Codec", "create", "names", "register", "registry"]

#: Payload shapes of the built-in codecs (their ``shape`` parameter): ``row`` writes
#: ``ragbench.v1.RetrievalResult`` (one Hit message per hit), ``columnar`` writes
#: ``ragbench.v1.RetrievalResultColumns`` (parallel columns). Both decode to the same result.
SHAPES = ("row", "columnar")


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

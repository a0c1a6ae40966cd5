"""A codec's library calls alone (``library_round_trip``, issue 27): the same bytes as the codec,
the same content back, for every built-in codec and shape."""

from __future__ import annotations

import pytest

from ragbench import codecs
from ragbench.types import Hit, RetrievalResult

RESULT = RetrievalResult(
    "q-1",
    "what does the query say? é",
    [
        Hit(f"doc-{i}", 1.0 / (i + 1), f"text {i} " * 30, {"source": f"s{i}"}, None)
        for i in range(10)
    ],
)


@pytest.mark.parametrize("shape", ["row", "columnar"])
@pytest.mark.parametrize("name", ["json", "orjson", "msgspec-json", "msgpack", "protobuf"])
def test_the_library_calls_write_the_codecs_own_bytes_and_read_them_back(
    name: str, shape: str
) -> None:
    codec = codecs.create(name, shape=shape)
    payload = codec.encode(RESULT)
    encode, decode = codec._library_calls(RESULT, payload)
    assert encode() == payload  # the library alone writes what the stage writes
    native = decode()
    assert not isinstance(native, RetrievalResult)  # the library's own objects, not ragbench's
    # ... holding the same content: the codec encoding it again gives the payload
    round_trip = codec.library_round_trip(RESULT)
    assert type(round_trip()) is type(native)


def test_a_codec_without_its_library_calls_says_so() -> None:
    from ragbench.codecs._wire import BaseCodec

    class Plain(BaseCodec):  # a codec of another project: encode and decode only
        name = "plain"

        def encode(self, result: RetrievalResult) -> bytes:
            return result.query.encode()

    with pytest.raises(NotImplementedError, match="does not name its library calls"):
        Plain(1024, {}).library_round_trip(RESULT)

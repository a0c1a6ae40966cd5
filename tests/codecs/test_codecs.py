"""Contract, round-trip, cross-check and bad-input tests for every registered codec."""

from __future__ import annotations

import base64
import json
import logging
import math
import struct

import msgspec
import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.codecs import Codec
from ragbench.codecs._pb import retrieval_pb2 as pb
from ragbench.errors import ConfigError, DecodeError, InputError

ALL = rb.codecs.names()
JSON_CODECS = ["json", "orjson", "msgspec-json"]
BUILTIN = ["json", "orjson", "msgspec-json", "msgpack", "protobuf"]

SAMPLE = rb.RetrievalResult(
    query_id="q1",
    query="what is a codec?",
    hits=[
        rb.Hit("d1", 0.75, "first chunk", {"src": "a", "page": "3"}, None),
        rb.Hit("d2", -1.5e-300, "second 𝄞 chunk", {}, struct.pack("<3f", 1.0, -2.5, 0.0)),
        rb.Hit("", 0.0, "", {"": ""}, b""),
    ],
)

settings.register_profile(
    "codecs",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# Every registered codec as it is created by default (the row shape), and every
# built-in one again with shape="columnar" (tests/codecs/test_codecs_columnar.py has the rest).
CODEC_SHAPES = [(name, None) for name in ALL] + [(name, "columnar") for name in BUILTIN]


@pytest.fixture(
    params=CODEC_SHAPES,
    ids=[name if shape is None else f"{name}-{shape}" for name, shape in CODEC_SHAPES],
)
def codec(request: pytest.FixtureRequest) -> Codec:
    name, shape = request.param
    params = {} if shape is None else {"shape": shape}
    return rb.codecs.create(name, **params)  # type: ignore[no-any-return]


# --- contract ----------------------------------------------------------------------------


def test_builtin_names_registered() -> None:
    assert set(BUILTIN) <= set(ALL)


def test_contract(codec: Codec) -> None:
    assert isinstance(codec, Codec)
    assert codec.name in ALL
    assert codec.content_type.startswith("application/")
    assert codec.max_payload_bytes == 64 * 1024 * 1024
    payload = codec.encode(SAMPLE)
    assert type(payload) is bytes
    for form in (payload, bytearray(payload), memoryview(payload)):
        back = codec.decode(form)
        assert back == SAMPLE
        assert type(back) is rb.RetrievalResult
        assert all(type(h) is rb.Hit for h in back.hits)


def test_content_types() -> None:
    types = {name: rb.codecs.create(name).content_type for name in BUILTIN}
    assert types == {
        "json": "application/json",
        "orjson": "application/json",
        "msgspec-json": "application/json",
        "msgpack": "application/msgpack",
        "protobuf": "application/x-protobuf",
    }


@pytest.mark.parametrize("name", BUILTIN)
def test_unknown_option_names_valid_ones(name: str) -> None:
    with pytest.raises(ConfigError, match="unknown parameter 'colour'.*max_payload_bytes"):
        rb.codecs.create(name, colour="red")


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_bad_max_payload_bytes(name: str, bad: object) -> None:
    with pytest.raises(ConfigError, match="max_payload_bytes"):
        rb.codecs.create(name, max_payload_bytes=bad)


def test_unknown_codec_lists_known() -> None:
    with pytest.raises(ConfigError, match="protobuf"):
        rb.codecs.create("yaml")


def test_empty_result(codec: Codec) -> None:
    empty = rb.RetrievalResult("", "", [])
    assert codec.decode(codec.encode(empty)) == empty


# --- round trips (hypothesis) --------------------------------------------------------------

# Any Unicode scalar value: astral characters yes, lone surrogates (category Cs) no.
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
# Large texts built by repetition: big payloads without exhausting hypothesis' entropy.
big_texts = st.one_of(
    texts, st.builds(lambda s, n: (s or 'é𝄞"\\') * n, texts, st.integers(500, 5000))
)
finite_scores = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1.7976931348623157e308, -1e-300, 1e300]),
)
embeddings = st.one_of(
    st.none(),
    st.sampled_from([0, 1, 3]).flatmap(lambda dim: st.binary(min_size=4 * dim, max_size=4 * dim)),
    st.builds(lambda b: b * 384, st.binary(min_size=4, max_size=4)),  # dim 384
)
hits = st.builds(
    rb.Hit,
    doc_id=texts,
    score=finite_scores,
    text=big_texts,
    metadata=st.dictionaries(texts, texts, max_size=4),
    embedding=embeddings,
)
results = st.builds(
    rb.RetrievalResult, query_id=texts, query=texts, hits=st.lists(hits, max_size=5)
)


def _same_scores(a: rb.RetrievalResult, b: rb.RetrievalResult) -> None:
    for x, y in zip(a.hits, b.hits, strict=True):
        assert math.copysign(1.0, x.score) == math.copysign(1.0, y.score)
        assert type(y.score) is float


@pytest.mark.parametrize("shape", ["row", "columnar"])
@pytest.mark.parametrize("name", BUILTIN)
@settings(settings.get_profile("codecs"))
@given(result=results)
def test_round_trip_property(name: str, shape: str, result: rb.RetrievalResult) -> None:
    codec = rb.codecs.create(name, shape=shape)
    back = codec.decode(codec.encode(result))
    assert back == result
    _same_scores(result, back)


@pytest.mark.parametrize("score", [math.nan, math.inf, -math.inf, -0.0])
def test_special_scores_round_trip(codec: Codec, score: float) -> None:
    # Decision: NaN and +-inf round-trip (proto3 JSON spells them "NaN",
    # "Infinity", "-Infinity"); NaN != NaN, so compare with isnan.
    result = rb.RetrievalResult("q", "x", [rb.Hit("d", score, "t")])
    back = codec.decode(codec.encode(result)).hits[0].score
    if math.isnan(score):
        assert math.isnan(back)
    else:
        assert back == score
        assert math.copysign(1.0, back) == math.copysign(1.0, score)


def test_embedding_vector_round_trip(codec: Codec) -> None:
    import numpy as np

    vec = np.linspace(-1, 1, 384, dtype=np.float32)
    back = codec.decode(
        codec.encode(rb.RetrievalResult("q", "x", [rb.Hit("d", 1.0, "t", {}, vec)]))
    )
    np.testing.assert_array_equal(back.hits[0].vector(), vec)


@pytest.mark.parametrize("name", JSON_CODECS)
def test_json_escaped_surrogate_pair_is_fine(name: str) -> None:
    back = rb.codecs.create(name).decode(b'{"query": "\\ud83d\\ude00 \\\\ud800"}')
    assert back.query == "\U0001f600 \\ud800"


def test_lone_surrogate_is_input_error(codec: Codec) -> None:
    bad = rb.RetrievalResult("q", "x", [rb.Hit("d", 1.0, "bad \ud800 text")])
    with pytest.raises(InputError):
        codec.encode(bad)


# --- proto3 JSON cross-checks with google.protobuf.json_format -------------------------------


def _to_message(result: rb.RetrievalResult) -> pb.RetrievalResult:
    message = pb.RetrievalResult(query_id=result.query_id, query=result.query)
    for h in result.hits:
        message.hits.add(
            doc_id=h.doc_id, score=h.score, text=h.text, metadata=h.metadata, embedding=h.embedding
        )
    return message


def _from_message(message: pb.RetrievalResult) -> rb.RetrievalResult:
    return rb.RetrievalResult(
        message.query_id,
        message.query,
        [
            rb.Hit(
                h.doc_id,
                h.score,
                h.text,
                dict(h.metadata),
                h.embedding if h.HasField("embedding") else None,
            )
            for h in message.hits
        ],
    )


@pytest.mark.parametrize("name", JSON_CODECS)
@settings(settings.get_profile("codecs"))
@given(result=results)
def test_json_format_parses_what_we_write(name: str, result: rb.RetrievalResult) -> None:
    payload = rb.codecs.create(name).encode(result)
    message = json_format.Parse(payload, pb.RetrievalResult())
    assert _from_message(message) == result


@pytest.mark.parametrize("name", JSON_CODECS)
@pytest.mark.parametrize("preserve", [False, True])
@settings(settings.get_profile("codecs"))
@given(result=results)
def test_we_parse_what_json_format_writes(
    name: str, preserve: bool, result: rb.RetrievalResult
) -> None:
    text = json_format.MessageToJson(_to_message(result), preserving_proto_field_name=preserve)
    assert rb.codecs.create(name).decode(text.encode()) == result


@pytest.mark.parametrize("name", JSON_CODECS)
def test_json_special_scores_match_json_format(name: str) -> None:
    result = rb.RetrievalResult(
        "q", "x", [rb.Hit("a", math.nan, ""), rb.Hit("b", math.inf, ""), rb.Hit("c", -math.inf, "")]
    )
    payload = rb.codecs.create(name).encode(result)
    assert [h["score"] for h in json.loads(payload)["hits"]] == ["NaN", "Infinity", "-Infinity"]
    parsed = json_format.Parse(payload, pb.RetrievalResult())
    assert math.isnan(parsed.hits[0].score)
    assert [h.score for h in parsed.hits[1:]] == [math.inf, -math.inf]
    back = rb.codecs.create(name).decode(json_format.MessageToJson(parsed).encode())
    assert math.isnan(back.hits[0].score)
    assert [h.score for h in back.hits[1:]] == [math.inf, -math.inf]


@pytest.mark.parametrize("name", JSON_CODECS)
def test_json_output_style(name: str) -> None:
    # Documented choice: original proto field names, every field written,
    # "embedding": null when absent, bytes as standard padded base64.
    doc = json.loads(rb.codecs.create(name).encode(SAMPLE))
    assert list(doc) == ["query_id", "query", "hits"]
    assert list(doc["hits"][0]) == ["doc_id", "score", "text", "metadata", "embedding"]
    assert doc["hits"][0]["embedding"] is None
    assert doc["hits"][1]["embedding"] == base64.b64encode(SAMPLE.hits[1].embedding).decode()
    assert doc["hits"][2]["embedding"] == ""


@pytest.mark.parametrize("name", JSON_CODECS)
@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({}, rb.RetrievalResult("", "", [])),
        ({"queryId": "q", "hits": [{}]}, rb.RetrievalResult("q", "", [rb.Hit("", 0.0)])),
        (
            {
                "query_id": None,
                "query": "x",
                "hits": [{"docId": "d", "score": None, "metadata": None}],
            },
            rb.RetrievalResult("", "x", [rb.Hit("d", 0.0)]),
        ),
        (
            {"hits": [{"doc_id": "d", "score": "1.5", "embedding": "AACAPw"}]},
            rb.RetrievalResult("", "", [rb.Hit("d", 1.5, "", {}, struct.pack("<f", 1.0))]),
        ),
        (
            {"hits": [{"score": 3, "embedding": "-_-__g"}]},  # int score; URL-safe base64
            rb.RetrievalResult("", "", [rb.Hit("", 3.0, "", {}, b"\xfb\xff\xbf\xfe")]),
        ),
    ],
)
def test_json_proto3_input_rules(name: str, doc: dict, expected: rb.RetrievalResult) -> None:
    codec = rb.codecs.create(name)
    assert codec.decode(json.dumps(doc).encode()) == expected
    # json_format reads the same document the same way.
    assert _from_message(json_format.Parse(json.dumps(doc), pb.RetrievalResult())) == expected


# --- protobuf specifics --------------------------------------------------------------------


def test_protobuf_backend_recorded() -> None:
    from google.protobuf.internal import api_implementation

    from ragbench.codecs import protobuf_codec

    assert protobuf_codec.backend() == api_implementation.Type()
    assert rb.codecs.create("protobuf").backend == api_implementation.Type()  # type: ignore[attr-defined]


def test_protobuf_python_backend_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ragbench.codecs import protobuf_codec

    monkeypatch.setattr(protobuf_codec, "backend", lambda: "python")
    with caplog.at_level(logging.WARNING):
        rb.codecs.create("protobuf")
    assert any("pure-Python backend" in r.getMessage() for r in caplog.records)


def test_protobuf_wire_is_the_schema() -> None:
    payload = rb.codecs.create("protobuf").encode(SAMPLE)
    assert _from_message(pb.RetrievalResult.FromString(payload)) == SAMPLE
    assert rb.codecs.create("protobuf").decode(_to_message(SAMPLE).SerializeToString()) == SAMPLE


def test_protobuf_unknown_fields_policy() -> None:
    # Top level: rejected (foreign payload). Inside a hit: ignored, as proto3
    # does, so a newer schema can add Hit fields.
    codec = rb.codecs.create("protobuf")
    one = codec.encode(rb.RetrievalResult("q", "x", [rb.Hit("a", 1.0)]))
    with pytest.raises(DecodeError, match=r"unknown field number\(s\) \[9\]"):
        codec.decode(one + _len_field(9, b"new"))
    hit = _len_field(1, b"a") + _len_field(15, b"from a newer schema")
    assert codec.decode(_len_field(3, hit)) == rb.RetrievalResult("", "", [rb.Hit("a", 0.0)])


def test_protobuf_accepts_non_canonical_known_fields() -> None:
    # Two concatenated messages merge (repeated hits append): valid protobuf.
    codec = rb.codecs.create("protobuf")
    one = rb.RetrievalResult("q", "x", [rb.Hit("a", 1.0)])
    merged = codec.decode(codec.encode(one) + codec.encode(one))
    assert merged == rb.RetrievalResult("q", "x", [rb.Hit("a", 1.0), rb.Hit("a", 1.0)])


# --- bad inputs ----------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


BAD: dict[str, list[bytes]] = {
    "json-family": [
        b"",
        b"[1, 2]",
        b'"just a string"',
        b"42",
        b"null",
        b'{"query_id": 5}',
        b'{"hits": [{"doc_id": 7, "score": 1.0}]}',
        b'{"hits": [{"doc_id": "d", "score": "high"}]}',
        b'{"hits": [{"doc_id": "d", "score": true}]}',
        b'{"hits": [{"doc_id": "d", "score": 1e400}]}',
        b'{"hits": [{"doc_id": "d", "score": NaN}]}',
        b'{"hits": {"doc_id": "d"}}',
        b'{"hits": [{"metadata": {"k": 1}}]}',
        b'{"hits": [{"metadata": ["k"]}]}',
        b'{"hits": [{"embedding": "not base64!"}]}',
        b'{"hits": [{"embedding": "AAAA"}]}',
        b'{"hits": [{"embedding": 12}]}',
        b'{"hits": [5]}',
        b'{"unknown": 1}',
        b'{"query_id": "a", "query": "b", "hits": [], "extra": 1}',
        b'{"hits": [{"doc_id": "d", "extra": 1}]}',
        b'{"query_id": "a", "queryId": "b"}',
        b'{"query_id": "a"',
        b'{"query_id": "a"} trailing',
        b'{"query_id": "\xff\xfe"}',
        b'{"query": "lone \\ud800 surrogate"}',
        b'{"hits": [{"metadata": {"\\udc00": "v"}}]}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"hits": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"hits": [{"metadata": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}]}",
    ],
    "msgpack": [
        b"",
        b"\x92\x01\x02",  # [1, 2]
        msgspec.msgpack.encode({"query_id": 5}),
        msgspec.msgpack.encode({"hits": [{"doc_id": 7}]}),
        msgspec.msgpack.encode({"hits": [{"score": "high"}]}),
        msgspec.msgpack.encode({"hits": [{"embedding": b"abc"}]}),
        msgspec.msgpack.encode({"unknown": 1}),
        msgspec.msgpack.encode({"hits": [{"doc_id": "d", "extra": 1}]}),
        msgspec.msgpack.encode({"query": "x"})[:-1],
        b"\x91" * 100_000 + b"\xc0",
        b"\x81\xa4hits" + b"\x91" * 100_000 + b"\xc0",
        b"\xc1",
    ],
    "protobuf": [
        b"\x0a",  # truncated length
        b"\x0a\x05ab",  # truncated string
        _len_field(1, b"\xff\xfe"),  # invalid UTF-8 in query_id
        b"\x08\x01",  # field 1 as a varint: wrong wire type, kept as unknown
        _len_field(9, b"x"),  # unknown field
        _len_field(3, _len_field(5, b"abc")),  # embedding not float32
        _len_field(3, b"\x11\x00\x00"),  # truncated double
        _len_field(3, b"\x1b" * 100_000),  # 100k nested groups
        b"\x1b" * 100_000,
        bytes(range(256)),
        b"\xff" * 64,
    ],
}


def _bad_for(name: str) -> list[bytes]:
    return BAD["json-family" if name in JSON_CODECS else name]


@pytest.mark.parametrize("name", BUILTIN)
def test_bad_payloads_raise_decode_error(name: str) -> None:
    codec = rb.codecs.create(name)
    for payload in _bad_for(name):
        with pytest.raises(DecodeError) as info:
            codec.decode(payload)
        assert isinstance(info.value, ValueError)
        assert info.value.codec == name


def test_ragbench_checks_catch_what_upb_accepts() -> None:
    # Guard against vacuous bad inputs: these parse fine in upb itself, so only
    # ragbench's own checks (top-level unknown fields, float32 length) reject them.
    for payload in [b"\x08\x01", _len_field(9, b"x"), _len_field(3, _len_field(5, b"abc"))]:
        pb.RetrievalResult.FromString(payload)
        assert payload in BAD["protobuf"]
        with pytest.raises(DecodeError):
            rb.codecs.create("protobuf").decode(payload)


@pytest.mark.parametrize("name", BUILTIN)
def test_truncated_payloads(name: str) -> None:
    codec = rb.codecs.create(name)
    payload = codec.encode(SAMPLE)
    for cut in range(1, len(payload)):
        try:
            back = codec.decode(payload[:cut])
        except DecodeError:
            continue
        # A prefix may happen to be a complete, smaller valid protobuf message
        # (fields end on a boundary); it must never equal the whole.
        assert name == "protobuf"
        assert back != SAMPLE


@pytest.mark.parametrize("name", BUILTIN)
def test_oversized_rejected_before_parsing(name: str) -> None:
    codec = rb.codecs.create(name, max_payload_bytes=100)
    ok = codec.encode(rb.RetrievalResult("q", "x", []))
    assert codec.decode(ok) == rb.RetrievalResult("q", "x", [])
    with pytest.raises(DecodeError, match="max_payload_bytes=100"):
        codec.decode(b"\x00" * 101)
    with pytest.raises(DecodeError, match="max_payload_bytes=100"):
        codec.decode(memoryview(codec.encode(SAMPLE)))


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("payload", ["a string", 12, None, [1]])
def test_non_bytes_payload(name: str, payload: object) -> None:
    with pytest.raises(DecodeError, match="bytes"):
        rb.codecs.create(name).decode(payload)  # type: ignore[arg-type]

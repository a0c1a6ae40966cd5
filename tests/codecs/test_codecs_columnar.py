"""The columnar payload shape (``shape="columnar"``, ``ragbench.v1.RetrievalResultColumns``).

Round trips against the row shape for every built-in codec, the wire checked
against the generated message and ``google.protobuf.json_format``, and payloads
whose columns disagree rejected with DecodeError.
"""

from __future__ import annotations

import base64
import json
import math
import random
import struct

import msgspec
import numpy as np
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.codecs import SHAPES
from ragbench.codecs._pb import retrieval_pb2 as pb
from ragbench.errors import ConfigError, DecodeError, InputError

BUILTIN = ["json", "orjson", "msgspec-json", "msgpack", "protobuf"]
JSON_CODECS = ["json", "orjson", "msgspec-json"]

SAMPLE = rb.RetrievalResult(
    query_id="q1",
    query="what is a column? ✓",
    hits=[
        rb.Hit("d1", 0.75, "first chunk", {"src": "a", "page": "3"}, None),
        rb.Hit("d2", -1.5e-300, "second 𝄞 chunk", {}, struct.pack("<3f", 1.0, -2.5, 0.0)),
        rb.Hit("", 0.0, "", {"": ""}, b""),
    ],
)


def _uniform(n: int, dim: int) -> rb.RetrievalResult:
    rng = np.random.default_rng(n * 1000 + dim)
    return rb.RetrievalResult(
        "q",
        "query",
        [
            rb.Hit(
                f"doc-{i}",
                float(1.0 - i / 10),
                f"text {i} é",
                {"source": "pydocs", "i": str(i)},
                rng.standard_normal(dim).astype("<f4"),
            )
            for i in range(n)
        ],
    )


def columnar(name: str) -> rb.codecs.Codec:
    return rb.codecs.create(name, shape="columnar")  # type: ignore[no-any-return]


# --- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN)
def test_shape_option(name: str) -> None:
    assert SHAPES == ("row", "columnar")
    assert rb.codecs.create(name).shape == "row"  # type: ignore[attr-defined]
    for shape in SHAPES:
        assert rb.codecs.create(name, shape=shape).shape == shape  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("bad", ["columns", "", None, 1, "ROW"])
def test_unknown_shape_lists_the_shapes(name: str, bad: object) -> None:
    with pytest.raises(ConfigError, match=r"unknown shape .*valid shapes: row, columnar"):
        rb.codecs.create(name, shape=bad)


def test_row_is_the_default_and_unchanged() -> None:
    for name in BUILTIN:
        assert rb.codecs.create(name).encode(SAMPLE) == rb.codecs.create(name, shape="row").encode(
            SAMPLE
        )


# --- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize(
    "result",
    [
        SAMPLE,
        rb.RetrievalResult("", "", []),
        rb.RetrievalResult("q", "", [rb.Hit("only", 1.0)]),
        _uniform(10, 384),
        _uniform(3, 0),  # every hit an empty (not missing) embedding
        rb.RetrievalResult("q", "x", [rb.Hit("a", 1.0, "", {}, b""), rb.Hit("b", 2.0)]),
    ],
    ids=["sample", "empty", "one", "uniform384", "dim0", "empty-then-none"],
)
def test_columnar_round_trip(name: str, result: rb.RetrievalResult) -> None:
    codec = columnar(name)
    back = codec.decode(codec.encode(result))
    assert back == result
    assert type(back) is rb.RetrievalResult and all(type(h) is rb.Hit for h in back.hits)
    # every hit owns its metadata dict (no sharing between hits)
    assert len({id(h.metadata) for h in back.hits}) == len(back.hits)


@pytest.mark.parametrize("name", BUILTIN)
def test_columnar_vectors_round_trip(name: str) -> None:
    result = _uniform(5, 384)
    back = columnar(name).decode(columnar(name).encode(result))
    for a, b in zip(result.hits, back.hits, strict=True):
        np.testing.assert_array_equal(a.vector(), b.vector())


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
embeddings = st.one_of(
    st.none(),
    st.sampled_from([0, 1, 3]).flatmap(lambda d: st.binary(min_size=4 * d, max_size=4 * d)),
)
scores = st.one_of(
    st.floats(allow_nan=False), st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308])
)
hits = st.builds(
    rb.Hit,
    doc_id=texts,
    score=scores,
    text=texts,
    metadata=st.dictionaries(texts, texts, max_size=3),
    embedding=embeddings,
)
results = st.builds(
    rb.RetrievalResult, query_id=texts, query=texts, hits=st.lists(hits, max_size=6)
)
profile = settings(max_examples=40, deadline=None)


@pytest.mark.parametrize("name", BUILTIN)
@profile
@given(result=results)
def test_columnar_round_trip_property(name: str, result: rb.RetrievalResult) -> None:
    codec = columnar(name)
    back = codec.decode(codec.encode(result))
    assert back == result  # NaN excluded above; signs of zero checked next
    for a, b in zip(result.hits, back.hits, strict=True):
        assert math.copysign(1.0, a.score) == math.copysign(1.0, b.score)


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("score", [math.nan, math.inf, -math.inf, -0.0])
def test_columnar_special_scores(name: str, score: float) -> None:
    result = rb.RetrievalResult("q", "x", [rb.Hit("a", 1.0), rb.Hit("d", score)])
    back = columnar(name).decode(columnar(name).encode(result)).hits[1].score
    assert (math.isnan(back) and math.isnan(score)) or (
        back == score and math.copysign(1.0, back) == math.copysign(1.0, score)
    )


@pytest.mark.parametrize("name", BUILTIN)
def test_columnar_lone_surrogate_is_input_error(name: str) -> None:
    with pytest.raises(InputError):
        columnar(name).encode(rb.RetrievalResult("q", "x", [rb.Hit("d", 1.0, "bad \ud800")]))


# --- the wire is the schema --------------------------------------------------------------------


def _message(result: rb.RetrievalResult) -> pb.RetrievalResultColumns:
    """The columnar message built independently of the codec (the documented layout)."""
    m = pb.RetrievalResultColumns(query_id=result.query_id, query=result.query)
    for h in result.hits:
        m.doc_ids.append(h.doc_id)
        m.scores.append(h.score)
        m.texts.append(h.text)
    if any(h.metadata for h in result.hits):
        for h in result.hits:
            m.metadata_counts.append(len(h.metadata))
            m.metadata_keys.extend(h.metadata.keys())
            m.metadata_values.extend(h.metadata.values())
    embs = [h.embedding for h in result.hits]
    present = [e for e in embs if e is not None]
    if present:
        m.embeddings = b"".join(present)
        if (
            len(present) == len(embs)
            and {len(e) for e in present} != {0}
            and len(set(map(len, present))) == 1
        ):
            m.dim = len(present[0]) // 4
        else:
            m.embedding_dims.extend(-1 if e is None else len(e) // 4 for e in embs)
    return m


def _from_message(m: pb.RetrievalResultColumns) -> rb.RetrievalResult:
    """The result read back from a message independently of the codec."""
    hits, pos, epos = [], 0, 0
    embs = m.embeddings
    for i in range(len(m.doc_ids)):
        count = m.metadata_counts[i] if m.metadata_counts else 0
        meta = dict(
            zip(
                m.metadata_keys[pos : pos + count],
                m.metadata_values[pos : pos + count],
                strict=True,
            )
        )
        pos += count
        emb = None
        if m.embedding_dims:
            d = m.embedding_dims[i]
            if d >= 0:
                emb, epos = embs[epos : epos + 4 * d], epos + 4 * d
        elif m.dim:
            emb = embs[4 * m.dim * i : 4 * m.dim * (i + 1)]
        hits.append(rb.Hit(m.doc_ids[i], m.scores[i], m.texts[i], meta, emb))
    return rb.RetrievalResult(m.query_id, m.query, hits)


@pytest.mark.parametrize(
    "result", [SAMPLE, _uniform(4, 3), rb.RetrievalResult("q", "x", [rb.Hit("a", 1.0)])]
)
def test_protobuf_columnar_wire_is_the_message(result: rb.RetrievalResult) -> None:
    codec = columnar("protobuf")
    payload = codec.encode(result)
    assert pb.RetrievalResultColumns.FromString(payload) == _message(result)
    assert codec.decode(_message(result).SerializeToString()) == result


def test_embedding_layouts() -> None:
    codec = columnar("protobuf")

    def wire(result: rb.RetrievalResult) -> pb.RetrievalResultColumns:
        return pb.RetrievalResultColumns.FromString(codec.encode(result))

    uniform = wire(_uniform(10, 384))
    assert (uniform.dim, len(uniform.embeddings), list(uniform.embedding_dims)) == (
        384,
        10 * 384 * 4,
        [],
    )
    assert list(uniform.metadata_counts) == [2] * 10
    none = wire(rb.RetrievalResult("q", "x", [rb.Hit("a", 1.0), rb.Hit("b", 0.5)]))
    assert (none.embeddings, none.dim, list(none.embedding_dims)) == (b"", 0, [])
    assert not none.metadata_counts
    ragged = wire(SAMPLE)
    assert (ragged.dim, list(ragged.embedding_dims), len(ragged.embeddings)) == (0, [-1, 3, 0], 12)
    zero = wire(_uniform(3, 0))  # all present, all empty: told apart from "none" by the dims
    assert (zero.embeddings, zero.dim, list(zero.embedding_dims)) == (b"", 0, [0, 0, 0])


@pytest.mark.parametrize("name", JSON_CODECS)
def test_json_columnar_output_style(name: str) -> None:
    doc = json.loads(columnar(name).encode(SAMPLE))
    assert list(doc) == [f.name for f in pb.RetrievalResultColumns.DESCRIPTOR.fields]
    assert doc["doc_ids"] == ["d1", "d2", ""]
    assert doc["metadata_counts"] == [2, 0, 1]
    assert doc["embeddings"] == base64.b64encode(struct.pack("<3f", 1.0, -2.5, 0.0)).decode()
    assert json.loads(columnar(name).encode(rb.RetrievalResult("", "", [])))["embeddings"] == ""


@pytest.mark.parametrize("name", JSON_CODECS)
@profile
@given(result=results)
def test_json_format_parses_what_we_write(name: str, result: rb.RetrievalResult) -> None:
    payload = columnar(name).encode(result)
    message = json_format.Parse(payload, pb.RetrievalResultColumns())
    assert message == _message(result)
    assert _from_message(message) == result


@pytest.mark.parametrize("name", JSON_CODECS)
@pytest.mark.parametrize("preserve", [False, True])
@profile
@given(result=results)
def test_we_parse_what_json_format_writes(
    name: str, preserve: bool, result: rb.RetrievalResult
) -> None:
    text = json_format.MessageToJson(_message(result), preserving_proto_field_name=preserve)
    assert columnar(name).decode(text.encode()) == result


@pytest.mark.parametrize("name", JSON_CODECS)
def test_json_columnar_proto3_input_rules(name: str) -> None:
    doc = {
        "queryId": "q",
        "docIds": ["a", "b"],
        "scores": ["1.5", "NaN"],
        "texts": None,  # null: the default (empty), which then disagrees with doc_ids
    }
    with pytest.raises(DecodeError, match="different lengths"):
        columnar(name).decode(json.dumps(doc).encode())
    doc["texts"] = ["x", "y"]
    doc.update(metadataCounts=["1", 0], metadataKeys=["k"], metadataValues=["v"])
    doc.update(dim="1", embeddings="AACAPwAAgD8")  # two float32 1.0, unpadded base64
    back = columnar(name).decode(json.dumps(doc).encode())
    assert [h.doc_id for h in back.hits] == ["a", "b"] and back.hits[0].score == 1.5
    assert math.isnan(back.hits[1].score) and back.hits[0].metadata == {"k": "v"}
    assert back.hits[1].embedding == struct.pack("<f", 1.0)
    # json_format reads the same document the same way
    parsed = json_format.Parse(json.dumps(doc), pb.RetrievalResultColumns())
    assert list(parsed.metadata_counts) == [1, 0] and parsed.dim == 1


# --- payloads whose columns disagree --------------------------------------------------------------


def _doc(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "query_id": "q",
        "query": "x",
        "doc_ids": ["a", "b"],
        "scores": [1.0, 0.5],
        "texts": ["t", "u"],
        "metadata_counts": [1, 0],
        "metadata_keys": ["k"],
        "metadata_values": ["v"],
        "dim": 1,
        "embeddings": struct.pack("<2f", 1.0, 2.0),
        "embedding_dims": [],
    }
    doc.update(changes)
    return doc


BAD_COLUMNS = {
    "scores short": (_doc(scores=[1.0]), "different lengths"),
    "texts long": (_doc(texts=["t", "u", "v"]), "different lengths"),
    "doc_ids short": (_doc(doc_ids=["a"]), "different lengths"),
    "counts short": (_doc(metadata_counts=[1]), "metadata_counts has 1 entries for 2 hits"),
    "counts too many": (_doc(metadata_counts=[1, 1]), "add up to 2"),
    "values short": (_doc(metadata_values=[]), "add up to 1"),
    "keys without counts": (_doc(metadata_counts=[]), "no metadata_counts"),
    "embeddings short": (_doc(embeddings=b"\x00" * 7), "expected 2 hits x dim 1"),
    "embeddings long": (_doc(embeddings=b"\x00" * 12), "expected 2 hits x dim 1"),
    "dim without embeddings": (_doc(embeddings=b""), "expected 2 hits x dim 1"),
    "embeddings without dim": (_doc(dim=0), "8 bytes of embeddings but dim=0"),
    "dims short": (_doc(dim=0, embedding_dims=[1]), "embedding_dims has 1 entries"),
    "dims and dim": (_doc(embedding_dims=[1, 1]), "dim must be 0"),
    "dims negative": (_doc(dim=0, embedding_dims=[-2, 2]), "embedding_dims must be -1"),
    "dims too big": (_doc(dim=0, embedding_dims=[1, 2]), "account for 12"),
}


def _payload(name: str, doc: dict[str, object]) -> bytes:
    if name == "protobuf":
        return pb.RetrievalResultColumns(**doc).SerializeToString()  # type: ignore[arg-type]
    if name == "msgpack":
        return msgspec.msgpack.encode(doc)
    emb = doc["embeddings"]
    doc = {**doc, "embeddings": None if emb is None else base64.b64encode(emb).decode()}  # type: ignore[arg-type]
    return json.dumps(doc).encode()


@pytest.mark.parametrize("name", BUILTIN)
def test_the_good_document_decodes(name: str) -> None:
    back = columnar(name).decode(_payload(name, _doc()))
    assert back == rb.RetrievalResult(
        "q",
        "x",
        [
            rb.Hit("a", 1.0, "t", {"k": "v"}, struct.pack("<f", 1.0)),
            rb.Hit("b", 0.5, "u", {}, struct.pack("<f", 2.0)),
        ],
    )


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("case", list(BAD_COLUMNS))
def test_mismatched_columns_raise_decode_error(name: str, case: str) -> None:
    doc, needle = BAD_COLUMNS[case]
    with pytest.raises(DecodeError, match=needle) as info:
        columnar(name).decode(_payload(name, doc))
    assert info.value.codec == name


@pytest.mark.parametrize("name", ["msgpack", *JSON_CODECS])
@pytest.mark.parametrize(
    "changes",
    [
        {"metadata_counts": [-1, 2]},
        {"metadata_counts": [1 << 32, 0]},
        {"dim": -1},
        {"dim": 1 << 32},
        {"embedding_dims": [1 << 31, 0], "dim": 0},
        {"doc_ids": "ab"},
        {"scores": [1.0, "high"]},
        {"extra": 1},
    ],
)
def test_out_of_range_or_wrong_types(name: str, changes: dict[str, object]) -> None:
    with pytest.raises(DecodeError):
        columnar(name).decode(_payload(name, _doc(**changes)))


def test_protobuf_columnar_rejects_top_level_unknown_fields() -> None:
    payload = columnar("protobuf").encode(SAMPLE) + b"\x7a\x01x"  # field 15, length 1
    with pytest.raises(DecodeError, match=r"unknown field number\(s\) \[15\].*Columns"):
        columnar("protobuf").decode(payload)


@pytest.mark.parametrize("name", BUILTIN)
def test_shapes_do_not_mix(name: str) -> None:
    # A row payload is not a columnar one and vice versa: an error, or (protobuf,
    # where field numbers overlap) never silently the same result.
    row, col = rb.codecs.create(name), columnar(name)
    for decoder, payload in ((col, row.encode(SAMPLE)), (row, col.encode(SAMPLE))):
        try:
            back = decoder.decode(payload)
        except DecodeError:
            continue
        assert back != SAMPLE


@pytest.mark.parametrize("name", BUILTIN)
def test_columnar_truncated_payloads(name: str) -> None:
    codec = columnar(name)
    payload = codec.encode(SAMPLE)
    for cut in range(len(payload)):
        try:
            back = codec.decode(payload[:cut])
        except DecodeError:
            continue
        assert name == "protobuf" and back != SAMPLE


@pytest.mark.parametrize("name", BUILTIN)
def test_columnar_fuzz_never_escapes(name: str) -> None:
    """Random bit flips, truncations and splices: a well-typed result or DecodeError."""
    codec = columnar(name)
    valid = [codec.encode(r) for r in (SAMPLE, _uniform(3, 2), rb.RetrievalResult("", "", []))]
    rnd = random.Random(f"columnar-{name}")
    errors = 0
    for i in range(3000):
        data = bytearray(rnd.choice(valid))
        if i % 3 == 0 and data:
            for _ in range(rnd.randrange(1, 6)):
                data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
        elif i % 3 == 1:
            del data[rnd.randrange(len(data) + 1) :]
        else:
            other = rnd.choice(valid)
            data = data[: rnd.randrange(len(data) + 1)] + other[rnd.randrange(len(other) + 1) :]
        try:
            back = codec.decode(bytes(data))
        except DecodeError as exc:
            assert exc.codec == name
            errors += 1
            continue
        assert type(back) is rb.RetrievalResult
        for h in back.hits:
            assert type(h) is rb.Hit and type(h.doc_id) is str and type(h.score) is float
            assert type(h.metadata) is dict
            assert h.embedding is None or (type(h.embedding) is bytes and len(h.embedding) % 4 == 0)
    assert errors > 300

"""Seeded fuzzing: random and mutated payloads either decode to a well-typed
RetrievalResult or raise DecodeError, for every codec; nothing else escapes."""

from __future__ import annotations

import itertools
import math
import random

import msgspec
import pytest

import ragbench as rb
from ragbench.errors import DecodeError

CASES_PER_CODEC = 6000
STRUCTURAL_CASES = 2000

SEEDS_RESULTS = [
    rb.RetrievalResult("", "", []),
    rb.RetrievalResult("q1", "what is 𝄞?", [rb.Hit("d1", 0.5, "text", {"k": "v"}, None)]),
    rb.RetrievalResult(
        "q2",
        "more",
        [
            rb.Hit("a", -0.0, "x" * 50, {"": "", "é": "ü"}, b"\x00\x00\x80\x3f" * 3),
            rb.Hit("b", math.inf, "", {}, b""),
            rb.Hit("c", 1e-300, 'line\nbreak "quoted"', {"n": "1"}, None),
        ],
    ),
]


def _check_well_typed(result: object) -> None:
    assert type(result) is rb.RetrievalResult
    assert type(result.query_id) is str
    assert type(result.query) is str
    assert type(result.hits) is list
    for hit in result.hits:
        assert type(hit) is rb.Hit
        assert type(hit.doc_id) is str
        assert type(hit.score) is float
        assert type(hit.text) is str
        assert type(hit.metadata) is dict
        for key, value in hit.metadata.items():
            assert type(key) is str
            assert type(value) is str
        assert hit.embedding is None or (
            type(hit.embedding) is bytes and len(hit.embedding) % 4 == 0
        )


def _mutations(valid: list[bytes], rnd: random.Random, count: int):  # type: ignore[no-untyped-def]
    for i in range(count):
        base = bytearray(rnd.choice(valid))
        kind = i % 6
        if kind == 0:  # pure random bytes
            yield bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 64)))
        elif kind == 1 and base:  # bit flips
            for _ in range(rnd.randrange(1, 9)):
                pos = rnd.randrange(len(base))
                base[pos] ^= 1 << rnd.randrange(8)
            yield bytes(base)
        elif kind == 2:  # truncation
            yield bytes(base[: rnd.randrange(len(base) + 1)])
        elif kind == 3:  # splice of two valid payloads
            other = rnd.choice(valid)
            yield (
                bytes(base[: rnd.randrange(len(base) + 1)]) + other[rnd.randrange(len(other) + 1) :]
            )
        elif kind == 4 and base:  # byte replaced by an interesting value
            for _ in range(rnd.randrange(1, 4)):
                base[rnd.randrange(len(base))] = rnd.choice(
                    [0x00, 0xFF, 0x7F, 0x80, 0x22, 0x5C, 0x7B, 0x5B, 0x3A, 0xC0, 0xDC, 0x0A]
                )
            yield bytes(base)
        else:  # random insertion / duplication of a segment
            if base:
                start = rnd.randrange(len(base))
                segment = base[start : start + rnd.randrange(1, 16)]
                at = rnd.randrange(len(base) + 1)
                base[at:at] = segment
            yield bytes(base)


_JSON_VALUES = [
    None,
    True,
    0,
    -1,
    1.5,
    1e308,
    "",
    "x",
    "NaN",
    "Infinity",
    "1e400",
    "AAAA",
    [],
    {},
    [1],
    {"a": 1},
    {"doc_id": 1},
]


_KEYS = ["docId", "queryId", "extra", "hits", "score", "", "docIds", "dim", "embeddingDims"]


def _replace_random_node(tree: object, rnd: random.Random) -> object:
    """A copy of a JSON-like tree with one random node (or key) replaced."""
    if isinstance(tree, dict) and tree and rnd.random() < 0.8:
        key = rnd.choice(list(tree))
        out = dict(tree)
        if rnd.random() < 0.15:  # rename a key: camelCase, unknown or duplicate-ish
            out[rnd.choice(_KEYS)] = out.pop(key)
        else:
            out[key] = _replace_random_node(tree[key], rnd)
        return out
    if isinstance(tree, list) and tree and rnd.random() < 0.8:
        i = rnd.randrange(len(tree))
        return [*tree[:i], _replace_random_node(tree[i], rnd), *tree[i + 1 :]]
    return rnd.choice(_JSON_VALUES)


def _structural(name: str, valid: list[bytes], rnd: random.Random):  # type: ignore[no-untyped-def]
    """Well-formed documents of the wrong shape (JSON and msgpack codecs)."""
    if name in ("json", "orjson", "msgspec-json"):
        load, dump = msgspec.json.decode, msgspec.json.encode
    elif name == "msgpack":
        load, dump = msgspec.msgpack.decode, msgspec.msgpack.encode
    else:
        return
    trees = [load(p) for p in valid]
    for _ in range(STRUCTURAL_CASES):
        yield dump(_replace_random_node(rnd.choice(trees), rnd))


@pytest.mark.parametrize("shape", ["row", "columnar"])
@pytest.mark.parametrize("name", rb.codecs.names())
def test_fuzz_decode_never_escapes(name: str, shape: str) -> None:
    codec = rb.codecs.create(name, shape=shape)
    valid = [codec.encode(r) for r in SEEDS_RESULTS]
    rnd = random.Random(f"ragbench-fuzz-{name}" + ("" if shape == "row" else f"-{shape}"))
    outcomes = {"ok": 0, "error": 0}
    for payload in itertools.chain(
        _mutations(valid, rnd, CASES_PER_CODEC), _structural(name, valid, rnd)
    ):
        try:
            result = codec.decode(payload)
        except DecodeError as exc:
            assert exc.codec == name
            outcomes["error"] += 1
            continue
        _check_well_typed(result)
        outcomes["ok"] += 1
    # Both branches must have been exercised, or the fuzzer tests nothing.
    assert outcomes["error"] > CASES_PER_CODEC // 10
    assert outcomes["ok"] > 0

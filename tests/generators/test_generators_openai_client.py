"""``client = "openai"``: the official openai package as the streaming client, against the stub.

What both clients must do alike (first tokens against the stub, a connection per
thread, refused and broken endpoints) is one test parametrised over the two
clients in ``test_generators.py``; this file holds what is the SDK's own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

import ragbench as rb
from ragbench.errors import ConfigError, MissingDependencyError
from ragbench.generators.openai import OpenAIGenerator
from ragbench.generators.stub_server import MODEL_ID, serve
from ragbench.prompt import count_tokens


@pytest.fixture
def stub_url() -> Iterator[str]:
    """An in-process stub server with no modelled prefill."""
    server, port = serve(prefill_ms_per_1k_tokens=0, base_ms=0, inter_token_ms=1, max_tokens=5)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("max_tokens", [1, 8])
def test_sdk_client_gets_the_same_first_token_as_the_minimal_one(
    stub_url: str, chat: bool, max_tokens: int
) -> None:
    firsts = {}
    for client in ("minimal", "openai"):
        gen = rb.generators.create(
            "openai", base_url=stub_url, chat=chat, max_tokens=max_tokens, client=client
        )
        try:
            gen.start()
            assert gen.model == MODEL_ID  # listed by GET /models, through either client
            # Several calls: the connection is reused (max_tokens=1) or reopened after a hang-up.
            got = [gen.first_token(f"Tell me about HNSW, take {i}.", 8) for i in range(3)]
            assert all(first.ttft_ns > 0 for first in got)
            firsts[client] = [first.text for first in got]
            assert gen.describe()["client"] == client
        finally:
            gen.close()
    assert firsts["openai"] == firsts["minimal"]
    assert firsts["openai"][0] == "Based"  # the stub's first word, whoever asks


@pytest.mark.integration
def test_sdk_library_is_recorded(stub_url: str) -> None:
    import openai

    gen = OpenAIGenerator(base_url=stub_url, model=MODEL_ID, client="openai")
    assert gen.describe() == {"client": "openai", "library": f"openai {openai.__version__}"}
    assert OpenAIGenerator(base_url=stub_url, model="m").describe()["client"] == "minimal"


def test_unknown_client_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown client 'aiohttp'; known: minimal, openai"):
        rb.generators.create("openai", base_url="http://127.0.0.1:9/v1", client="aiohttp")
    with pytest.raises(ConfigError, match=r"unknown client 'sdk'; known: minimal, openai"):
        rb.generators.create("stub", client="sdk")
    with pytest.raises(ConfigError, match="base_url"):
        rb.generators.create("openai", base_url="ftp://x/v1", client="openai")


def test_missing_openai_package_names_the_serve_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragbench\[serve\]'"):
        OpenAIGenerator(base_url="http://127.0.0.1:9/v1", model="m", client="openai")
    with pytest.raises(MissingDependencyError, match=r"ragbench\[serve\]"):
        rb.generators.create("stub", client="openai")
    # The minimal client needs nothing beyond the standard library.
    OpenAIGenerator(base_url="http://127.0.0.1:9/v1", model="m").close()


@pytest.mark.integration
def test_stub_generator_streams_through_the_sdk() -> None:
    gen = rb.generators.create(
        "stub", client="openai", prefill_ms_per_1k_tokens=200, base_ms=0, max_tokens=1
    )
    try:
        gen.start()
        prompt = "vector " * 500
        first = gen.first_token(prompt, count_tokens(prompt))
        assert first.text == "Based"
        # The modelled prefill (100 ms for 500 tokens) is a lower bound of the TTFT.
        assert first.ttft_ns >= 100_000_000
        assert gen.describe()["library"].startswith("openai ")
    finally:
        gen.close()
    assert gen.pid is None

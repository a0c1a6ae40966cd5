"""``client = "openai"``: the official openai package as the streaming client, against the stub."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import ragbench as rb
from ragbench.errors import ConfigError, GeneratorError, MissingDependencyError
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
def test_each_thread_streams_over_its_own_sdk_client(stub_url: str) -> None:
    gen = OpenAIGenerator(base_url=stub_url, model=MODEL_ID, max_tokens=1, client="openai")
    gen.start()
    seen: dict[str, object] = {}
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            gen.connect()  # outside the TTFT clock
            texts = {gen.first_token(f"thread {t} asks {i}", 4).text for i in range(5)}
            seen[f"t{t}"] = texts
        except BaseException as exc:
            errors.append(exc)
        finally:
            barrier.wait(60)  # all threads (and their connections) alive together
            if t == 0:
                seen["connections"] = gen.connections
            barrier.wait(60)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    try:
        for thread in threads:
            thread.start()
        barrier.wait(60)
        barrier.wait(60)
        for thread in threads:
            thread.join(60)
    finally:
        gen.close()
    assert not errors, errors
    assert [seen[f"t{t}"] for t in range(3)] == [{"Based"}] * 3
    # The starting thread's client and one per worker thread. (Their TCP connections
    # are not counted at the server: openai 3.x closes a streamed response's connection
    # once it has read "data: [DONE]", so the next request opens a new one.)
    assert seen["connections"] == 4
    assert gen.connections == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_connection_is_a_generator_error() -> None:
    gen = OpenAIGenerator(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", client="openai")
    with pytest.raises(GeneratorError, match="refused"):
        gen.start()
    gen.close()


class _Scripted(BaseHTTPRequestHandler):
    """Answers every request with the server's ``reply`` (status, content type, body)."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        status, ctype, body = self.server.reply  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("reply", "match"),
    [
        ((500, "application/json", b'{"error": {"message": "trouble"}}'), "500"),
        ((401, "application/json", b'{"error": {"message": "bad key"}}'), "401"),
        ((200, "text/event-stream", b"data: [DONE]\n\n"), "before any content"),
        ((200, "text/event-stream", b'data: {"error": {"message": "overloaded"}}\n\n'), "over"),
    ],
)
def test_broken_endpoints_are_generator_errors(
    scripted: ThreadingHTTPServer, reply: tuple[int, str, bytes], match: str
) -> None:
    scripted.reply = reply  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{scripted.server_address[1]}/v1"
    gen = OpenAIGenerator(base_url=url, model="m", client="openai")
    try:
        gen.start()
        with pytest.raises(GeneratorError, match=match):
            gen.first_token("hello", 1)
    finally:
        gen.close()


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

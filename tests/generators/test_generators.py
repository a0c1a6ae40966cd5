"""Generators: none, the stub LLM server (in process and as a child), and the openai client."""

from __future__ import annotations

import http.client
import io
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import ragbench as rb
from ragbench.errors import ConfigError, GeneratorError, NotBuiltError
from ragbench.generators import FirstToken
from ragbench.generators.openai import OpenAIGenerator
from ragbench.generators.stub import StubGenerator
from ragbench.generators.stub_server import (
    MODEL_ID,
    SERVER_OPTIONS,
    StubModel,
    StubServer,
    run_forever,
    serve,
)
from ragbench.prompt import count_tokens

LONG_PROMPT = "vector " * 1000  # 1000 tokens by count_tokens' rule (checked below)


@pytest.fixture
def stub_url() -> Iterator[str]:
    """An in-process stub server with no modelled delays."""
    server, port = serve(prefill_ms_per_1k_tokens=0, base_ms=0, inter_token_ms=1, max_tokens=5)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def slow_prefill_url() -> Iterator[str]:
    """An in-process stub server whose prefill costs 200 ms per 1k prompt tokens."""
    server, port = serve(prefill_ms_per_1k_tokens=200, base_ms=0, inter_token_ms=1)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def post() -> Iterator:
    """``post(url, path, body) -> response`` on connections closed after the test."""
    conns: list[http.client.HTTPConnection] = []

    def do(url: str, path: str, body: dict) -> http.client.HTTPResponse:
        host, port = url.split("/")[2].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conns.append(conn)
        conn.request(
            "POST",
            "/v1" + path,
            body=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        return conn.getresponse()

    try:
        yield do
    finally:
        for conn in conns:
            conn.close()


def sse_events(resp: http.client.HTTPResponse) -> list[str]:
    """Parse a whole SSE body strictly: only ``data: ...`` lines separated by blank lines."""
    raw = resp.read().decode()
    assert raw.endswith("\n\n")
    events = []
    for block in raw.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        assert "\n" not in block
        events.append(block[len("data: ") :])
    return events


# ----------------------------------------------------------------- stub server: format


@pytest.mark.integration
def test_chat_stream_is_openai_chunks(stub_url: str, post) -> None:
    resp = post(
        stub_url,
        "/chat/completions",
        {
            "model": MODEL_ID,
            "stream": True,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hello there"}],
        },
    )
    assert resp.status == 200
    assert resp.getheader("Content-Type") == "text/event-stream"
    assert resp.getheader("X-Ragbench-Stub") == "simulated"
    events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        assert c["model"] == MODEL_ID == "ragbench-stub (simulated)"
        assert isinstance(c["created"], int)
        assert len(c["choices"]) == 1 and c["choices"][0]["index"] == 0
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    contents = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert sum(1 for x in contents if x) == 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


@pytest.mark.integration
def test_completions_stream_and_usage_chunk(stub_url: str, post) -> None:
    resp = post(
        stub_url,
        "/completions",
        {
            "model": MODEL_ID,
            "stream": True,
            "max_tokens": 3,
            "prompt": "one two three",
            "stream_options": {"include_usage": True},
        },
    )
    events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert sum(1 for t in texts if t) == 3
    assert all(c["object"] == "text_completion" for c in chunks)
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


@pytest.mark.integration
def test_non_streaming_models_health_and_errors(stub_url: str, post) -> None:
    prompt = "What does the reranker do, exactly?"
    resp = post(
        stub_url,
        "/chat/completions",
        {
            "model": MODEL_ID,
            "max_tokens": 2,
            "messages": [{"role": "user", "content": prompt}],
        },
    )
    body = json.loads(resp.read())
    assert resp.getheader("X-Ragbench-Stub") == "simulated"
    assert body["object"] == "chat.completion"
    assert body["usage"]["prompt_tokens"] == count_tokens(prompt)
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["message"]["content"]

    host, port = stub_url.split("/")[2].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        models = json.loads(resp.read())
        assert [m["id"] for m in models["data"]] == [MODEL_ID]
        assert resp.getheader("X-Ragbench-Stub") == "simulated"
        conn.request("GET", "/health")  # same keep-alive connection
        health = conn.getresponse()
        assert health.status == 200 and json.loads(health.read())["simulated"] is True
    finally:
        conn.close()

    bad = post(stub_url, "/chat/completions", {"model": MODEL_ID, "messages": "nope"})
    assert bad.status == 400 and "messages" in json.loads(bad.read())["error"]["message"]
    missing = post(stub_url, "/embeddings", {})
    assert missing.status == 404
    assert missing.getheader("X-Ragbench-Stub") == "simulated"


def test_stub_model_parameters() -> None:
    model = StubModel(prefill_ms_per_1k_tokens=200, base_ms=10)
    assert model.prefill_seconds(0) == pytest.approx(0.010)
    assert model.prefill_seconds(1500) == pytest.approx(0.310)
    for bad in (
        {"base_ms": -1},
        {"inter_token_ms": float("nan")},
        {"max_tokens": 0},
        {"prefill_ms_per_1k_tokens": "fast"},
        {"speed": 1},
    ):
        with pytest.raises(ConfigError):
            StubModel(**bad)


# ----------------------------------------------------------------- openai generator


#: The two streaming clients of the openai generator: ragbench's own and the openai SDK.
CLIENTS = ["minimal", "openai"]


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("max_tokens", [1, 8])
def test_openai_generator_against_the_stub(
    stub_url: str, chat: bool, max_tokens: int, client: str
) -> None:
    gen = rb.generators.create(
        "openai", base_url=stub_url, chat=chat, max_tokens=max_tokens, client=client
    )
    try:
        assert gen.describe()["client"] == client
        assert gen.simulated is False
        assert gen.start() > 0
        assert gen.model == MODEL_ID  # picked from /v1/models
        # Several calls: the connection is reused (max_tokens=1) or reopened (after a hang-up).
        for _ in range(3):
            first = gen.first_token("Tell me about HNSW.", 5)
            assert isinstance(first, FirstToken)
            assert first.text == "Based"
            assert first.ttft_ns > 0
    finally:
        gen.close()


@pytest.mark.integration
def test_ttft_grows_with_prompt_tokens_per_the_model(slow_prefill_url: str) -> None:
    assert count_tokens(LONG_PROMPT) == 1000
    gen = OpenAIGenerator(base_url=slow_prefill_url, model=MODEL_ID, max_tokens=1)
    try:
        gen.start()
        short = gen.first_token("hi", 1).ttft_ns
        long = gen.first_token(LONG_PROMPT, 1000).ttft_ns
    finally:
        gen.close()
    # The model sleeps 200 ms for 1000 tokens; a sleep is never shorter than asked.
    assert long >= 200_000_000
    assert short < long


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("client", CLIENTS)
def test_refused_connection_is_a_generator_error(client: str) -> None:
    gen = OpenAIGenerator(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", client=client)
    with pytest.raises(GeneratorError, match="refused"):
        gen.start()
    gen.close()


class _BadServer(BaseHTTPRequestHandler):
    """Serves whatever the test put in ``server.reply`` as (status, content type, body)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, ctype, body = self.server.reply  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bad_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BadServer)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


#: (reply, message) pairs both clients must turn into a GeneratorError saying so.
BROKEN_BOTH = [
    ((200, "text/event-stream", b"data: [DONE]\n\n"), "before any content"),
    ((200, "text/event-stream", b'data: {"error": {"message": "overloaded"}}\n\n'), "overloaded"),
    ((500, "text/plain", b"internal trouble"), "500"),
    ((500, "application/json", b'{"error": {"message": "trouble"}}'), "500"),
    ((401, "application/json", b'{"error": {"message": "bad key"}}'), "401"),
]
#: What only the minimal client parses itself (the SDK reports these its own way).
BROKEN_MINIMAL = [
    ((200, "text/event-stream", b"data: {not json\n\n"), "not JSON"),
    ((200, "text/event-stream", b"hello world\n\n"), "not an SSE line"),
    ((200, "text/event-stream", b": keep-alive\n\n"), "ended before any content"),
    ((200, "application/json", b'{"choices": []}'), "not text/event-stream"),
    ((500, "text/plain", b"internal trouble"), "500.*internal trouble"),
]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("client", "reply", "match"),
    [(c, r, m) for c in CLIENTS for r, m in BROKEN_BOTH]
    + [("minimal", r, m) for r, m in BROKEN_MINIMAL],
)
def test_broken_endpoints_are_generator_errors(
    bad_server: ThreadingHTTPServer, client: str, reply: tuple, match: str
) -> None:
    bad_server.reply = reply  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{bad_server.server_address[1]}/v1"
    gen = OpenAIGenerator(base_url=url, model="m", client=client)
    try:
        gen.start()
        with pytest.raises(GeneratorError, match=match):
            gen.first_token("hello", 1)
    finally:
        gen.close()


def test_openai_configuration_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIGenerator()
    for bad in (
        {"base_url": "ftp://x/v1"},
        {"base_url": "http://h/v1", "max_tokens": 0},
        {"base_url": "http://h/v1", "timeout": -1},
        {"base_url": "http://h/v1", "chat": 1},
        {"base_url": "http://h/v1", "temperature": 0.2},
    ):
        with pytest.raises(ConfigError):
            rb.generators.create("openai", **bad)
    gen = OpenAIGenerator(base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(NotBuiltError):
        gen.first_token("x", 1)


def test_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    gen = OpenAIGenerator(base_url="http://127.0.0.1:9/v1", model="m")
    assert gen._client.headers["Authorization"] == "Bearer sk-test"


# ----------------------------------------------------------------- none, stub


def test_none_generator() -> None:
    gen = rb.generators.create("none")
    assert gen.simulated is False
    assert gen.start() == 0
    assert gen.first_token("anything", 3) == FirstToken("", 0)
    gen.close()
    with pytest.raises(ConfigError):
        rb.generators.create("none", model="x")


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.integration
def test_stub_generator_runs_the_server_in_a_child_process() -> None:
    gen = rb.generators.create("stub", prefill_ms_per_1k_tokens=200, base_ms=0)
    try:
        assert gen.simulated is True
        assert gen.start() > 0
        pid = gen.pid
        assert pid is not None and pid != os.getpid() and not gone(pid)
        assert gen.url.startswith("http://127.0.0.1:")
        short = gen.first_token("hi", 1)
        long = gen.first_token(LONG_PROMPT, 1000)
        again = gen.first_token("hi", 1)
        assert short.text == long.text == again.text == "Based"
        assert long.ttft_ns >= 200_000_000  # the modelled prefill, a lower bound
        assert short.ttft_ns < long.ttft_ns and again.ttft_ns < long.ttft_ns
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(GeneratorError):
            gen.first_token("hi", 1)
    finally:
        gen.close()
    deadline = time.monotonic() + 10
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid)
    assert gen.pid is None


@pytest.mark.integration
def test_stub_generator_close_stops_the_child() -> None:
    gen = rb.generators.create("stub", base_ms=0, prefill_ms_per_1k_tokens=0)
    gen.start()
    pid = gen.pid
    try:
        assert gen.first_token("x", 1).text == "Based"
    finally:
        gen.close()
    assert gone(pid)
    gen.close()  # idempotent
    with pytest.raises(NotBuiltError):
        gen.first_token("x", 1)


def test_stub_generator_rejects_bad_parameters() -> None:
    for bad in ({"base_ms": -5}, {"max_tokens": 0}, {"timeout": 0}, {"host": ""}, {"model": "x"}):
        with pytest.raises(ConfigError):
            rb.generators.create("stub", **bad)


def test_stub_generator_runs_the_stub_llm_command() -> None:
    gen = StubGenerator(prefill_ms_per_1k_tokens=0.5, base_ms=0, inter_token_ms=2, max_tokens=3)
    assert gen.server_argv() == [
        sys.executable,
        "-m",
        "ragbench",
        "stub-llm",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--prefill-ms-per-1k-tokens",
        "0.5",
        "--base-ms",
        "0.0",
        "--inter-token-ms",
        "2.0",
        "--max-tokens",
        "3",
        "--exit-on-stdin-eof",
    ]
    flags = {option.flag for option in SERVER_OPTIONS}
    assert {arg for arg in gen.server_argv() if arg.startswith("--")} <= flags


def test_server_options_hold_the_defaults() -> None:
    defaults = {option.keyword: option.default for option in SERVER_OPTIONS}
    assert defaults.pop("host") == "127.0.0.1" and defaults.pop("port") == 0
    assert defaults.pop("verbose") is False and defaults.pop("exit_on_stdin_eof") is False
    assert defaults.pop("allow_remote") is False  # loopback only unless asked
    limits = {
        key: defaults.pop(key) for key in ("read_timeout_s", "max_body_bytes", "max_connections")
    }
    server = StubServer(("127.0.0.1", 0), StubModel())
    try:
        assert {key: getattr(server, key) for key in limits} == limits
    finally:
        server.server_close()
    assert StubModel().params() == defaults
    gen = StubGenerator()
    assert gen.model.params() | {"max_tokens": 16} == defaults
    hidden = [option.flag for option in SERVER_OPTIONS if option.hidden]
    assert hidden == ["--exit-on-stdin-eof"]


@pytest.mark.integration
def test_stub_generator_reports_a_server_that_dies_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = "import sys; sys.stderr.write('no such option'); sys.exit(2)"
    monkeypatch.setattr(StubGenerator, "server_argv", lambda self: [sys.executable, "-c", script])
    gen = StubGenerator()
    with pytest.raises(
        GeneratorError, match="(?s)exited with code 2 before it was ready.*no such option"
    ):
        gen.start()
    assert gen.pid is None


def test_run_forever_rejects_bad_values_before_serving(capsys: pytest.CaptureFixture) -> None:
    for args, kwargs, match in (
        ((), {"base_ms": -1}, "base_ms"),
        ((), {"max_tokens": 0}, "max_tokens"),
        ((), {"speed": 2}, "speed"),
        (("",), {}, "host"),
        (("127.0.0.1", 70000), {}, "port"),
        (("127.0.0.1", "80"), {}, "port"),
    ):
        with pytest.raises(ConfigError, match=match):
            run_forever(*args, **kwargs)
    assert capsys.readouterr().out == ""


def test_run_forever_names_an_address_it_cannot_listen_on() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}.*another port"):
            run_forever("127.0.0.1", port)
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
            serve("127.0.0.1", port)


@pytest.mark.integration
def test_run_forever_serves_until_stdin_ends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    read_end, write_end = os.pipe()
    stdin = io.TextIOWrapper(os.fdopen(read_end, "rb"))
    monkeypatch.setattr(sys, "stdin", stdin)
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(
            run_forever("127.0.0.1", 0, exit_on_stdin_eof=True, base_ms=0, max_tokens=2)
        ),
        daemon=True,
    )
    thread.start()
    try:
        out = ""
        deadline = time.monotonic() + 10
        while "listening" not in out and time.monotonic() < deadline:
            time.sleep(0.01)
            out += capsys.readouterr().out
        assert out.startswith("ragbench stub LLM (simulated) listening on http://127.0.0.1:")
        url = out.split()[-1]
        gen = OpenAIGenerator(base_url=url, model=MODEL_ID, max_tokens=1)
        try:
            gen.start()
            assert gen.first_token("hi", 1).text == "Based"
        finally:
            gen.close()
    finally:
        os.close(write_end)  # EOF: the server shuts down
        thread.join(10)
        stdin.close()
    assert not thread.is_alive() and codes == [0]


# ----------------------------------------------------------------- one generator, many threads


def url_port(url: str) -> int:
    return int(url.split("/")[2].rsplit(":", 1)[1])


@pytest.mark.integration
def test_stub_generator_serves_threads_side_by_side(sockets) -> None:
    n_threads, n_requests = 4, 50
    before = sockets.now()
    gen = StubGenerator(prefill_ms_per_1k_tokens=40, base_ms=0, inter_token_ms=0, max_tokens=1)
    try:
        gen.start()
        assert gen.connections == 1  # the starting thread's

        def work(t: int) -> list[int]:
            ttfts = []
            for i in range(n_requests):
                # Each thread's prompts have their own length, so their own modelled prefill.
                prompt = f"thread {t} request {i}: " + "vector " * (40 * t)
                tokens = count_tokens(prompt)
                first = gen.first_token(prompt, tokens)
                assert first.text == "Based"
                # A sleep is never shorter than asked: the reply came after this
                # request's own prefill (a reply crossed with a shorter prompt's would not).
                assert first.ttft_ns >= gen.model.prefill_seconds(tokens) * 1e9 - 1_000
                ttfts.append(first.ttft_ns)
            return ttfts

        def look() -> tuple[int, int]:
            return gen.connections, sockets.server_connections(url_port(gen.url))

        out, (connections, at_server) = sockets.in_threads(n_threads, work, look)
        assert [len(ttfts) for ttfts in out] == [n_requests] * n_threads
        # A keep-alive connection per thread plus the starting thread's, open at once.
        assert connections == n_threads + 1
        assert at_server >= n_threads + 1
    finally:
        gen.close()
    assert gen.connections == 0
    assert not sockets.leaked(before)


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_openai_generator_gives_each_thread_its_connection(
    stub_url: str, sockets, client: str
) -> None:
    before = sockets.now()
    gen = OpenAIGenerator(base_url=stub_url, model=MODEL_ID, max_tokens=1, client=client)
    with pytest.raises(NotBuiltError):
        gen.connect()
    gen.start()
    try:

        def work(t: int) -> str:
            gen.connect()  # opened here, outside the TTFT clock; the calls reuse it
            texts = {gen.first_token(f"thread {t} asks {i}", 4).text for i in range(5)}
            return texts.pop()

        out, connections = sockets.in_threads(3, work, lambda: gen.connections)
        assert out == ["Based"] * 3
        assert connections == 4  # the starting thread's client and one per worker thread
        if client == "minimal":
            # (Not for the SDK: openai 3.x closes a streamed response's TCP connection
            # once it has read "data: [DONE]", so the next request opens a new one.)
            assert sockets.server_connections(url_port(stub_url)) >= 4
        # A thread that has ended leaves its connection open until another
        # thread opens one, which closes it.
        sockets.in_threads(1, lambda t: gen.first_token("one more", 2))
        assert gen.connections == 2
    finally:
        gen.close()
    assert gen.connections == 0
    assert not sockets.leaked(before)

"""An idle keep-alive connection the server closed is reopened, never surfaced as a failure.

The bug: the stub server closes a connection silent for ``read_timeout_s``
(30 s); a connection opened ahead of time (``connect()``, as ``start()`` and
a pipeline's workers do) that then idled past it -- a slow rerank, a long
set-up -- made the next request fail "closed the connection without
answering". Here the real stub server (a thread, and the ``stub``
generator's child process) runs with a 0.5 s idle timeout and the clients
idle 1 s past it; a raw socket server plays the cases the clients cannot be
driven into by timing alone (the server closing a reused connection just as
a request is written, a reply cut after its first bytes, a fresh connection
closed).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ragbench.errors import GeneratorError
from ragbench.generators.openai import OpenAIGenerator, StreamClient
from ragbench.generators.stub import StubGenerator
from ragbench.generators.stub_server import serve

IDLE_TIMEOUT_S = 0.5
IDLE_S = 1.0  # twice the server's idle timeout


@pytest.fixture
def stub_url() -> Iterator[str]:
    server, port = serve(
        "127.0.0.1",
        0,
        read_timeout_s=IDLE_TIMEOUT_S,
        base_ms=0.0,
        prefill_ms_per_1k_tokens=0.0,
        inter_token_ms=0.0,
    )
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_the_stub_server_really_closes_an_idle_connection(stub_url: str) -> None:
    """The premise: a plain keep-alive client reusing the idle connection gets no answer."""
    port = int(stub_url.rsplit(":", 1)[1].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/health")
        assert conn.getresponse().read()
        time.sleep(IDLE_S)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            conn.request("GET", "/health")
            conn.getresponse().read()
    finally:
        conn.close()


@pytest.mark.parametrize("client", ["minimal", "openai"])
@pytest.mark.parametrize(
    ("model", "max_tokens"),
    [
        (
            "ragbench-stub (simulated)",
            1,
        ),  # start() only connects: the connection never carried a request
        (None, 1),  # start() asks GET /models; each one-token stream keeps the connection
        ("ragbench-stub (simulated)", 4),  # a longer stream hangs up after the first token
    ],
)
def test_the_openai_generator_survives_connections_idle_past_the_servers_timeout(
    stub_url: str, client: str, model: str | None, max_tokens: int
) -> None:
    if client == "openai":
        pytest.importorskip("openai", reason="the serve extra (openai) is not installed")
    gen = OpenAIGenerator(stub_url, model=model, max_tokens=max_tokens, client=client)
    gen.start()
    try:
        for _ in range(2):
            time.sleep(IDLE_S)
            assert gen.first_token("a question about keep-alive", 5).text == "Based"
        gen.connect()  # opened ahead of time, on another thread
        results: list[str] = []

        def later() -> None:
            gen.connect()
            time.sleep(IDLE_S)
            results.append(gen.first_token("from a second thread", 4).text)

        worker = threading.Thread(target=later)
        worker.start()
        worker.join(30)
        assert results == ["Based"]
    finally:
        gen.close()


def test_the_stub_generator_survives_its_server_closing_the_idle_connection() -> None:
    gen = StubGenerator(base_ms=0.0, prefill_ms_per_1k_tokens=0.0, read_timeout_s=IDLE_TIMEOUT_S)
    assert gen.server_argv()[-2:] == ["--read-timeout-s", "0.5"]
    gen.start()  # starts the child server and connects ahead of the first request
    try:
        for _ in range(2):
            time.sleep(IDLE_S)
            assert gen.first_token("a question", 3).text == "Based"
    finally:
        gen.close()
    assert not gen.alive


# ---- a raw server: what it does with each request on each connection

SSE_REPLY = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
SSE_BODY = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
ANSWER = SSE_REPLY % (len(SSE_BODY), SSE_BODY)


class RawServer:
    """Accepts on 127.0.0.1; ``act(connection_no, request_no_on_it, sock)`` answers each request.

    ``act`` returns False to close the connection (after whatever it sent).
    ``seen`` lists ``(connection_no, request_no)`` of every request read.
    """

    def __init__(self, act: Callable[[int, int, socket.socket], bool]) -> None:
        self.act = act
        self.seen: list[tuple[int, int]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.threads: list[threading.Thread] = []
        self.accepting = threading.Thread(target=self._accept, daemon=True)
        self.accepting.start()

    def _accept(self) -> None:
        n = 0
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(n, sock), daemon=True)
            t.start()
            self.threads.append(t)
            n += 1

    def _serve(self, n: int, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        try:
            self._requests(n, sock, reader)
        finally:
            reader.close()
            sock.close()

    def _requests(self, n: int, sock: socket.socket, reader: Any) -> None:
        i = 0
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = reader.readline()
                if not line:
                    return
                head += line
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            reader.read(length)
            self.seen.append((n, i))
            if not self.act(n, i, sock):
                return
            i += 1

    def close(self) -> None:
        self.listener.close()
        for t in self.threads:
            t.join(5)


@contextlib.contextmanager
def raw_generator(
    act: Callable[[int, int, socket.socket], bool],
) -> Iterator[tuple[RawServer, OpenAIGenerator]]:
    server = RawServer(act)
    gen = OpenAIGenerator(f"http://127.0.0.1:{server.port}/v1", model="m", max_tokens=1)
    try:
        gen.start()
        yield server, gen
    finally:
        gen.close()
        server.close()


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_reused_connection_closed_before_any_reply_byte_is_retried_once(how: str) -> None:
    def act(n: int, i: int, sock: socket.socket) -> bool:
        if n == 0 and i == 1:  # the second request on the first connection: dropped, unanswered
            if how == "reset":
                _reset(sock)
            return False
        sock.sendall(ANSWER)
        return True

    with raw_generator(act) as (server, gen):
        assert gen.first_token("one", 1).text == "hi"
        assert gen.first_token("two", 1).text == "hi"  # retried on a fresh connection
        assert gen.first_token("three", 1).text == "hi"  # which is kept
    assert server.seen == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_no_retry_once_a_byte_of_the_reply_arrived() -> None:
    def act(n: int, i: int, sock: socket.socket) -> bool:
        if i == 1:
            sock.sendall(b"HTTP/1.1 2")  # the reply starts, then the connection closes
            return False
        sock.sendall(ANSWER)
        return True

    with raw_generator(act) as (server, gen):
        assert gen.first_token("one", 1).text == "hi"
        with pytest.raises(GeneratorError, match="failed") as info:
            gen.first_token("two", 1)
        assert "without answering" not in str(info.value)
        time.sleep(0.2)
        assert server.seen == [(0, 0), (0, 1)]  # the request was not sent again


def test_no_retry_on_a_connection_opened_for_the_request() -> None:
    def act(n: int, i: int, sock: socket.socket) -> bool:
        if n == 0:
            return False  # the first connection's first request: closed unanswered
        sock.sendall(ANSWER)
        return True

    server = RawServer(act)
    # no connect() ahead: the first request opens its connection itself
    client = StreamClient(f"http://127.0.0.1:{server.port}/v1", api_key=None, timeout=5, what="t")
    body = {"model": "m", "stream": True, "max_tokens": 1, "messages": []}
    try:
        with pytest.raises(GeneratorError, match="closed the connection without answering"):
            client.first_token("/chat/completions", body, chat=True, drain=True)
        time.sleep(0.2)
        assert server.seen == [(0, 0)]
        # the next request opens a new one
        assert client.first_token("/chat/completions", body, chat=True, drain=True).text == "hi"
    finally:
        client.close()
        server.close()


def test_a_reply_after_an_idle_connection_answers_json_too() -> None:
    """``GET /models`` (start() without a model) takes the same retry."""
    models = json.dumps({"data": [{"id": "raw-model"}]}).encode()

    def act(n: int, i: int, sock: socket.socket) -> bool:
        if n == 0 and i == 0:
            return False  # closed unanswered right after connect() opened it ahead
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        sock.sendall(head % len(models) + models)
        return True

    server = RawServer(act)
    gen = OpenAIGenerator(f"http://127.0.0.1:{server.port}/v1", max_tokens=1)
    try:
        gen.start()  # connect() ahead, then GET /models on that connection
        assert gen.model == "raw-model"
        assert server.seen == [(0, 0), (1, 0)]
    finally:
        gen.close()
        server.close()

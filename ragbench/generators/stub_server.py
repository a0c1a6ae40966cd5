"""ragbench's own OpenAI-compatible streaming LLM server -- a *stub* whose timings are modelled.

Nothing here runs a model. The server answers the OpenAI HTTP API closely
enough for streaming clients (the ``openai`` generator, the OpenAI SDK,
curl) and spends time the way an LLM server would, by a simple model:

* **prefill**: before the first token it sleeps
  ``base_ms + prefill_ms_per_1k_tokens * prompt_tokens / 1000``, with the
  prompt counted by :func:`ragbench.prompt.count_tokens`;
* **decode**: then it emits one token every ``inter_token_ms``, up to the
  request's ``max_tokens`` (default ``max_tokens``, capped at 4096).

Defaults (``prefill_ms_per_1k_tokens=100``, ``base_ms=5``,
``inter_token_ms=20``, ``max_tokens=16``; :data:`SERVER_OPTIONS` lists them
with the host and port, and is the one place they are written down) are in
the range of a 7-8B model
on one datacenter GPU (about 10k prompt tokens/s prefill, 50 tokens/s per
stream). Every response carries ``X-Ragbench-Stub: simulated`` and names the
model ``"ragbench-stub (simulated)"`` so nobody mistakes its timings for a
measurement.

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions``
(``"stream": true`` gives ``text/event-stream`` chunks ``data: {json}`` ...
``data: [DONE]``; otherwise one JSON object), ``GET /v1/models``,
``GET /health``. Binds 127.0.0.1 unless told otherwise.

Limits bound what clients can make it hold (options too, see
:class:`StubServer`): a connection silent for ``read_timeout_s`` (30 s)
while a request is awaited or read is closed, and a body must arrive within
it (408 otherwise); a body above ``max_body_bytes`` (1 MiB) gets 413 before
it is read; beyond ``max_connections`` (256) connections at once, a new one
is answered 503 with ``Retry-After: 1`` and closed (refused, not queued).

Run it with ``ragbench stub-llm [--host H] [--port P] [model options]``
(:func:`run_forever`; the ``stub`` generator runs that command as its child
process); it prints one line with its base URL.

The timing model, the defaults and :data:`SERVER_OPTIONS` are in
:mod:`~ragbench.generators.stub_model`, the request checks and JSON answers
in :mod:`~ragbench.generators.stub_api`; every public name of both is
importable from here as before.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import ConfigError
from ..process import watch_stdin
from ..transports.child import check_loopback
from ..validate import positive_int, positive_number
from .stub_api import MODEL_ID, STUB_HEADER, BadRequest, Completion
from .stub_model import (
    BASE_MS,
    HOST,
    INTER_TOKEN_MS,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_TOKENS,
    PORT,
    PREFILL_MS_PER_1K_TOKENS,
    READ_TIMEOUT_S,
    SERVER_OPTIONS,
    ServerOption,
    StubModel,
)

__all__ = [
    "BASE_MS",
    "HOST",
    "INTER_TOKEN_MS",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_TOKENS",
    "MODEL_ID",
    "PORT",
    "PREFILL_MS_PER_1K_TOKENS",
    "READ_TIMEOUT_S",
    "SERVER_OPTIONS",
    "ServerOption",
    "StubModel",
    "StubServer",
    "run_forever",
    "serve",
]

_BODY_BLOCK = 1 << 16  # bytes read per recv while a body arrives


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Each SSE event must leave at once, as a real server flushes per token.
    disable_nagle_algorithm = True
    server_version = "ragbench-stub"
    server: StubServer

    def setup(self) -> None:
        # Every recv on this connection (request line, headers, body) waits at
        # most this long; http.server then closes the connection.
        # (the class's timeout stays None, so setup() leaves this one alone)
        self.request.settimeout(self.server.read_timeout_s)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    # -- plumbing

    def _send_json(self, code: int, obj: Any, close: bool = False) -> None:
        body = json.dumps(obj).encode()
        head = (
            f"HTTP/1.1 {code} {self.responses.get(code, ('',))[0]}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"{STUB_HEADER}: simulated\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
        ).encode("latin-1")
        if close:
            self.close_connection = True
        self.wfile.write(head + body)

    def _send_error_json(self, code: int, message: str, close: bool = False) -> None:
        kind = "invalid_request_error" if code < 500 else "server_error"
        self._send_json(code, {"error": {"message": message, "type": kind, "code": code}}, close)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _event(self, obj: Any) -> None:
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    # -- routes

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send_json(200, {"status": "ok", "simulated": True, "model": MODEL_ID})
        elif path == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": MODEL_ID,
                            "object": "model",
                            "created": 0,
                            "owned_by": "ragbench",
                            "simulated": True,
                            "timing_model": self.server.model.params(),
                        }
                    ],
                },
            )
        else:
            self._send_error_json(404, f"unknown path {path}; try /v1/models or /health")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._send_error_json(
                404, f"unknown path {path}; POST /v1/chat/completions or /v1/completions", True
            )
            return
        try:
            body = self._read_body()
            self._complete(body, chat=path == "/v1/chat/completions")
        except BadRequest as exc:
            self._send_error_json(exc.code, exc.message, close=exc.code in (408, 411, 413))
        except TimeoutError:
            self.close_connection = True  # a stalled client: drop it
        except (BrokenPipeError, ConnectionResetError):
            # The client had what it wanted (the first token) and hung up.
            self.close_connection = True

    def _read_body(self) -> dict[str, Any]:
        raw = self.headers.get("Content-Length")
        if raw is None:
            raise BadRequest(411, "Content-Length is required")
        try:
            length = int(raw)
        except ValueError:
            raise BadRequest(400, f"bad Content-Length {raw!r}") from None
        limit = self.server.max_body_bytes
        if length < 0 or length > limit:
            # refused before a byte of the body is read; the connection is closed after
            raise BadRequest(413, f"request body must be 0..{limit} bytes, got {length}")
        data = self._read_exactly(length)
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise BadRequest(400, f"request body is not JSON: {type(exc).__name__}") from None
        if not isinstance(body, dict):
            raise BadRequest(400, "request body must be a JSON object")
        return body

    def _read_exactly(self, length: int) -> bytes:
        """The body's ``length`` bytes, all within ``read_timeout_s`` (408 otherwise).

        Each recv waits at most the timeout too (the socket's), so a client
        trickling a byte at a time cannot hold the connection longer.
        """
        deadline = time.monotonic() + self.server.read_timeout_s
        parts: list[bytes] = []
        left = length
        while left:
            part = self.rfile.read1(min(left, _BODY_BLOCK))
            if not part:
                raise BadRequest(400, f"request body ended {left} bytes short")
            parts.append(part)
            left -= len(part)
            if left and time.monotonic() > deadline:
                raise BadRequest(408, "request body took longer than the read timeout")
        return b"".join(parts)

    def _complete(self, body: dict[str, Any], chat: bool) -> None:
        model = self.server.model
        completion = Completion.from_request(body, chat, model.max_tokens, self.server.next_id)
        time.sleep(model.prefill_seconds(completion.prompt_tokens))
        step = model.inter_token_ms / 1000.0
        if completion.stream:
            self._stream(completion, step)
        else:
            # A non-streaming client waits for the whole completion.
            time.sleep(step * (len(completion.words) - 1))
            self._send_json(200, completion.whole())

    def _stream(self, completion: Completion, step: float) -> None:
        """Send ``completion`` as server-sent events, one token every ``step`` seconds."""
        self.wfile.write(
            (
                "HTTP/1.1 200 OK\r\n"
                "Content-Type: text/event-stream\r\n"
                "Cache-Control: no-cache\r\n"
                "Transfer-Encoding: chunked\r\n"
                f"{STUB_HEADER}: simulated\r\n\r\n"
            ).encode("latin-1")
        )
        chat = completion.chat
        if chat:
            self._event(completion.chunk({"role": "assistant", "content": ""}, None))
        for i, word in enumerate(completion.words):
            if i:
                time.sleep(step)
            self._event(completion.chunk({"content": word} if chat else word, None))
        self._event(completion.chunk({} if chat else "", "length"))
        if completion.include_usage:
            final = completion.chunk(None, None)
            final["choices"] = []
            final["usage"] = completion.usage()
            self._event(final)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class StubServer(ThreadingHTTPServer):
    """The stub's HTTP server, bound to ``(host, port)``; ``model`` holds its :class:`StubModel`.

    Limits (see :data:`SERVER_OPTIONS`): ``read_timeout_s`` (a connection
    silent that long while a request is awaited or read is closed; a body
    must arrive within it), ``max_body_bytes`` (a larger request is answered
    413 before its body is read), ``max_connections`` (connections served at
    once, each on its own thread; one more is answered ``503`` with
    ``Retry-After: 1`` and closed at once, not queued). Together they bound
    what clients can make it hold: about ``max_connections x
    max_body_bytes``.

    Raises :class:`ConfigError` for a host that is not a non-empty string, a
    port outside ``[0, 65535]``, a limit that is not positive, or an address
    it cannot listen on (a port in use, a host that is not this machine's).
    """

    daemon_threads = True
    # Many client threads may connect at once; the default backlog of 5
    # would drop SYNs and add a 1 s retransmit to some of them.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        model: StubModel,
        verbose: bool = False,
        *,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        host, port = address
        owner = "stub LLM server"
        if not isinstance(host, str) or not host:
            raise ConfigError(f"{owner}: host must be a non-empty string, got {host!r}")
        port = positive_int(owner, "port", port, lo=0, hi=65535)
        self.read_timeout_s = positive_number(owner, "read_timeout_s", read_timeout_s)
        self.max_body_bytes = positive_int(owner, "max_body_bytes", max_body_bytes, hi=1 << 31)
        self.max_connections = positive_int(owner, "max_connections", max_connections, hi=65536)
        self._active = 0
        self._active_lock = threading.Lock()
        self.refused = 0  # connections answered 503 because max_connections were busy
        self.model = model
        self.verbose = verbose
        self.counter = 0
        self.counter_lock = threading.Lock()
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise ConfigError(
                f"stub LLM server: cannot listen on {host}:{port}: {exc}; choose another port "
                "(0 picks any free one) or a host address of this machine"
            ) from None

    def next_id(self) -> int:
        """A number for the next completion's id, unique for this server."""
        with self.counter_lock:
            self.counter += 1
            return self.counter

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own, or refuse it when the cap is reached."""
        with self._active_lock:
            full = self._active >= self.max_connections
            if full:
                self.refused += 1
            else:
                self._active += 1
        if full:
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._active_lock:
            self._active -= 1

    def _refuse(self, request: Any) -> None:
        """Answer 503 on the accepting thread (a few bytes, never blocking) and close."""
        body = json.dumps(
            {
                "error": {
                    "message": f"the stub serves at most {self.max_connections} connections "
                    "at once; retry later",
                    "type": "server_error",
                    "code": 503,
                }
            }
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n"
            f"{STUB_HEADER}: simulated\r\n\r\n"
        ).encode("latin-1")
        try:
            request.setblocking(False)
            request.send(head + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-stream is normal (it had its first token).
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def serve(
    host: str = HOST,
    port: int = PORT,
    *,
    read_timeout_s: float = READ_TIMEOUT_S,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    **model_params: Any,
) -> tuple[StubServer, int]:
    """Start the stub server in a background thread; return ``(server, port)``.

    ``model_params`` are :class:`StubModel`'s; the limits are
    :class:`StubServer`'s. Stop it with ``server.shutdown();
    server.server_close()``. Bad values and an address it cannot listen on
    raise :class:`ConfigError`.
    """
    model = StubModel(**model_params)
    server = StubServer(
        (host, port),
        model,
        read_timeout_s=read_timeout_s,
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
    )
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.2},
        daemon=True,
        name="ragbench-stub-llm",
    )
    thread.start()
    return server, server.server_address[1]


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def run_forever(
    host: str = HOST,
    port: int = PORT,
    *,
    exit_on_stdin_eof: bool = False,
    verbose: bool = False,
    allow_remote: bool = False,
    read_timeout_s: float = READ_TIMEOUT_S,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    **model_params: Any,
) -> int:
    """Serve until Ctrl-C (or stdin EOF if asked); print one line with the base URL first.

    The line reads ``ragbench stub LLM (simulated) listening on http://HOST:PORT/v1``.
    ``model_params`` are :class:`StubModel`'s; :data:`SERVER_OPTIONS`
    describes every parameter as a command-line option. Bad values and an
    address it cannot listen on raise :class:`ConfigError` before anything
    is printed, and so does a ``host`` that is not loopback unless
    ``allow_remote`` (the stub has no authentication; ``0.0.0.0`` would serve
    every interface). Returns the process exit code (0) when stdin ended; Ctrl-C
    closes the server and raises :class:`KeyboardInterrupt` on (so
    ``ragbench stub-llm`` exits 130, as every command does on Ctrl-C).
    """
    if not allow_remote:
        check_loopback("ragbench stub-llm", host, "pass --allow-remote")
    model = StubModel(**model_params)
    server = StubServer(
        (host, port),
        model,
        verbose=verbose,
        read_timeout_s=read_timeout_s,
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
    )
    if exit_on_stdin_eof:
        watch_stdin(server.shutdown, exit_after=None)
    print(
        f"ragbench stub LLM (simulated) listening on {_url(host, server.server_address[1])}",
        flush=True,
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:  # Ctrl-C: closed here, the KeyboardInterrupt goes on to the command (exit 130)
        server.server_close()
    return 0

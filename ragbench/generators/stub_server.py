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
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import ConfigError
from ..process import watch_stdin
from ..validate import positive_int, positive_number

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

# The defaults of the server and of its timing model (used by StubModel,
# serve, run_forever, the ``stub`` generator and ``ragbench stub-llm``).
HOST = "127.0.0.1"
PORT = 0
PREFILL_MS_PER_1K_TOKENS = 100.0
BASE_MS = 5.0
INTER_TOKEN_MS = 20.0
MAX_TOKENS = 16
# Limits that bound what clients can make the server hold: seconds a connection
# may stay silent while a request is read (and the whole body's deadline),
# bytes of one request body, connections served at once (more are refused 503).
READ_TIMEOUT_S = 30.0
MAX_BODY_BYTES = 1 << 20
MAX_CONNECTIONS = 256

MODEL_ID = "ragbench-stub (simulated)"
STUB_HEADER = "X-Ragbench-Stub"
_BODY_BLOCK = 1 << 16  # bytes read per recv while a body arrives
_MAX_TOKENS_CAP = 4096
# The stub's "generated" text: deterministic words, one token each.
_WORDS = (
    "Based",
    " on",
    " the",
    " retrieved",
    " context",
    ",",
    " the",
    " answer",
    " is",
    " as",
    " follows",
    ":",
    " this",
    " text",
    " is",
    " simulated",
    ".",
)


@dataclass(frozen=True, slots=True)
class ServerOption:
    """One option of the stub server's command line (``ragbench stub-llm``).

    ``flag`` is the command-line spelling, ``keyword`` the parameter of
    :func:`run_forever` it feeds, ``type`` its Python type (``bool``: a flag
    that is off unless given), ``default`` its default, ``help`` one line of
    help, and ``hidden`` true for options meant for the ``stub`` generator
    only.
    """

    flag: str
    keyword: str
    type: type[str] | type[int] | type[float] | type[bool]
    default: str | int | float | bool
    help: str
    hidden: bool = False


#: The stub server's command-line options, in order; their defaults are the
#: server's and the timing model's.
SERVER_OPTIONS: tuple[ServerOption, ...] = (
    ServerOption("--host", "host", str, HOST, "Address to bind."),
    ServerOption("--port", "port", int, PORT, "Port to listen on (0: any free port)."),
    ServerOption(
        "--prefill-ms-per-1k-tokens",
        "prefill_ms_per_1k_tokens",
        float,
        PREFILL_MS_PER_1K_TOKENS,
        "Modelled prefill time per 1000 prompt tokens (ms).",
    ),
    ServerOption(
        "--base-ms", "base_ms", float, BASE_MS, "Modelled fixed time before the first token (ms)."
    ),
    ServerOption(
        "--inter-token-ms",
        "inter_token_ms",
        float,
        INTER_TOKEN_MS,
        "Modelled time between two generated tokens (ms).",
    ),
    ServerOption(
        "--max-tokens",
        "max_tokens",
        int,
        MAX_TOKENS,
        "Completion length when a request does not say (capped at 4096).",
    ),
    ServerOption(
        "--read-timeout-s",
        "read_timeout_s",
        float,
        READ_TIMEOUT_S,
        "Close a connection that sends nothing for this long while a request is awaited or "
        "read, or whose body takes longer than this in all (s).",
    ),
    ServerOption(
        "--max-body-bytes",
        "max_body_bytes",
        int,
        MAX_BODY_BYTES,
        "Largest request body; a larger Content-Length gets 413 and the connection is closed "
        "before the body is read.",
    ),
    ServerOption(
        "--max-connections",
        "max_connections",
        int,
        MAX_CONNECTIONS,
        "Connections served at once; one more is answered 503 (Retry-After: 1) and closed.",
    ),
    ServerOption("--verbose", "verbose", bool, False, "Log every request to stderr."),
    ServerOption(
        "--exit-on-stdin-eof",
        "exit_on_stdin_eof",
        bool,
        False,
        "Stop when stdin reaches EOF (the parent process closed it or died).",
        hidden=True,
    ),
)


class StubModel:
    """The timing model: how long prefill and each decode step take.

    All parameters are keyword-only, non-negative and finite
    (:class:`ConfigError` otherwise): ``prefill_ms_per_1k_tokens`` (default
    :data:`PREFILL_MS_PER_1K_TOKENS`, 100.0), ``base_ms`` (:data:`BASE_MS`,
    5.0), ``inter_token_ms`` (:data:`INTER_TOKEN_MS`, 20.0), ``max_tokens``
    (:data:`MAX_TOKENS`, 16: the completion length when a request does not
    say; capped at 4096).
    """

    __slots__ = ("base_ms", "inter_token_ms", "max_tokens", "prefill_ms_per_1k_tokens")

    def __init__(
        self,
        *,
        prefill_ms_per_1k_tokens: float = PREFILL_MS_PER_1K_TOKENS,
        base_ms: float = BASE_MS,
        inter_token_ms: float = INTER_TOKEN_MS,
        max_tokens: int = MAX_TOKENS,
        **unknown: Any,
    ) -> None:
        if unknown:
            from .._registry import check_params

            check_params(
                "stub model",
                unknown,
                {"prefill_ms_per_1k_tokens", "base_ms", "inter_token_ms", "max_tokens"},
            )
        for key, value in (
            ("prefill_ms_per_1k_tokens", prefill_ms_per_1k_tokens),
            ("base_ms", base_ms),
            ("inter_token_ms", inter_token_ms),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(f"stub model: {key} must be a finite number >= 0, got {value!r}")
        self.prefill_ms_per_1k_tokens = float(prefill_ms_per_1k_tokens)
        self.base_ms = float(base_ms)
        self.inter_token_ms = float(inter_token_ms)
        self.max_tokens = min(positive_int("stub model", "max_tokens", max_tokens), _MAX_TOKENS_CAP)

    def prefill_seconds(self, prompt_tokens: int) -> float:
        """Modelled time to the first token for a prompt of ``prompt_tokens`` tokens."""
        return (self.base_ms + self.prefill_ms_per_1k_tokens * prompt_tokens / 1000.0) / 1000.0

    def params(self) -> dict[str, float | int]:
        return {
            "prefill_ms_per_1k_tokens": self.prefill_ms_per_1k_tokens,
            "base_ms": self.base_ms,
            "inter_token_ms": self.inter_token_ms,
            "max_tokens": self.max_tokens,
        }


class _BadRequest(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _prompt_text(body: dict[str, Any], chat: bool) -> str:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest(400, "'messages' must be a non-empty list")
        texts: list[str] = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                # Content parts: [{"type": "text", "text": "..."}, ...]
                texts.extend(
                    part["text"]
                    for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
            elif content is not None:
                raise _BadRequest(400, "each message 'content' must be a string or a list of parts")
        return "\n".join(texts)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    if not isinstance(prompt, str):
        raise _BadRequest(400, "'prompt' must be a string")
    return prompt


def _completion_tokens(body: dict[str, Any], default: int) -> int:
    """The completion length a request asks for, capped; ``default`` when it does not say."""
    n_tokens = body.get("max_tokens", body.get("max_completion_tokens", default))
    if n_tokens is None:
        n_tokens = default
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
        raise _BadRequest(400, "'max_tokens' must be a positive integer")
    return min(n_tokens, _MAX_TOKENS_CAP)


@dataclass(frozen=True, slots=True)
class _Completion:
    """One completion request, checked, and the JSON objects of its answer."""

    chat: bool
    ident: str
    created: int
    prompt_tokens: int
    words: list[str]
    stream: bool
    include_usage: bool

    @classmethod
    def from_request(cls, body: dict[str, Any], chat: bool, server: StubServer) -> _Completion:
        """Check ``body``; :class:`_BadRequest` (status 400) for what the API would reject."""
        from ..prompt import count_tokens

        prompt_tokens = count_tokens(_prompt_text(body, chat))
        n_tokens = _completion_tokens(body, server.model.max_tokens)
        options = body.get("stream_options")
        return cls(
            chat=chat,
            ident=f"{'chatcmpl' if chat else 'cmpl'}-ragbench-{server.next_id()}",
            created=int(time.time()),
            prompt_tokens=prompt_tokens,
            words=[_WORDS[i % len(_WORDS)] for i in range(n_tokens)],
            stream=bool(body.get("stream", False)),
            include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        )

    def usage(self) -> dict[str, int]:
        n_tokens = len(self.words)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": n_tokens,
            "total_tokens": self.prompt_tokens + n_tokens,
        }

    def chunk(self, delta: dict[str, Any] | str | None, finish: str | None) -> dict[str, Any]:
        """One streamed event carrying ``delta`` (chat) or text (completions)."""
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
        return {
            "id": self.ident,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": MODEL_ID,
            "choices": [choice],
        }

    def whole(self) -> dict[str, Any]:
        """The answer to a non-streaming request."""
        text = "".join(self.words)
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return {
            "id": self.ident,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": MODEL_ID,
            "choices": [choice],
            "usage": self.usage(),
        }


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
        except _BadRequest as exc:
            self._send_error_json(exc.code, exc.message, close=exc.code in (408, 411, 413))
        except TimeoutError:
            self.close_connection = True  # a stalled client: drop it
        except (BrokenPipeError, ConnectionResetError):
            # The client had what it wanted (the first token) and hung up.
            self.close_connection = True

    def _read_body(self) -> dict[str, Any]:
        raw = self.headers.get("Content-Length")
        if raw is None:
            raise _BadRequest(411, "Content-Length is required")
        try:
            length = int(raw)
        except ValueError:
            raise _BadRequest(400, f"bad Content-Length {raw!r}") from None
        limit = self.server.max_body_bytes
        if length < 0 or length > limit:
            # refused before a byte of the body is read; the connection is closed after
            raise _BadRequest(413, f"request body must be 0..{limit} bytes, got {length}")
        data = self._read_exactly(length)
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise _BadRequest(400, f"request body is not JSON: {type(exc).__name__}") from None
        if not isinstance(body, dict):
            raise _BadRequest(400, "request body must be a JSON object")
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
                raise _BadRequest(400, f"request body ended {left} bytes short")
            parts.append(part)
            left -= len(part)
            if left and time.monotonic() > deadline:
                raise _BadRequest(408, "request body took longer than the read timeout")
        return b"".join(parts)

    def _complete(self, body: dict[str, Any], chat: bool) -> None:
        model = self.server.model
        completion = _Completion.from_request(body, chat, self.server)
        time.sleep(model.prefill_seconds(completion.prompt_tokens))
        step = model.inter_token_ms / 1000.0
        if completion.stream:
            self._stream(completion, step)
        else:
            # A non-streaming client waits for the whole completion.
            time.sleep(step * (len(completion.words) - 1))
            self._send_json(200, completion.whole())

    def _stream(self, completion: _Completion, step: float) -> None:
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
    is printed. Returns the process exit code (0).
    """
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
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0

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
``inter_token_ms=20``, ``max_tokens=16``) are in the range of a 7-8B model
on one datacenter GPU (about 10k prompt tokens/s prefill, 50 tokens/s per
stream). Every response carries ``X-Ragbench-Stub: simulated`` and names the
model ``"ragbench-stub (simulated)"`` so nobody mistakes its timings for a
measurement.

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions``
(``"stream": true`` gives ``text/event-stream`` chunks ``data: {json}`` ...
``data: [DONE]``; otherwise one JSON object), ``GET /v1/models``,
``GET /health``. Binds 127.0.0.1 unless told otherwise.

Run it with ``python -m ragbench.generators.stub_server [--host H] [--port P]``
(or ``ragbench stub-llm``); it prints one line with its base URL.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import ConfigError

__all__ = [
    "MODEL_ID",
    "StubModel",
    "StubServer",
    "main",
    "run_forever",
    "serve",
]

MODEL_ID = "ragbench-stub (simulated)"
STUB_HEADER = "X-Ragbench-Stub"
_MAX_BODY = 16 * 1024 * 1024
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


class StubModel:
    """The timing model: how long prefill and each decode step take.

    All parameters are keyword-only, non-negative and finite
    (:class:`ConfigError` otherwise): ``prefill_ms_per_1k_tokens`` (default
    100.0), ``base_ms`` (5.0), ``inter_token_ms`` (20.0), ``max_tokens``
    (16, the completion length when a request does not say).
    """

    __slots__ = ("base_ms", "inter_token_ms", "max_tokens", "prefill_ms_per_1k_tokens")

    def __init__(
        self,
        *,
        prefill_ms_per_1k_tokens: float = 100.0,
        base_ms: float = 5.0,
        inter_token_ms: float = 20.0,
        max_tokens: int = 16,
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
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(
                f"stub model: max_tokens must be a positive integer, got {max_tokens!r}"
            )
        self.prefill_ms_per_1k_tokens = float(prefill_ms_per_1k_tokens)
        self.base_ms = float(base_ms)
        self.inter_token_ms = float(inter_token_ms)
        self.max_tokens = min(max_tokens, _MAX_TOKENS_CAP)

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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Each SSE event must leave at once, as a real server flushes per token.
    disable_nagle_algorithm = True
    server_version = "ragbench-stub"
    server: StubServer

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
            self._send_error_json(exc.code, exc.message, close=exc.code in (411, 413))
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
        if length < 0 or length > _MAX_BODY:
            raise _BadRequest(413, f"request body must be 0..{_MAX_BODY} bytes")
        data = self.rfile.read(length)
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(400, f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest(400, "request body must be a JSON object")
        return body

    def _complete(self, body: dict[str, Any], chat: bool) -> None:
        from ..prompt import count_tokens

        model = self.server.model
        prompt_tokens = count_tokens(_prompt_text(body, chat))
        n_tokens = body.get("max_tokens", body.get("max_completion_tokens", model.max_tokens))
        if n_tokens is None:
            n_tokens = model.max_tokens
        if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
            raise _BadRequest(400, "'max_tokens' must be a positive integer")
        n_tokens = min(n_tokens, _MAX_TOKENS_CAP)
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))

        with self.server.counter_lock:
            self.server.counter += 1
            rid = self.server.counter
        created = int(time.time())
        ident = f"{'chatcmpl' if chat else 'cmpl'}-ragbench-{rid}"
        obj = "chat.completion.chunk" if chat else "text_completion"
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n_tokens,
            "total_tokens": prompt_tokens + n_tokens,
        }

        time.sleep(model.prefill_seconds(prompt_tokens))
        step = model.inter_token_ms / 1000.0
        words = [_WORDS[i % len(_WORDS)] for i in range(n_tokens)]

        if not stream:
            text = "".join(words)
            # A non-streaming client waits for the whole completion.
            time.sleep(step * (n_tokens - 1))
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length",
                }
                kind = "chat.completion"
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
                kind = "text_completion"
            self._send_json(
                200,
                {
                    "id": ident,
                    "object": kind,
                    "created": created,
                    "model": MODEL_ID,
                    "choices": [choice],
                    "usage": usage,
                },
            )
            return

        self.wfile.write(
            (
                "HTTP/1.1 200 OK\r\n"
                "Content-Type: text/event-stream\r\n"
                "Cache-Control: no-cache\r\n"
                "Transfer-Encoding: chunked\r\n"
                f"{STUB_HEADER}: simulated\r\n\r\n"
            ).encode("latin-1")
        )

        def chunk(delta: dict[str, Any] | str | None, finish: str | None) -> dict[str, Any]:
            if chat:
                c: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
            else:
                c = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
            return {
                "id": ident,
                "object": obj,
                "created": created,
                "model": MODEL_ID,
                "choices": [c],
            }

        if chat:
            self._event(chunk({"role": "assistant", "content": ""}, None))
        for i, word in enumerate(words):
            if i:
                time.sleep(step)
            self._event(chunk({"content": word} if chat else word, None))
        self._event(chunk({} if chat else "", "length"))
        if include_usage:
            final = chunk(None, None)
            final["choices"] = []
            final["usage"] = usage
            self._event(final)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class StubServer(ThreadingHTTPServer):
    """The stub's HTTP server; ``model`` holds its :class:`StubModel`."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: StubModel, verbose: bool = False) -> None:
        self.model = model
        self.verbose = verbose
        self.counter = 0
        self.counter_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-stream is normal (it had its first token).
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def serve(host: str = "127.0.0.1", port: int = 0, **model_params: Any) -> tuple[StubServer, int]:
    """Start the stub server in a background thread; return ``(server, port)``.

    ``model_params`` are :class:`StubModel`'s. Stop it with
    ``server.shutdown(); server.server_close()``.
    """
    model = StubModel(**model_params)
    server = StubServer((host, port), model)
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
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    exit_on_stdin_eof: bool = False,
    verbose: bool = False,
    **model_params: Any,
) -> int:
    """Serve until Ctrl-C (or stdin EOF if asked); print one line with the base URL first.

    The line reads ``ragbench stub LLM (simulated) listening on http://HOST:PORT/v1``.
    Returns the process exit code (0).
    """
    model = StubModel(**model_params)
    server = StubServer((host, port), model, verbose=verbose)
    if exit_on_stdin_eof:

        def watch() -> None:
            try:
                while sys.stdin.buffer.read(65536):
                    pass
            except (OSError, ValueError):
                pass
            server.shutdown()

        threading.Thread(target=watch, daemon=True, name="ragbench-parent-watch").start()
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


def main(argv: list[str] | None = None) -> int:
    """``python -m ragbench.generators.stub_server [--host H] [--port P] [model options]``."""
    parser = argparse.ArgumentParser(
        prog="python -m ragbench.generators.stub_server",
        description="ragbench's OpenAI-compatible streaming stub LLM (timings are simulated).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    parser.add_argument("--prefill-ms-per-1k-tokens", type=float, default=100.0)
    parser.add_argument("--base-ms", type=float, default=5.0)
    parser.add_argument("--inter-token-ms", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        return run_forever(
            args.host,
            args.port,
            exit_on_stdin_eof=args.exit_on_stdin_eof,
            verbose=args.verbose,
            prefill_ms_per_1k_tokens=args.prefill_ms_per_1k_tokens,
            base_ms=args.base_ms,
            inter_token_ms=args.inter_token_ms,
            max_tokens=args.max_tokens,
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

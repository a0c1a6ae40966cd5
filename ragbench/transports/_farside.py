"""The far side of every transport, and the servers that host it in a child process.

What an LLM gateway does with a payload -- decode it with the agreed codec,
build the prompt -- lives in :class:`FarSideProcessor`, shared by the
``inproc`` transport (in the calling thread) and by the ``http`` and
``grpc`` servers, which run it in a child process started with::

    python -m ragbench.transports._farside {http|grpc}

The child is a :class:`ragbench.process.ChildProcess`: the parent writes one
JSON line of configuration to its stdin (codec name, an importable
``"module:attr"`` factory for it, codec and prompt parameters, host). The
child answers with one stdout line ``READY <port>`` and then serves until its
stdin reaches EOF -- which also happens when the parent dies, so a child
never outlives it.

Reply layout (both servers): a 21-byte little-endian header ``<BIQQ``
(status, prompt_tokens, decode_ns, prompt_ns) followed by UTF-8 text -- the
prompt when status is 0, else ``codec\\0problem`` (status 1, a
:class:`~ragbench.errors.DecodeError` on the far side), or a message
(status 3, a :class:`~ragbench.errors.ConfigError` such as a question too
long for the prompt budget; status 2, any other far-side failure).
"""

from __future__ import annotations

import importlib
import json
import signal
import struct
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError, DecodeError, NotBuiltError, RagbenchError, TransportError
from ..process import ChildProcess, watch_stdin
from ..validate import positive_number

__all__ = [
    "ChildTransport",
    "FarSideProcessor",
    "codec_spec",
    "decode_reply",
    "main",
]

REPLY_OK = 0
REPLY_DECODE_ERROR = 1
REPLY_ERROR = 2
REPLY_CONFIG_ERROR = 3
_HEAD = struct.Struct("<BIQQ")
HEAD_SIZE = _HEAD.size

#: Content type of the far side's reply (the ``http`` transport sends it back).
REPLY_CONTENT_TYPE = "application/x-ragbench-farside"
#: Largest request body the servers accept when the codec names no limit.
DEFAULT_MAX_BODY = 64 * 1024 * 1024
# An oversized body up to this size is read and dropped so the 413 reply
# arrives intact; beyond it the connection is simply closed.
_MAX_DISCARD = 1024 * 1024 * 1024


# ------------------------------------------------------------------ codec spec


def _importable_name(factory: Any) -> str | None:
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _resolve(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def codec_spec(codec_name: str, codec_params: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """Resolve a codec for a far side in another process.

    ``codec_name`` is a registered codec name or an importable
    ``"module:attr"`` factory. Returns ``(spec, codec)``: a JSON-able spec the
    child recreates the codec from, and the codec built here (which checks the
    name and parameters before any process starts). Raises
    :class:`ConfigError` when the codec cannot be recreated by import in a
    child process (a lambda, a local function, something in ``__main__``) or
    its parameters are not JSON-able.
    """
    from .. import codecs

    if not isinstance(codec_name, str) or not codec_name:
        raise ConfigError(f"transport: codec name must be a non-empty string, got {codec_name!r}")
    if not isinstance(codec_params, dict):
        raise ConfigError("transport: codec parameters must be a dict")
    if codec_name in codecs.registry or ":" not in codec_name:
        factory = codecs.registry.factory(codec_name)  # UnknownBackendError lists names
        target = _importable_name(factory)
        try:
            same = target is not None and _resolve(target) is factory
        except (ImportError, AttributeError):
            same = False
        if not same:
            raise ConfigError(
                f"transport: the factory of codec {codec_name!r} cannot be imported by name in "
                "the far side's process; register it as a 'module:attr' string or a "
                "module-level callable"
            )
    else:
        target = codec_name
        try:
            factory = _resolve(target)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"transport: cannot import codec factory {target!r}: {exc}") from None
    try:
        json.dumps(codec_params)
    except (TypeError, ValueError):
        raise ConfigError(
            f"transport: parameters of codec {codec_name!r} must be JSON-able to reach "
            "the far side's process"
        ) from None
    codec = factory(**codec_params)
    return {"name": codec_name, "factory": target, "params": codec_params}, codec


def _make_codec(spec: dict[str, Any]) -> Any:
    from .. import codecs

    # Register what the parent resolved, even over a built-in name: the
    # parent may have replaced it, and the far side must build the same codec.
    codecs.register(spec["name"], spec["factory"])
    return codecs.create(spec["name"], **spec["params"])


# ------------------------------------------------------------------ processing


class FarSideProcessor:
    """Decode a payload and build its prompt, timing both with ``perf_counter_ns``."""

    __slots__ = ("_build", "_decode", "codec", "codec_name")

    def __init__(self, codec: Any, codec_name: str, prompt_params: dict[str, Any]) -> None:
        from ..prompt import PromptBuilder

        self.codec = codec
        self.codec_name = codec_name
        self._decode = codec.decode
        self._build = PromptBuilder(**prompt_params).build

    def process(self, payload: bytes) -> tuple[str, int, int, int]:
        """``(prompt, prompt_tokens, decode_ns, prompt_ns)``; raises the codec's DecodeError."""
        t0 = time.perf_counter_ns()
        result = self._decode(payload)
        t1 = time.perf_counter_ns()
        prompt, tokens = self._build(result)
        t2 = time.perf_counter_ns()
        return prompt, tokens, t1 - t0, t2 - t1

    def reply(self, payload: bytes) -> bytes:
        """The encoded reply for ``payload``; never raises for a bad payload."""
        try:
            prompt, tokens, decode_ns, prompt_ns = self.process(payload)
        except DecodeError as exc:
            body = f"{exc.codec}\0{exc.problem}".encode("utf-8", "replace")
            return _HEAD.pack(REPLY_DECODE_ERROR, 0, 0, 0) + body
        except ConfigError as exc:
            # e.g. a question too long for the prompt budget: the same error inproc raises.
            return _HEAD.pack(REPLY_CONFIG_ERROR, 0, 0, 0) + str(exc).encode("utf-8", "replace")
        except Exception as exc:  # the far side must answer, whatever went wrong
            text = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
            return _HEAD.pack(REPLY_ERROR, 0, 0, 0) + text
        return _HEAD.pack(REPLY_OK, tokens, decode_ns, prompt_ns) + prompt.encode(
            "utf-8", "surrogatepass"
        )


def decode_reply(reply: bytes, where: str) -> tuple[str, int, int, int]:
    """Parse a far-side reply into ``(prompt, prompt_tokens, decode_ns, prompt_ns)``.

    A far-side decode failure becomes :class:`DecodeError` (same codec, same
    problem); anything else unreadable becomes :class:`TransportError`.
    """
    if len(reply) < HEAD_SIZE:
        raise TransportError(f"{where}: reply of {len(reply)} bytes is shorter than its header")
    status, tokens, decode_ns, prompt_ns = _HEAD.unpack_from(reply)
    text = reply[HEAD_SIZE:].decode("utf-8", "surrogatepass")
    if status == REPLY_OK:
        return text, tokens, decode_ns, prompt_ns
    if status == REPLY_DECODE_ERROR:
        codec, _, problem = text.partition("\0")
        raise DecodeError(codec, f"{problem} (reported by the far side over {where})")
    if status == REPLY_CONFIG_ERROR:
        raise ConfigError(f"{text} (reported by the far side over {where})")
    if status == REPLY_ERROR:
        raise TransportError(f"{where}: the far side failed: {text}")
    raise TransportError(f"{where}: reply has unknown status {status}")


# ------------------------------------------------------------------ near side base


class ChildTransport:
    """Shared near-side life cycle of the ``http`` and ``grpc`` transports.

    Parameters (keyword only; unknown ones raise :class:`ConfigError`):
    ``host`` the far side binds and the near side dials (default
    ``"127.0.0.1"``), ``timeout`` seconds one request may take before it
    fails with :class:`TransportError` (default 30), ``startup_timeout``
    seconds the child may take to report ready (default 30).

    One connection carries one request at a time: use one transport per
    thread. ``alive`` says whether the far side still runs; after it died,
    every ``send`` raises :class:`TransportError` at once.
    """

    name = ""
    kind = ""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        startup_timeout: float = 30.0,
        **unknown: Any,
    ) -> None:
        from .._registry import check_params

        check_params(f"{self.name} transport", unknown, {"host", "timeout", "startup_timeout"})
        if not isinstance(host, str) or not host:
            raise ConfigError(f"{self.name} transport: host must be a non-empty string")
        owner = f"{self.name} transport"
        self.host = host
        self.timeout = positive_number(owner, "timeout", timeout)
        self.startup_timeout = positive_number(owner, "startup_timeout", startup_timeout)
        self.port = 0
        self.content_type = "application/octet-stream"
        self.codec_name = ""
        self._child: ChildProcess | None = None
        self._dead: str | None = None

    @property
    def pid(self) -> int | None:
        """Process id of the far side's server, or ``None`` before start / after close."""
        return None if self._child is None else self._child.pid

    @property
    def alive(self) -> bool:
        """True while the far side's process runs and has not failed a request fatally."""
        return self._child is not None and self._dead is None and self._child.alive

    def start(
        self, codec_name: str, codec_params: dict[str, Any], prompt_params: dict[str, Any]
    ) -> int:
        """Start the far side's server process; return the nanoseconds until it was ready.

        The codec and the prompt parameters are checked here first, so a
        configuration mistake is a :class:`ConfigError` from this process,
        not a dead child.
        """
        from ..prompt import PromptBuilder

        if self._child is not None:
            raise ConfigError(f"{self.name} transport: already started; close() it first")
        t0 = time.perf_counter_ns()
        spec, codec = codec_spec(codec_name, codec_params)
        if not isinstance(prompt_params, dict):
            raise ConfigError(f"{self.name} transport: prompt parameters must be a dict")
        PromptBuilder(**prompt_params)
        try:
            json.dumps(prompt_params)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{self.name} transport: prompt parameters must be JSON-able"
            ) from None
        self.content_type = str(getattr(codec, "content_type", "application/octet-stream"))
        self.codec_name = codec_name
        limit = getattr(codec, "max_payload_bytes", None)
        max_body = limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_BODY
        config = {"codec": spec, "prompt": prompt_params, "host": self.host, "max_body": max_body}
        child = ChildProcess(
            [sys.executable, "-m", "ragbench.transports._farside", self.kind],
            f"{self.name} transport",
            config,
            error=TransportError,
        )
        try:
            line = child.wait_ready(self.startup_timeout)
            word, _, port = line.partition(" ")
            if word != "READY" or not port.isdigit():
                raise TransportError(f"{self.name} transport: unexpected ready line {line!r}")
            self.port = int(port)
            self._child = child
            self._dead = None
            self._connect()
        except BaseException:
            self._child = None
            child.stop(grace=0.0)
            raise
        return time.perf_counter_ns() - t0

    def _connect(self) -> None:
        raise NotImplementedError

    def _disconnect(self) -> None:
        raise NotImplementedError

    def _check_usable(self) -> ChildProcess:
        child = self._child
        if child is None:
            raise NotBuiltError(f"{self.name} transport: call start() before send()")
        if self._dead is not None:
            raise TransportError(f"{self.name} transport: the far side is dead: {self._dead}")
        if not child.alive:
            self._dead = child.death_note(0.0)
            self._disconnect()
            raise TransportError(f"{self.name} transport: the far side is dead: {self._dead}")
        return child

    def _failed(self, problem: str, query: str) -> TransportError:
        """Build the error for a failed request; mark the far side dead if its process is gone."""
        self._disconnect()
        child = self._child
        note = child.death_note(0.5) if child is not None else "not started"
        if child is not None and not child.alive:
            self._dead = note
        return TransportError(
            f"{self.name} transport to {self.host}:{self.port}: {problem} "
            f"(query {query[:60]!r}); {note}"
        )

    def close(self) -> None:
        """Close the connection and stop the far side's process (idempotent)."""
        self._disconnect()
        child, self._child = self._child, None
        if child is not None:
            child.stop()

    def __enter__(self) -> ChildTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ child side


def _read_config() -> dict[str, Any]:
    line = sys.stdin.buffer.readline()
    if not line:
        raise SystemExit("far side: no configuration line on stdin")
    config = json.loads(line)
    if not isinstance(config, dict):
        raise SystemExit("far side: configuration must be a JSON object")
    return config


def _serve_http(processor: FarSideProcessor, host: str, max_body: int) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Replies are one write each; no Nagle delay on a keep-alive socket.
        disable_nagle_algorithm = True
        server_version = "ragbench-farside"

        def _reply(self, code: int, body: bytes, content_type: str, close: bool = False) -> None:
            head = (
                f"HTTP/1.1 {code} {self.responses.get(code, ('',))[0]}\r\n"
                f"Content-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n"
                + ("Connection: close\r\n" if close else "")
                + "\r\n"
            ).encode("latin-1")
            if close:
                self.close_connection = True
            self.wfile.write(head + body)

        def _error(self, code: int, message: str) -> None:
            self._reply(code, message.encode("utf-8", "replace"), "text/plain; charset=utf-8", True)

        def do_POST(self) -> None:
            if self.path != "/v1/process":
                self._error(404, f"unknown path {self.path}; POST /v1/process")
                return
            raw_length = self.headers.get("Content-Length")
            if raw_length is None:
                self._error(411, "Content-Length is required")
                return
            try:
                length = int(raw_length)
            except ValueError:
                self._error(400, f"bad Content-Length {raw_length!r}")
                return
            if length < 0:
                self._error(400, f"bad Content-Length {raw_length!r}")
                return
            if length > max_body:
                message = f"payload of {length} bytes exceeds the {max_body}-byte limit"
                if length > _MAX_DISCARD:
                    self._error(413, message)
                    return
                # Read and drop the body so the reply reaches the client
                # (closing on unread data would reset the connection first).
                left = length
                while left > 0:
                    got = len(self.rfile.read(min(left, 1 << 20)))
                    if not got:
                        self.close_connection = True
                        return
                    left -= got
                self._reply(413, message.encode(), "text/plain; charset=utf-8")
                return
            body = self.rfile.read(length)
            if len(body) != length:
                self.close_connection = True
                return
            self._reply(200, processor.reply(body), REPLY_CONTENT_TYPE)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, b"ok", "text/plain")
            else:
                self._error(404, f"unknown path {self.path}")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request on stderr would cost more than the request

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    server = Server((host, 0), Handler)
    watch_stdin(server.shutdown)
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()


def _serve_grpc(processor: FarSideProcessor, host: str, max_body: int) -> None:
    from concurrent import futures

    import grpc

    def process(request: bytes, context: Any) -> bytes:
        return processor.reply(request)

    handler = grpc.method_handlers_generic_handler(
        GRPC_SERVICE, {GRPC_METHOD: grpc.unary_unary_rpc_method_handler(process)}
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        handlers=(handler,),
        options=[
            ("grpc.max_receive_message_length", max_body),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
        ],
    )
    bind_host = f"[{host}]" if ":" in host else host
    port = server.add_insecure_port(f"{bind_host}:0")
    if port == 0:
        raise SystemExit(f"far side: grpc could not bind {host}")
    server.start()
    done = threading.Event()

    def stop() -> None:
        server.stop(grace=0.5).wait(2.0)
        done.set()

    watch_stdin(stop)
    print(f"READY {port}", flush=True)
    done.wait()


GRPC_SERVICE = "ragbench.v1.FarSide"
GRPC_METHOD = "Process"
GRPC_PATH = f"/{GRPC_SERVICE}/{GRPC_METHOD}"


def main(argv: Sequence[str] | None = None) -> int:
    """Child entry point: ``python -m ragbench.transports._farside {http|grpc}``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] not in ("http", "grpc"):
        print("usage: python -m ragbench.transports._farside {http|grpc}", file=sys.stderr)
        return 2
    # The parent decides when we stop (stdin EOF); a terminal's Ctrl-C is its business.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = _read_config()
    try:
        codec = _make_codec(config["codec"])
        processor = FarSideProcessor(codec, config["codec"]["name"], config.get("prompt", {}))
    except (RagbenchError, ImportError, KeyError, TypeError) as exc:
        print(f"far side: cannot set up: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    host = str(config.get("host", "127.0.0.1"))
    max_body = int(config.get("max_body", DEFAULT_MAX_BODY))
    if args[0] == "http":
        _serve_http(processor, host, max_body)
    else:
        _serve_grpc(processor, host, max_body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The far side of every transport, and the servers that host it in a child process.

What an LLM gateway does with a payload -- decode it with the agreed codec,
build the prompt -- lives in :class:`FarSideProcessor`, shared by the
``inproc`` transport (in the calling thread) and by the ``http`` and
``grpc`` servers, which run it in a child process started with::

    python -m ragbench.transports._far_side_servers {http|grpc|asgi}

The child is a :class:`ragbench.process.ChildProcess`: the parent writes one
JSON line of configuration to its stdin (codec name, an importable
``"module:attr"`` factory for it, codec and prompt parameters, host). The
child answers with one stdout line ``READY <port>`` and then serves until its
stdin reaches EOF -- which also happens when the parent dies, so a child
never outlives it.

The configuration line may also carry ``"cpu_time": true``: the far side
then measures its own thread CPU time (:func:`time.thread_time_ns`) around
decode and around prompt building, beside the wall-clock figures; without it
it never calls ``thread_time_ns`` and reports 0 for both.

Reply layout, version 2 (every server): a 38-byte little-endian header
``<BBIQQQQ`` -- ``version`` (:data:`REPLY_VERSION`, 2), ``status``,
``prompt_tokens``, ``decode_ns``, ``prompt_ns``, ``decode_cpu_ns``,
``prompt_cpu_ns`` (the last two 0 unless CPU time was asked for) --
followed by UTF-8 text: the prompt when status is 0, else
``codec\\0problem`` (status 1, a :class:`~ragbench.errors.DecodeError` on
the far side), or a message (status 3, a
:class:`~ragbench.errors.ConfigError` such as a question too long for the
prompt budget; status 2, any other far-side failure). A reply of another
version is a :class:`~ragbench.errors.TransportError`. (Version 1, before
the CPU-time fields, was a 21-byte ``<BIQQ`` header without a version byte.)

Every server serves many connections at once: the ``http`` server is a
:class:`http.server.ThreadingHTTPServer` (one thread per connection), the
``grpc`` server runs calls on a pool of up to :data:`~ragbench.transports.grpc_server.GRPC_MAX_WORKERS`
threads, and the ``asgi`` server (Starlette on uvicorn,
:mod:`ragbench.transports.asgi_server`, given the configuration's
``"asgi"`` table) runs them in Starlette's thread pool, so each near-side
thread's requests are served side by side.
"""

from __future__ import annotations

import importlib
import json
import signal
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError, DecodeError, RagbenchError, TransportError
from ..process import watch_stdin
from .grpc_server import serve_grpc

#: Version of the reply layout (the first header byte); see the module docstring.
REPLY_VERSION = 2
REPLY_OK = 0
REPLY_DECODE_ERROR = 1
REPLY_ERROR = 2
REPLY_CONFIG_ERROR = 3
# version, status, prompt_tokens, decode_ns, prompt_ns, decode_cpu_ns, prompt_cpu_ns
_HEAD = struct.Struct("<BBIQQQQ")
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


def make_codec(spec: dict[str, Any]) -> Any:
    """The codec a far side decodes with, from the ``"codec"`` entry of its configuration."""
    from .. import codecs

    # Register what the parent resolved, even over a built-in name: the
    # parent may have replaced it, and the far side must build the same codec.
    codecs.register(spec["name"], spec["factory"])
    return codecs.create(spec["name"], **spec["params"])


# ------------------------------------------------------------------ processing


def cpu_time_flag(owner: str, cpu_time: object) -> bool:
    """``cpu_time`` checked to be a bool (:class:`ConfigError` otherwise)."""
    if not isinstance(cpu_time, bool):
        raise ConfigError(f"{owner}: cpu_time must be true or false, got {cpu_time!r}")
    return cpu_time


class FarSideProcessor:
    """Decode a payload and build its prompt, timing both with ``perf_counter_ns``.

    With ``cpu_time=True`` it also measures the calling thread's CPU time
    (``thread_time_ns``) around each step; each CPU-time pair brackets the
    wall-clock pair, so the wall figures mean the same either way and never
    include the ``thread_time_ns`` calls. Without it ``thread_time_ns`` is
    never called and both CPU figures are 0.

    Safe to share between threads: it keeps no per-call state, the prompt
    builder keeps none either, and the codec must be shareable (all of
    ragbench's are: the stdlib JSON decoder, orjson, msgspec's
    ``Encoder``/``Decoder`` -- thread-safe since msgspec/msgspec#402, May 2023 --
    and protobuf's ``FromString``).
    """

    __slots__ = ("_build", "_decode", "codec", "codec_name", "cpu_time")

    def __init__(
        self,
        codec: Any,
        codec_name: str,
        prompt_params: dict[str, Any],
        *,
        cpu_time: bool = False,
    ) -> None:
        from ..prompt import PromptBuilder

        self.codec = codec
        self.codec_name = codec_name
        self.cpu_time = cpu_time_flag("far side", cpu_time)
        self._decode = codec.decode
        self._build = PromptBuilder(**prompt_params).build

    def process(self, payload: bytes) -> tuple[str, int, int, int, int, int]:
        """``(prompt, prompt_tokens, decode_ns, prompt_ns, decode_cpu_ns, prompt_cpu_ns)``.

        Raises the codec's DecodeError (and the prompt builder's ConfigError).
        """
        if self.cpu_time:
            return self._process_with_cpu_time(payload)
        perf = time.perf_counter_ns
        t0 = perf()
        result = self._decode(payload)
        t1 = perf()
        prompt, tokens = self._build(result)
        t2 = perf()
        return prompt, tokens, t1 - t0, t2 - t1, 0, 0

    def _process_with_cpu_time(self, payload: bytes) -> tuple[str, int, int, int, int, int]:
        perf = time.perf_counter_ns
        cpu = time.thread_time_ns
        c0 = cpu()
        t0 = perf()
        result = self._decode(payload)
        t1 = perf()
        c1 = cpu()
        c2 = cpu()
        t2 = perf()
        prompt, tokens = self._build(result)
        t3 = perf()
        c3 = cpu()
        return prompt, tokens, t1 - t0, t3 - t2, c1 - c0, c3 - c2

    def reply(self, payload: bytes) -> bytes:
        """The encoded reply for ``payload``; never raises for a bad payload."""
        try:
            prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = self.process(payload)
        except DecodeError as exc:
            body = f"{exc.codec}\0{exc.problem}".encode("utf-8", "replace")
            return _failure_head(REPLY_DECODE_ERROR) + body
        except ConfigError as exc:
            # e.g. a question too long for the prompt budget: the same error inproc raises.
            return _failure_head(REPLY_CONFIG_ERROR) + str(exc).encode("utf-8", "replace")
        except Exception as exc:  # the far side must answer, whatever went wrong
            text = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
            return _failure_head(REPLY_ERROR) + text
        head = _HEAD.pack(
            REPLY_VERSION, REPLY_OK, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu
        )
        return head + prompt.encode("utf-8", "surrogatepass")


def _failure_head(status: int) -> bytes:
    return _HEAD.pack(REPLY_VERSION, status, 0, 0, 0, 0, 0)


def decode_reply(reply: bytes, where: str) -> tuple[str, int, int, int, int, int]:
    """Parse a far-side reply into ``(prompt, prompt_tokens, decode_ns, prompt_ns,
    decode_cpu_ns, prompt_cpu_ns)``.

    A far-side decode failure becomes :class:`DecodeError` (same codec, same
    problem); anything else unreadable, or a reply of another layout version,
    becomes :class:`TransportError`.
    """
    if len(reply) < HEAD_SIZE:
        raise TransportError(f"{where}: reply of {len(reply)} bytes is shorter than its header")
    version, status, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = _HEAD.unpack_from(reply)
    if version != REPLY_VERSION:
        raise TransportError(
            f"{where}: reply layout version {version}, expected {REPLY_VERSION} (is the far "
            "side running another ragbench version?)"
        )
    text = reply[HEAD_SIZE:].decode("utf-8", "surrogatepass")
    if status == REPLY_OK:
        return text, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu
    if status == REPLY_DECODE_ERROR:
        codec, _, problem = text.partition("\0")
        raise DecodeError(codec, f"{problem} (reported by the far side over {where})")
    if status == REPLY_CONFIG_ERROR:
        raise ConfigError(f"{text} (reported by the far side over {where})")
    if status == REPLY_ERROR:
        raise TransportError(f"{where}: the far side failed: {text}")
    raise TransportError(f"{where}: reply has unknown status {status}")


# ------------------------------------------------------------------ child side


def read_child_config() -> dict[str, Any]:
    """The far side's configuration: the one JSON line its parent wrote to stdin."""
    line = sys.stdin.buffer.readline()
    if not line:
        raise SystemExit("far side: no configuration line on stdin")
    config = json.loads(line)
    if not isinstance(config, dict):
        raise SystemExit("far side: configuration must be a JSON object")
    return config


def _content_length(raw: str) -> int:
    """A ``Content-Length`` value as an int; -1 when it is not a non-negative integer."""
    try:
        return max(int(raw), -1)
    except ValueError:
        return -1


def _drain(rfile: Any, length: int) -> bool:
    """Read and drop ``length`` bytes; False if the connection ended first."""
    left = length
    while left > 0:
        got = len(rfile.read(min(left, 1 << 20)))
        if not got:
            return False
        left -= got
    return True


def _tls_listener(sock: Any, tls: dict[str, str]) -> Any:
    """``sock`` wrapped for TLS 1.3 with the certificate at ``tls``; handshakes left to
    :func:`_handshake` in each connection's thread."""
    from .tls import server_context

    ctx = server_context(tls["cert"], tls["key"])
    return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)


def _handshake(conn: Any) -> None:
    """Complete a TLS connection's handshake (in its own thread, not the accept loop)."""
    if hasattr(conn, "do_handshake"):
        try:
            conn.do_handshake()
        except (OSError, ValueError):
            conn.close()
            raise


def _serve_http(
    processor: FarSideProcessor, host: str, max_body: int, tls: dict[str, str] | None = None
) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Replies are one write each; no Nagle delay on a keep-alive socket.
        disable_nagle_algorithm = True
        server_version = "ragbench-farside"

        def setup(self) -> None:
            _handshake(self.request)
            super().setup()

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
            length = _content_length(raw_length)
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
                if not _drain(self.rfile, length):
                    self.close_connection = True
                    return
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
        request_queue_size = 128  # threads connecting at once; a backlog of 5 drops SYNs

    server = Server((host, 0), Handler)
    if tls is not None:
        server.socket = _tls_listener(server.socket, tls)
    watch_stdin(server.shutdown)
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    """Child entry point: ``python -m ragbench.transports._far_side_servers {http|grpc|asgi}``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] not in ("http", "grpc", "asgi"):
        print(
            "usage: python -m ragbench.transports._far_side_servers {http|grpc|asgi}",
            file=sys.stderr,
        )
        return 2
    # The parent decides when we stop (stdin EOF); a terminal's Ctrl-C is its business.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = read_child_config()
    try:
        codec = make_codec(config["codec"])
        processor = FarSideProcessor(
            codec,
            config["codec"]["name"],
            config.get("prompt", {}),
            cpu_time=bool(config.get("cpu_time", False)),
        )
    except (RagbenchError, ImportError, KeyError, TypeError) as exc:
        print(f"far side: cannot set up: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    host = str(config.get("host", "127.0.0.1"))
    max_body = int(config.get("max_body", DEFAULT_MAX_BODY))
    tls = config.get("tls")
    if args[0] == "http":
        _serve_http(processor, host, max_body, tls)
    elif args[0] == "asgi":
        from .asgi_server import serve_asgi

        settings = {**config.get("asgi", {}), "tls": tls}
        serve_asgi(processor.reply, REPLY_CONTENT_TYPE, host, max_body, settings)
    else:
        serve_grpc(processor.reply, host, max_body, {**config.get("grpc", {}), "tls": tls})
    return 0


if __name__ == "__main__":
    sys.exit(main())

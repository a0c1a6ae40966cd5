"""``asgi``: HTTP the way Python services serve it -- Starlette on uvicorn, called with httpx.

The far side is a Starlette app served by one uvicorn worker in a child
process bound to ``host`` on a port the kernel picks
(:mod:`ragbench.transports.asgi_server`); it decodes and builds the prompt
exactly as the ``http``/``grpc`` far sides do and answers with the same
reply (layout version 2), so the pipeline records the same far-side
timings. The near side calls it with an :class:`httpx.Client`:
``client.post("/v1/process", content=payload)``, keep-alive, HTTP/1.1.
Compared with the stdlib ``http`` transport (a raw socket to a
``ThreadingHTTPServer``), the difference per request is what the framework
costs: httpx's request building and response parsing, uvicorn's protocol,
Starlette's routing and request/response objects, and the hop to
Starlette's thread pool.

Wire bytes: httpx exposes no socket counters. The figures are rebuilt from
what httpx sent and received: request line, every request header
(``name: value`` CRLF, as h11 writes them) and the body; status line, every
response header and the body. That equals the bytes on the socket for
HTTP/1.1 with a ``Content-Length`` body (what both ends use here; a test
checks it through a counting proxy). Not counted: nothing on this
connection -- but a header that h11 folded or whose spacing it normalised
would be counted as normalised, and a chunked body's chunk framing would be
missed (neither happens with httpx and uvicorn).

Threads: each calling thread has its own ``httpx.Client`` holding one
keep-alive connection (pool of one, no idle expiry), opened by a ``GET
/health`` on the thread's first request or ahead of time by
:meth:`~ragbench.transports.ChildTransport.connect`. See
:class:`~ragbench.transports.ChildTransport` for the life cycle.

Parameters: ``host``, ``timeout``, ``startup_timeout`` as for every child
transport, and the server's settings: ``http`` (``"auto"``, ``"h11"``,
``"httptools"``), ``loop`` (``"auto"``, ``"asyncio"``, ``"uvloop"``) --
``auto`` is resolved here to the fastest one installed (httptools, uvloop)
and what ran is in :meth:`AsgiTransport.describe` (and in every run record's ``info.transport_info``) -- ``offload`` (default
``True``: the endpoint runs in Starlette's thread pool like a FastAPI
``def`` endpoint; ``False``: on the event loop like an ``async def`` one)
and ``keep_alive_s`` (seconds the server keeps an idle connection, default
3600). Needs ``starlette``, ``uvicorn`` and ``httpx``
(``pip install 'ragbench[serve]'``).

``http2 = true``: the app is served by hypercorn (uvicorn speaks no
HTTP/2) and called with ``httpx.Client(http2=True, http1=False)``: over TLS
h2 is negotiated by ALPN, in clear text it is h2c with prior knowledge. The
byte counts are then a lower bound: bodies plus one 9-byte DATA frame
header per 16 KiB, without the HPACK-compressed HEADERS frames.

``tls = true``: ``https`` with an :class:`ssl.SSLContext` trusting exactly
the certificate made at start (TLS 1.3); the byte counts add what TLS
records add (:func:`~ragbench.transports.tls.record_bytes`, head and body
as separate writes), without the handshake. ``keep_alive = false``: the
client keeps no idle connection, so every request connects (and shakes
hands) anew; httpx's ``trace`` extension times the ``connect``, ``tls``
and ``first_byte`` (request sent until the reply's head is read) parts
into :attr:`~ragbench.transports.FarSide.connection_ns`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
from importlib import metadata
from time import perf_counter_ns
from typing import Any

from .._registry import check_params
from ..errors import ConfigError, DecodeError, MissingDependencyError, TransportError
from ..validate import bool_param, positive_int
from . import FarSide
from ._far_side_servers import decode_reply
from .aio import AsyncPost
from .child import COMMON_PARAMS, tls_problem
from .tls import record_bytes

__all__ = ["HTTP_IMPLEMENTATIONS", "LOOPS", "AsgiTransport"]

#: uvicorn's HTTP/1.1 implementations, fastest first (``auto`` takes the first installed).
HTTP_IMPLEMENTATIONS = ("httptools", "h11")
#: uvicorn's event loops, fastest first (``auto`` takes the first installed).
LOOPS = ("uvloop", "asyncio")
_NEEDS = {"h11": "h11", "httptools": "httptools", "asyncio": None, "uvloop": "uvloop"}
_COMMON = COMMON_PARAMS
_OWN = frozenset({"http", "loop", "offload", "keep_alive_s", "http2"})
_FRAME = 16384  # HTTP/2's default largest DATA frame


def _h2_bytes(body: int) -> int:
    """A body's bytes in HTTP/2 DATA frames (9-byte header each, 16 KiB each at most)."""
    return body + 9 * max(1, -(-body // _FRAME))


class _Trace:
    """httpx ``trace`` extension callback: the ``perf_counter_ns`` of each event it saw."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: dict[str, int] = {}

    def __call__(self, event: str, info: Any) -> None:
        self.at[event] = perf_counter_ns()

    def parts(self, tls: bool) -> tuple[tuple[str, int], ...]:
        at = self.at
        out = []
        if "connection.connect_tcp.complete" in at:
            out.append(
                (
                    "connect",
                    at["connection.connect_tcp.complete"] - at["connection.connect_tcp.started"],
                )
            )
        if tls and "connection.start_tls.complete" in at:
            out.append(
                ("tls", at["connection.start_tls.complete"] - at["connection.start_tls.started"])
            )
        sent = next((at[e] for e in at if e.endswith(".send_request_headers.started")), None)
        head = next((at[e] for e in at if e.endswith(".receive_response_headers.complete")), None)
        if sent is not None and head is not None:
            out.append(("first_byte", head - sent))
        return tuple(out)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None
        return False


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingDependencyError("httpx", "serve") from None
    for module in ("starlette", "uvicorn"):
        if not _installed(module):
            raise MissingDependencyError(module, "serve") from None
    return httpx


def _choose(kind: str, value: object, known: tuple[str, ...]) -> str:
    """``value`` checked against ``known`` (or ``auto``: the first installed) and installed."""
    if value == "auto":
        return next(name for name in known if _NEEDS[name] is None or _installed(name))
    if value not in known:
        raise ConfigError(
            f"asgi transport: unknown {kind} {value!r}; known: auto, {', '.join(known)}"
        )
    needs = _NEEDS[str(value)]
    if needs is not None and not _installed(needs):
        raise ConfigError(
            f"asgi transport: {kind} {value!r} needs {needs}, which is not installed "
            f"(pip install {needs}), or use {kind}='auto'"
        )
    return str(value)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class _Client:
    """One thread's httpx client and its socket (shut down on close, to wake a blocked read)."""

    __slots__ = ("client", "sock")

    def __init__(self, client: Any, sock: socket.socket | None) -> None:
        self.client = client
        self.sock = sock


def _head_bytes(headers: Any) -> int:
    """Bytes of a header block as HTTP/1.1 writes it: ``name: value\\r\\n`` each, then ``\\r\\n``."""
    return sum(len(name) + len(value) + 4 for name, value in headers.raw) + 2


class AsgiTransport(AsyncPost):
    """Payloads as httpx POSTs to ``/v1/process`` on a Starlette app under uvicorn.

    Thread-safe: each calling thread sends over its own ``httpx.Client``
    (one keep-alive connection), opened on its first :meth:`send` (or by
    :meth:`connect`); :meth:`close` closes them all. Requests from
    different threads overlap, and so do their far-side decodes (the
    endpoint runs in Starlette's thread pool unless ``offload=False``).
    """

    name = "asgi"
    kind = "asgi"

    def __init__(
        self,
        *,
        http: str = "auto",
        loop: str = "auto",
        offload: bool = True,
        keep_alive_s: int = 3600,
        http2: bool = False,
        **params: Any,
    ) -> None:
        check_params("asgi transport", params, _COMMON | _OWN)
        self._httpx = _httpx()  # fail at create time, before any process starts
        super().__init__(**params)
        self.http = _choose("http implementation", http, HTTP_IMPLEMENTATIONS)
        self.loop = _choose("loop", loop, LOOPS)
        self.offload = bool_param("asgi transport", "offload", offload)
        self.keep_alive_s = positive_int("asgi transport", "keep_alive_s", keep_alive_s)
        self.http2 = bool_param("asgi transport", "http2", http2)
        if self.http2:
            for module in ("hypercorn", "h2"):
                if not _installed(module):
                    raise MissingDependencyError(module, "serve")

    def describe(self) -> dict[str, Any]:
        """What serves and what calls: server, app, HTTP implementation, loop, client, versions."""
        server = "hypercorn" if self.http2 else "uvicorn"
        packages = ("hypercorn", "h2") if self.http2 else ("uvicorn", self.http, self.loop)
        return {
            "server": server,
            "workers": 1,
            "http": "h2" if self.http2 else self.http,
            "loop": "asyncio" if self.http2 else self.loop,
            "app": "starlette",
            "offload": self.offload,
            "client": "httpx",
            "tls": self.tls,
            "keep_alive": self.keep_alive,
            "versions": {
                p: v for p in (*packages, "starlette", "httpx") if (v := _version(p)) is not None
            },
        }

    def server_config(self) -> dict[str, Any]:
        settings = {
            "http": self.http,
            "loop": self.loop,
            "offload": self.offload,
            "keep_alive_s": self.keep_alive_s,
            "server": "hypercorn" if self.http2 else "uvicorn",
        }
        return {"asgi": settings}

    def client_settings(self) -> dict[str, Any]:
        """``httpx.Client``/``AsyncClient`` arguments for this transport's scheme, TLS and HTTP version."""
        out = super().client_settings()
        if self.http2:
            out.update(http1=False, http2=True)
        return out

    def open_connection(self) -> _Client:
        httpx = self._httpx
        host = f"[{self.host}]" if ":" in self.host else self.host
        client = httpx.Client(
            headers={"Content-Type": self.content_type},
            timeout=self.timeout,
            # One connection per thread, kept however long it idles (none with keep_alive = false).
            limits=httpx.Limits(
                max_connections=1,
                max_keepalive_connections=1 if self.keep_alive else 0,
                keepalive_expiry=None,
            ),
            trust_env=False,  # no proxy or .netrc from the environment on loopback
            **self.client_settings(),
        )
        try:
            resp = client.get("/health")  # opens the connection, outside any clock
            stream = resp.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
        except httpx.TimeoutException:
            client.close()
            raise TransportError(
                f"asgi transport: no answer from {host}:{self.port} within {self.timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            client.close()
            raise TransportError(
                f"asgi transport: {tls_problem(exc) or f'cannot connect: {exc}'}"
            ) from None
        if resp.status_code != 200:
            client.close()
            raise TransportError(f"asgi transport: /health answered {resp.status_code}")
        return _Client(client, sock if isinstance(sock, socket.socket) else None)

    def close_connection(self, conn: Any) -> None:
        sock = conn.sock
        if sock is not None:
            # shutdown first: it wakes a thread blocked reading this connection.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            conn.client.close()

    def send(self, payload: bytes, query: str) -> FarSide:
        """POST ``payload``; return the far side's prompt, its timings and the wire byte counts.

        ``query`` only labels errors. Raises :class:`~ragbench.errors.DecodeError`
        when the far side could not decode the payload or found it too
        large, :class:`TransportError` when the server failed, died or did
        not answer within ``timeout``.
        """
        self.check_usable()
        try:
            conn = self.thread_connections.local.conn
        except AttributeError:
            # This thread's first request, or the first after a failure closed its client.
            conn = self.attach(query)
        httpx = self._httpx
        trace = None if self.keep_alive else _Trace()
        try:
            if trace is None:
                resp = conn.client.post("/v1/process", content=payload)
            else:
                resp = conn.client.post("/v1/process", content=payload, extensions={"trace": trace})
        except httpx.TimeoutException:
            raise self.failed(f"no reply within {self.timeout:g} s", query) from None
        except httpx.HTTPError as exc:
            raise self.failed(f"request failed: {type(exc).__name__}: {exc}", query) from None
        body = resp.content
        if resp.status_code != 200:
            return self._refused(resp, body, query)
        sent, received = self._wire_bytes(resp, len(payload), len(body))
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(body, "asgi")
        parts = () if trace is None else trace.parts(self.tls)
        return FarSide(
            prompt, tokens, decode_ns, prompt_ns, sent, received, decode_cpu, prompt_cpu, parts
        )

    def _wire_bytes(self, resp: Any, payload: int, body: int) -> tuple[int, int]:
        """Bytes sent and received for one exchange (see the module docstring)."""
        if resp.http_version == "HTTP/2":
            sent, received = _h2_bytes(payload), _h2_bytes(body)
            if self.tls:
                return record_bytes(sent), record_bytes(received)
            return sent, received
        request = resp.request
        # "M /path HTTP/1.1\r\n" + headers; "HTTP/1.1 200 OK\r\n" + headers
        sent_head = len(request.method) + len(request.url.raw_path) + 12
        sent_head += _head_bytes(request.headers)
        head = len(resp.http_version) + len(resp.reason_phrase) + 7 + _head_bytes(resp.headers)
        if self.tls:  # head and body are separate writes on both ends: separate records
            return (
                record_bytes(sent_head) + record_bytes(payload),
                record_bytes(head) + record_bytes(body),
            )
        return sent_head + payload, head + body

    def _refused(self, resp: Any, body: bytes, query: str) -> FarSide:
        text = body[:500].decode("utf-8", "replace")
        if resp.status_code == 413:
            # Oversized payloads are a DecodeError wherever they are caught.
            raise DecodeError(self.codec_name, f"{text[:300]} (reported by the far side over asgi)")
        self.disconnect()
        raise TransportError(
            f"asgi transport: far side answered {resp.status_code} {resp.reason_phrase}: {text} "
            f"(query {query[:60]!r})"
        )

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
:meth:`~ragbench.transports._farside.ChildTransport.connect`. See
:class:`~ragbench.transports._farside.ChildTransport` for the life cycle.

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
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
from importlib import metadata
from typing import Any

from .._registry import check_params
from ..errors import ConfigError, DecodeError, MissingDependencyError, TransportError
from ..validate import bool_param, positive_int
from . import FarSide
from ._farside import decode_reply
from .aio import AsyncPost

__all__ = ["HTTP_IMPLEMENTATIONS", "LOOPS", "AsgiTransport"]

#: uvicorn's HTTP/1.1 implementations, fastest first (``auto`` takes the first installed).
HTTP_IMPLEMENTATIONS = ("httptools", "h11")
#: uvicorn's event loops, fastest first (``auto`` takes the first installed).
LOOPS = ("uvloop", "asyncio")
_NEEDS = {"h11": "h11", "httptools": "httptools", "asyncio": None, "uvloop": "uvloop"}
_COMMON = frozenset({"host", "timeout", "startup_timeout"})
_OWN = frozenset({"http", "loop", "offload", "keep_alive_s"})


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
        **params: Any,
    ) -> None:
        check_params("asgi transport", params, _COMMON | _OWN)
        self._httpx = _httpx()  # fail at create time, before any process starts
        super().__init__(**params)
        self.http = _choose("http implementation", http, HTTP_IMPLEMENTATIONS)
        self.loop = _choose("loop", loop, LOOPS)
        self.offload = bool_param("asgi transport", "offload", offload)
        self.keep_alive_s = positive_int("asgi transport", "keep_alive_s", keep_alive_s)

    def describe(self) -> dict[str, Any]:
        """What serves and what calls: server, app, HTTP implementation, loop, client, versions."""
        return {
            "server": "uvicorn",
            "workers": 1,
            "http": self.http,
            "loop": self.loop,
            "app": "starlette",
            "offload": self.offload,
            "client": "httpx",
            "versions": {
                p: v
                for p in ("uvicorn", "starlette", self.http, self.loop, "httpx")
                if (v := _version(p)) is not None
            },
        }

    def _child_config(self) -> dict[str, Any]:
        settings = {
            "http": self.http,
            "loop": self.loop,
            "offload": self.offload,
            "keep_alive_s": self.keep_alive_s,
        }
        return {"asgi": settings}

    def _open(self) -> _Client:
        httpx = self._httpx
        host = f"[{self.host}]" if ":" in self.host else self.host
        client = httpx.Client(
            base_url=f"http://{host}:{self.port}",
            headers={"Content-Type": self.content_type},
            timeout=self.timeout,
            # One connection per thread, kept however long it idles.
            limits=httpx.Limits(
                max_connections=1, max_keepalive_connections=1, keepalive_expiry=None
            ),
            trust_env=False,  # no proxy or .netrc from the environment on loopback
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
            raise TransportError(f"asgi transport: cannot connect: {exc}") from None
        if resp.status_code != 200:
            client.close()
            raise TransportError(f"asgi transport: /health answered {resp.status_code}")
        return _Client(client, sock if isinstance(sock, socket.socket) else None)

    def _close_conn(self, conn: Any) -> None:
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
        self._check_usable()
        try:
            conn = self._conns.local.conn
        except AttributeError:
            # This thread's first request, or the first after a failure closed its client.
            conn = self._attach(query)
        httpx = self._httpx
        try:
            resp = conn.client.post("/v1/process", content=payload)
        except httpx.TimeoutException:
            raise self._failed(f"no reply within {self.timeout:g} s", query) from None
        except httpx.HTTPError as exc:
            raise self._failed(f"request failed: {type(exc).__name__}: {exc}", query) from None
        body = resp.content
        if resp.status_code != 200:
            return self._refused(resp, body, query)
        request = resp.request
        sent = (
            len(request.method)
            + len(request.url.raw_path)
            + 12  # "M /path HTTP/1.1\r\n"
            + _head_bytes(request.headers)
            + len(payload)
        )
        received = (
            len(resp.http_version)
            + len(resp.reason_phrase)
            + 7  # "HTTP/1.1 200 OK\r\n"
            + _head_bytes(resp.headers)
            + len(body)
        )
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(body, "asgi")
        return FarSide(prompt, tokens, decode_ns, prompt_ns, sent, received, decode_cpu, prompt_cpu)

    def _refused(self, resp: Any, body: bytes, query: str) -> FarSide:
        text = body[:500].decode("utf-8", "replace")
        if resp.status_code == 413:
            # Oversized payloads are a DecodeError wherever they are caught.
            raise DecodeError(self.codec_name, f"{text[:300]} (reported by the far side over asgi)")
        self._disconnect()
        raise TransportError(
            f"asgi transport: far side answered {resp.status_code} {resp.reason_phrase}: {text} "
            f"(query {query[:60]!r})"
        )

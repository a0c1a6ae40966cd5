"""The ``asgi`` transport's far side: a Starlette app served by uvicorn, in the far side's child process.

Started by :func:`ragbench.transports._far_side_servers.main` (``python -m
ragbench.transports._far_side_servers asgi``) with the same configuration line as the
``http``/``grpc`` far sides plus an ``"asgi"`` table (:func:`serve_asgi`);
it answers ``POST /v1/process`` with the far side's reply (layout version 2,
see :mod:`ragbench.transports._far_side_servers`) and ``GET /health`` with ``ok``.

How it is served, as a Python RAG service is usually deployed:

- one uvicorn worker (``uvicorn.Server`` in this process), no access log,
  no lifespan; the HTTP implementation (``h11`` or ``httptools``) and the
  event loop (``asyncio`` or ``uvloop``) are the ones the parent chose and
  recorded -- never uvicorn's ``auto``, so a record always says which ran;
- the endpoint is a plain ``def`` by default (``offload=True``): Starlette
  runs it in its thread pool, as FastAPI runs ``def`` endpoints, so slow
  decodes of several connections overlap like on the other far sides;
  ``offload=False`` decodes on the event loop, as an ``async def`` endpoint
  doing the work inline would (one request at a time);
- idle keep-alive connections are kept for ``keep_alive_s`` seconds
  (default one hour; uvicorn's 5 s default would make a near-side thread
  that paused between runs pay a new connection inside its next request).

The socket is bound here before uvicorn starts (port 0: the kernel picks a
free one) and ``READY <port>`` is printed once uvicorn serves it. The server
stops when the parent closes our stdin (:func:`ragbench.process.watch_stdin`).

With ``"server": "hypercorn"`` in the settings (the ``asgi`` transport's
``http2 = true``) the same app is served by hypercorn instead, which speaks
HTTP/2: over TLS negotiated by ALPN, in clear text with prior knowledge
(h2c). With ``"tls": {"cert": path, "key": path}`` either server speaks TLS
1.3 only, with that certificate.

Needs ``starlette`` and ``uvicorn`` (``pip install 'ragbench[serve]'``), and
``hypercorn`` for HTTP/2; this module imports them only inside
:func:`serve_asgi` and :func:`make_app`.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import Any

from ..process import watch_stdin

__all__ = ["make_app", "serve_asgi"]

# An oversized body up to this size is read and dropped so the 413 reply
# arrives intact; beyond it the reply is sent and uvicorn closes the connection.
_MAX_DISCARD = 1024 * 1024 * 1024


def make_app(
    reply: Callable[[bytes], bytes], content_type: str, max_body: int, *, offload: bool = True
) -> Any:
    """The Starlette app: ``POST /v1/process`` → ``reply(body)``; ``GET /health`` → ``ok``."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    async def read_body(request: Request) -> bytes | Response:
        raw = request.headers.get("content-length")
        if raw is not None and (not raw.isdigit()):
            return PlainTextResponse(f"bad Content-Length {raw!r}", status_code=400)
        if raw is not None and int(raw) > max_body:
            message = f"payload of {raw} bytes exceeds the {max_body}-byte limit"
            if int(raw) <= _MAX_DISCARD:
                async for _ in request.stream():
                    pass  # read and drop, so the client sees the 413 rather than a reset
            return PlainTextResponse(message, status_code=413)
        body = await request.body()
        if len(body) > max_body:  # a chunked body has no Content-Length to check first
            return PlainTextResponse(
                f"payload of {len(body)} bytes exceeds the {max_body}-byte limit", status_code=413
            )
        return body

    async def process(request: Request) -> Response:
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        out = await run_in_threadpool(reply, body) if offload else reply(body)
        return Response(out, media_type=content_type)

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes = [
        Route("/v1/process", process, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes)


def _bind(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on an accepted connection only
    # when its socket's proto is IPPROTO_TCP, and accepted sockets inherit the
    # listener's (socket.create_server leaves it 0). Without it, uvicorn's
    # separate writes of the response head and body meet Nagle's algorithm and
    # the client's delayed ACK: ~40 ms per request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(128)  # threads connecting at once; a small backlog would drop SYNs
    except OSError:
        sock.close()
        raise
    return sock


def serve_asgi(
    reply: Callable[[bytes], bytes],
    content_type: str,
    host: str,
    max_body: int,
    settings: dict[str, Any],
) -> None:
    """Serve the app until stdin reaches EOF; print ``READY <port>`` once serving.

    ``settings``: ``http`` (``"h11"``/``"httptools"``), ``loop``
    (``"asyncio"``/``"uvloop"``), ``offload`` (bool), ``keep_alive_s``
    (seconds an idle connection is kept).
    """
    app = make_app(reply, content_type, max_body, offload=bool(settings.get("offload", True)))
    if settings.get("server") == "hypercorn":
        _serve_hypercorn(app, host, settings)
        return
    import uvicorn

    tls = settings.get("tls") or {}
    config = uvicorn.Config(
        app,
        http=str(settings.get("http", "h11")),
        loop=str(settings.get("loop", "asyncio")),
        workers=1,
        lifespan="off",
        access_log=False,
        log_config=None,
        log_level="warning",
        timeout_keep_alive=int(settings.get("keep_alive_s", 3600)),
        timeout_graceful_shutdown=2,
        ssl_certfile=tls.get("cert"),
        ssl_keyfile=tls.get("key"),
    )
    config.load()
    if config.ssl is not None:
        from .tls import MIN_VERSION

        config.ssl.minimum_version = MIN_VERSION
    sock = _bind(host)
    port = sock.getsockname()[1]

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                print(f"READY {port}", flush=True)

    server = Server(config)

    def stop() -> None:
        server.should_exit = True  # uvicorn's main loop looks every 0.1 s

    watch_stdin(stop)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    sys.stdout.flush()


def _serve_hypercorn(app: Any, host: str, settings: dict[str, Any]) -> None:
    """Serve ``app`` with hypercorn (HTTP/2 and HTTP/1.1) until stdin reaches EOF."""
    import asyncio
    import ssl

    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from .tls import MIN_VERSION

    class TLS13(Config):
        def create_ssl_context(self) -> ssl.SSLContext | None:
            ctx = super().create_ssl_context()
            if ctx is not None:
                ctx.minimum_version = MIN_VERSION
            return ctx

    tls = settings.get("tls") or {}
    sock = _bind(host)
    port = sock.getsockname()[1]
    config = TLS13()
    config.bind = [f"fd://{sock.fileno()}"]
    config.certfile = tls.get("cert")
    config.keyfile = tls.get("key")
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = float(settings.get("keep_alive_s", 3600))
    config.graceful_timeout = 2.0

    async def main() -> None:
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop() -> None:
            loop.call_soon_threadsafe(stopped.set)

        watch_stdin(stop)
        print(f"READY {port}", flush=True)  # the socket listens; connections wait in its backlog
        await serve(app, config, shutdown_trigger=stopped.wait)

    try:
        asyncio.run(main())
    finally:
        sock.close()
    sys.stdout.flush()

"""The ``grpc`` transport's far side: a generic gRPC server in the far side's child process.

Started by :func:`ragbench.transports._far_side_servers.main` (``python -m
ragbench.transports._far_side_servers grpc``); :func:`serve_grpc` registers two raw
bytes methods on ``ragbench.v1.FarSide`` (no generated stubs, no
(de)serializers):

- ``Process`` (unary): the payload in, the far side's reply (layout
  version 2, see :mod:`ragbench.transports._far_side_servers`) out as one message;
- ``ProcessStream`` (server streaming): the same reply cut into messages of
  at most ``stream_chunk_bytes`` (the first carries the reply's header), so
  the near side's first message arrives before the whole reply is sent.

The server takes the near side's settings (``settings``, the configuration
line's ``"grpc"`` table): ``max_message_bytes`` (the largest message either
way; without it, requests up to the codec's limit and replies of any size),
``initial_window_bytes`` (``grpc.http2.lookahead_bytes``: the HTTP/2 stream
window it advertises), ``bdp_probe`` (``grpc.http2.bdp_probe``: window
auto-tuning), ``compression`` (of its replies: ``none``, ``gzip``,
``deflate``), ``keepalive_ms`` (how often the client may ping) and ``tls``
(``{"cert": path, "key": path}``). Needs ``grpcio``; imported only in
:func:`serve_grpc`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..process import watch_stdin

__all__ = [
    "GRPC_MAX_WORKERS",
    "GRPC_METHOD",
    "GRPC_PATH",
    "GRPC_SERVICE",
    "GRPC_STREAM_METHOD",
    "GRPC_STREAM_PATH",
    "channel_options",
    "serve_grpc",
]

#: Most calls the ``grpc`` far side runs at once (threads are made as needed).
GRPC_MAX_WORKERS = 64
GRPC_SERVICE = "ragbench.v1.FarSide"
GRPC_METHOD = "Process"
GRPC_STREAM_METHOD = "ProcessStream"
GRPC_PATH = f"/{GRPC_SERVICE}/{GRPC_METHOD}"
GRPC_STREAM_PATH = f"/{GRPC_SERVICE}/{GRPC_STREAM_METHOD}"


def channel_options(settings: dict[str, Any]) -> list[tuple[str, int]]:
    """The HTTP/2 flow-control and keep-alive channel arguments both ends set from ``settings``."""
    options: list[tuple[str, int]] = []
    window = settings.get("initial_window_bytes")
    if window is not None:
        options.append(("grpc.http2.lookahead_bytes", int(window)))
    bdp = settings.get("bdp_probe")
    if bdp is not None:
        options.append(("grpc.http2.bdp_probe", int(bool(bdp))))
    return options


def _compression(grpc: Any, name: object) -> Any:
    return {
        "gzip": grpc.Compression.Gzip,
        "deflate": grpc.Compression.Deflate,
    }.get(str(name), grpc.Compression.NoCompression)


def serve_grpc(
    reply: Callable[[bytes], bytes], host: str, max_body: int, settings: dict[str, Any]
) -> None:
    """Serve until stdin reaches EOF; print ``READY <port>`` once serving."""
    from concurrent import futures

    import grpc

    chunk = int(settings.get("stream_chunk_bytes") or 16384)

    def process(request: bytes, context: Any) -> bytes:
        return reply(request)

    def process_stream(request: bytes, context: Any) -> Iterator[bytes]:
        out = reply(request)
        for at in range(0, max(len(out), 1), chunk):
            yield out[at : at + chunk]

    handler = grpc.method_handlers_generic_handler(
        GRPC_SERVICE,
        {
            GRPC_METHOD: grpc.unary_unary_rpc_method_handler(process),
            GRPC_STREAM_METHOD: grpc.unary_stream_rpc_method_handler(process_stream),
        },
    )
    limit = settings.get("max_message_bytes")
    options = [
        ("grpc.max_receive_message_length", int(limit) if limit else max_body),
        ("grpc.max_send_message_length", int(limit) if limit else -1),
        ("grpc.so_reuseport", 0),
        *channel_options(settings),
    ]
    keepalive = settings.get("keepalive_ms")
    if keepalive:
        # accept the client's pings at that rate instead of answering GOAWAY "too_many_pings"
        options += [
            ("grpc.http2.min_recv_ping_interval_without_data_ms", int(keepalive)),
            ("grpc.http2.min_ping_interval_without_data_ms", int(keepalive)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    server = grpc.server(
        # Enough workers that concurrent near-side threads are served side by
        # side, as the http server does, rather than queued here.
        futures.ThreadPoolExecutor(max_workers=GRPC_MAX_WORKERS),
        handlers=(handler,),
        options=options,
        compression=_compression(grpc, settings.get("compression", "none")),
    )
    bind_host = f"[{host}]" if ":" in host else host
    tls = settings.get("tls")
    if tls:
        with open(tls["key"], "rb") as f:
            key = f.read()
        with open(tls["cert"], "rb") as f:
            cert = f.read()
        # grpc's TLS stack (BoringSSL) negotiates TLS 1.3 with a TLS 1.3 client
        creds = grpc.ssl_server_credentials([(key, cert)])
        port = server.add_secure_port(f"{bind_host}:0", creds)
    else:
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

"""``grpc``: one unary gRPC call per payload to a far-side server in a child process.

No generated stubs: the far side registers a generic handler for
``/ragbench.v1.FarSide/Process`` without (de)serializers, so the request is
the codec's payload bytes untouched and the reply is the far side's compact
binary reply (see :mod:`ragbench.transports._far_side_servers`). The codec's content
type travels in the ``x-ragbench-content-type`` metadata entry. Every call
has a deadline of ``timeout`` seconds, so a stuck far side is an error, never
a hang.

Wire bytes: gRPC does not expose socket counters, so the figures are the
bytes every call must carry -- the message, its 5-byte gRPC length prefix and
one 9-byte HTTP/2 DATA frame header per direction. HPACK-compressed HEADERS
frames (a few dozen bytes per call once the header table is warm) are not
counted, so the ``grpc`` byte counts are a lower bound.

Threads: a gRPC channel is thread-safe and would multiplex every thread's
calls as HTTP/2 streams over one TCP connection (channels with equal
arguments even share it, through gRPC's global subchannel pool). Instead
each calling thread gets its own channel, opened on its first call, with
``grpc.use_local_subchannel_pool`` so it really is its own TCP connection:
like the ``http`` transport's socket per thread, so the two compare like for
like under concurrency, and one thread's large payload never waits behind
another's in a shared connection's flow-control window. The far side runs
up to :data:`~ragbench.transports.grpc_server.GRPC_MAX_WORKERS` calls at once.

Async (an event loop serving many requests, ``ragbench load --worker-kind
asyncio``): :meth:`GrpcTransport.asend` makes the same call with
``grpc.aio`` over one channel per event loop, made on the loop's first call
(or by :meth:`GrpcTransport.aconnect`): the loop's calls in flight are
HTTP/2 streams multiplexed on that channel's connection, as an async gRPC
client does. :meth:`GrpcTransport.aclose` closes the running loop's channel.

Settings (each also sent to the far side, so both ends agree):

- ``max_message_bytes``: the largest message either end sends or accepts
  (default: any size out, the codec's limit in; at most :data:`GRPC_INT_MAX`,
  as every integer setting: grpc's channel arguments are C ints). A payload or reply over it
  fails at once with a :class:`~ragbench.errors.DecodeError` naming the
  setting, never a hang.
- ``initial_window_bytes``: the HTTP/2 stream window each end advertises
  (``grpc.http2.lookahead_bytes``; grpc's default is 64 KiB), and
  ``bdp_probe`` (``grpc.http2.bdp_probe``; grpc's default ``true``): whether
  the window grows with the measured bandwidth-delay product.
- ``compression``: ``"none"`` (default), ``"gzip"`` or ``"deflate"`` for the
  request (this channel) and the reply (the server). The byte counts stay
  the uncompressed message sizes (grpcio reports no compressed size).
- ``keepalive_ms``: HTTP/2 ping interval of an idle channel (the server
  accepts that rate); default none (grpc's: no pings).
- ``reply``: ``"unary"`` (default: the reply as one message) or
  ``"stream"`` (a server-streaming call; the reply in messages of at most
  ``stream_chunk_bytes``, default 16 KiB, joined here).
- ``tls``: TLS 1.3 channels (``grpc.secure_channel`` trusting only the
  certificate made at start); ``keep_alive = false``: a new channel per
  call, its set-up timed as ``("channel", ns)`` in
  :attr:`~ragbench.transports.FarSide.connection_ns` (TCP, TLS and the
  HTTP/2 preface together), then ``("first_byte", ns)`` until the first reply
  message.

And ``host``, ``timeout``, ``startup_timeout`` as every child transport
(:class:`ragbench.transports.ChildTransport`). Needs ``grpcio``
(``pip install 'ragbench[grpc]'``).
"""

from __future__ import annotations

import asyncio
import threading
from time import perf_counter_ns
from typing import Any

from .._registry import check_params
from ..errors import ConfigError, DecodeError, MissingDependencyError, TransportError
from ..validate import bool_param, positive_int
from . import FarSide
from ._far_side_servers import decode_reply
from .child import COMMON_PARAMS, ChildTransport
from .grpc_server import GRPC_PATH, GRPC_STREAM_PATH, channel_options

__all__ = ["COMPRESSIONS", "GRPC_INT_MAX", "REPLIES", "GrpcTransport"]

#: Values of ``compression``.
COMPRESSIONS = ("none", "gzip", "deflate")
#: Values of ``reply``.
REPLIES = ("unary", "stream")
_COMMON = COMMON_PARAMS
_CLOSER_LOCK = threading.Lock()


def _one_of(name: str, value: object, valid: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in valid:
        raise ConfigError(f"grpc transport: unknown {name} {value!r}; valid: {', '.join(valid)}")
    return value


#: The largest value of a gRPC integer setting: grpc's channel arguments are C ints (a larger
#: max_message_bytes used to reach the far side and kill it).
GRPC_INT_MAX = 2**31 - 1


def _optional_int(name: str, value: object, lo: int = 1) -> int | None:
    if value is None:
        return None
    return positive_int("grpc transport", name, value, lo=lo, hi=GRPC_INT_MAX)


# 5-byte gRPC message prefix + 9-byte HTTP/2 DATA frame header.
_FRAMING_BYTES = 5 + 9


def _grpc() -> Any:
    try:
        import grpc
    except ImportError:
        raise MissingDependencyError("grpcio", "grpc") from None
    return grpc


class _Channel:
    """One thread's channel and its ``Process`` method."""

    __slots__ = ("call", "channel")

    def __init__(self, channel: Any, call: Any) -> None:
        self.channel = channel
        self.call = call


class GrpcTransport(ChildTransport):
    """Payloads as raw-bytes unary gRPC calls over insecure loopback channels.

    Thread-safe: each calling thread calls over its own channel (its own TCP
    connection), opened on its first :meth:`send` (or by :meth:`connect`);
    :meth:`close` closes them all. Calls from different threads overlap.
    """

    name = "grpc"
    kind = "grpc"

    def __init__(
        self,
        *,
        max_message_bytes: int | None = None,
        initial_window_bytes: int | None = None,
        bdp_probe: bool | None = None,
        compression: str = "none",
        keepalive_ms: int | None = None,
        reply: str = "unary",
        stream_chunk_bytes: int = 16384,
        **params: Any,
    ) -> None:
        own = {
            "max_message_bytes",
            "initial_window_bytes",
            "bdp_probe",
            "compression",
            "keepalive_ms",
            "reply",
            "stream_chunk_bytes",
        }
        check_params("grpc transport", params, _COMMON | own)
        self._grpc = _grpc()  # fail at create time, before any process starts
        super().__init__(**params)
        self.max_message_bytes = _optional_int("max_message_bytes", max_message_bytes)
        self.initial_window_bytes = _optional_int("initial_window_bytes", initial_window_bytes)
        self.bdp_probe = None if bdp_probe is None else bool_param("grpc", "bdp_probe", bdp_probe)
        self.compression = _one_of("compression", compression, COMPRESSIONS)
        self.keepalive_ms = _optional_int("keepalive_ms", keepalive_ms, lo=10)
        self.reply = _one_of("reply", reply, REPLIES)
        self.stream_chunk_bytes = positive_int(
            "grpc transport", "stream_chunk_bytes", stream_chunk_bytes, lo=64, hi=GRPC_INT_MAX
        )
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._aio: dict[asyncio.AbstractEventLoop, _Channel] = {}
        #: calls the ``grpc.aio`` channels carried (all loops)
        self.async_requests = 0

    def settings(self) -> dict[str, Any]:
        """The gRPC settings both ends use (sent to the far side; in every run record)."""
        return {
            "max_message_bytes": self.max_message_bytes,
            "initial_window_bytes": self.initial_window_bytes,
            "bdp_probe": self.bdp_probe,
            "compression": self.compression,
            "keepalive_ms": self.keepalive_ms,
            "reply": self.reply,
            "stream_chunk_bytes": self.stream_chunk_bytes,
        }

    def describe(self) -> dict[str, Any]:
        """What calls: grpcio's version, TLS, keep-alive and the gRPC settings."""
        return {
            "client": f"grpcio {self._grpc.__version__}",
            "tls": self.tls,
            "keep_alive": self.keep_alive,
            **self.settings(),
        }

    def server_config(self) -> dict[str, Any]:
        return {"grpc": self.settings()}

    def _options(self) -> list[tuple[str, int]]:
        limit = self.max_message_bytes or -1
        extra = channel_options(self.settings())
        if self.keepalive_ms:
            extra += [
                ("grpc.keepalive_time_ms", self.keepalive_ms),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
            ]
        return [
            *extra,
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            # A far side that dies must fail the next call at once,
            # not after a long reconnect back-off.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            # This channel's own TCP connection, not one shared with the
            # other threads' channels through the global subchannel pool.
            ("grpc.use_local_subchannel_pool", 1),
        ]

    def open_connection(self) -> _Channel:
        grpc = self._grpc
        host = f"[{self.host}]" if ":" in self.host else self.host
        # The same value for every thread; set before any of them calls.
        self._metadata = (("x-ragbench-content-type", self.content_type),)
        channel = self._make_channel(grpc, f"{host}:{self.port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=self.startup_timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            if self.tls:  # grpc does not say why: a refused certificate looks the same
                self._check_tls()
            raise TransportError(
                f"grpc transport: could not connect to {host}:{self.port} "
                f"within {self.startup_timeout:g} s"
            ) from None
        return _Channel(channel, self._method(channel))

    def _credentials(self, grpc: Any) -> Any:
        return grpc.ssl_channel_credentials(root_certificates=self.certificate.cert_pem)

    def _make_channel(self, grpc: Any, target: str, aio: bool = False) -> Any:
        """A channel with this transport's options, compression and (with ``tls``) credentials."""
        maker = grpc.aio if aio else grpc
        compression = {
            "gzip": grpc.Compression.Gzip,
            "deflate": grpc.Compression.Deflate,
        }.get(self.compression, grpc.Compression.NoCompression)
        options = self._options()
        if self.tls:
            creds = self._credentials(grpc)
            return maker.secure_channel(target, creds, options=options, compression=compression)
        return maker.insecure_channel(target, options=options, compression=compression)

    def _method(self, channel: Any) -> Any:
        if self.reply == "stream":
            return channel.unary_stream(GRPC_STREAM_PATH)
        return channel.unary_unary(GRPC_PATH)

    def close_connection(self, conn: Any) -> None:
        conn.channel.close()

    def send(self, payload: bytes, query: str) -> FarSide:
        """Call the far side with ``payload``; return its prompt, timings and wire byte counts.

        ``query`` only labels errors. Raises
        :class:`~ragbench.errors.DecodeError` when the far side could not
        decode the payload or found it too large, :class:`TransportError` when the call failed, the
        server died or the ``timeout`` deadline passed.
        """
        self.check_usable()
        if not self.keep_alive:
            return self._send_alone(payload, query)
        try:
            conn = self.thread_connections.local.conn
        except AttributeError:
            # This thread's first call, or the first after a failure closed its channel.
            conn = self.attach(query)
        try:
            if self.reply == "stream":
                replies = conn.call(payload, timeout=self.timeout, metadata=self._metadata)
                reply, _, messages = self._join(replies)
            else:
                reply = conn.call(payload, timeout=self.timeout, metadata=self._metadata)
                messages = 1
        except self._grpc.RpcError as exc:
            raise self._call_error(exc, query) from None
        return self._answer(payload, reply, messages, ())

    @staticmethod
    def _join(replies: Any) -> tuple[bytes, int, int]:
        """A streamed reply joined, the ``perf_counter_ns`` its first message arrived, messages."""
        it = iter(replies)
        first = next(it, b"")
        t = perf_counter_ns()
        if not isinstance(first, bytes):
            raise TransportError(f"grpc transport: reply is {type(first).__name__}, not bytes")
        rest = list(it)
        return (first + b"".join(rest) if rest else first), t, 1 + len(rest)

    def _send_alone(self, payload: bytes, query: str) -> FarSide:
        """One call on a channel of its own (``keep_alive = false``), its set-up timed."""
        grpc = self._grpc
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._metadata = (("x-ragbench-content-type", self.content_type),)
        t0 = perf_counter_ns()
        channel = self._make_channel(grpc, f"{host}:{self.port}")
        try:
            try:
                grpc.channel_ready_future(channel).result(timeout=self.timeout)
            except grpc.FutureTimeoutError:
                refused = self.tls_refusal() if self.tls else None
                raise self.failed(
                    refused or f"cannot connect within {self.timeout:g} s", query
                ) from None
            t1 = perf_counter_ns()
            call = self._method(channel)
            try:
                if self.reply == "stream":
                    replies = call(payload, timeout=self.timeout, metadata=self._metadata)
                    reply, t2, messages = self._join(replies)
                else:
                    reply = call(payload, timeout=self.timeout, metadata=self._metadata)
                    t2, messages = perf_counter_ns(), 1
            except grpc.RpcError as exc:
                raise self._call_error(exc, query) from None
        finally:
            # grpcio's close() takes ~200 ms (it waits for the channel's threads):
            # done off the clock, by a closer thread; close() waits for it.
            self._closer().submit(channel.close)
        return self._answer(
            payload, reply, messages, (("channel", t1 - t0), ("first_byte", t2 - t1))
        )

    def _closer(self) -> Any:
        """The pool closing per-call channels off the clock (made on first use, once)."""
        closer = self.__dict__.get("_closer_pool")
        if closer is None:
            from concurrent.futures import ThreadPoolExecutor

            with _CLOSER_LOCK:
                closer = self.__dict__.get("_closer_pool")
                if closer is None:
                    closer = self.__dict__["_closer_pool"] = ThreadPoolExecutor(
                        2, thread_name_prefix="grpc-close"
                    )
        return closer

    def close(self) -> None:
        """Close every channel (waiting for those closing in the background) and stop the far side."""
        closer = self.__dict__.pop("_closer_pool", None)
        if closer is not None:
            closer.shutdown(wait=True)
        super().close()

    def _call_error(self, exc: Any, query: str) -> Exception:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        name = getattr(code, "name", str(code))
        if name == "RESOURCE_EXHAUSTED" and self.alive:
            # A message over a size limit: this end's max_message_bytes, or the far side's.
            limit = (
                f"max_message_bytes = {self.max_message_bytes}"
                if self.max_message_bytes
                else "the codec's payload limit"
            )
            where = (
                "reported by the far side over grpc" if "SERVER" in details else "grpc transport"
            )
            return DecodeError(self.codec_name, f"{details} ({where}; {limit})")
        return self.failed(f"call failed with {name}: {details}", query)

    def _answer(
        self, payload: bytes, reply: Any, messages: int, parts: tuple[tuple[str, int], ...]
    ) -> FarSide:
        if not isinstance(reply, bytes):
            raise TransportError(f"grpc transport: reply is {type(reply).__name__}, not bytes")
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(reply, "grpc")
        return FarSide(
            prompt,
            tokens,
            decode_ns,
            prompt_ns,
            len(payload) + _FRAMING_BYTES,
            len(reply) + _FRAMING_BYTES * messages,
            decode_cpu,
            prompt_cpu,
            parts,
        )

    # -- async: grpc.aio, one channel per event loop

    def async_client(self) -> str:
        """What :meth:`asend` calls with (recorded beside each asyncio load record)."""
        return f"grpc.aio {self._grpc.__version__}"

    async def aconnect(self) -> None:
        """Make the running loop's channel and wait until it is connected (outside any clock)."""
        self.check_usable()
        await self._aio_channel()

    async def _aio_channel(self) -> _Channel:
        loop = asyncio.get_running_loop()
        conn = self._aio.get(loop)
        if conn is not None:
            return conn
        grpc = self._grpc
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._metadata = (("x-ragbench-content-type", self.content_type),)
        channel = self._make_channel(grpc, f"{host}:{self.port}", aio=True)
        try:
            await asyncio.wait_for(channel.channel_ready(), self.startup_timeout)
        except asyncio.TimeoutError:
            await channel.close()
            if self.tls:  # as open_connection: grpc does not say a certificate was refused
                problem = await asyncio.to_thread(self.tls_refusal)
                if problem is not None:
                    raise TransportError(
                        f"{self.name} transport to {self.host}:{self.port}: {problem}"
                    ) from None
            raise TransportError(
                f"grpc transport: could not connect to {host}:{self.port} "
                f"within {self.startup_timeout:g} s"
            ) from None
        conn = self._aio[loop] = _Channel(channel, channel.unary_unary(GRPC_PATH))
        return conn

    async def asend(self, payload: bytes, query: str) -> FarSide:
        """:meth:`send` from the running event loop, with ``grpc.aio``; same reply, same errors."""
        self.check_usable()
        conn = await self._aio_channel()
        try:
            reply = await conn.call(payload, timeout=self.timeout, metadata=self._metadata)
        except self._grpc.aio.AioRpcError as exc:
            name = getattr(exc.code(), "name", str(exc.code()))
            if name == "RESOURCE_EXHAUSTED" and self.alive:
                raise DecodeError(
                    self.codec_name, f"{exc.details()} (reported by the far side over grpc)"
                ) from None
            raise self.failed(f"call failed with {name}: {exc.details()}", query) from None
        if not isinstance(reply, bytes):
            raise TransportError(f"grpc transport: reply is {type(reply).__name__}, not bytes")
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(reply, "grpc")
        self.async_requests += 1
        return FarSide(
            prompt,
            tokens,
            decode_ns,
            prompt_ns,
            len(payload) + _FRAMING_BYTES,
            len(reply) + _FRAMING_BYTES,
            decode_cpu,
            prompt_cpu,
        )

    async def aclose(self) -> None:
        """Close the running loop's channel (idempotent)."""
        conn = self._aio.pop(asyncio.get_running_loop(), None)
        if conn is not None:
            await conn.channel.close()

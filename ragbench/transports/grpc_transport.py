"""``grpc``: one unary gRPC call per payload to a far-side server in a child process.

No generated stubs: the far side registers a generic handler for
``/ragbench.v1.FarSide/Process`` without (de)serializers, so the request is
the codec's payload bytes untouched and the reply is the far side's compact
binary reply (see :mod:`ragbench.transports._farside`). The codec's content
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
up to :data:`~ragbench.transports._farside.GRPC_MAX_WORKERS` calls at once.

Async (an event loop serving many requests, ``ragbench load --worker-kind
asyncio``): :meth:`GrpcTransport.asend` makes the same call with
``grpc.aio`` over one channel per event loop, made on the loop's first call
(or by :meth:`GrpcTransport.aconnect`): the loop's calls in flight are
HTTP/2 streams multiplexed on that channel's connection, as an async gRPC
client does. :meth:`GrpcTransport.aclose` closes the running loop's channel.

Parameters: see :class:`ragbench.transports._farside.ChildTransport`
(``host``, ``timeout``, ``startup_timeout``). Needs ``grpcio``
(``pip install 'ragbench[grpc]'``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import DecodeError, MissingDependencyError, TransportError
from . import FarSide
from ._farside import GRPC_PATH, ChildTransport, decode_reply

__all__ = ["GrpcTransport"]

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

    def __init__(self, **params: Any) -> None:
        self._grpc = _grpc()  # fail at create time, before any process starts
        super().__init__(**params)
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._aio: dict[asyncio.AbstractEventLoop, _Channel] = {}
        #: calls the ``grpc.aio`` channels carried (all loops)
        self.async_requests = 0

    def _options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            # A far side that dies must fail the next call at once,
            # not after a long reconnect back-off.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            # This channel's own TCP connection, not one shared with the
            # other threads' channels through the global subchannel pool.
            ("grpc.use_local_subchannel_pool", 1),
        ]

    def _open(self) -> _Channel:
        grpc = self._grpc
        host = f"[{self.host}]" if ":" in self.host else self.host
        # The same value for every thread; set before any of them calls.
        self._metadata = (("x-ragbench-content-type", self.content_type),)
        channel = grpc.insecure_channel(f"{host}:{self.port}", options=self._options())
        try:
            grpc.channel_ready_future(channel).result(timeout=self.startup_timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            raise TransportError(
                f"grpc transport: could not connect to {host}:{self.port} "
                f"within {self.startup_timeout:g} s"
            ) from None
        return _Channel(channel, channel.unary_unary(GRPC_PATH))

    def _close_conn(self, conn: Any) -> None:
        conn.channel.close()

    def send(self, payload: bytes, query: str) -> FarSide:
        """Call the far side with ``payload``; return its prompt, timings and wire byte counts.

        ``query`` only labels errors. Raises
        :class:`~ragbench.errors.DecodeError` when the far side could not
        decode the payload or found it too large, :class:`TransportError` when the call failed, the
        server died or the ``timeout`` deadline passed.
        """
        self._check_usable()
        try:
            conn = self._conns.local.conn
        except AttributeError:
            # This thread's first call, or the first after a failure closed its channel.
            conn = self._attach(query)
        try:
            reply = conn.call(payload, timeout=self.timeout, metadata=self._metadata)
        except self._grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            name = getattr(code, "name", str(code))
            if name == "RESOURCE_EXHAUSTED" and self.alive:
                # The far side refused a message over its size limit.
                raise DecodeError(
                    self.codec_name, f"{details} (reported by the far side over grpc)"
                ) from None
            raise self._failed(f"call failed with {name}: {details}", query) from None
        if not isinstance(reply, bytes):
            raise TransportError(f"grpc transport: reply is {type(reply).__name__}, not bytes")
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(reply, "grpc")
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

    # -- async: grpc.aio, one channel per event loop

    def async_client(self) -> str:
        """What :meth:`asend` calls with (recorded beside each asyncio load record)."""
        return f"grpc.aio {self._grpc.__version__}"

    async def aconnect(self) -> None:
        """Make the running loop's channel and wait until it is connected (outside any clock)."""
        self._check_usable()
        await self._aio_channel()

    async def _aio_channel(self) -> _Channel:
        loop = asyncio.get_running_loop()
        conn = self._aio.get(loop)
        if conn is not None:
            return conn
        grpc = self._grpc
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._metadata = (("x-ragbench-content-type", self.content_type),)
        channel = grpc.aio.insecure_channel(f"{host}:{self.port}", options=self._options())
        try:
            await asyncio.wait_for(channel.channel_ready(), self.startup_timeout)
        except asyncio.TimeoutError:
            await channel.close()
            raise TransportError(
                f"grpc transport: could not connect to {host}:{self.port} "
                f"within {self.startup_timeout:g} s"
            ) from None
        conn = self._aio[loop] = _Channel(channel, channel.unary_unary(GRPC_PATH))
        return conn

    async def asend(self, payload: bytes, query: str) -> FarSide:
        """:meth:`send` from the running event loop, with ``grpc.aio``; same reply, same errors."""
        self._check_usable()
        conn = await self._aio_channel()
        try:
            reply = await conn.call(payload, timeout=self.timeout, metadata=self._metadata)
        except self._grpc.aio.AioRpcError as exc:
            name = getattr(exc.code(), "name", str(exc.code()))
            if name == "RESOURCE_EXHAUSTED" and self.alive:
                raise DecodeError(
                    self.codec_name, f"{exc.details()} (reported by the far side over grpc)"
                ) from None
            raise self._failed(f"call failed with {name}: {exc.details()}", query) from None
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

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

Parameters: see :class:`ragbench.transports._farside.ChildTransport`
(``host``, ``timeout``, ``startup_timeout``). Needs ``grpcio``
(``pip install 'ragbench[grpc]'``).
"""

from __future__ import annotations

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

    def _open(self) -> _Channel:
        grpc = self._grpc
        host = f"[{self.host}]" if ":" in self.host else self.host
        # The same value for every thread; set before any of them calls.
        self._metadata = (("x-ragbench-content-type", self.content_type),)
        channel = grpc.insecure_channel(
            f"{host}:{self.port}",
            options=[
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", -1),
                # A far side that dies must fail the next call at once,
                # not after a long reconnect back-off.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
                # This channel's own TCP connection, not one shared with the
                # other threads' channels through the global subchannel pool.
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
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

"""How the serialized payload reaches the LLM side, behind one :class:`Transport` protocol.

``start(codec_name, codec_params, prompt_params, *, cpu_time=False)`` brings
up the far side (a child process for ``http``/``grpc``/``asgi``); ``send(payload,
query)`` carries the bytes over, the far side decodes them and builds the
prompt, and the reply says what happened there (:class:`FarSide`), with the
far side's own thread CPU time when ``cpu_time`` was asked for.
``close()`` stops the far side.

Every built-in transport may be shared by several threads once started:
``send`` is thread-safe, and the ``http``/``grpc``/``asgi`` transports give each
calling thread its own connection (see their classes). Their ``connect()``
opens the calling thread's connection ahead of time, so a worker thread's
first measured request does not include it (``inproc.connect()`` does
nothing).

The ``http``, ``asgi`` and ``grpc`` transports also have ``asend`` (the same
request awaited on an event loop: :class:`httpx.AsyncClient` or ``grpc.aio``,
one client per loop, see :mod:`ragbench.transports.aio`), with
``aconnect``/``aclose`` for the running loop's client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .._registry import Registry

__all__ = [
    "ChildTransport",
    "FarSide",
    "FarSideProcessor",
    "Transport",
    "connection_columns",
    "create",
    "decode_reply",
    "make_codec",
    "names",
    "read_child_config",
    "register",
    "registry",
]

# the base of a transport of your own, and the far side's parts its server needs (loaded lazily:
# importing ragbench.transports starts nothing and loads no client library)
_LAZY = {
    "ChildTransport": "ragbench.transports.child",
    "FarSideProcessor": "ragbench.transports._far_side_servers",
    "decode_reply": "ragbench.transports._far_side_servers",
    "make_codec": "ragbench.transports._far_side_servers",
    "read_child_config": "ragbench.transports._far_side_servers",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True, slots=True)
class FarSide:
    """What the far side reports for one payload.

    ``decode_ns``/``prompt_ns`` are the far side's wall-clock times for
    decoding the payload and building the prompt; ``decode_cpu_ns``/
    ``prompt_cpu_ns`` the CPU time its thread spent on them
    (``time.thread_time_ns``), measured only when the transport was started
    with ``cpu_time=True`` and 0 otherwise.

    ``connection_ns`` is empty on a kept-alive connection. With
    ``keep_alive = false`` (a new connection inside every request) it splits
    the request's set-up, in order, as ``(part, ns)`` pairs: ``("connect",
    ns)`` (TCP), ``("tls", ns)`` (the TLS handshake, with ``tls = true``) and
    ``("first_byte", ns)`` (from the request's first byte written to the
    reply's first byte read); ``grpc`` reports ``("channel", ns)`` instead of
    the first two (grpcio times TCP, TLS and the HTTP/2 preface only
    together). Parts sum to at most the transport's round trip.
    """

    prompt: str
    prompt_tokens: int
    decode_ns: int
    prompt_ns: int
    wire_bytes_sent: int
    wire_bytes_received: int
    decode_cpu_ns: int = 0
    prompt_cpu_ns: int = 0
    connection_ns: tuple[tuple[str, int], ...] = ()


def _set_fields() -> tuple[Any, ...]:
    return tuple(getattr(FarSide, name).__set__ for name in FarSide.__dataclass_fields__)


(
    _set_prompt,
    _set_prompt_tokens,
    _set_decode_ns,
    _set_prompt_ns,
    _set_sent,
    _set_received,
    _set_decode_cpu,
    _set_prompt_cpu,
    _set_connection,
) = _set_fields()


def _far_side_init(
    self: FarSide,
    prompt: str,
    prompt_tokens: int,
    decode_ns: int,
    prompt_ns: int,
    wire_bytes_sent: int,
    wire_bytes_received: int,
    decode_cpu_ns: int = 0,
    prompt_cpu_ns: int = 0,
    connection_ns: tuple[tuple[str, int], ...] = (),
) -> None:
    # The generated __init__ of a frozen dataclass sets each field through
    # object.__setattr__ (~620 ns for 8 fields); the slots' own
    # descriptors do the same in ~340 ns. A FarSide is built on every send.
    _set_prompt(self, prompt)
    _set_prompt_tokens(self, prompt_tokens)
    _set_decode_ns(self, decode_ns)
    _set_prompt_ns(self, prompt_ns)
    _set_sent(self, wire_bytes_sent)
    _set_received(self, wire_bytes_received)
    _set_decode_cpu(self, decode_cpu_ns)
    _set_prompt_cpu(self, prompt_cpu_ns)
    _set_connection(self, connection_ns)


# Same signature, fields and defaults as the generated one (a test checks).
FarSide.__init__ = _far_side_init  # type: ignore[method-assign]


def connection_columns(fars: Sequence[Any]) -> dict[str, list[int]] | None:
    """Per part, the :attr:`FarSide.connection_ns` of every request, in order; ``None`` if none has any.

    ``fars`` are FarSide records (or ``None``); a request without a part gets 0 there.
    """
    names: dict[str, None] = {}
    for far in fars:
        for part, _ in getattr(far, "connection_ns", ()) or ():
            names[part] = None
    if not names:
        return None
    out: dict[str, list[int]] = {name: [] for name in names}
    for far in fars:
        parts = dict(getattr(far, "connection_ns", ()) or ())
        for name, column in out.items():
            column.append(int(parts.get(name, 0)))
    return out


@runtime_checkable
class Transport(Protocol):
    name: str

    def start(
        self,
        codec_name: str,
        codec_params: dict[str, Any],
        prompt_params: dict[str, Any],
        *,
        cpu_time: bool = False,
    ) -> int:
        """Bring up the far side; return the nanoseconds it took.

        ``cpu_time=True`` asks the far side to report its thread CPU time
        (:attr:`FarSide.decode_cpu_ns`, :attr:`FarSide.prompt_cpu_ns`).
        """
        ...

    def send(self, payload: bytes, query: str) -> FarSide: ...
    def close(self) -> None: ...


registry: Registry[Transport] = Registry(
    "transports",
    {
        "inproc": "ragbench.transports.inproc:InprocTransport",
        "http": "ragbench.transports.http:HttpTransport",
        "grpc": "ragbench.transports.grpc_transport:GrpcTransport",
        "asgi": "ragbench.transports.asgi:AsgiTransport",
    },
)
create = registry.create
names = registry.names
register = registry.register

"""How the serialized payload reaches the LLM side, behind one :class:`Transport` protocol.

``start(codec_name, codec_params, prompt_params)`` brings up the far side
(a child process for ``http``/``grpc``); ``send(payload)`` carries the bytes
over, the far side decodes them and builds the prompt, and the reply says
what happened there (:class:`FarSide`). ``close()`` stops the far side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .._registry import Registry

__all__ = ["FarSide", "Transport", "create", "names", "register", "registry"]


@dataclass(frozen=True, slots=True)
class FarSide:
    """What the far side reports for one payload."""

    prompt: str
    prompt_tokens: int
    decode_ns: int
    prompt_ns: int
    wire_bytes_sent: int
    wire_bytes_received: int


@runtime_checkable
class Transport(Protocol):
    name: str

    def start(
        self, codec_name: str, codec_params: dict[str, Any], prompt_params: dict[str, Any]
    ) -> int:
        """Bring up the far side; return the nanoseconds it took."""
        ...

    def send(self, payload: bytes, query: str) -> FarSide: ...
    def close(self) -> None: ...


registry: Registry[Transport] = Registry(
    "transports",
    {
        "inproc": "ragbench.transports.inproc:InprocTransport",
        "http": "ragbench.transports.http:HttpTransport",
        "grpc": "ragbench.transports.grpc_transport:GrpcTransport",
    },
)
create = registry.create
names = registry.names
register = registry.register

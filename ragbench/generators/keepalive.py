"""The minimal client's keep-alive connection: one per thread, and telling a stale one apart.

Used by :class:`ragbench.generators.openai.StreamClient`. A keep-alive
connection may be closed by the server while it sits idle (the stub server
closes one silent for ``read_timeout_s``): :func:`peer_closed` sees that
before a request is written, and :class:`KeepAliveResponse` raises
:class:`NoReply` when the connection ends before a single byte of the
reply, the one case in which sending the request again is safe.
"""

from __future__ import annotations

import http.client
import select
import socket

__all__ = ["KeepAliveResponse", "NoReply", "ThreadConn", "peer_closed"]


class ThreadConn:
    """One thread's keep-alive connection and whether it is idle.

    ``idle``: it was open before the request now starting (it carried an
    earlier one and was kept, or
    :meth:`ragbench.generators.openai.StreamClient.connect` opened it
    ahead of time), so the server may have closed it meanwhile.
    """

    __slots__ = ("http", "idle")

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.http = conn
        self.idle = False


class NoReply(ConnectionError):
    """The connection closed (or was reset) before a single byte of the reply arrived."""


class KeepAliveResponse(http.client.HTTPResponse):
    """An :class:`http.client.HTTPResponse` telling "no byte of a reply" apart (:class:`NoReply`).

    Before the status line is parsed, one read waits for the reply's first
    bytes; an end of stream or a reset there means the server answered
    nothing. Any failure after a byte arrived is the response's own.
    """

    def begin(self) -> None:
        if self.headers is None:
            try:
                first = self.fp.peek(1) if self.fp is not None else b""
            except ConnectionResetError:
                first = b""
            if not first:
                raise NoReply("closed before any byte of the reply")
        super().begin()


def peer_closed(sock: socket.socket) -> bool:
    """Whether an idle connection's socket is readable: the server closed it (or sent stray bytes)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))

"""``http``: HTTP/1.1 POST to a far-side server in a child process, over keep-alive sockets.

The far side is a stdlib :class:`http.server.ThreadingHTTPServer` (HTTP/1.1,
keep-alive) in a child process bound to ``host`` on a port the kernel picks.
The near side speaks HTTP/1.1 directly on a socket rather than through
:mod:`http.client`: the request goes out in one ``sendall`` and the byte
counts reported are exactly what crossed the socket -- request line, headers
and body sent; status line, headers and body received.

Threads: each calling thread has its own keep-alive socket (HTTP/1.1 carries
one request at a time per connection), opened on its first request; the far
side serves every connection in its own thread. See
:class:`ragbench.transports._farside.ChildTransport`.

Parameters: see :class:`ragbench.transports._farside.ChildTransport`
(``host``, ``timeout``, ``startup_timeout``).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from ..errors import DecodeError, TransportError
from . import FarSide
from ._farside import decode_reply
from .aio import AsyncPost

__all__ = ["HttpTransport"]

_MAX_HEAD = 64 * 1024


class _Connection:
    """One thread's keep-alive socket, its receive buffer and its request head."""

    __slots__ = ("buf", "head", "sock")

    def __init__(self, sock: socket.socket, head: bytes) -> None:
        self.sock = sock
        self.head = head
        self.buf = bytearray()


class HttpTransport(AsyncPost):
    """Payloads as HTTP/1.1 POST bodies to ``/v1/process``; ``Content-Type`` is the codec's.

    Thread-safe: each calling thread sends over its own keep-alive socket,
    opened on its first :meth:`send` (or by :meth:`connect`); :meth:`close`
    closes them all. Requests from different threads overlap.
    """

    name = "http"
    kind = "http"

    def _open(self) -> _Connection:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        # Request and reply are single writes; Nagle would only add delay.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        host = f"[{self.host}]" if ":" in self.host else self.host
        head = (
            f"POST /v1/process HTTP/1.1\r\nHost: {host}:{self.port}\r\n"
            f"Content-Type: {self.content_type}\r\nContent-Length: "
        ).encode("latin-1")
        return _Connection(sock, head)

    def _close_conn(self, conn: Any) -> None:
        sock = conn.sock
        # shutdown first: it wakes a thread blocked in recv on this socket.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()

    def send(self, payload: bytes, query: str) -> FarSide:
        """POST ``payload``; return the far side's prompt, its timings and the wire byte counts.

        ``query`` only labels errors (the far side reads the question from
        the payload). Raises :class:`~ragbench.errors.DecodeError` when the
        far side could not decode the payload or found it too large, :class:`TransportError` when
        the server failed, died or did not answer within ``timeout``.
        """
        self._check_usable()
        try:
            conn = self._conns.local.conn
        except AttributeError:
            # This thread's first request, or the first after a failure closed its socket.
            conn = self._attach(query)
        request = b"".join((conn.head, str(len(payload)).encode(), b"\r\n\r\n", payload))
        try:
            conn.sock.sendall(request)
            status, reason, body, received = self._read_response(conn)
        except TimeoutError:
            raise self._failed(f"no reply within {self.timeout:g} s", query) from None
        except (OSError, ValueError) as exc:
            raise self._failed(f"request failed: {exc}", query) from None
        if status == 413:
            # Oversized payloads are a DecodeError wherever they are caught.
            raise DecodeError(
                self.codec_name,
                f"{body[:300].decode('utf-8', 'replace')} (reported by the far side over http)",
            )
        if status != 200:
            self._disconnect()
            text = body[:500].decode("utf-8", "replace")
            raise TransportError(
                f"http transport: far side answered {status} {reason}: {text} "
                f"(query {query[:60]!r})"
            )
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(body, "http")
        return FarSide(
            prompt, tokens, decode_ns, prompt_ns, len(request), received, decode_cpu, prompt_cpu
        )

    def _read_response(self, conn: _Connection) -> tuple[int, str, bytes, int]:
        """Read one response on ``conn``: ``(status, reason, body, bytes received)``."""
        buf = conn.buf
        sock = conn.sock
        while (end := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > _MAX_HEAD:
                raise ValueError("response head larger than 64 KiB")
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the far side closed the connection")
            buf += chunk
        head = bytes(buf[:end]).decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"malformed status line {lines[0][:80]!r}")
        status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
        length = -1
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            if key == "content-length":
                length = int(value.strip())
            elif key == "connection" and value.strip().lower() == "close":
                close = True
        if length < 0:
            raise ValueError("response without Content-Length")
        total = end + 4 + length
        while len(buf) < total:
            chunk = sock.recv(max(65536, total - len(buf)))
            if not chunk:
                raise ConnectionError("the far side closed the connection mid-reply")
            buf += chunk
        body = bytes(buf[end + 4 : total])
        del buf[:total]
        if close:
            self._disconnect()
        return status, reason, body, total

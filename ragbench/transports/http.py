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
:class:`ragbench.transports.ChildTransport`.

TLS (``tls = true``): the socket is wrapped with :func:`ragbench.transports.tls.client_context`
(TLS 1.3, trusting only the certificate made at start); the far side wraps
its listening socket the same way. The byte counts are then what TLS puts on
the wire for the request and the reply, each one write sent in full records
(:func:`~ragbench.transports.tls.record_bytes`: 22 bytes per record of up to
16 KiB); the handshake and the server's session tickets are not counted.

``keep_alive = false``: every request opens its own connection (TCP connect,
TLS handshake) and closes it after the reply; the request carries
``Connection: close`` and :attr:`FarSide.connection_ns` splits the set-up
into ``connect``, ``tls`` and ``first_byte``.

Parameters: see :class:`ragbench.transports.ChildTransport`
(``host``, ``timeout``, ``startup_timeout``, ``tls``, ``keep_alive``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from time import perf_counter_ns
from typing import Any

from ..errors import DecodeError, TransportError
from . import FarSide
from ._far_side_servers import decode_reply
from .aio import AsyncPost
from .child import tls_problem
from .tls import client_context, record_bytes

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

    _ssl: ssl.SSLContext | None = None

    def describe(self) -> dict[str, Any]:
        """What serves and what calls (in every run record's ``info.transport_info``)."""
        return {
            "server": "http.server.ThreadingHTTPServer",
            "client": "raw socket",
            "tls": self.tls,
            "keep_alive": self.keep_alive,
        }

    def open_connection(self) -> _Connection:
        return self._connect()[0]

    def _connect(self) -> tuple[_Connection, int, int, int]:
        """A new connection and the ``perf_counter_ns`` stamps before, after TCP, after TLS."""
        t0 = perf_counter_ns()
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        t1 = perf_counter_ns()
        # Request and reply are single writes; Nagle would only add delay.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            ctx = self._ssl
            if ctx is None:
                ctx = self._ssl = client_context(self.certificate.cert_pem)
            try:
                sock = ctx.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        t2 = perf_counter_ns()
        host = f"[{self.host}]" if ":" in self.host else self.host
        close = "" if self.keep_alive else "Connection: close\r\n"
        head = (
            f"POST /v1/process HTTP/1.1\r\nHost: {host}:{self.port}\r\n{close}"
            f"Content-Type: {self.content_type}\r\nContent-Length: "
        ).encode("latin-1")
        return _Connection(sock, head), t0, t1, t2

    def close_connection(self, conn: Any) -> None:
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
        self.check_usable()
        if not self.keep_alive:
            return self._send_alone(payload, query)
        try:
            conn = self.thread_connections.local.conn
        except AttributeError:
            # This thread's first request, or the first after a failure closed its socket.
            conn = self.attach(query)
        request = b"".join((conn.head, str(len(payload)).encode(), b"\r\n\r\n", payload))
        try:
            conn.sock.sendall(request)
            status, reason, body, received = self._read_response(conn)
        except TimeoutError:
            raise self.failed(f"no reply within {self.timeout:g} s", query) from None
        except (OSError, ValueError) as exc:
            raise self.failed(f"request failed: {exc}", query) from None
        return self._answer(status, reason, body, len(request), received, query, ())

    def _send_alone(self, payload: bytes, query: str) -> FarSide:
        """One request on a connection of its own (``keep_alive = false``), its set-up timed."""
        try:
            conn, t0, t1, t2 = self._connect()
        except TimeoutError:
            raise self.failed(f"cannot connect within {self.timeout:g} s", query) from None
        except OSError as exc:
            raise self.failed(tls_problem(exc) or f"cannot connect: {exc}", query) from None
        request = b"".join((conn.head, str(len(payload)).encode(), b"\r\n\r\n", payload))
        try:
            t3 = perf_counter_ns()
            conn.sock.sendall(request)
            first = conn.sock.recv(65536)
            t4 = perf_counter_ns()
            if not first:
                raise ConnectionError("the far side closed the connection")
            conn.buf += first
            status, reason, body, received = self._read_response(conn)
        except TimeoutError:
            raise self.failed(f"no reply within {self.timeout:g} s", query) from None
        except (OSError, ValueError) as exc:
            raise self.failed(f"request failed: {exc}", query) from None
        finally:
            self.close_connection(conn)
        parts = [("connect", t1 - t0)]
        if self.tls:
            parts.append(("tls", t2 - t1))
        parts.append(("first_byte", t4 - t3))
        return self._answer(status, reason, body, len(request), received, query, tuple(parts))

    def _answer(
        self,
        status: int,
        reason: str,
        body: bytes,
        sent: int,
        received: int,
        query: str,
        parts: tuple[tuple[str, int], ...],
    ) -> FarSide:
        if status == 413:
            # Oversized payloads are a DecodeError wherever they are caught.
            raise DecodeError(
                self.codec_name,
                f"{body[:300].decode('utf-8', 'replace')} (reported by the far side over http)",
            )
        if status != 200:
            self.disconnect()
            text = body[:500].decode("utf-8", "replace")
            raise TransportError(
                f"http transport: far side answered {status} {reason}: {text} "
                f"(query {query[:60]!r})"
            )
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(body, "http")
        if self.tls:
            sent, received = record_bytes(sent), record_bytes(received)
        return FarSide(
            prompt, tokens, decode_ns, prompt_ns, sent, received, decode_cpu, prompt_cpu, parts
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
            self.disconnect()
        return status, reason, body, total

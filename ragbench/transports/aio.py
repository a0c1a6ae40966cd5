"""The async near side of the ``http`` and ``asgi`` transports: ``await transport.asend(...)``.

An event loop serving many requests at once (``ragbench load --worker-kind
asyncio``) cannot block in a socket read, so these transports also have
:meth:`AsyncPost.asend`: the same ``POST /v1/process`` with an
:class:`httpx.AsyncClient`, returning the same :class:`FarSide`. The far
side is the very server the sync path talks to.

One client per event loop, made on the loop's first ``asend`` (or by
:meth:`AsyncPost.aconnect`), with no connection limit: every request in
flight on the loop has a keep-alive connection of its own (HTTP/1.1 carries
one request at a time), and the far side serves each connection in a thread
(``http``) or on its loop (``asgi``). :meth:`AsyncPost.aclose` closes the
running loop's client; call it on that loop before the loop ends.

Wire bytes are rebuilt from what httpx sent and received, as the sync
``asgi`` transport does (request line, headers and body; status line,
headers and body), exact for HTTP/1.1 with a ``Content-Length`` body.
:attr:`AsyncPost.async_requests` counts the requests the async client
carried, and :meth:`AsyncPost.async_client` names it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import DecodeError, MissingDependencyError, TransportError
from . import FarSide
from ._far_side_servers import decode_reply
from .child import ChildTransport, tls_problem
from .tls import client_context

__all__ = ["AsyncPost", "head_bytes", "require_httpx"]


def require_httpx() -> Any:
    """The ``httpx`` module, or :class:`MissingDependencyError` naming the ``serve`` extra."""
    try:
        import httpx
    except ImportError:
        raise MissingDependencyError("httpx", "serve") from None
    return httpx


def head_bytes(headers: Any) -> int:
    """Bytes of a header block as HTTP/1.1 writes it: ``name: value\\r\\n`` each, then ``\\r\\n``."""
    return sum(len(name) + len(value) + 4 for name, value in headers.raw) + 2


class AsyncPost(ChildTransport):
    """A child transport that also sends with an :class:`httpx.AsyncClient` (``asend``)."""

    #: requests the async clients carried (all loops)
    async_requests = 0

    def async_client(self) -> str:
        """What ``asend`` sends with (recorded beside each asyncio load record)."""
        return f"httpx.AsyncClient {require_httpx().__version__}"

    def client_settings(self) -> dict[str, Any]:
        """httpx client arguments for this transport's scheme and TLS (``base_url``, ``verify``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        out: dict[str, Any] = {
            "base_url": f"{'https' if self.tls else 'http'}://{host}:{self.port}",
        }
        if self.tls:
            out["verify"] = client_context(self.certificate.cert_pem)
        return out

    def _loop_clients(self) -> dict[asyncio.AbstractEventLoop, Any]:
        clients: dict[asyncio.AbstractEventLoop, Any] | None = self.__dict__.get("_aclients")
        if clients is None:
            clients = self.__dict__["_aclients"] = {}
        return clients

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        clients = self._loop_clients()
        client = clients.get(loop)
        if client is None:
            httpx = require_httpx()
            client = httpx.AsyncClient(
                **self.client_settings(),
                headers={"Content-Type": self.content_type},
                timeout=self.timeout,
                # a connection per request in flight, kept however long it idles
                limits=httpx.Limits(
                    max_connections=None, max_keepalive_connections=None, keepalive_expiry=None
                ),
                trust_env=False,  # no proxy or .netrc from the environment on loopback
            )
            clients[loop] = client
        return client

    async def aconnect(self) -> None:
        """Make the running loop's client and open one connection (outside any clock)."""
        self.check_usable()
        httpx = require_httpx()
        try:
            await self._client().get("/health")
        except httpx.HTTPError as exc:
            problem = tls_problem(exc) or f"cannot connect: {type(exc).__name__}: {exc}"
            raise self.failed(problem, "(connect)") from None

    async def asend(self, payload: bytes, query: str) -> FarSide:
        """POST ``payload`` from the running loop; the far side's prompt, timings and wire bytes.

        Raises as :meth:`send` does: :class:`~ragbench.errors.DecodeError`
        for a payload the far side could not decode or found too large,
        :class:`TransportError` when it failed, died or did not answer in time.
        """
        self.check_usable()
        httpx = require_httpx()
        try:
            resp = await self._client().post("/v1/process", content=payload)
        except httpx.TimeoutException:
            raise self.failed(f"no reply within {self.timeout:g} s", query) from None
        except httpx.HTTPError as exc:
            # a refused certificate in words naming TLS, as the sync send says it
            problem = tls_problem(exc) or f"request failed: {type(exc).__name__}: {exc}"
            raise self.failed(problem, query) from None
        body = resp.content
        if resp.status_code != 200:
            text = body[:500].decode("utf-8", "replace")
            if resp.status_code == 413:
                raise DecodeError(
                    self.codec_name, f"{text[:300]} (reported by the far side over {self.name})"
                )
            raise TransportError(
                f"{self.name} transport: far side answered {resp.status_code} "
                f"{resp.reason_phrase}: {text} (query {query[:60]!r})"
            )
        request = resp.request
        sent = len(request.method) + len(request.url.raw_path) + 12  # "M /path HTTP/1.1\r\n"
        sent += head_bytes(request.headers) + len(payload)
        received = len(resp.http_version) + len(resp.reason_phrase) + 7  # "HTTP/1.1 200 OK\r\n"
        received += head_bytes(resp.headers) + len(body)
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = decode_reply(body, self.name)
        self.async_requests += 1
        return FarSide(prompt, tokens, decode_ns, prompt_ns, sent, received, decode_cpu, prompt_cpu)

    async def aclose(self) -> None:
        """Close the running loop's client and its connections (idempotent)."""
        client = self._loop_clients().pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

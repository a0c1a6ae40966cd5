"""``openai``: time to first token from any OpenAI-compatible streaming endpoint.

Works with vLLM, llama.cpp's server, Ollama (``/v1``), TGI's OpenAI route, the
OpenAI API itself and ragbench's own stub (:mod:`ragbench.generators.stub_server`).
The request is ``POST {base_url}/chat/completions`` (or ``/completions``
with ``chat=False``) with ``"stream": true``; the server-sent events are read
until the first non-empty content delta, and TTFT is measured on the client
from just before the request is written to just after that delta is parsed.

Connection handling: one keep-alive :mod:`http.client` connection per
calling thread, opened on the thread's first request (the starting thread's
in :meth:`OpenAIGenerator.start`; any thread's ahead of time by
:meth:`OpenAIGenerator.connect`) and, after it was closed, again *before*
the TTFT clock starts. After the first token the client drains the rest of
the stream when ``max_tokens <= 1`` (the tail is immediate) and keeps the
connection; otherwise it closes the connection, which cancels the
generation on the server as any client that only wanted the first token
would.

Threads: :meth:`OpenAIGenerator.first_token` may be called from several
threads at once. Each thread streams over its own connection, with no lock
held across a request, so the requests overlap (the server must serve
concurrent connections, as vLLM, llama.cpp's server with several slots, and
the stub do); :meth:`~OpenAIGenerator.close` closes every thread's.

Failures -- connection refused, timeouts, a non-200 status, a body that is
not an event stream, malformed events, a stream that ends before any
content -- raise :class:`~ragbench.errors.GeneratorError` saying which.

Two clients (``client=``, :data:`CLIENTS`): ``"minimal"`` (the default,
everything above: :class:`StreamClient`, SSE parsed by hand over
:mod:`http.client`, the least a client can add to TTFT) and ``"openai"``
(the official ``openai`` package's streaming client, as services call an
LLM: :class:`ragbench.generators.openai_sdk.SdkClient`, same connection
handling, TTFT measured the same way).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import time
import urllib.parse
from typing import Any

from .._registry import check_params
from ..errors import ConfigError, GeneratorError, NotBuiltError
from ..threads import ThreadConnections
from ..validate import positive_int, positive_number
from . import FirstToken
from .aio import AsyncSdkClient, AsyncStreamClient, make_async_client
from .keepalive import KeepAliveResponse, NoReply, ThreadConn, peer_closed
from .openai_sdk import SdkClient
from .sse import sse_text

__all__ = ["CLIENTS", "OpenAIGenerator", "StreamClient", "make_client"]

#: The streaming clients a generator can use (``client=``).
CLIENTS = ("minimal", "openai")

_MAX_LINE = 1024 * 1024


def split_base_url(base_url: object, what: str) -> tuple[urllib.parse.SplitResult, int | None]:
    """``base_url`` checked to be an http(s) URL naming a host: its parts and its port."""
    if not isinstance(base_url, str) or not base_url:
        raise ConfigError(f"{what}: base_url must be a URL such as http://127.0.0.1:8000/v1")
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{what}: base_url {base_url!r} must start with http:// or https:// and name a "
            "host, e.g. http://127.0.0.1:8000/v1"
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{what}: base_url {base_url!r} has a bad port") from None
    return parts, port


def make_client(
    client: object, base_url: str, *, api_key: str | None, timeout: float, what: str
) -> StreamClient | SdkClient:
    """The streaming client named ``client`` (one of :data:`CLIENTS`) for ``base_url``."""
    if client == "minimal":
        return StreamClient(base_url, api_key=api_key, timeout=timeout, what=what)
    if client == "openai":
        split_base_url(base_url, what)
        return SdkClient(base_url, api_key=api_key, timeout=timeout, what=what)
    raise ConfigError(f"{what}: unknown client {client!r}; known: {', '.join(CLIENTS)}")


def client_library(client: StreamClient | SdkClient) -> str:
    """What a client streams with: ``http.client`` or ``openai <version>``."""
    if isinstance(client, SdkClient):
        return client.library
    return "http.client (ragbench's SSE reader)"


class StreamClient:
    """A keep-alive client for one OpenAI-compatible base URL (``http://host:port/v1``).

    Thread-safe: each calling thread has its own keep-alive connection,
    opened on its first request (or by :meth:`connect`) and kept for its
    next ones; no lock is held across a request. A failure or a hang-up
    closes only the calling thread's connection; the connection of a thread
    that has ended is closed when another thread next opens one;
    :meth:`close` closes every thread's (:attr:`connections` counts them).
    """

    def __init__(self, base_url: str, *, api_key: str | None, timeout: float, what: str) -> None:
        parts, port = split_base_url(base_url, what)
        self.what = what
        self.base_url = base_url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname or ""  # split_base_url checked there is one
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        # Each thread's connection; the registry's lock is taken only to add
        # or remove one, never across a request.
        self._conns: ThreadConnections[ThreadConn] = ThreadConnections()

    # -- connection

    @property
    def connections(self) -> int:
        """How many threads' connections are open now."""
        return len(self._conns)

    def connect(self) -> None:
        """Open the calling thread's connection now if it is not open (outside any TTFT clock)."""
        self._connection().idle = True  # open before the next request: it may go stale

    def _new_conn(self) -> ThreadConn:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        tc = ThreadConn(cls(self.host, self.port, timeout=self.timeout))
        tc.http.response_class = KeepAliveResponse
        for c in self._conns.register(tc):
            c.http.close()
        return tc

    def _connection(self) -> ThreadConn:
        """The calling thread's connection, connected now if it is not."""
        tc = self._conns.current()
        if tc is None:
            tc = self._new_conn()
        conn = tc.http
        if conn.sock is not None and tc.idle and peer_closed(conn.sock):
            conn.close()  # the server dropped it while idle: reconnect now, before any clock
        if conn.sock is None:
            try:
                conn.connect()
            except ConnectionRefusedError:
                self._drop()
                raise GeneratorError(
                    f"{self.what}: connection to {self.base_url} refused; is the server running "
                    "and is base_url right?"
                ) from None
            except TimeoutError:
                self._drop()
                raise GeneratorError(
                    f"{self.what}: connecting to {self.base_url} timed out after {self.timeout:g} s"
                ) from None
            except OSError as exc:
                self._drop()
                raise GeneratorError(
                    f"{self.what}: cannot connect to {self.base_url}: {exc}"
                ) from None
            if conn.sock is not None and self.scheme == "http":
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tc.idle = False
        return tc

    def _drop(self) -> None:
        """Close the calling thread's connection (the next request opens a new one)."""
        tc = self._conns.drop_current()
        if tc is not None:
            tc.http.close()

    def close(self) -> None:
        """Close every thread's connection (idempotent; later requests open new ones)."""
        for tc in self._conns.take_all():
            sock = tc.http.sock
            if sock is not None:
                # Wakes a thread blocked reading this connection, if any.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            tc.http.close()

    # -- requests

    def _request(
        self, method: str, path: str, body: bytes | None, tc: ThreadConn | None = None
    ) -> http.client.HTTPResponse:
        """Send one request and return its response.

        ``tc``: the calling thread's connection when the caller has just
        checked it (:meth:`_connection`, before its clock); else checked here.
        Retried once, on a fresh connection, when an idle keep-alive
        connection turns out closed before any byte of the reply arrived
        (the server dropped it while idle: nothing was answered); never once
        a byte of the reply is in, nor on a connection opened for this request.
        """
        for attempt in (0, 1):
            if tc is None or attempt:
                tc = self._connection()
            reused = tc.idle
            tc.idle = True  # kept after this request, it is idle before the next
            resp = self._send(tc.http, method, path, body)
            if resp is not None:
                return resp
            self._drop()
            if not (reused and attempt == 0):
                raise GeneratorError(
                    f"{self.what}: {self.base_url} closed the connection without answering"
                )
        raise GeneratorError(f"{self.what}: request to {self.base_url} failed")  # pragma: no cover

    def _send(
        self, conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None
    ) -> http.client.HTTPResponse | None:
        """Send the request and read the reply's head; ``None``: no byte of a reply came."""
        try:
            try:
                conn.request(method, self.prefix + path, body=body, headers=self.headers)
            except (ConnectionResetError, BrokenPipeError):
                return None  # refused while sending: no reply can have come
            try:
                return conn.getresponse()
            except NoReply:
                return None
        except TimeoutError:
            self._drop()
            raise GeneratorError(
                f"{self.what}: no answer from {self.base_url} within {self.timeout:g} s"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise GeneratorError(f"{self.what}: request to {self.base_url} failed: {exc}") from None

    def _check_status(self, resp: http.client.HTTPResponse, path: str) -> None:
        if resp.status == 200:
            return
        try:
            excerpt = resp.read(2000).decode("utf-8", "replace").strip()
        except (OSError, http.client.HTTPException):
            excerpt = ""
        self._drop()
        raise GeneratorError(
            f"{self.what}: {self.base_url}{path} answered {resp.status} {resp.reason}"
            + (f": {excerpt[:500]}" if excerpt else "")
        )

    def get_json(self, path: str) -> Any:
        """``GET {base_url}{path}`` and parse the JSON answer."""
        resp = self._request("GET", path, None)
        self._check_status(resp, path)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise GeneratorError(
                f"{self.what}: reading {self.base_url}{path} failed: {exc}"
            ) from None
        if resp.will_close:
            self._drop()
        try:
            return json.loads(data)
        except ValueError:
            raise GeneratorError(
                f"{self.what}: {self.base_url}{path} did not answer JSON"
            ) from None

    def first_token(
        self, path: str, body: dict[str, Any], *, chat: bool, drain: bool
    ) -> FirstToken:
        """Stream ``body`` to ``path``; return the first content token and the client-side TTFT."""
        payload = json.dumps(body).encode()
        tc = self._connection()  # opened (or found stale and reopened) before the clock starts
        t0 = time.perf_counter_ns()
        resp = self._request("POST", path, payload, tc)
        try:
            self._check_status(resp, path)
            ctype = resp.getheader("Content-Type", "")
            if "text/event-stream" not in ctype:
                self._drop()
                raise GeneratorError(
                    f"{self.what}: {self.base_url}{path} answered Content-Type {ctype!r}, not "
                    'text/event-stream; does the endpoint support "stream": true?'
                )
            text = self._read_first(resp, chat)
            ttft = time.perf_counter_ns() - t0
            if drain:
                # The response must be read to its end before the connection
                # can carry the next request.
                while resp.read1(65536):
                    pass
                # read1 never marks a Content-Length body done (only a chunked one):
                # read() does, so the connection can carry the next request
                resp.read()
                if resp.will_close:
                    self._drop()
            else:
                # Cancel the rest of the generation: only the first token counts.
                self._drop()
            return FirstToken(text, ttft)
        except TimeoutError:
            self._drop()
            raise GeneratorError(
                f"{self.what}: no token from {self.base_url}{path} within {self.timeout:g} s"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise GeneratorError(
                f"{self.what}: stream from {self.base_url}{path} broke: {exc}"
            ) from None

    def _read_first(self, resp: http.client.HTTPResponse, chat: bool) -> str:
        """Read SSE lines until the first non-empty content and return it."""
        buf = b""
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > _MAX_LINE:
                    self._drop()
                    raise GeneratorError(f"{self.what}: malformed stream: a line over 1 MiB")
                data = resp.read1(65536)
                if not data:
                    self._drop()
                    raise GeneratorError(
                        f"{self.what}: the stream from {self.base_url} ended before any content token"
                    )
                buf += data
                continue
            line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1 :]
            try:
                text = sse_text(line, chat, self.what, self.base_url)
            except GeneratorError:
                self._drop()
                raise
            if text:
                return text


class OpenAIGenerator:
    """First token from an OpenAI-compatible streaming endpoint.

    Parameters (keyword; unknown ones raise :class:`ConfigError`):

    ``base_url``
        The API root including its version prefix, e.g.
        ``http://127.0.0.1:8000/v1`` (vLLM), ``http://127.0.0.1:8080/v1``
        (llama.cpp), ``http://127.0.0.1:11434/v1`` (Ollama). Default: the
        ``OPENAI_BASE_URL`` environment variable.
    ``model``
        Model name; ``None`` asks ``GET /models`` in :meth:`start` and uses
        the first one listed.
    ``api_key``
        Sent as ``Authorization: Bearer``; default ``OPENAI_API_KEY`` if set.
    ``timeout``
        Seconds for connecting and for each read (default 30).
    ``max_tokens``
        Completion length requested (default 16); see the module docstring
        for what happens after the first token.
    ``chat``
        ``True`` for ``/chat/completions`` (the prompt as one user message),
        ``False`` for ``/completions``.
    ``client``
        ``"minimal"`` (default: ragbench's own SSE client over
        :mod:`http.client`) or ``"openai"`` (the official ``openai``
        package, ``pip install 'ragbench[serve]'``); see the module docstring.

    Thread-safe: once started, :meth:`first_token` may be called from
    several threads at once; each thread streams over its own keep-alive
    connection, opened on its first call (inside that call's TTFT only if
    the thread did not call :meth:`connect` first) and closed by
    :meth:`close` with all the others.
    """

    name = "openai"
    simulated = False

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_tokens: int = 16,
        chat: bool = True,
        client: str = "minimal",
        **unknown: Any,
    ) -> None:
        check_params(
            "openai generator",
            unknown,
            {"base_url", "model", "api_key", "timeout", "max_tokens", "chat", "client"},
        )
        if base_url is None:
            base_url = os.environ.get("OPENAI_BASE_URL")
            if not base_url:
                raise ConfigError(
                    "openai generator: base_url is required (e.g. http://127.0.0.1:8000/v1), "
                    "or set OPENAI_BASE_URL"
                )
        if model is not None and (not isinstance(model, str) or not model):
            raise ConfigError("openai generator: model must be a non-empty string or None")
        if not isinstance(chat, bool):
            raise ConfigError(f"openai generator: chat must be true or false, got {chat!r}")
        self.timeout = positive_number("openai generator", "timeout", timeout)
        self.max_tokens = positive_int("openai generator", "max_tokens", max_tokens)
        self.chat = chat
        self.model = model
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY") or None
        self._client = make_client(
            client, base_url, api_key=api_key, timeout=self.timeout, what="openai generator"
        )
        self.client = str(client)
        self.base_url = self._client.base_url
        self._api_key = api_key
        # made on the first afirst_token (ragbench.generators.aio)
        self._aclient: AsyncStreamClient | AsyncSdkClient | None = None
        self._started = False

    def start(self) -> int:
        """Connect (and look up the model if none was given); return the nanoseconds it took."""
        t0 = time.perf_counter_ns()
        self._client.connect()
        if self.model is None:
            listing = self._client.get_json("/models")
            data = listing.get("data") if isinstance(listing, dict) else None
            first = data[0] if isinstance(data, list) and data else None
            model_id = first.get("id") if isinstance(first, dict) else None
            if not isinstance(model_id, str) or not model_id:
                raise GeneratorError(
                    f"openai generator: {self.base_url}/models lists no model; pass model=..."
                )
            self.model = model_id
        self._started = True
        return time.perf_counter_ns() - t0

    @property
    def connections(self) -> int:
        """How many threads' connections to the endpoint are open now."""
        return self._client.connections

    def describe(self) -> dict[str, Any]:
        """Which streaming client measured the TTFT (recorded as ``info.generator_info``)."""
        return {"client": self.client, "library": client_library(self._client)}

    def connect(self) -> None:
        """Open the calling thread's connection now, outside any TTFT clock."""
        if not self._started:
            raise NotBuiltError("openai generator: call start() before connect()")
        self._client.connect()

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        """Stream a completion of ``prompt``; return its first token and client-side TTFT (ns).

        ``prompt_tokens`` is not sent (the server counts its own tokens).
        """
        if not self._started:
            raise NotBuiltError("openai generator: call start() before first_token()")
        body, path = self._body(prompt)
        return self._client.first_token(path, body, chat=self.chat, drain=self.max_tokens <= 1)

    def _body(self, prompt: str) -> tuple[dict[str, Any], str]:
        body: dict[str, Any] = {"model": self.model, "stream": True, "max_tokens": self.max_tokens}
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
            return body, "/chat/completions"
        body["prompt"] = prompt
        return body, "/completions"

    # -- async: the same request awaited on an event loop (ragbench.generators.aio)

    def _async_client(self) -> AsyncStreamClient | AsyncSdkClient:
        aclient = self._aclient
        if aclient is None:
            aclient = self._aclient = make_async_client(
                self.client,
                self.base_url,
                api_key=self._api_key,
                timeout=self.timeout,
                what="openai generator",
            )
        return aclient

    def async_client(self) -> str:
        """What :meth:`afirst_token` streams with (recorded beside each asyncio load record)."""
        return self._async_client().library

    @property
    def async_requests(self) -> int:
        """Streams the async clients carried."""
        return 0 if self._aclient is None else self._aclient.requests

    async def aconnect(self) -> None:
        """Open a connection of the running loop's async client, outside any TTFT clock."""
        await self._async_client().aconnect()

    async def afirst_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        """:meth:`first_token` awaited on the running event loop, with the async client."""
        if not self._started:
            raise NotBuiltError("openai generator: call start() before afirst_token()")
        body, path = self._body(prompt)
        return await self._async_client().first_token(
            path, body, chat=self.chat, drain=self.max_tokens <= 1
        )

    async def aclose(self) -> None:
        """Close the running loop's async client (idempotent)."""
        if self._aclient is not None:
            await self._aclient.aclose()

    def close(self) -> None:
        """Close every thread's connection (idempotent)."""
        self._client.close()
        self._started = False

    def __enter__(self) -> OpenAIGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

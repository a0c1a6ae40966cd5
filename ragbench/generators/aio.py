"""Async streaming clients for the ``openai`` and ``stub`` generators: ``await generator.afirst_token(...)``.

An event loop serving many requests at once awaits the LLM call rather than
blocking in it. Two clients, as for the sync path (``client=``):

- ``"minimal"``: :class:`AsyncStreamClient`, a streaming ``POST`` with an
  :class:`httpx.AsyncClient`, the server-sent events read line by line until
  the first non-empty content delta (the same line parser as the sync
  client, :func:`ragbench.generators.sse.sse_text`);
- ``"openai"``: :class:`AsyncSdkClient`, the official SDK's
  ``AsyncOpenAI(...).chat.completions.create(..., stream=True)``, iterated
  until the first chunk with content.

TTFT is measured on the client, from just before the request is sent to
just after that first content is in hand, exactly as the sync clients do --
on a busy event loop it includes the time the loop took to resume the
request after the token arrived (that is what an async service sees).

One client per event loop, made on the loop's first call (or by
``aconnect``), with no connection limit and no idle expiry: each request
in flight streams over a keep-alive connection of its own, and a connection
is reused when its stream was drained (``max_tokens <= 1``); otherwise the
client hangs up after the first token, which cancels the generation.
``aclose()`` closes the running loop's client. :attr:`requests` counts the
streams each client carried. Needs ``httpx`` (and ``openai`` for the SDK
client): ``pip install 'ragbench[serve]'``.
"""

from __future__ import annotations

import asyncio
import json
import time
from importlib import metadata
from typing import Any

from ..errors import GeneratorError, MissingDependencyError
from . import FirstToken
from .openai_sdk import chunk_content, require_openai
from .sse import sse_text

__all__ = ["AsyncSdkClient", "AsyncStreamClient", "make_async_client"]

_MAX_LINE = 1024 * 1024


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingDependencyError("httpx", "serve") from None
    return httpx


class _PerLoop:
    """A client object per event loop, made on the loop's first request."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout: float, what: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.what = what
        self.requests = 0
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}

    def _make(self) -> Any:
        raise NotImplementedError

    def client(self) -> Any:
        loop = asyncio.get_running_loop()
        made = self._clients.get(loop)
        if made is None:
            made = self._clients[loop] = self._make()
        return made

    async def aclose(self) -> None:
        """Close the running loop's client (idempotent)."""
        made = self._clients.pop(asyncio.get_running_loop(), None)
        if made is not None:
            closer = getattr(made, "aclose", None) or made.close  # httpx / AsyncOpenAI
            await closer()


class AsyncStreamClient(_PerLoop):
    """``"minimal"``: SSE read by hand over an :class:`httpx.AsyncClient` (see the module docstring)."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout: float, what: str) -> None:
        super().__init__(base_url, api_key=api_key, timeout=timeout, what=what)
        self._httpx = _httpx()
        self.library = f"httpx.AsyncClient {self._httpx.__version__} (ragbench's SSE reader)"
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def _make(self) -> Any:
        httpx = self._httpx
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers=self.headers,
            timeout=self.timeout,
            limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=None, keepalive_expiry=None
            ),
            trust_env=False,
        )

    async def aconnect(self) -> None:
        """Make the running loop's client and open a connection (``GET /models``), outside any clock."""
        httpx = self._httpx
        try:
            await self.client().get("/models")
        except httpx.HTTPError as exc:
            raise GeneratorError(f"{self.what}: cannot connect to {self.base_url}: {exc}") from None

    async def first_token(
        self, path: str, body: dict[str, Any], *, chat: bool, drain: bool
    ) -> FirstToken:
        """Stream ``body`` to ``path``; the first content token and the client-side TTFT."""
        httpx = self._httpx
        payload = json.dumps(body).encode()
        client = self.client()
        t0 = time.perf_counter_ns()
        try:
            async with client.stream("POST", path, content=payload) as resp:
                await self._check(resp, path)
                chunks = resp.aiter_raw()  # one iterator: a stream is read once
                text = await self._read_first(chunks, chat)
                ttft = time.perf_counter_ns() - t0
                if drain:  # read to the end, so the connection carries the next request
                    async for _ in chunks:
                        pass
            # leaving the block unread closes the connection: the generation is cancelled
        except httpx.TimeoutException:
            raise GeneratorError(
                f"{self.what}: no token from {self.base_url}{path} within {self.timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise GeneratorError(
                f"{self.what}: stream from {self.base_url}{path} broke: {type(exc).__name__}: {exc}"
            ) from None
        self.requests += 1
        return FirstToken(text, ttft)

    async def _check(self, resp: Any, path: str) -> None:
        if resp.status_code != 200:
            excerpt = (await resp.aread())[:2000].decode("utf-8", "replace").strip()
            raise GeneratorError(
                f"{self.what}: {self.base_url}{path} answered {resp.status_code} "
                f"{resp.reason_phrase}" + (f": {excerpt[:500]}" if excerpt else "")
            )
        ctype = resp.headers.get("Content-Type", "")
        if "text/event-stream" not in ctype:
            raise GeneratorError(
                f"{self.what}: {self.base_url}{path} answered Content-Type {ctype!r}, not "
                'text/event-stream; does the endpoint support "stream": true?'
            )

    async def _read_first(self, chunks: Any, chat: bool) -> str:
        """Read SSE lines from the body's ``chunks`` until the first non-empty content; return it."""
        buf = b""
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > _MAX_LINE:
                    raise GeneratorError(f"{self.what}: malformed stream: a line over 1 MiB")
                try:
                    buf += await chunks.__anext__()
                except StopAsyncIteration:
                    raise GeneratorError(
                        f"{self.what}: the stream from {self.base_url} ended before any content token"
                    ) from None
                continue
            line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1 :]
            text = sse_text(line, chat, self.what, self.base_url)
            if text:
                return text


class AsyncSdkClient(_PerLoop):
    """``"openai"``: the official SDK's ``AsyncOpenAI`` streaming client (see the module docstring)."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout: float, what: str) -> None:
        super().__init__(base_url, api_key=api_key or "ragbench-no-key", timeout=timeout, what=what)
        self._openai = require_openai()
        self.library = f"openai.AsyncOpenAI {metadata.version('openai')}"

    def _make(self) -> Any:
        openai = self._openai
        limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
            max_connections=None, max_keepalive_connections=None, keepalive_expiry=None
        )
        http_client = openai.DefaultAsyncHttpxClient(
            limits=limits, timeout=self.timeout, trust_env=False
        )
        return openai.AsyncOpenAI(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,  # a retry would hide a failure inside a TTFT
            http_client=http_client,
        )

    def _error(self, exc: BaseException, doing: str) -> GeneratorError:
        return GeneratorError(f"{self.what}: {doing} at {self.base_url} failed: {exc}")

    async def aconnect(self) -> None:
        """Make the running loop's client and open a connection (``GET /models``)."""
        openai = self._openai
        try:
            await self.client().get("/models", cast_to=object)
        except openai.APIStatusError:
            pass  # answered: the connection is open
        except (openai.OpenAIError, OSError) as exc:
            raise self._error(exc, "connecting") from None

    async def first_token(
        self, path: str, body: dict[str, Any], *, chat: bool, drain: bool
    ) -> FirstToken:
        """Stream ``body`` with the SDK; the first content token and the client-side TTFT."""
        client = self.client()
        params = {k: v for k, v in body.items() if k != "stream"}
        create = (client.chat.completions if chat else client.completions).create
        t0 = time.perf_counter_ns()
        try:
            stream = await create(**params, stream=True)
            text = ""
            while not text:
                try:
                    chunk = await stream.__anext__()
                except StopAsyncIteration:
                    await stream.close()
                    raise GeneratorError(
                        f"{self.what}: the stream from {self.base_url}{path} ended before any "
                        "content token"
                    ) from None
                text = chunk_content(chunk, chat)
            ttft = time.perf_counter_ns() - t0
            if drain:
                async for _ in stream:
                    pass
            else:
                await stream.close()
        except (self._openai.OpenAIError, OSError, ValueError) as exc:
            raise self._error(exc, f"streaming {path}") from None
        self.requests += 1
        return FirstToken(text, ttft)


def make_async_client(
    client: str, base_url: str, *, api_key: str | None, timeout: float, what: str
) -> AsyncStreamClient | AsyncSdkClient:
    """The async counterpart of :func:`ragbench.generators.openai.make_client` (same ``client`` names)."""
    if client == "openai":
        return AsyncSdkClient(base_url, api_key=api_key, timeout=timeout, what=what)
    return AsyncStreamClient(base_url, api_key=api_key, timeout=timeout, what=what)

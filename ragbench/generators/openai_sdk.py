"""The official ``openai`` package as the streaming client of the ``openai`` (and ``stub``) generator.

``client = "openai"`` calls the endpoint the way most Python services call
an LLM: ``OpenAI(...).chat.completions.create(..., stream=True)`` (or
``completions.create`` with ``chat=False``), iterating the SDK's parsed
chunks until the first non-empty content delta. TTFT is measured from just
before ``create`` to just after that chunk is in hand, so it includes what
the SDK costs per request: building and validating the request, its
headers, its HTTP client (``httpx``, or ``httpx2`` in openai 3.x), and
parsing every event into a pydantic chunk object.

Set up like the minimal client (:class:`ragbench.generators.openai.StreamClient`)
so that the library is what differs: one client per calling thread, each
with a pool of one keep-alive connection that never expires while idle
(the SDK's default pool drops idle connections after 5 s, which would put
a new connection inside the next TTFT after any pause); ``max_retries=0``
(a retry would hide a failure inside a TTFT); the connection is opened (a
``GET /models``) before the clock starts on a thread's first request and
after a hang-up of ours. After the first token the stream is drained when
the request asked for at most one token, otherwise closed -- closing an
unfinished response closes its connection, which cancels the generation,
as the minimal client does.

What the SDK does with the connection is part of what it measures:
openai 3.x stops reading a stream at ``data: [DONE]`` and closes the
response before the chunked body's last chunk, so the connection cannot be
reused and *every* streamed request opens a new TCP connection inside its
TTFT (openai 1.x read the stream to its end and kept the connection). On
loopback that is a connect of some tens of microseconds; across a network
it is a round trip, or a TLS handshake for https.

Needs ``openai`` (``pip install 'ragbench[serve]'``); imported when a
client is made, never by ``import ragbench``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from ..errors import GeneratorError, MissingDependencyError
from ..threads import ThreadConnections
from . import FirstToken

__all__ = ["SdkClient", "chunk_content", "require_openai"]


def require_openai() -> Any:
    """The ``openai`` module, or :class:`MissingDependencyError` naming the ``serve`` extra."""
    try:
        import openai
    except ImportError:
        raise MissingDependencyError("openai", "serve") from None
    return openai


class _ThreadClient:
    """One thread's SDK client and whether its connection is open and idle."""

    __slots__ = ("client", "warm")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.warm = False


class SdkClient:
    """A per-thread ``openai.OpenAI`` client for one base URL, same interface as ``StreamClient``.

    Thread-safe: each calling thread has its own client (and connection),
    made on its first request or by :meth:`connect`; :meth:`close` closes
    every thread's.
    """

    def __init__(self, base_url: str, *, api_key: str | None, timeout: float, what: str) -> None:
        self._openai = require_openai()
        self.base_url = base_url.rstrip("/")
        # The SDK insists on a key; servers that check none ignore it.
        self.api_key = api_key or "ragbench-no-key"
        self.timeout = timeout
        self.what = what
        self.library = f"openai {metadata.version('openai')}"
        self._conns: ThreadConnections[_ThreadClient] = ThreadConnections()

    @property
    def connections(self) -> int:
        """How many threads' clients are open now."""
        return len(self._conns)

    def _new(self) -> _ThreadClient:
        openai = self._openai
        # The Limits class of whichever httpx the installed SDK uses.
        limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=None
        )
        http_client = openai.DefaultHttpxClient(
            limits=limits, timeout=self.timeout, trust_env=False
        )
        client = openai.OpenAI(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
            http_client=http_client,
        )
        tc = _ThreadClient(client)
        for c in self._conns.register(tc):
            c.client.close()
        return tc

    def _thread_client(self) -> _ThreadClient:
        tc = self._conns.current()
        return self._new() if tc is None else tc

    def _drop(self) -> None:
        """Close the calling thread's client (its next request makes a new one)."""
        tc = self._conns.drop_current()
        if tc is None:
            return
        with contextlib.suppress(Exception):
            tc.client.close()

    def close(self) -> None:
        """Close every thread's client (idempotent)."""
        for tc in self._conns.take_all():
            with contextlib.suppress(Exception):
                tc.client.close()

    def _error(self, exc: BaseException, doing: str) -> GeneratorError:
        """A GeneratorError for an SDK failure; the calling thread's client is dropped."""
        self._drop()
        openai = self._openai
        if isinstance(exc, openai.APITimeoutError):
            return GeneratorError(
                f"{self.what}: no answer from {self.base_url} within {self.timeout:g} s ({doing})"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            refused = "refused" if "refused" in str(cause).lower() else "failed"
            return GeneratorError(
                f"{self.what}: connection to {self.base_url} {refused} ({doing}): {cause}; is "
                "the server running and is base_url right?"
            )
        if isinstance(exc, openai.APIStatusError):
            return GeneratorError(
                f"{self.what}: {self.base_url} answered {exc.status_code} ({doing}): {exc.message}"
            )
        return GeneratorError(f"{self.what}: {doing} at {self.base_url} failed: {exc}")

    def connect(self) -> None:
        """Open the calling thread's connection now (a ``GET /models``), outside any TTFT clock."""
        tc = self._thread_client()
        if tc.warm:
            return
        openai = self._openai
        try:
            tc.client.get("/models", cast_to=object)
        except openai.APIStatusError:
            pass  # answered, so the connection is open; /models is optional for some servers
        except (openai.OpenAIError, OSError) as exc:
            raise self._error(exc, "connecting") from None
        tc.warm = True

    def get_json(self, path: str) -> Any:
        """``GET {base_url}{path}``, parsed."""
        tc = self._thread_client()
        try:
            data = tc.client.get(path, cast_to=object)
        except (self._openai.OpenAIError, OSError, ValueError) as exc:
            raise self._error(exc, f"GET {path}") from None
        tc.warm = True
        return data

    def first_token(
        self, path: str, body: dict[str, Any], *, chat: bool, drain: bool
    ) -> FirstToken:
        """Stream ``body`` with the SDK; return the first content token and the client-side TTFT.

        ``path`` is ``/chat/completions`` or ``/completions``, as ``chat`` says.
        """
        self.connect()
        tc = self._thread_client()
        params = {k: v for k, v in body.items() if k != "stream"}
        create = (tc.client.chat.completions if chat else tc.client.completions).create
        t0 = time.perf_counter_ns()
        try:
            stream = create(**params, stream=True)
            # One iterator for the first token and the drain: a second iter(stream)
            # would start a new generator, and dropping the first would close the response.
            chunks = iter(stream)
            text = _first_content(chunks, chat)
            ttft = time.perf_counter_ns() - t0
            if text is None:
                stream.close()
                self._drop()
                raise GeneratorError(
                    f"{self.what}: the stream from {self.base_url}{path} ended before any "
                    "content token"
                )
            if drain:
                for _ in chunks:
                    pass
            else:
                stream.close()  # hangs up: the next request reconnects before its clock
                tc.warm = False
        except (self._openai.OpenAIError, OSError, ValueError) as exc:
            raise self._error(exc, f"streaming {path}") from None
        return FirstToken(text, ttft)


def _first_content(chunks: Iterator[Any], chat: bool) -> str | None:
    """Advance the SDK's chunks to the first non-empty content; ``None`` if the stream ends first."""
    for chunk in chunks:
        content = chunk_content(chunk, chat)
        if content:
            return content
    return None


def chunk_content(chunk: Any, chat: bool) -> str:
    """The content one of the SDK's parsed stream chunks carries ('' for none)."""
    choices = chunk.choices
    if not choices:
        return ""  # e.g. a usage-only chunk
    choice = choices[0]
    if chat:
        delta = choice.delta
        if delta is None:
            return ""
        # Reasoning models stream their thoughts first; that is the first token too.
        content = delta.content or getattr(delta, "reasoning_content", None)
    else:
        content = choice.text
    return content if isinstance(content, str) else ""

"""``stub``: first token from ragbench's own stub LLM server, run in a child process.

The server (:mod:`ragbench.generators.stub_server`) models prefill time from
the prompt's token count and labels every answer as simulated, so this
generator's ``simulated`` is ``True`` and reports say so. The child process
runs ``python -m ragbench stub-llm ... --exit-on-stdin-eof``
(:meth:`StubGenerator.server_argv`), so it stops when this process closes
its stdin or dies. The client side is
the same streaming client as the ``openai`` generator, over one keep-alive
connection per calling thread; TTFT is measured on the client.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

from .._registry import check_params
from ..errors import ConfigError, GeneratorError, NotBuiltError
from ..process import ChildProcess
from ..transports.child import check_loopback
from ..validate import positive_int, positive_number
from . import FirstToken
from .aio import AsyncSdkClient, AsyncStreamClient, make_async_client
from .openai import CLIENTS, StreamClient, client_library, make_client
from .openai_sdk import SdkClient, require_openai
from .stub_server import (
    BASE_MS,
    HOST,
    INTER_TOKEN_MS,
    MODEL_ID,
    PREFILL_MS_PER_1K_TOKENS,
    StubModel,
)

__all__ = ["StubGenerator"]

_URL_RE = re.compile(r"(https?://\S+)")


class StubGenerator:
    """Start the stub LLM server in a child process and stream first tokens from it.

    Parameters (keyword; unknown ones raise :class:`ConfigError`): the timing
    model's ``prefill_ms_per_1k_tokens`` (default 100), ``base_ms`` (5) and
    ``inter_token_ms`` (20), as the server's; ``max_tokens`` requested per
    completion (default 1: only the first token is timed, and a one-token stream ends at
    once, so the keep-alive connection is reused; a larger value makes the
    client hang up after the first token); ``host`` to bind (default
    ``"127.0.0.1"``); ``timeout`` seconds per read (30);
    ``startup_timeout`` seconds for the server to come up (30); ``client``
    the streaming client, ``"minimal"`` (default) or ``"openai"`` (the
    official SDK), as for the ``openai`` generator; ``read_timeout_s`` the
    server's (``--read-timeout-s``: how long it keeps an idle connection;
    default ``None``, the server's 30 s).

    Thread-safe: once started, :meth:`first_token` may be called from
    several threads at once. Each thread streams over its own keep-alive
    connection (opened on its first call, or ahead of time by
    :meth:`connect`), with no lock held across a request; the server is a
    threading HTTP server, one thread per connection, so the requests and
    their modelled prefill sleeps overlap. :meth:`close` closes every
    thread's connection and stops the server.
    """

    name = "stub"
    simulated = True
    #: the model name the stub server reports (its ``model`` is the latency model)
    model_id = MODEL_ID

    def __init__(
        self,
        *,
        prefill_ms_per_1k_tokens: float = PREFILL_MS_PER_1K_TOKENS,
        base_ms: float = BASE_MS,
        inter_token_ms: float = INTER_TOKEN_MS,
        max_tokens: int = 1,
        host: str = HOST,
        timeout: float = 30.0,
        startup_timeout: float = 30.0,
        client: str = "minimal",
        read_timeout_s: float | None = None,
        allow_remote: bool = False,
        **unknown: Any,
    ) -> None:
        check_params(
            "stub generator",
            unknown,
            {
                "prefill_ms_per_1k_tokens",
                "base_ms",
                "inter_token_ms",
                "max_tokens",
                "host",
                "timeout",
                "startup_timeout",
                "client",
                "read_timeout_s",
                "allow_remote",
            },
        )
        if client not in CLIENTS:
            raise ConfigError(
                f"stub generator: unknown client {client!r}; known: {', '.join(CLIENTS)}"
            )
        if client == "openai":
            require_openai()  # a missing SDK fails now, not at start()
        self.client = client
        # Checked here, so a bad value is a ConfigError now, not a dead child later.
        self.model = StubModel(
            prefill_ms_per_1k_tokens=prefill_ms_per_1k_tokens,
            base_ms=base_ms,
            inter_token_ms=inter_token_ms,
        )
        self.max_tokens = positive_int("stub generator", "max_tokens", max_tokens)
        if not isinstance(host, str) or not host:
            raise ConfigError("stub generator: host must be a non-empty string")
        if type(allow_remote) is not bool:
            raise ConfigError(
                f"stub generator: allow_remote must be true or false, got {allow_remote!r}"
            )
        if not allow_remote:  # the stub server has no authentication, as the transports' far side
            check_loopback("stub generator", host)
        self.host = host
        self.allow_remote = allow_remote
        self.timeout = positive_number("stub generator", "timeout", timeout)
        self.startup_timeout = positive_number("stub generator", "startup_timeout", startup_timeout)
        self.read_timeout_s = (
            None
            if read_timeout_s is None
            else positive_number("stub generator", "read_timeout_s", read_timeout_s)
        )
        self.url: str | None = None
        self._child: ChildProcess | None = None
        self._client: StreamClient | SdkClient | None = None
        self._aclient: AsyncStreamClient | AsyncSdkClient | None = None

    @property
    def pid(self) -> int | None:
        """Process id of the stub server, or ``None`` when not started."""
        return None if self._child is None else self._child.pid

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.alive

    def server_argv(self) -> list[str]:
        """The command line of the server's child process (``ragbench stub-llm``, any free port)."""
        model = self.model
        return [
            sys.executable,
            "-m",
            "ragbench",
            "stub-llm",
            "--host",
            self.host,
            "--port",
            "0",
            "--prefill-ms-per-1k-tokens",
            repr(model.prefill_ms_per_1k_tokens),
            "--base-ms",
            repr(model.base_ms),
            "--inter-token-ms",
            repr(model.inter_token_ms),
            "--max-tokens",
            str(self.max_tokens),
            "--exit-on-stdin-eof",
            *(["--allow-remote"] if self.allow_remote else []),
        ] + ([] if self.read_timeout_s is None else ["--read-timeout-s", repr(self.read_timeout_s)])

    def start(self) -> int:
        """Start the stub server process and connect; return the nanoseconds it took."""
        if self._child is not None:
            raise ConfigError("stub generator: already started; close() it first")
        t0 = time.perf_counter_ns()
        child = ChildProcess(self.server_argv(), "stub generator", error=GeneratorError)
        try:
            line = child.wait_ready(self.startup_timeout)
            match = _URL_RE.search(line)
            if match is None:
                raise GeneratorError(f"stub generator: unexpected first line {line!r}")
            self.url = match.group(1)
            client = make_client(
                self.client, self.url, api_key=None, timeout=self.timeout, what="stub generator"
            )
            client.connect()
        except BaseException:
            child.stop(grace=0.0)
            raise
        self._child = child
        self._client = client
        return time.perf_counter_ns() - t0

    @property
    def connections(self) -> int:
        """How many threads' connections to the server are open now."""
        client = self._client
        return 0 if client is None else client.connections

    def describe(self) -> dict[str, Any]:
        """Which streaming client measured the TTFT (recorded as ``info.generator_info``)."""
        client = self._client
        library = client_library(client) if client is not None else None
        return {"client": self.client, "library": library}

    def connect(self) -> None:
        """Open the calling thread's connection now, outside any TTFT clock."""
        client = self._client
        if client is None:
            raise NotBuiltError("stub generator: call start() before connect()")
        client.connect()

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        """Stream a chat completion of ``prompt``; return its first token and client-side TTFT."""
        client = self._client
        if client is None:
            raise NotBuiltError("stub generator: call start() before first_token()")
        body = {
            "model": MODEL_ID,
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "max_tokens": self.max_tokens,
        }
        try:
            return client.first_token(
                "/chat/completions", body, chat=True, drain=self.max_tokens <= 1
            )
        except GeneratorError as exc:
            child = self._child
            if child is not None and not child.alive:
                raise GeneratorError(f"{exc}; {child.death_note(0.0)}") from None
            raise

    # -- async: the same request awaited on an event loop (ragbench.generators.aio)

    def _async_client(self) -> AsyncStreamClient | AsyncSdkClient:
        aclient = self._aclient
        if aclient is None:
            if self.url is None:
                raise NotBuiltError("stub generator: call start() before afirst_token()")
            aclient = self._aclient = make_async_client(
                self.client, self.url, api_key=None, timeout=self.timeout, what="stub generator"
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
        body = {
            "model": MODEL_ID,
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "max_tokens": self.max_tokens,
        }
        return await self._async_client().first_token(
            "/chat/completions", body, chat=True, drain=self.max_tokens <= 1
        )

    async def aclose(self) -> None:
        """Close the running loop's async client (idempotent)."""
        if self._aclient is not None:
            await self._aclient.aclose()

    def close(self) -> None:
        """Close every thread's connection and stop the server process (idempotent)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()
        child, self._child = self._child, None
        if child is not None:
            child.stop()

    def __enter__(self) -> StubGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

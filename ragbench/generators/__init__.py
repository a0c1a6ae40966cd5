"""The LLM call up to its first token, behind one :class:`Generator` protocol.

``first_token(prompt, prompt_tokens)`` streams a completion and returns as
soon as the first token arrives. ``simulated`` is true for backends whose
timings are modelled rather than measured on a real model (the ``stub``);
reports label them so.

Threads: once started, the built-in generators' ``first_token`` may be called
from several threads at once; ``stub`` and ``openai`` stream each thread's
requests over that thread's own keep-alive connection, and their
``connect()`` opens the calling thread's connection ahead of time, outside
any TTFT clock. ``close()`` closes every thread's connection.

The ``stub`` and ``openai`` generators also have ``afirst_token`` (the same
call awaited on an event loop with an async streaming client,
:mod:`ragbench.generators.aio`), with ``aconnect``/``aclose`` for the running
loop's client.

A generator may also have ``caveat``: a string every report of it must carry
(``transformers`` with random weights: "time real, text meaningless"), or
``None``; and ``describe()``: a dict of what records keep about it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._registry import Registry

__all__ = ["FirstToken", "Generator", "create", "names", "register", "registry"]


@dataclass(frozen=True, slots=True)
class FirstToken:
    """The first token of a completion and the time it took.

    ``prompt_tokens`` is the prompt's length in the model's own tokens when
    the backend knows it (``transformers``), else ``None`` (the prompt
    builder's approximate count is what reports show then). ``decode_rest``,
    when not ``None``, decodes the tokens after the first and returns each
    one's inter-token nanoseconds; the pipeline calls it after the request's
    timed stages, so it never counts as time before the first token.
    """

    text: str
    ttft_ns: int
    prompt_tokens: int | None = None
    decode_rest: Callable[[], tuple[int, ...]] | None = None


@runtime_checkable
class Generator(Protocol):
    name: str
    simulated: bool

    def start(self) -> int:
        """Connect or start the server; return the nanoseconds it took."""
        ...

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken: ...
    def close(self) -> None: ...


registry: Registry[Generator] = Registry(
    "generators",
    {
        "none": "ragbench.generators.none:NoGenerator",
        "stub": "ragbench.generators.stub:StubGenerator",
        "openai": "ragbench.generators.openai:OpenAIGenerator",
        "transformers": "ragbench.generators.transformers_gen:TransformersGenerator",
    },
)
create = registry.create
names = registry.names
register = registry.register

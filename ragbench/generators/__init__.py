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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._registry import Registry

__all__ = ["FirstToken", "Generator", "create", "names", "register", "registry"]


@dataclass(frozen=True, slots=True)
class FirstToken:
    text: str
    ttft_ns: int


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
    },
)
create = registry.create
names = registry.names
register = registry.register

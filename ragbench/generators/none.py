"""``none``: no LLM call; the request ends when the prompt is built."""

from __future__ import annotations

from typing import Any

from .._registry import check_params
from . import FirstToken

__all__ = ["NoGenerator"]

_EMPTY = FirstToken("", 0)


class NoGenerator:
    """Returns an empty first token at once (TTFT 0). Takes no parameters."""

    name = "none"
    simulated = False

    def __init__(self, **params: Any) -> None:
        check_params("none generator", params, set())

    def start(self) -> int:
        """Nothing to start: 0 ns."""
        return 0

    def connect(self) -> None:
        """Nothing to connect (thread-safe, like :meth:`first_token`)."""

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        """``FirstToken("", 0)``, without looking at the prompt."""
        return _EMPTY

    def close(self) -> None:
        """Nothing to stop."""

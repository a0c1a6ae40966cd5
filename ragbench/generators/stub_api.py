"""The OpenAI API side of the stub LLM server: a completion request checked, its answer as JSON.

Part of :mod:`ragbench.generators.stub_server`: :class:`Completion` reads a
``/v1/chat/completions`` or ``/v1/completions`` body (:class:`BadRequest`,
status 400, for what the API would reject) and builds the streamed chunks
and the whole answer, naming the model :data:`MODEL_ID`. No sockets here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .stub_model import MAX_TOKENS_CAP

__all__ = ["MODEL_ID", "STUB_HEADER", "WORDS", "BadRequest", "Completion"]

MODEL_ID = "ragbench-stub (simulated)"
STUB_HEADER = "X-Ragbench-Stub"
# The stub's "generated" text: deterministic words, one token each.
WORDS = (
    "Based",
    " on",
    " the",
    " retrieved",
    " context",
    ",",
    " the",
    " answer",
    " is",
    " as",
    " follows",
    ":",
    " this",
    " text",
    " is",
    " simulated",
    ".",
)


class BadRequest(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _prompt_text(body: dict[str, Any], chat: bool) -> str:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest(400, "'messages' must be a non-empty list")
        texts: list[str] = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                # Content parts: [{"type": "text", "text": "..."}, ...]
                texts.extend(
                    part["text"]
                    for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
            elif content is not None:
                raise BadRequest(400, "each message 'content' must be a string or a list of parts")
        return "\n".join(texts)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    if not isinstance(prompt, str):
        raise BadRequest(400, "'prompt' must be a string")
    return prompt


def _completion_tokens(body: dict[str, Any], default: int) -> int:
    """The completion length a request asks for, capped; ``default`` when it does not say."""
    n_tokens = body.get("max_tokens", body.get("max_completion_tokens", default))
    if n_tokens is None:
        n_tokens = default
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
        raise BadRequest(400, "'max_tokens' must be a positive integer")
    return min(n_tokens, MAX_TOKENS_CAP)


@dataclass(frozen=True, slots=True)
class Completion:
    """One completion request, checked, and the JSON objects of its answer."""

    chat: bool
    ident: str
    created: int
    prompt_tokens: int
    words: list[str]
    stream: bool
    include_usage: bool

    @classmethod
    def from_request(
        cls, body: dict[str, Any], chat: bool, default_tokens: int, next_id: Callable[[], int]
    ) -> Completion:
        """Check ``body``; :class:`BadRequest` (status 400) for what the API would reject.

        ``default_tokens``: the completion length when the request does not
        say; ``next_id()``: a number for the completion's id (asked last, once
        the request passed every check).
        """
        from ..prompt import count_tokens

        prompt_tokens = count_tokens(_prompt_text(body, chat))
        n_tokens = _completion_tokens(body, default_tokens)
        options = body.get("stream_options")
        return cls(
            chat=chat,
            ident=f"{'chatcmpl' if chat else 'cmpl'}-ragbench-{next_id()}",
            created=int(time.time()),
            prompt_tokens=prompt_tokens,
            words=[WORDS[i % len(WORDS)] for i in range(n_tokens)],
            stream=bool(body.get("stream", False)),
            include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        )

    def usage(self) -> dict[str, int]:
        n_tokens = len(self.words)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": n_tokens,
            "total_tokens": self.prompt_tokens + n_tokens,
        }

    def chunk(self, delta: dict[str, Any] | str | None, finish: str | None) -> dict[str, Any]:
        """One streamed event carrying ``delta`` (chat) or text (completions)."""
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
        return {
            "id": self.ident,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": MODEL_ID,
            "choices": [choice],
        }

    def whole(self) -> dict[str, Any]:
        """The answer to a non-streaming request."""
        text = "".join(self.words)
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return {
            "id": self.ident,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": MODEL_ID,
            "choices": [choice],
            "usage": self.usage(),
        }

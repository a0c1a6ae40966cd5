"""One server-sent-events line of an OpenAI-compatible stream, read for its content token.

Shared by the sync streaming client (:mod:`ragbench.generators.openai`) and
the async one (:mod:`ragbench.generators.aio`), so both read a stream the same way.
"""

from __future__ import annotations

import json

from ..errors import GeneratorError

__all__ = ["sse_text"]


def sse_text(line: bytes, chat: bool, what: str, base_url: str) -> str:
    """The content token one server-sent-event line carries ('' for none); ``line`` without its newline.

    Raises :class:`GeneratorError` for a line that is not SSE, data that is
    not a JSON object, an error event, or ``[DONE]`` (the stream ended before
    any content: the caller asks only while it has none).
    """
    if not line or line.startswith(b":"):
        return ""  # event separator or SSE comment
    field, _, value = line.partition(b":")
    if field != b"data":
        if field in (b"event", b"id", b"retry"):
            return ""
        raise GeneratorError(
            f"{what}: malformed stream from {base_url}: not an SSE line: {line[:120]!r}"
        )
    value = value[1:] if value.startswith(b" ") else value
    if value.strip() == b"[DONE]":
        raise GeneratorError(
            f"{what}: the stream from {base_url} ended ([DONE]) before any content token"
        )
    try:
        event = json.loads(value)
    except ValueError:
        raise GeneratorError(
            f"{what}: malformed stream from {base_url}: data is not JSON: {value[:120]!r}"
        ) from None
    if not isinstance(event, dict):
        raise GeneratorError(f"{what}: malformed stream: event is not a JSON object")
    if "error" in event:
        error = event["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise GeneratorError(f"{what}: {base_url} reported an error: {message}")
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices:
        return ""  # e.g. a usage-only chunk
    choice = choices[0]
    if not isinstance(choice, dict):
        raise GeneratorError(f"{what}: malformed stream: a choice is not an object")
    if chat:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        # Reasoning models stream their thoughts first; that is the first token too.
        content = delta.get("content") or delta.get("reasoning_content")
    else:
        content = choice.get("text")
    return content if isinstance(content, str) else ""

"""The stub LLM server's timing model and its options: defaults, :class:`StubModel`, :data:`SERVER_OPTIONS`.

Part of :mod:`ragbench.generators.stub_server` (which re-exports every name
here): the numbers the server sleeps by and the one place its command-line
options (``ragbench stub-llm``) and their defaults are written down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..validate import positive_int

__all__ = [
    "BASE_MS",
    "HOST",
    "INTER_TOKEN_MS",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_TOKENS",
    "MAX_TOKENS_CAP",
    "PORT",
    "PREFILL_MS_PER_1K_TOKENS",
    "READ_TIMEOUT_S",
    "SERVER_OPTIONS",
    "ServerOption",
    "StubModel",
]

# The defaults of the server and of its timing model (used by StubModel,
# serve, run_forever, the ``stub`` generator and ``ragbench stub-llm``).
HOST = "127.0.0.1"
PORT = 0
PREFILL_MS_PER_1K_TOKENS = 100.0
BASE_MS = 5.0
INTER_TOKEN_MS = 20.0
MAX_TOKENS = 16
# Limits that bound what clients can make the server hold: seconds a connection
# may stay silent while a request is read (and the whole body's deadline),
# bytes of one request body, connections served at once (more are refused 503).
READ_TIMEOUT_S = 30.0
MAX_BODY_BYTES = 1 << 20
MAX_CONNECTIONS = 256

#: The longest completion a request (or the model's default) may ask for.
MAX_TOKENS_CAP = 4096


@dataclass(frozen=True, slots=True)
class ServerOption:
    """One option of the stub server's command line (``ragbench stub-llm``).

    ``flag`` is the command-line spelling, ``keyword`` the parameter of
    :func:`run_forever` it feeds, ``type`` its Python type (``bool``: a flag
    that is off unless given), ``default`` its default, ``help`` one line of
    help, and ``hidden`` true for options meant for the ``stub`` generator
    only.
    """

    flag: str
    keyword: str
    type: type[str] | type[int] | type[float] | type[bool]
    default: str | int | float | bool
    help: str
    hidden: bool = False


#: The stub server's command-line options, in order; their defaults are the
#: server's and the timing model's.
SERVER_OPTIONS: tuple[ServerOption, ...] = (
    ServerOption(
        "--host",
        "host",
        str,
        HOST,
        "Address to bind: loopback (127.0.0.1, ::1, localhost) unless --allow-remote.",
    ),
    ServerOption(
        "--allow-remote",
        "allow_remote",
        bool,
        False,
        "Let --host be an address that is not loopback (0.0.0.0 or :: is every interface): "
        "the stub then serves anyone who reaches it, with no authentication.",
    ),
    ServerOption("--port", "port", int, PORT, "Port to listen on (0: any free port)."),
    ServerOption(
        "--prefill-ms-per-1k-tokens",
        "prefill_ms_per_1k_tokens",
        float,
        PREFILL_MS_PER_1K_TOKENS,
        "Modelled prefill time per 1000 prompt tokens (ms).",
    ),
    ServerOption(
        "--base-ms", "base_ms", float, BASE_MS, "Modelled fixed time before the first token (ms)."
    ),
    ServerOption(
        "--inter-token-ms",
        "inter_token_ms",
        float,
        INTER_TOKEN_MS,
        "Modelled time between two generated tokens (ms).",
    ),
    ServerOption(
        "--max-tokens",
        "max_tokens",
        int,
        MAX_TOKENS,
        "Completion length when a request does not say (capped at 4096).",
    ),
    ServerOption(
        "--read-timeout-s",
        "read_timeout_s",
        float,
        READ_TIMEOUT_S,
        "Close a connection that sends nothing for this long while a request is awaited or "
        "read, or whose body takes longer than this in all (s).",
    ),
    ServerOption(
        "--max-body-bytes",
        "max_body_bytes",
        int,
        MAX_BODY_BYTES,
        "Largest request body; a larger Content-Length gets 413 and the connection is closed "
        "before the body is read.",
    ),
    ServerOption(
        "--max-connections",
        "max_connections",
        int,
        MAX_CONNECTIONS,
        "Connections served at once; one more is answered 503 (Retry-After: 1) and closed.",
    ),
    ServerOption("--verbose", "verbose", bool, False, "Log every request to stderr."),
    ServerOption(
        "--exit-on-stdin-eof",
        "exit_on_stdin_eof",
        bool,
        False,
        "Stop when stdin reaches EOF (the parent process closed it or died).",
        hidden=True,
    ),
)


class StubModel:
    """The timing model: how long prefill and each decode step take.

    All parameters are keyword-only, non-negative and finite
    (:class:`ConfigError` otherwise): ``prefill_ms_per_1k_tokens`` (default
    :data:`PREFILL_MS_PER_1K_TOKENS`, 100.0), ``base_ms`` (:data:`BASE_MS`,
    5.0), ``inter_token_ms`` (:data:`INTER_TOKEN_MS`, 20.0), ``max_tokens``
    (:data:`MAX_TOKENS`, 16: the completion length when a request does not
    say; capped at 4096).
    """

    __slots__ = ("base_ms", "inter_token_ms", "max_tokens", "prefill_ms_per_1k_tokens")

    def __init__(
        self,
        *,
        prefill_ms_per_1k_tokens: float = PREFILL_MS_PER_1K_TOKENS,
        base_ms: float = BASE_MS,
        inter_token_ms: float = INTER_TOKEN_MS,
        max_tokens: int = MAX_TOKENS,
        **unknown: Any,
    ) -> None:
        if unknown:
            from .._registry import check_params

            check_params(
                "stub model",
                unknown,
                {"prefill_ms_per_1k_tokens", "base_ms", "inter_token_ms", "max_tokens"},
            )
        for key, value in (
            ("prefill_ms_per_1k_tokens", prefill_ms_per_1k_tokens),
            ("base_ms", base_ms),
            ("inter_token_ms", inter_token_ms),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(f"stub model: {key} must be a finite number >= 0, got {value!r}")
        self.prefill_ms_per_1k_tokens = float(prefill_ms_per_1k_tokens)
        self.base_ms = float(base_ms)
        self.inter_token_ms = float(inter_token_ms)
        self.max_tokens = min(positive_int("stub model", "max_tokens", max_tokens), MAX_TOKENS_CAP)

    def prefill_seconds(self, prompt_tokens: int) -> float:
        """Modelled time to the first token for a prompt of ``prompt_tokens`` tokens."""
        return (self.base_ms + self.prefill_ms_per_1k_tokens * prompt_tokens / 1000.0) / 1000.0

    def params(self) -> dict[str, float | int]:
        return {
            "prefill_ms_per_1k_tokens": self.prefill_ms_per_1k_tokens,
            "base_ms": self.base_ms,
            "inter_token_ms": self.inter_token_ms,
            "max_tokens": self.max_tokens,
        }

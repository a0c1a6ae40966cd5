"""``ragbench stub-llm``: the one command line of ragbench's simulated OpenAI-compatible LLM.

The stub generator launches its server child process through this same
command (``python -m ragbench stub-llm ... --exit-on-stdin-eof``).
"""

from __future__ import annotations

import click

__all__ = ["stub_llm"]


@click.command("stub-llm")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    default=0,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port (0: the OS picks one).",
)
@click.option(
    "--prefill-ms-per-1k-tokens",
    "prefill",
    type=float,
    default=None,
    help="Modelled prefill time per 1000 prompt tokens (ms).",
)
@click.option(
    "--base-ms", type=float, default=None, help="Modelled fixed time before the first token (ms)."
)
@click.option(
    "--inter-token-ms", type=float, default=None, help="Modelled time between streamed tokens (ms)."
)
@click.option(
    "--max-tokens", type=int, default=None, help="Tokens streamed per completion at most."
)
@click.option("--verbose", is_flag=True, help="Log every request to stderr.")
@click.option("--exit-on-stdin-eof", is_flag=True, hidden=True)
def stub_llm(
    host: str,
    port: int,
    prefill: float | None,
    base_ms: float | None,
    inter_token_ms: float | None,
    max_tokens: int | None,
    verbose: bool,
    exit_on_stdin_eof: bool,
) -> None:
    """Serve ragbench's OpenAI-compatible streaming stub (timings are SIMULATED); defaults: the stub model's."""
    from ..generators.stub_server import run_forever

    given = {
        "prefill_ms_per_1k_tokens": prefill,
        "base_ms": base_ms,
        "inter_token_ms": inter_token_ms,
        "max_tokens": max_tokens,
    }
    params = {k: v for k, v in given.items() if v is not None}
    run_forever(host, port, exit_on_stdin_eof=exit_on_stdin_eof, verbose=verbose, **params)

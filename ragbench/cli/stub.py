"""``ragbench stub-llm``: the one command line of ragbench's simulated OpenAI-compatible LLM.

Its options, defaults and help come from
:data:`ragbench.generators.stub_server.SERVER_OPTIONS`; the stub generator
launches its server child through this same command
(``python -m ragbench stub-llm ... --exit-on-stdin-eof``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..generators.stub_server import SERVER_OPTIONS, run_forever

__all__ = ["stub_llm"]


def _serve(**options: Any) -> None:
    """Serve ragbench's OpenAI-compatible streaming stub LLM (timings are SIMULATED)."""
    run_forever(**options)


def _with_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(SERVER_OPTIONS):
        if opt.type is bool:
            fn = click.option(
                opt.flag, opt.keyword, is_flag=True, help=opt.help, hidden=opt.hidden
            )(fn)
        else:
            fn = click.option(
                opt.flag,
                opt.keyword,
                type=opt.type,
                default=opt.default,
                show_default=True,
                help=opt.help,
                hidden=opt.hidden,
            )(fn)
    return fn


stub_llm = click.command("stub-llm")(_with_options(_serve))

"""The ``ragbench`` command line: parse options, call a driver, render its records.

Every command has ``--help``. Bad input prints one line and exits 2 (never a
traceback); a run stopped by a failing server exits 1 after writing what it
finished; Ctrl-C exits 130 and keeps every record already written.

Commands live in the modules of this package and are registered here
statically: a command module that fails to import fails ``ragbench`` loudly.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ..errors import RagbenchError
from .bars import on_terminal
from .options import Interrupted
from .pipelines import compare, run
from .results import datasets, diff, report
from .stub import stub_llm
from .sweeps import scale, sweep
from .traffic import load

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ragbench")
def cli() -> None:
    """Measure where the time goes between a question and the first token of a RAG service."""


for command in (datasets, run, compare, sweep, scale, load, report, diff, stub_llm):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one line and exit 2 on bad input; 1 when a run stopped early; 130 on Ctrl-C."""
    try:
        with on_terminal():
            cli.main(
                args=list(argv) if argv is not None else None,
                prog_name="ragbench",
                standalone_mode=False,
            )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("ragbench: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"ragbench: error: {one_line(exc.format_message())}", err=True)
        return 2
    except RagbenchError as exc:
        click.echo(f"ragbench: error: {one_line(str(exc))}", err=True)
        return 2
    except (KeyboardInterrupt, Interrupted):
        click.echo("ragbench: interrupted; records already written are kept", err=True)
        return 130
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else 1
    return 0


def one_line(text: str) -> str:
    """Collapse whitespace so an error message is one line."""
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

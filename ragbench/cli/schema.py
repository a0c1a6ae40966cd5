"""``ragbench schema config|records``: the JSON Schema of a config file or of result records."""

from __future__ import annotations

import json

import click

from ..results.schema import CURRENT, records_schema
from ..settings import config_schema
from .options import echo

__all__ = ["schema"]


@click.command()
@click.argument("what", type=click.Choice(["config", "records"]))
@click.option(
    "--kind",
    type=click.Choice(sorted(CURRENT)),
    help="Only this record kind (records only). [default: every kind, as oneOf]",
)
def schema(what: str, kind: str | None) -> None:
    """Print the JSON Schema of a pipeline config (TOML read as JSON) or of result records.

    Both are generated from the typed Structs ragbench converts configs and
    checks records with, so they say exactly what this version accepts.
    """
    if what == "config":
        if kind is not None:
            raise click.UsageError("--kind applies to records only")
        doc = config_schema()
    else:
        doc = records_schema(kind)
    echo(json.dumps(doc, indent=2, sort_keys=False))

"""The JSON Schema of a config file, generated from the Structs (:func:`config_schema`).

Part of :mod:`ragbench.settings`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .tables import STAGES
from .variants import TABLE_TYPES, TABLES, VARIANTS

__all__ = ["config_schema"]


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a config file (TOML read as JSON), generated from the Structs.

    Each stage table is ``oneOf`` its typed backends (the table's default
    backend when it names none) and an open table for any other backend
    name, whose parameters the backend checks when it is created.
    """
    typed = [cls for table in STAGES for cls in VARIANTS[table].values()]
    plain = [TABLE_TYPES[t] for t in TABLE_TYPES]
    refs, defs = msgspec.json.schema_components(
        [*plain, *typed, *STAGES.values()], ref_template="#/$defs/{name}"
    )
    props: dict[str, Any] = {}
    for table, ref in zip(TABLE_TYPES, refs, strict=False):
        props[table] = ref
    for table, base in STAGES.items():
        default = base.__struct_defaults__[base.__struct_fields__.index("backend")]
        choices = []
        for name, cls in VARIANTS[table].items():
            if name != default:
                defs[cls.__name__].setdefault("required", []).append("backend")
            choices.append({"$ref": f"#/$defs/{cls.__name__}"})
        choices.append(_open_schema(defs.pop(base.__name__), list(VARIANTS[table]), default))
        props[table] = {"oneOf": choices}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ragbench pipeline config",
        "type": "object",
        "properties": {t: props[t] for t in TABLES},
        "additionalProperties": False,
        "$defs": defs,
    }


def _open_schema(base: dict[str, Any], typed: list[str], default: str | None) -> dict[str, Any]:
    """A stage table naming a backend ragbench does not type: its own keys, any others."""
    out = dict(base)
    other: dict[str, Any] = {"type": "string", "not": {"enum": typed}}
    out["properties"] = {**base["properties"], "backend": other}
    if default is None:
        out["properties"]["backend"] = {"anyOf": [other, {"type": "null"}]}
    else:
        out["required"] = ["backend"]
    out["additionalProperties"] = True
    out["title"] = f"{base.get('title', '')} (another backend)".strip()
    return out

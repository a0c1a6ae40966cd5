"""The payload-size and transport-setting axes of ``compare``/``load``.

``--payload-k 10,100,1000`` varies ``[run] k`` (the hits each payload
carries; ``k_candidates`` is raised to ``k`` where it is lower),
``--payload-embeddings without,with`` varies ``[serialize]
with_embeddings``, and a ``--transport`` item may carry settings after a
``+``: ``grpc+compression=gzip+reply=stream`` is the ``grpc`` backend with
those ``[transport]`` keys (values read as JSON: ``true``, ``65536``, else
text), labelled as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from .options import counts, parse_value, split_list

__all__ = ["PAYLOAD_AXES", "payload_axes", "set_axis", "transport_item"]

PAYLOAD_AXES = ("payload_k", "payload_embeddings")
_EMBEDDINGS = {"without": False, "with": True}


def payload_axes(opts: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    """The payload axes the options give (each a list of values), in a fixed order."""
    axes: list[tuple[str, list[Any]]] = []
    ks = counts(opts.get("payload_k"), "--payload-k")
    if any(k < 1 for k in ks):
        raise click.BadParameter("hit counts must be >= 1", param_hint="--payload-k")
    axes += [("payload_k", ks)] if ks else []
    shapes = split_list(opts.get("payload_embeddings"), "--payload-embeddings")
    for item in shapes:
        if item not in _EMBEDDINGS:
            raise click.BadParameter(
                f"unknown value {item!r}; valid: without, with", param_hint="--payload-embeddings"
            )
    return axes + ([("payload_embeddings", shapes)] if shapes else [])


def transport_item(item: str) -> tuple[str, dict[str, Any]]:
    """``"grpc+compression=gzip"`` → ``("grpc", {"compression": "gzip"})``."""
    name, *settings = item.split("+")
    params: dict[str, Any] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key or not value:
            raise click.BadParameter(
                f"expected NAME+KEY=VALUE[+KEY=VALUE...], got {item!r}", param_hint="--transport"
            )
        params[key] = parse_value(value)
    if not name:
        raise click.BadParameter(f"no transport name in {item!r}", param_hint="--transport")
    return name, params


def set_axis(cfg: dict[str, Any], axis: str, value: Any) -> list[str]:
    """Apply one axis value to ``cfg``; return its label part."""
    if axis == "payload_k":
        cfg["run"]["k"] = value
        cfg["run"]["k_candidates"] = max(int(cfg["run"].get("k_candidates") or 0), value)
        return [f"k={value}"]
    if axis == "payload_embeddings":
        cfg["serialize"]["with_embeddings"] = _EMBEDDINGS[value]
        return [f"{value} embeddings"]
    name, params = transport_item(str(value))
    cfg["transport"]["backend"] = name
    cfg["transport"].update(params)
    return [str(value)]

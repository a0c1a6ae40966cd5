"""One registry type for every component kind.

A registry maps names to factories. Built-in factories are lazy
``"module:attr"`` strings so that listing names imports nothing heavy;
third-party backends arrive through the ``ragbench.<kind>`` entry-point group.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .errors import ConfigError, UnknownBackendError

T = TypeVar("T")

Factory = Callable[..., Any]


def _resolve(target: str) -> Factory:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


class Registry(Generic[T]):
    """Named factories for one component kind (``indexes``, ``codecs``, ...)."""

    def __init__(self, kind: str, builtins: dict[str, str]) -> None:
        self.kind = kind
        self.group = f"ragbench.{kind}"
        self._factories: dict[str, str | Factory] = dict(builtins)
        self._entry_points_loaded = False

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            # A name registered in code wins over a plugin of the same name.
            self._factories.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        """Every registered name, built-in first, then plugins, in order."""
        self._load_entry_points()
        return list(self._factories)

    def register(self, name: str, factory: str | Factory) -> None:
        """Add or replace a backend: a callable, or a lazy ``"module:attr"`` string."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{self.kind} backend name must be a non-empty string")
        if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
            raise ConfigError(f"{self.kind} factory for {name!r} must be callable or 'module:attr'")
        self._factories[name] = factory

    def unregister(self, name: str) -> None:
        """Remove a backend (built-in, registered or plugin); unknown names are an error."""
        self._load_entry_points()
        if name not in self._factories:
            raise UnknownBackendError(self.kind, str(name), self.names())
        del self._factories[name]

    def factory(self, name: str) -> Factory:
        """The factory behind ``name`` (imports it if it is a lazy string)."""
        self._load_entry_points()
        try:
            target = self._factories[name]
        except (KeyError, TypeError):
            raise UnknownBackendError(self.kind, str(name), self.names()) from None
        if isinstance(target, str):
            target = _resolve(target)
            self._factories[name] = target
        return target

    def create(self, name: str, **params: Any) -> T:
        """Build the backend ``name`` with its construction parameters."""
        return self.factory(name)(**params)  # type: ignore[no-any-return]

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._factories

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()!r})"


def check_params(owner: str, given: dict[str, Any], valid: set[str] | frozenset[str]) -> None:
    """Raise :class:`ConfigError` naming any parameter not in ``valid``."""
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise ConfigError(
            f"{owner}: unknown parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}; valid: {', '.join(sorted(valid)) or '(none)'}"
        )

"""One typed shape for a stage's call split into timed parts: :class:`Parts`.

A backend that can say where the time of one call went returns a
:class:`Parts`: three consecutive parts, in nanoseconds, each with its name,
in the order they happened -- before, inside and after the engine. A
database query is ``send`` / ``server`` / ``decode``, a hybrid retriever
``dense`` / ``lexical`` / ``fuse``, a lexical engine ``tokenize`` /
``score`` / ``decode``, an embedder ``tokenize`` / ``forward`` / ``pool``.

It is a read-only mapping from name to nanoseconds (``parts["server"]``,
``list(parts)`` gives the names in order), and :attr:`Parts.ns` is the three
figures in order, which is what a request record keeps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True, slots=True, eq=False)
class Parts(Mapping[str, int]):
    """One call's time as three named, consecutive parts, in nanoseconds.

    ``names``: the parts' names in order (distinct); ``ns``: their times, in
    the same order. Equal to another mapping with the same names and times.
    """

    names: tuple[str, str, str]
    ns: tuple[int, int, int]

    def __post_init__(self) -> None:
        if len(self.names) != 3 or len(self.ns) != 3 or len(set(self.names)) != 3:
            raise InputError(
                f"Parts: three distinct names and three times, got names={self.names!r}, "
                f"ns={self.ns!r}"
            )

    def __getitem__(self, name: str) -> int:
        """The time of the part called ``name`` (KeyError for a name it does not have)."""
        names = self.names
        if name == names[0]:
            return self.ns[0]
        if name == names[1]:
            return self.ns[1]
        if name == names[2]:
            return self.ns[2]
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return 3

    @property
    def total(self) -> int:
        """The three parts summed: the call's time, less whatever ran before or after them."""
        return self.ns[0] + self.ns[1] + self.ns[2]

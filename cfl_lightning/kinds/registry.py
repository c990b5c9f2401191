"""``Registry``: a named table of kinds that users extend, and lazy references to their code.

Each place where the product varies (automaton generators, event kinds, intervention kinds) keeps
one :class:`Registry`. The CLI's choices, the configs' validation, the analysis labels and the
docs' lists read it, so adding a kind is one module (its code) plus one registration.

Entries hold their code as a callable or as a *reference* ``"package.module:attribute"``
(:func:`resolve`), imported on first use: a registry can then name code of a higher floor (the
sampler, torch) while it stays pure Python, so that the analysis reads labels without torch.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Colour:
    ...     name: str
    >>> colours = Registry("colour", ValueError)
    >>> colours.register(Colour("red"))
    >>> with colours.registered(Colour("blue")):
    ...     colours.names()
    ('red', 'blue')
    >>> colours.names()
    ('red',)
    >>> colours.get("green")
    Traceback (most recent call last):
    ...
    ValueError: unknown colour 'green'; expected one of red
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Registry", "Names", "Fields", "Named", "resolve", "call", "Ref"]

#: code given as a callable or as ``"package.module:attribute"``
Ref = Any


class Named(Protocol):
    """What a registry holds: an entry with a unique ``name``."""

    @property
    def name(self) -> str: ...


E = TypeVar("E", bound=Named)


def resolve(ref: Ref) -> Any:
    """The object a reference names: ``"pkg.mod:attr"`` is imported, anything else returned.

    Raises:
        ImportError, AttributeError: the reference names no importable object.
    """
    if not isinstance(ref, str):
        return ref
    module, _, attribute = ref.partition(":")
    if not module or not attribute:
        raise ValueError(f"a reference reads 'package.module:attribute', got {ref!r}")
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


class Registry(Generic[E]):
    """Entries by name, in registration order.

    Args:
        what: the kind of entry, for messages (``"intervention"``).
        error: the exception raised for an unknown or duplicate name (one line).
    """

    def __init__(self, what: str, error: type[Exception]) -> None:
        self.what = what
        self.error = error
        self._entries: dict[str, E] = {}

    def register(self, entry: E, *, replace: bool = False) -> None:
        """Add ``entry`` (``replace`` an entry of the same name instead of refusing it)."""
        if not isinstance(entry.name, str) or not entry.name or ":" in entry.name:
            raise self.error(
                f"a {self.what} name is non-empty text without ':', got {entry.name!r}"
            )
        if entry.name in self._entries and not replace:
            raise self.error(f"{self.what} {entry.name!r} is already registered")
        self._entries[entry.name] = entry

    def unregister(self, name: str) -> E:
        """Remove and return the entry ``name``."""
        self.get(name)
        return self._entries.pop(name)

    @contextmanager
    def registered(self, *entries: E) -> Iterator[None]:
        """Register ``entries`` for the block, then remove them (tests, temporary kinds)."""
        done = []
        try:
            for entry in entries:
                self.register(entry)
                done.append(entry.name)
            yield
        finally:
            for name in reversed(done):
                self._entries.pop(name, None)

    def get(self, name: str) -> E:
        """The entry ``name``.

        Raises:
            the registry's error: ``unknown <what> 'x'; expected one of a, b, c``.
        """
        entry = self._entries.get(name) if isinstance(name, str) else None
        if entry is None:
            raise self.error(f"unknown {self.what} {name!r}; expected one of {self.listing()}")
        return entry

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def entries(self) -> tuple[E, ...]:
        """The registered entries, in registration order."""
        return tuple(self._entries.values())

    def listing(self) -> str:
        """``"a, b, c"``: the names for a message."""
        return ", ".join(self._entries)

    def view(self) -> Names:
        """A live sequence of the names (it follows later registrations)."""
        return Names(self)

    def mapping(self, attribute: str) -> Fields:
        """A live mapping ``{name: entry.<attribute>}`` (it follows later registrations)."""
        return Fields(self, attribute)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[E]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self._entries)


class Names(Sequence[str]):
    """The names of a registry as a tuple-like view that follows (un)registrations.

    Module constants such as ``INTERVENTIONS`` are views, so ``"x" in INTERVENTIONS`` and
    ``choices=INTERVENTIONS`` see a kind registered after the import.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def __getitem__(self, index):  # type: ignore[override]
        return self._registry.names()[index]

    def __len__(self) -> int:
        return len(self._registry)

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


def call(ref: Ref, *args: Any, **kwargs: Any) -> Any:
    """``resolve(ref)(*args, **kwargs)``."""
    function: Callable[..., Any] = resolve(ref)
    return function(*args, **kwargs)


class Fields(Mapping[str, Any]):
    """``{name: entry.<attribute>}`` of a registry, live: module constants such as
    ``COUNT_UNITS`` see a kind registered after the import."""

    def __init__(self, registry: Registry, attribute: str) -> None:
        self._registry = registry
        self._attribute = attribute

    def __getitem__(self, name: str) -> Any:
        if name not in self._registry:
            raise KeyError(name)
        return getattr(self._registry.get(name), self._attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.names())

    def __len__(self) -> int:
        return len(self._registry)

    def __repr__(self) -> str:
        return repr(dict(self))

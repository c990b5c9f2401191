"""Events: sets of transitions whose traversals an intervention counts.

The kinds and their text forms are registered in :mod:`cfl_lightning.kinds.events` (used on the
command line and in configs); built in:

* ``state:NAME`` -- every transition leaving state ``NAME`` (stopping at it is not an occurrence);
* ``symbol:SYM`` -- every transition emitting ``SYM``;
* ``transition:SOURCE:SYM`` -- the one transition leaving ``SOURCE`` on ``SYM``.

An event is turned into an *event function* on a concrete automaton: a ``[Q, |S|]`` int64 table
holding 1 on the counted transitions and 0 elsewhere (the paper's ``f_delta``; its initial and final
components are zero). This module holds the built-in kinds' tables on a PFSA
(:func:`state_table`, :func:`symbol_table`, :func:`transition_table`) and where each lives in a
decomposed KL (:func:`state_index`, ...); the registry names them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.errors import EventError
from cfl_lightning.kinds.automata import event_table_ref
from cfl_lightning.kinds.events import EVENT_KINDS, event_kind, format_event, parse_event_text
from cfl_lightning.kinds.registry import call

__all__ = [
    "Event",
    "EVENT_KINDS",
    "state_table",
    "symbol_table",
    "transition_table",
    "state_index",
    "symbol_index",
    "transition_index",
]


class Event:
    """A set of transitions: its kind and the values of the kind's fields.

    Args:
        kind: a registered event kind (``"state"``, ``"symbol"``, ``"transition"``, ...).
        state: the state name (``state`` and ``transition`` events).
        symbol: the symbol name (``symbol`` and ``transition`` events).
        stack: the stack symbol name (a pushdown automaton's ``push`` events).
        **more: the values of fields other kinds name (``nonterminal="A"``).

    Attributes:
        kind: the event kind.
        fields: ``{field: value}``, read-only: the values given (``None`` ones left out).
        state, symbol, stack: ``fields.get(...)`` (None when absent).

    Immutable and hashable; equal when the kind and the fields are.
    """

    __slots__ = ("kind", "_values")

    def __init__(
        self,
        kind: str,
        state: str | None = None,
        symbol: str | None = None,
        stack: str | None = None,
        **more: str | None,
    ) -> None:
        given = {"state": state, "symbol": symbol, "stack": stack, **more}
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "_values", {k: v for k, v in given.items() if v is not None})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"an Event is immutable (cannot set {name!r})")

    def __reduce__(self) -> tuple:
        return (_rebuild, (self.kind, dict(self._values)))

    @property
    def fields(self) -> Mapping[str, str]:
        """``{field: value}`` (read-only)."""
        return MappingProxyType(self._values)

    @property
    def state(self) -> str | None:
        return self._values.get("state")

    @property
    def symbol(self) -> str | None:
        return self._values.get("symbol")

    @property
    def stack(self) -> str | None:
        return self._values.get("stack")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self.kind == other.kind and self._values == other._values

    def __hash__(self) -> int:
        return hash((self.kind, tuple(sorted(self._values.items()))))

    def __repr__(self) -> str:
        values = "".join(f", {k}={v!r}" for k, v in self._values.items())
        return f"Event({self.kind!r}{values})"

    @classmethod
    def parse(cls, spec: str) -> Event:
        """Parse a registered kind's text: ``state:NAME``, ``symbol:SYM``,
        ``transition:SOURCE:SYM``, ...

        Names may themselves contain ``:`` only in the last field.
        """
        kind, values = parse_event_text(spec)
        return cls(kind, **values)

    def __str__(self) -> str:
        return format_event(self.kind, self._values)

    def table(self, automaton: Any) -> Tensor:
        """The registered table of this event's kind on ``automaton``'s kind (unmasked).

        Returns:
            ``[C, S]`` int64 (:func:`~cfl_lightning.kinds.automata.event_table_ref`).

        Raises:
            EventError: an unknown kind or name, or a kind the automaton's kind does not have.
        """
        return call(event_table_ref(self.kind, automaton.kind), self, automaton)

    def _state(self, pfsa: PFSA) -> int:
        if self.state not in pfsa.states:
            raise EventError(f"event {self}: unknown state {self.state!r}")
        return pfsa.states.index(self.state)

    def _symbol(self, pfsa: PFSA) -> int:
        if self.symbol not in pfsa.alphabet:
            raise EventError(f"event {self}: unknown symbol {self.symbol!r}")
        return pfsa.alphabet.index(self.symbol)

    def function(self, pfsa: PFSA) -> Tensor:
        """The 0/1 event function on ``pfsa`` (the kind's ``"pfsa"`` table).

        Returns:
            ``[Q, |S|]`` int64 on ``pfsa.device``; 1 on the counted transitions that exist.

        Raises:
            EventError: an unknown kind or name, or a kind that a PFSA does not have.
        """
        mask = self.table(pfsa).to(pfsa.device)
        return mask * (pfsa.next_state >= 0).long()

    def transition_index(self, pfsa: PFSA) -> tuple[str, int]:
        """Where this event lives in a decomposed KL: ``("state", q)``, ``("symbol", s)``..."""
        locate = event_kind(self.kind).locate
        if locate is None:
            raise EventError(f"{self.kind} events have no entry in the decomposed KL")
        return call(locate, self, pfsa)

    def expected_count(self, pfsa: PFSA) -> float:
        """Expected number of occurrences per string, ``sum_(q,s) p_pi(q) w(q, s) f(q, s)``."""
        visits = pfsa.expected_visits()
        return float((visits[:, None] * pfsa.weights * self.function(pfsa)).sum())


def _rebuild(kind: str, values: dict[str, str]) -> Event:
    """Unpickle / copy an :class:`Event`."""
    return Event(kind, **values)


def _zeros(pfsa: PFSA) -> Tensor:
    return torch.zeros(pfsa.num_states, pfsa.num_symbols, dtype=torch.long)


def state_table(event: Event, pfsa: PFSA) -> Tensor:
    """``state:NAME``: 1 on every transition leaving the state. ``[Q, S]`` int64 (CPU)."""
    mask = _zeros(pfsa)
    mask[event._state(pfsa), :] = 1
    return mask


def symbol_table(event: Event, pfsa: PFSA) -> Tensor:
    """``symbol:SYM``: 1 on every transition emitting the symbol. ``[Q, S]`` int64 (CPU)."""
    mask = _zeros(pfsa)
    mask[:, event._symbol(pfsa)] = 1
    return mask


def transition_table(event: Event, pfsa: PFSA) -> Tensor:
    """``transition:SOURCE:SYM``: 1 on that transition, which must exist. ``[Q, S]`` int64."""
    q, s = event._state(pfsa), event._symbol(pfsa)
    if int(pfsa.next_state[q, s]) < 0:
        raise EventError(
            f"event {event}: state {event.state!r} has no transition on {event.symbol!r}"
        )
    mask = _zeros(pfsa)
    mask[q, s] = 1
    return mask


def state_index(event: Event, pfsa: PFSA) -> tuple[str, int]:
    """``("state", q)``."""
    return "state", event._state(pfsa)


def symbol_index(event: Event, pfsa: PFSA) -> tuple[str, int]:
    """``("symbol", s)``."""
    return "symbol", event._symbol(pfsa)


def transition_index(event: Event, pfsa: PFSA) -> tuple[str, int]:
    """``("transition", q * (S + 1) + s)``."""
    return "transition", event._state(pfsa) * (pfsa.num_symbols + 1) + event._symbol(pfsa)

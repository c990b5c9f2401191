"""Events on a pushdown automaton: their ``[C, S]`` tables over (class, symbol) steps.

Kinds: ``symbol:SYM`` (every class), ``state:NAME`` (every class of that state),
``transition:CLASS:SYM`` with ``CLASS = STATE/TOP`` or ``STATE/-`` (one step, which must
exist), and ``push:X`` (every step that pushes stack symbol ``X``: one more level of nesting;
registered in :mod:`cfl_lightning.kinds.events`, so :meth:`Event.parse` reads it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cfl_lightning.automata.events import Event
from cfl_lightning.errors import EventError

# ``pda`` below is a :class:`~cfl_lightning.automata.pushdown.PushdownAutomaton` (not imported:
# that module imports this one)
PushdownAutomaton = Any

__all__ = ["PushEvent", "parse_event", "event_table", "event_location", "push_table"]


def PushEvent(stack: str) -> Event:  # noqa: N802 (reads as the event's constructor)
    """``push:X``: every step that pushes stack symbol ``X``."""
    return Event("push", stack=stack)


def parse_event(spec: str) -> Event:
    """Parse an event spec (every registered kind, ``push:X`` included): :meth:`Event.parse`."""
    return Event.parse(spec)


def push_table(event: Event, pda: PushdownAutomaton) -> Tensor:
    """The registry's table function of ``push:X`` (:func:`event_table`)."""
    return event_table(pda, event)


def _index(names: tuple[str, ...], name: str | None, what: str, event: Event) -> int:
    if name not in names:
        raise EventError(f"event {event}: unknown {what} {name!r}")
    return names.index(name)


def event_table(pda: PushdownAutomaton, event: Event) -> Tensor:
    """Occurrences of ``event`` added by each (class, symbol) step of ``pda``.

    Returns:
        ``[C, S]`` int64 on ``pda.device``, 1 on the counted steps that exist, 0 elsewhere.

    Raises:
        EventError: an unknown name, a transition that does not exist, or an unknown kind.
    """
    q, g, s = pda.num_states, pda.num_stack, pda.num_symbols
    exists = (pda.target >= 0).reshape(q * (g + 1), s)
    table = torch.zeros(q, g + 1, s, dtype=torch.long, device=pda.device)
    if event.kind == "symbol":
        table[:, :, _index(pda.alphabet, event.symbol, "symbol", event)] = 1
    elif event.kind == "state":
        table[_index(pda.states, event.state, "state", event)] = 1
    elif event.kind == "push":
        stack = _index(pda.stack_alphabet, event.stack, "stack symbol", event)
        table = (pda.action == stack).long()
    elif event.kind == "transition":
        if event.state not in pda.class_names:
            raise EventError(
                f"event {event}: unknown class {event.state!r} (pushdown transitions are "
                "named transition:STATE/TOP:SYMBOL, STATE/- on the empty stack)"
            )
        c = pda.class_names.index(event.state or "")
        a = _index(pda.alphabet, event.symbol, "symbol", event)
        if not bool(exists[c, a]):
            raise EventError(
                f"event {event}: class {event.state!r} has no transition on {event.symbol!r}"
            )
        table.view(q * (g + 1), s)[c, a] = 1
    else:
        raise EventError(f"unknown event kind {event.kind!r} for a pushdown automaton")
    return table.reshape(q * (g + 1), s) * exists.long()


def event_location(pda: PushdownAutomaton, event: Event) -> tuple[str, tuple[int, ...]]:
    """Where ``event`` lives in a decomposed KL result.

    Returns:
        ``("symbol", (s,))``; ``("state", classes of the state)``; ``("transition", flat
        indices c * (S + 1) + s)``: the one step of ``transition:``, every pushing step of
        ``push:X``.

    Raises:
        EventError: as :func:`event_table`.
    """
    table = event_table(pda, event)  # validates the names
    if event.kind == "symbol":
        return "symbol", (pda.alphabet.index(event.symbol),)
    if event.kind == "state":
        q, width = pda.states.index(event.state), pda.num_stack + 1
        return "state", tuple(range(q * width, (q + 1) * width))
    cls, sym = table.nonzero(as_tuple=True)
    return "transition", tuple((cls * (pda.num_symbols + 1) + sym).tolist())

"""Events on a pushdown automaton: their ``[C, S]`` tables over (class, symbol) steps.

Kinds: ``symbol:SYM`` (every class), ``state:NAME`` (every class of that state),
``transition:CLASS:SYM`` with ``CLASS = STATE/TOP`` or ``STATE/-`` (one step, which must
exist), ``push:X`` (every step that pushes stack symbol ``X``: one more level of nesting),
``pop:X`` (every step that pops ``X``: a nesting closed) and ``class:STATE/TOP`` (every step
from one class: the state with ``TOP`` on the stack; it carries the stack, where ``state:NAME``
pools its tops). Each kind's table is a function here, looked up in the registries like a PFSA's
(:func:`~cfl_lightning.kinds.automata.event_table_ref`): the ``pushdown`` automaton kind lists the
first three, the ``push``, ``pop`` and ``class`` event kinds bring their own; a kind registered
later with a ``pushdown`` table works the same way.

In an automaton that ends only on the empty stack every ``X`` pushed is popped, so a string's
count of ``pop:X`` equals its count of ``push:X``: interventions on the two draw the same
corpora; what differs is where the target lives in the decomposed KL (the popping steps, not the
pushing ones).
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

__all__ = [
    "PushEvent",
    "parse_event",
    "event_table",
    "event_location",
    "symbol_table",
    "state_table",
    "transition_table",
    "push_table",
    "pop_table",
    "class_table",
]


def PushEvent(stack: str) -> Event:  # noqa: N802 (reads as the event's constructor)
    """``push:X``: every step that pushes stack symbol ``X``."""
    return Event("push", stack=stack)


def parse_event(spec: str) -> Event:
    """Parse an event spec (every registered kind, ``push:X`` included): :meth:`Event.parse`."""
    return Event.parse(spec)


def _index(names: tuple[str, ...], name: str | None, what: str, event: Event) -> int:
    if name not in names:
        raise EventError(f"event {event}: unknown {what} {name!r}")
    return names.index(name)


def _zeros(pda: PushdownAutomaton) -> Tensor:
    return torch.zeros(
        pda.num_states, pda.num_stack + 1, pda.num_symbols, dtype=torch.long, device=pda.device
    )


def symbol_table(event: Event, pda: PushdownAutomaton) -> Tensor:
    """``symbol:SYM``: every class's steps on ``SYM``. ``[C, S]`` int64 (unmasked)."""
    table = _zeros(pda)
    table[:, :, _index(pda.alphabet, event.symbol, "symbol", event)] = 1
    return table.reshape(pda.num_classes, pda.num_symbols)


def state_table(event: Event, pda: PushdownAutomaton) -> Tensor:
    """``state:NAME``: every step from a class ``NAME/TOP``. ``[C, S]`` int64 (unmasked)."""
    table = _zeros(pda)
    table[_index(pda.states, event.state, "state", event)] = 1
    return table.reshape(pda.num_classes, pda.num_symbols)


def push_table(event: Event, pda: PushdownAutomaton) -> Tensor:
    """``push:X``: every step that pushes ``X``. ``[C, S]`` int64."""
    stack = _index(pda.stack_alphabet, event.stack, "stack symbol", event)
    return (pda.action == stack).long().reshape(pda.num_classes, pda.num_symbols)


def pop_table(event: Event, pda: PushdownAutomaton) -> Tensor:
    """``pop:X``: every step that pops ``X`` (from a class with ``X`` on top). ``[C, S]`` int64."""
    from cfl_lightning.automata.pushdown.fixpoint import POP

    stack = _index(pda.stack_alphabet, event.stack, "stack symbol", event)
    table = _zeros(pda)
    table[:, stack, :] = (pda.action[:, stack, :] == POP).long()
    return table.reshape(pda.num_classes, pda.num_symbols)


def class_table(event: Event, pda: PushdownAutomaton) -> Tensor:
    """``class:STATE/TOP``: every step from that class (``STATE/-``: the empty stack).
    ``[C, S]`` int64 (unmasked)."""
    if event.state not in pda.class_names:
        raise EventError(
            f"event {event}: unknown class {event.state!r} (classes are named STATE/TOP, "
            "STATE/- on the empty stack)"
        )
    table = _zeros(pda).reshape(pda.num_classes, pda.num_symbols)
    table[pda.class_names.index(event.state)] = 1
    return table


def transition_table(event: Event, pda: PushdownAutomaton) -> Tensor:
    """``transition:CLASS:SYM``: the one step, which must exist. ``[C, S]`` int64."""
    if event.state not in pda.class_names:
        raise EventError(
            f"event {event}: unknown class {event.state!r} (pushdown transitions are "
            "named transition:STATE/TOP:SYMBOL, STATE/- on the empty stack)"
        )
    c = pda.class_names.index(event.state or "")
    a = _index(pda.alphabet, event.symbol, "symbol", event)
    if int(pda.target.reshape(pda.num_classes, pda.num_symbols)[c, a]) < 0:
        raise EventError(
            f"event {event}: class {event.state!r} has no transition on {event.symbol!r}"
        )
    table = _zeros(pda).reshape(pda.num_classes, pda.num_symbols)
    table[c, a] = 1
    return table


def event_table(pda: PushdownAutomaton, event: Event) -> Tensor:
    """Occurrences of ``event`` added by each (class, symbol) step of ``pda``.

    The table is the event kind's registered one on pushdown automata
    (:meth:`Event.table <cfl_lightning.automata.Event.table>`: ``symbol_table``,
    ``state_table``, ``transition_table`` above, ``push_table``, or a kind registered later),
    zero where no transition exists.

    Returns:
        ``[C, S]`` int64 on ``pda.device``, 1 on the counted steps that exist, 0 elsewhere.

    Raises:
        EventError: an unknown name, a transition that does not exist, or a kind without a
            pushdown table.
    """
    exists = (pda.target >= 0).reshape(pda.num_classes, pda.num_symbols)
    return event.table(pda).to(pda.device) * exists.long()


def event_location(pda: PushdownAutomaton, event: Event) -> tuple[str, tuple[int, ...]]:
    """Where ``event`` lives in a decomposed KL result.

    Returns:
        ``("symbol", (s,))``; ``("state", classes of the state)`` (``class:`` its one class);
        ``("transition", flat indices c * (S + 1) + s)``: the one step of ``transition:``, every
        pushing step of ``push:X``, every popping step of ``pop:X``.

    Raises:
        EventError: as :func:`event_table`.
    """
    table = event_table(pda, event)  # validates the names
    if event.kind == "symbol":
        return "symbol", (pda.alphabet.index(event.symbol),)
    if event.kind == "state":
        q, width = pda.states.index(event.state), pda.num_stack + 1
        return "state", tuple(range(q * width, (q + 1) * width))
    if event.kind == "class":
        return "state", (pda.class_names.index(event.state),)
    cls, sym = table.nonzero(as_tuple=True)
    return "transition", tuple((cls * (pda.num_symbols + 1) + sym).tolist())

"""What an automaton file declares, read before the automaton is built (and its cost to build).

Building an automaton validates it, and a pushdown automaton's validation solves its excursion
system (a fixed point with a dense ``[V, V]`` Jacobian, ``V = G Q^2 + Q``): minutes for 50
states. Mistakes that the file's declared names already show are refused before that, right
after the JSON is parsed:

* :func:`declared_names` reads the kind's name lists (states, alphabet, stack alphabet);
* :func:`check_event_names` refuses an event naming an unknown state, symbol, stack symbol or
  class, with the message the event tables give (``event symbol:s0: unknown symbol 's0'``);
* :func:`load_cost` estimates the memory and CPU time of building the automaton, per kind
  (:data:`LOAD_COSTS`, the one place that dispatches on the kind), and
  :func:`check_load_memory` refuses one that will not fit in memory.

The time law of the pushdown fixed point (``LOAD_SECONDS_PER_CUBE x V^3``) was measured by
``benchmarks/bench_estimates.py`` (docs/benchmarks/cpu_bench_estimates.log).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cfl_lightning.errors import EventError
from cfl_lightning.memory import check_host_bytes

__all__ = [
    "Declared",
    "LoadCost",
    "declared_names",
    "check_event_names",
    "load_cost",
    "check_load_memory",
    "LOAD_COSTS",
    "LOAD_SECONDS_PER_CUBE",
]

#: CPU seconds per ``V^3`` of the pushdown fixed point and its spectral radius (one thread)
LOAD_SECONDS_PER_CUBE = 1.2e-9
# Above pushdown.structured.DENSE_MAX variables the fixed point is solved by structured splitting
# steps (no V x V Jacobian): measured at 50 states x 3 stack symbols (7,550 variables), ~20 MB and
# ~0.2 CPU-s beyond the imports; these constants keep the estimate above that (x4 in memory).
_DENSE_MAX = 1500  # = automata.pushdown.structured.DENSE_MAX (a test holds them equal)
_STRUCTURED_BYTES = 40
_STRUCTURED_STEPS = 200
#: bytes per Jacobian entry at the peak: the Jacobian, the Newton system, the eigenvalue copy
_JACOBIAN_BYTES = 40
_ARC_BYTES = 200  # per (class, symbol) entry: tensors and the per-arc Python lists


@dataclass(frozen=True)
class Declared:
    """The names a file declares (before anything is validated).

    Attributes:
        kind: ``"pfsa"`` or ``"pushdown"`` (any registered kind).
        states: state names.
        alphabet: symbol names.
        stack: stack symbol names (None: the kind has no stack).
    """

    kind: str
    states: tuple[str, ...]
    alphabet: tuple[str, ...]
    stack: tuple[str, ...] | None = None

    @property
    def classes(self) -> tuple[str, ...]:
        """Position classes: the states, or a pushdown automaton's ``STATE/TOP`` pairs."""
        if self.stack is None:
            return self.states
        tops = (*self.stack, "-")
        return tuple(f"{q}/{t}" for q in self.states for t in tops)


@dataclass(frozen=True)
class LoadCost:
    """Estimated peak bytes and CPU seconds of building (and validating) an automaton.

    Attributes:
        bytes: peak memory.
        seconds: CPU time on one thread.
        what: the work, for messages (``"the fixed point of 50 states x 2 stack symbols (5,050
            variables)"``).
    """

    bytes: float
    seconds: float
    what: str


def _names(data: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    names = data.get(key)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)


def declared_names(data: Mapping[str, Any], kind: str) -> Declared | None:
    """The names ``data`` declares, or None where they are not lists of strings (the kind's
    reader then says what is wrong)."""
    states, alphabet = _names(data, "states"), _names(data, "alphabet")
    if states is None or alphabet is None:
        return None
    stack = None
    if kind == "pushdown":
        stack = _names(data, "stack_alphabet")
        if stack is None:
            return None
    return Declared(kind, states, alphabet, stack)


# event kinds whose ``state`` field names a pushdown automaton's class (``STATE/TOP``)
_CLASS_NAMED = ("transition", "class")


def check_event_names(declared: Declared, event: Any) -> None:
    """Refuse an event whose names the file does not declare (before the automaton is built).

    Args:
        declared: the file's names (:func:`declared_names`).
        event: an :class:`~cfl_lightning.automata.events.Event` (its ``kind`` and its fields
            ``state``, ``symbol``, ``stack``; a field it does not have is not checked).

    Raises:
        EventError: ``event symbol:s0: unknown symbol 's0'`` (the event tables' wording).
    """
    state, symbol, stack = (getattr(event, f, None) for f in ("state", "symbol", "stack"))
    if state is not None:
        if declared.stack is not None and event.kind in _CLASS_NAMED:
            if state not in declared.classes:
                raise EventError(
                    f"event {event}: unknown class {state!r} (a pushdown automaton's classes "
                    "are named STATE/TOP, STATE/- on the empty stack)"
                )
        elif state not in declared.states:
            raise EventError(f"event {event}: unknown state {state!r}")
    if symbol is not None and symbol not in declared.alphabet:
        raise EventError(f"event {event}: unknown symbol {symbol!r}")
    if stack is not None and declared.stack is not None and stack not in declared.stack:
        raise EventError(f"event {event}: unknown stack symbol {stack!r}")


def _pfsa_cost(declared: Declared) -> LoadCost:
    q, s = len(declared.states), len(declared.alphabet)
    return LoadCost(
        3 * 8 * q * q + _ARC_BYTES * q * s,
        LOAD_SECONDS_PER_CUBE * q**3,
        f"solving an automaton with {q:,} states",
    )


def _pushdown_cost(declared: Declared) -> LoadCost:
    q, s, g = len(declared.states), len(declared.alphabet), len(declared.stack or ())
    v = g * q * q + q  # the excursion system's variables E[X, p, r] and T[p]
    what = f"the fixed point of {q:,} states x {g:,} stack symbols ({v:,} variables)"
    arcs = _ARC_BYTES * q * (g + 1) * s
    if v > _DENSE_MAX:  # structured solves: [G + 1, G + 1, Q, Q, Q]-sized work, no V x V matrix
        work = (g + 1) ** 2 * q**3
        return LoadCost(_STRUCTURED_BYTES * work + arcs,
                        LOAD_SECONDS_PER_CUBE * _STRUCTURED_STEPS * work, what)
    return LoadCost(_JACOBIAN_BYTES * v * v + arcs, LOAD_SECONDS_PER_CUBE * v**3, what)


#: the load-cost estimate of each automaton kind (a kind without one is not estimated)
LOAD_COSTS: dict[str, Callable[[Declared], LoadCost]] = {
    "pfsa": _pfsa_cost,
    "pushdown": _pushdown_cost,
}


def load_cost(declared: Declared) -> LoadCost | None:
    """The kind's estimate of building the automaton (None for a kind without one)."""
    estimate = LOAD_COSTS.get(declared.kind)
    return None if estimate is None else estimate(declared)


def check_load_memory(declared: Declared, where: str = "") -> LoadCost | None:
    """Refuse to build an automaton whose estimated peak memory exceeds what is available.

    Raises:
        SizeError: ``FILE: the fixed point of 400 states x 3 stack symbols (480,400 variables)
            needs ~8.4 TB, more than the 22.1 GB of memory available (...)``.
    """
    cost = load_cost(declared)
    if cost is not None:
        check_host_bytes(cost.bytes, what=f"{where}{cost.what}")
    return cost

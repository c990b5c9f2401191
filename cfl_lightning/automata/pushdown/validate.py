"""Validation of a pushdown automaton's tables: names, shapes, weights, stack actions, termination.

Each check raises :class:`~cfl_lightning.errors.PDAError` with one line naming the place (file,
state, top, symbol). The termination check solves the excursion system
(:mod:`cfl_lightning.automata.pushdown.fixpoint`): the automaton must end with probability 1 from
its initial configuration, and the expected string length must be finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from cfl_lightning.automata.pfsa import NORMALIZATION_TOLERANCE, check_names
from cfl_lightning.automata.pushdown.fixpoint import KEEP, POP
from cfl_lightning.errors import PDAError, PFSAError

# ``pda`` below is a :class:`~cfl_lightning.automata.pushdown.PushdownAutomaton` (not imported:
# that module imports this one)
PushdownAutomaton = Any

__all__ = [
    "check_stack_names",
    "check_tables",
    "check_termination",
    "ENDING_TOLERANCE",
    "CRITICAL_TOLERANCE",
]

# T[initial] below 1 - ENDING_TOLERANCE: the automaton does not end with probability 1
ENDING_TOLERANCE = 1e-9
# spectral radius of the Jacobian at the fixed point above 1 - CRITICAL_TOLERANCE: critical (an
# infinite expected length; floating point resolves a critical fixed point to ~sqrt(eps) only)
CRITICAL_TOLERANCE = 1e-6


def check_stack_names(stack_alphabet: Sequence[str], where: str = "") -> None:
    """Stack symbols: non-empty, unique, not ``-``, without ``/`` or ``:`` (they name classes)."""
    seen: set[str] = set()
    for name in stack_alphabet:
        if not isinstance(name, str) or name == "":
            raise PDAError(f"{where}empty stack symbol name")
        if name in seen:
            raise PDAError(f"{where}duplicate stack symbol name {name!r}")
        if name == "-" or "/" in name or ":" in name:
            raise PDAError(
                f"{where}stack symbol name {name!r} is '-' or contains '/' or ':' (class names "
                "are STATE/TOP with '-' for the empty stack); rename the stack symbol"
            )
        seen.add(name)


def _place(pda: PushdownAutomaton, q: int, t: int, a: int | None = None) -> str:
    top = "-" if t == pda.num_stack else pda.stack_alphabet[t]
    sym = "" if a is None else f", symbol {pda.alphabet[a]!r}"
    return f"{pda.where()}state {pda.states[q]!r}, top {top!r}{sym}"


def _check_shapes(pda: PushdownAutomaton) -> None:
    where = pda.where()
    q, g, s = pda.num_states, pda.num_stack, pda.num_symbols
    if q == 0:
        raise PDAError(f"{where}the automaton has no states")
    if s == 0:
        raise PDAError(f"{where}the alphabet is empty")
    try:
        check_names(pda.states, pda.alphabet, where)
    except PFSAError as err:
        raise PDAError(str(err)) from None
    check_stack_names(pda.stack_alphabet, where)
    shape = (q, g + 1, s)
    for name in ("target", "action", "weights"):
        if tuple(getattr(pda, name).shape) != shape:
            raise PDAError(
                f"{where}{name} must have shape {list(shape)}, got {list(getattr(pda, name).shape)}"
            )
    if tuple(pda.final.shape) != (q,):
        raise PDAError(f"{where}final must have shape [{q}], got {list(pda.final.shape)}")
    if not 0 <= pda.initial < q:
        raise PDAError(f"{where}initial state index {pda.initial} out of range")


def _check_step(
    pda: PushdownAutomaton, q: int, t: int, a: int, tgt: int, act: int, w: float
) -> None:
    g = pda.num_stack
    if tgt < -1 or tgt >= pda.num_states:
        raise PDAError(f"{_place(pda, q, t, a)}: target index {tgt} out of range")
    if tgt == -1:
        if w != 0:
            raise PDAError(f"{_place(pda, q, t, a)}: weight {w} but no transition")
        return
    if not math.isfinite(w) or w < 0:
        raise PDAError(f"{_place(pda, q, t, a)}: invalid weight {w!r}")
    if act == POP and t == g:
        raise PDAError(f"{_place(pda, q, t, a)}: pops the empty stack")
    if act not in (KEEP, POP) and not 0 <= act < g:
        raise PDAError(f"{_place(pda, q, t, a)}: pushes unknown stack symbol index {act}")


def check_tables(pda: PushdownAutomaton) -> None:
    """Names, shapes, ranges, weights, stack actions and normalisation.

    Every (state, top) has weights (plus ``final`` on the empty stack) summing to 1, or no
    transition at all (a configuration that never occurs; if it does, the termination check
    fails).

    Raises:
        PDAError: one line naming the place.
    """
    _check_shapes(pda)
    g = pda.num_stack
    target, action = pda.target.cpu().tolist(), pda.action.cpu().tolist()
    weights, final = pda.weights.cpu().tolist(), pda.final.cpu().tolist()
    for q in range(pda.num_states):
        if not math.isfinite(final[q]) or final[q] < 0:
            raise PDAError(
                f"{pda.where()}state {pda.states[q]!r} has invalid final weight {final[q]!r}"
            )
        for t in range(g + 1):
            total = final[q] if t == g else 0.0
            defined = total > 0
            for a in range(pda.num_symbols):
                _check_step(pda, q, t, a, target[q][t][a], action[q][t][a], weights[q][t][a])
                if target[q][t][a] >= 0:
                    total += weights[q][t][a]
                    defined = True
            if defined and abs(total - 1.0) > NORMALIZATION_TOLERANCE:
                what = "outgoing + final weights" if t == g else "outgoing weights"
                raise PDAError(f"{_place(pda, q, t)}: {what} sum to {total:.9g}, not 1")


def check_termination(pda: PushdownAutomaton) -> None:
    """The automaton ends with probability 1 and its expected string length is finite.

    Raises:
        PDAError: ``does not end with probability 1`` (the least fixed point's ``T[initial]``,
            the probability of ending, below ``1 - 1e-9``) or ``expected string length is
            infinite`` (a critical automaton: the Jacobian's spectral radius at the fixed point
            is 1 within ``1e-6``).
    """
    ending = pda.ending_probability()
    _, rho = pda.visits_and_radius()
    critical = rho >= 1 - CRITICAL_TOLERANCE
    if ending < 1 - CRITICAL_TOLERANCE or (ending < 1 - ENDING_TOLERANCE and not critical):
        raise PDAError(
            f"{pda.where()}the automaton does not end with probability 1 (it ends with "
            f"probability {ending:.9g} from state {pda.states[pda.initial]!r}: pushes outweigh "
            "pops, or a reachable (state, top) has no transition)"
        )
    if critical:
        raise PDAError(
            f"{pda.where()}expected string length is infinite (a critical automaton: the "
            f"excursion system's Jacobian has spectral radius {rho:.9g} at its fixed point)"
        )

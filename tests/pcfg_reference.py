"""An independent reference for PCFG laws: leftmost derivation states, solved exactly.

No normal form and no inside pass: a *derivation state* is ``(pos, todo)``, the number of
symbols of ``w`` written so far by a leftmost derivation and the symbols still to expand,
leftmost first. Since every rule writes at least one terminal per symbol, only the first
``len(w) - pos`` symbols of ``todo`` can touch ``w`` (the rest of a consistent grammar's
derivation has probability 1 for the prefix, and must write nothing for the whole string), so
the states are finitely many. The probability ``V(state)`` of writing the rest of ``w`` is
linear in the states it expands to (``V = b + A V``, left recursion included), solved with
one sparse direct (LU) solve: the prefix probability ``P(w Sigma*)`` and the string probability
``P(w)`` exactly, up to float64 rounding.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix, identity
from scipy.sparse.linalg import spsolve

from cfl_lightning.automata.pcfg import Grammar

__all__ = ["prefix_and_string_probability", "reference_laws"]


def _solve(grammar: Grammar, w: tuple[int, ...], whole: bool) -> float:
    index: dict = {}
    edges: list[tuple[int, int, float]] = []
    const: dict[int, float] = {}
    frontier: list = []

    def state(pos, todo):
        if not whole:
            todo = todo[: len(w) - pos]
        key = (pos, todo)
        if key not in index:
            index[key] = len(index)
            frontier.append(key)
        return index[key]

    start = state(0, ((False, 0),))
    while frontier:
        pos, todo = frontier.pop()
        me = index[(pos, todo)]
        while todo and todo[0][0] and pos < len(w) and todo[0][1] == w[pos]:
            pos, todo = pos + 1, todo[1:]
        if pos == len(w) and (not whole or not todo):
            const[me] = 1.0
            continue
        if not todo or todo[0][0] or (whole and len(todo) > len(w) - pos):
            continue  # a mismatch, an early end, or too many symbols left: 0
        for rule in grammar.rules_of(todo[0][1]):
            if rule.prob > 0:
                rhs = tuple((s.terminal, s.index) for s in rule.rhs)
                edges.append((me, state(pos, rhs + todo[1:]), rule.prob))
    n = len(index)
    rows, cols, vals = (list(x) for x in zip(*edges)) if edges else ([], [], [])
    a = coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsc()  # duplicates add up
    b = np.zeros(n)
    for i, v in const.items():
        b[i] = v
    if n == 1:
        return float(b[0] / (1.0 - a.toarray()[0, 0]))
    return float(np.atleast_1d(spsolve((identity(n, format="csc") - a).tocsc(), b))[start])


def prefix_and_string_probability(grammar: Grammar, w: tuple[int, ...]) -> tuple[float, float]:
    """``(P(w Sigma*), P(w))``."""
    return _solve(grammar, tuple(w), whole=False), _solve(grammar, tuple(w), whole=True)


def reference_laws(grammar: Grammar, w: tuple[int, ...]) -> list[list[float]]:
    """``[len(w) + 1][S + 1]`` next-symbol laws after each prefix of ``w`` (EOS last)."""
    laws = []
    for k in range(len(w) + 1):
        base, ends = prefix_and_string_probability(grammar, w[:k])
        row = [_solve(grammar, w[:k] + (a,), whole=False) / base
               for a in range(grammar.num_symbols)]
        laws.append(row + [ends / base])
    return laws

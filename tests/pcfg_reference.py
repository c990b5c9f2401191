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

__all__ = [
    "prefix_and_string_probability",
    "reference_laws",
    "DYCK",
    "EXPR",
    "UNITS",
    "GRAMMARS",
    "BAD",
]


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


# --------------------------------------------------------------------------- test grammars
#: ambiguous (S S splits a string many ways) and without empty rules
DYCK = "S -> '(' ')' [0.5] | '(' S ')' [0.3] | S S [0.2]\n"
#: left recursion, a unit rule (E -> T), a ternary rule with terminals inside, ambiguity of
#: E + E vs the left-recursive E + T
EXPR = """# arithmetic expressions, ambiguous
E -> E '+' T [0.2] | E '+' E [0.1] | T [0.7]
T -> T '*' F [0.25] | F [0.75]
F -> '(' E ')' [0.2] | 'x' [0.5] | 'y' [0.3]
"""
#: centre embedding with a unit cycle A -> B -> A
UNITS = """S -> 'a' S 'b' [0.3] | A [0.7]
A -> B [0.4] | 'c' [0.6]
B -> A [0.5] | 'd' A [0.5]
"""
GRAMMARS = {"dyck": DYCK, "expr": EXPR, "units": UNITS}

BAD = {
    "sums": ("S -> 'a' [0.5] | 'b' [0.4]\n", "the rules of S sum to 0.9"),
    "undefined": ("S -> 'a' X [1.0]\n", "x.pcfg:1: nonterminal X has no rules"),
    "unproductive": ("S -> 'a' [0.5] | X [0.5]\nX -> 'b' X [1.0]\n",
                     "x.pcfg:2: nonterminal X derives no finite string"),
    "no end": ("S -> S S [0.7] | 'a' [0.3]\n", "does not end with probability 1"),
    "critical": ("S -> S S [0.5] | 'a' [0.5]\n", "expected string length is infinite"),
    "parse": ("S -> 'a' [0.5]\nS => 'b' [0.5]\n", "x.pcfg:2: cannot read"),
    "no probability": ("S -> 'a' | 'b' [1.0]\n", "x.pcfg:1: an alternative of S has no prob"),
    "empty rhs": ("S -> 'a' [0.5] | [0.5]\n", "x.pcfg:1: empty right side for S"),
    "empty file": ("# nothing\n\n", "x.pcfg: no rules"),
    "quote": ("S -> 'a [1.0]\n", "x.pcfg:1: cannot read"),
    "reserved": ("S -> 'EOS' [1.0]\n", "reserved"),
}

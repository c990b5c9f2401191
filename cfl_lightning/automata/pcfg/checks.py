"""What makes a grammar usable: proper, productive, ending with probability 1, finite length.

* **proper**: the rules of every nonterminal sum to 1 (within :data:`TOLERANCE`);
* **productive**: every nonterminal derives at least one finite string (a fixed point over the
  rules with positive probability);
* **consistent**: the start derives a finite string with probability 1. The probability
  ``Z_A`` that ``A`` derives a finite string is the least fixed point of
  ``Z_A = sum_(A -> alpha) p prod_(B in alpha) Z_B``, computed by Newton's method from 0
  (monotone convergence to the least fixed point: Etessami and Yannakakis 2009; Nederhof and
  Satta 2008);
* **finite expected length**: the spectral radius of the expectation matrix over the
  nonterminals reachable from the start is below 1 (a critical grammar ends with probability 1
  but has infinite expected length: refused, since corpora of it have no typical size).

Each failure is one :class:`~cfl_lightning.errors.GrammarError` line naming the file and the
nonterminal (and its first line).
"""

from __future__ import annotations

import numpy as np

from cfl_lightning.automata.pcfg.grammar import Grammar
from cfl_lightning.errors import GrammarError

__all__ = ["TOLERANCE", "check_grammar", "termination_probabilities", "expected_length",
           "reachable"]

#: how far the rules of a nonterminal may sum from 1
TOLERANCE = 1e-6


def _where(grammar: Grammar, lhs: int) -> str:
    lines = [r.line for r in grammar.rules_of(lhs) if r.line]
    at = f":{lines[0]}" if lines else ""
    return f"{grammar.source or 'grammar'}{at}"


def reachable(grammar: Grammar) -> np.ndarray:
    """``[N]`` bool: nonterminals reachable from the start through rules of positive weight."""
    seen = np.zeros(grammar.num_nonterminals, dtype=bool)
    stack = [0]
    seen[0] = True
    while stack:
        for rule in grammar.rules_of(stack.pop()):
            for sym in rule.rhs:
                if rule.prob > 0 and not sym.terminal and not seen[sym.index]:
                    seen[sym.index] = True
                    stack.append(sym.index)
    return seen


def _productive(grammar: Grammar) -> np.ndarray:
    done = np.zeros(grammar.num_nonterminals, dtype=bool)
    changed = True
    while changed:
        changed = False
        for rule in grammar.rules:
            if not done[rule.lhs] and rule.prob > 0 and all(
                    s.terminal or done[s.index] for s in rule.rhs):
                done[rule.lhs] = changed = True
    return done


def termination_probabilities(grammar: Grammar, iterations: int = 200) -> np.ndarray:
    """``[N]`` float64: ``Z_A``, the probability that ``A`` derives a finite string.

    Newton's method on ``Z = F(Z)`` from ``Z = 0`` (the least fixed point), stopped when a step
    changes no entry by more than ``1e-15``; clipped to [0, 1].
    """
    n = grammar.num_nonterminals
    z = np.zeros(n)
    for _ in range(iterations):
        f = np.zeros(n)
        jac = np.zeros((n, n))
        for rule in grammar.rules:
            nts = [s.index for s in rule.rhs if not s.terminal]
            f[rule.lhs] += rule.prob * np.prod([z[b] for b in nts])
            for k, b in enumerate(nts):
                jac[rule.lhs, b] += rule.prob * np.prod([z[c] for j, c in enumerate(nts) if j != k])
        try:
            step = np.linalg.solve(np.eye(n) - jac, f - z)
        except np.linalg.LinAlgError:
            step = f - z  # a singular Jacobian (critical): fall back to one Kleene step
        z = np.clip(z + step, 0.0, 1.0)
        if np.max(np.abs(step)) <= 1e-15:
            break
    return z


def _spectral_radius(grammar: Grammar) -> float:
    """The spectral radius of the expectation matrix over the nonterminals reachable from the
    start: below 1, the grammar ends with probability 1 and has a finite expected length;
    1, it is critical (ends, infinite length); above 1, it does not end with probability 1."""
    keep = reachable(grammar)
    m = grammar.expectation_matrix()[np.ix_(keep, keep)]
    return float(np.max(np.abs(np.linalg.eigvals(m)), initial=0.0))


def expected_length(grammar: Grammar) -> float:
    """Expected number of terminals of a string (``inf`` when the grammar is critical)."""
    keep = reachable(grammar)
    m = grammar.expectation_matrix()[np.ix_(keep, keep)]
    if np.max(np.abs(np.linalg.eigvals(m)), initial=0.0) >= 1.0 - 1e-12:
        return float("inf")
    visits = np.linalg.solve(np.eye(len(m)) - m.T, np.eye(len(m))[0])
    return float(visits @ grammar.terminal_counts()[keep])


def check_grammar(grammar: Grammar) -> None:
    """Raise one :class:`GrammarError` line for the first problem found (see the module).

    Raises:
        GrammarError: rules not summing to 1, an unproductive nonterminal, a grammar that does
            not end with probability 1, or one whose expected length is infinite.
    """
    for lhs, name in enumerate(grammar.nonterminals):
        total = sum(r.prob for r in grammar.rules_of(lhs))
        if abs(total - 1.0) > TOLERANCE:
            raise GrammarError(f"{_where(grammar, lhs)}: the rules of {name} sum to {total:.6g}, "
                               "not 1")
    productive = _productive(grammar)
    if not productive.all():
        name = grammar.nonterminals[int(np.flatnonzero(~productive)[0])]
        lhs = grammar.nonterminals.index(name)
        raise GrammarError(f"{_where(grammar, lhs)}: nonterminal {name} derives no finite string "
                           "(unproductive: every rule of it leads back to it)")
    radius = _spectral_radius(grammar)
    if radius > 1.0 + 1e-9:  # supercritical: a reachable part grows with positive probability
        z = termination_probabilities(grammar)
        raise GrammarError(f"{grammar.source or 'grammar'}: the grammar does not end with "
                           f"probability 1 (it ends with probability {z[0]:.6g}: lower the "
                           "weight of the rules that add nonterminals)")
    if radius >= 1.0 - 1e-9:
        raise GrammarError(f"{grammar.source or 'grammar'}: the grammar's expected string length "
                           "is infinite (critical: it ends with probability 1 but its corpora "
                           "have no typical size); lower the weight of the recursive rules")

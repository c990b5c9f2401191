"""A grammar's Chomsky normal form as tensors, with the same string law.

Three rewrites, each keeping the probability of every string:

1. a terminal inside a right side of two or more symbols is replaced by a new preterminal
   ``'a'`` with the single rule ``'a' -> a [1]``;
2. a right side ``X1 X2 ... Xk`` (k >= 3) becomes ``X1 R1``, ``R1 -> X2 R2 [1]``, ...,
   ``R(k-2) -> X(k-1) Xk [1]`` (fresh nonterminals, right-branching);
3. unit rules are closed: with ``U[A, B]`` the total weight of ``A -> B``, the weight of a
   non-unit right side ``alpha`` at ``A`` becomes ``sum_B (I - U)^-1 [A, B] p(B -> alpha)``
   (every chain of unit rewrites summed once; ``I - U`` is invertible for a productive grammar).

The result has binary rules ``A -> B C`` and lexical rules ``A -> a`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.automata.pcfg.grammar import Grammar

__all__ = ["NormalForm", "normal_form"]


@dataclass(frozen=True)
class NormalForm:
    """A CNF grammar as tensors (float64).

    Attributes:
        num_nonterminals: ``M`` (the grammar's ``N`` first, then preterminals and binarization
            nonterminals); the start is 0.
        left, right, parent: ``[R]`` int64: binary rule ``r`` is ``parent[r] -> left[r] right[r]``.
        weight: ``[R]`` float64, the binary rules' probabilities.
        lexical: ``[M, S]`` float64, ``P(A -> a)``.
        left_corner: ``[M, M]`` float64, ``(I - P_L)^-1`` with ``P_L[A, B] = sum_C P(A -> B C)``:
            the expected number of times ``B`` is the leftmost descendant of ``A`` (``A``
            itself included).
    """

    num_nonterminals: int
    left: Tensor
    right: Tensor
    parent: Tensor
    weight: Tensor
    lexical: Tensor
    left_corner: Tensor

    @property
    def first_symbol(self) -> Tensor:
        """``[M, S]``: ``P(A derives a string starting with a)`` = ``left_corner @ lexical``."""
        return self.left_corner @ self.lexical


def _symbols(grammar: Grammar):
    """Right sides as tuples of ("t", i) / ("n", i), preterminals introduced (rewrite 1)."""
    names = list(grammar.nonterminals)
    pre: dict[int, int] = {}
    rules: list[tuple[int, tuple, float]] = []
    for rule in grammar.rules:
        rhs = []
        for s in rule.rhs:
            if s.terminal and len(rule.rhs) > 1:
                if s.index not in pre:
                    pre[s.index] = len(names)
                    names.append(f"'{grammar.alphabet[s.index]}'")
                rhs.append(("n", pre[s.index]))
            else:
                rhs.append(("t" if s.terminal else "n", s.index))
        rules.append((rule.lhs, tuple(rhs), rule.prob))
    rules += [(nt, (("t", a),), 1.0) for a, nt in pre.items()]
    return names, rules


def _binarize(names: list[str], rules: list) -> list:
    out = []
    for lhs, rhs, prob in rules:
        while len(rhs) > 2:
            names.append(f"{names[lhs]}~{len(names)}")
            fresh = len(names) - 1
            out.append((lhs, (rhs[0], ("n", fresh)), prob))
            lhs, rhs, prob = fresh, rhs[1:], 1.0
        out.append((lhs, rhs, prob))
    return out


def normal_form(grammar: Grammar, device: str | torch.device = "cpu") -> NormalForm:
    """The CNF of ``grammar`` (module docstring), on ``device``."""
    names, rules = _symbols(grammar)
    rules = _binarize(names, rules)
    m, s = len(names), grammar.num_symbols
    unit = np.zeros((m, m))
    for lhs, rhs, prob in rules:
        if len(rhs) == 1 and rhs[0][0] == "n":
            unit[lhs, rhs[0][1]] += prob
    closure = np.linalg.inv(np.eye(m) - unit)
    lexical = np.zeros((m, s))
    binary: dict[tuple[int, int], np.ndarray] = {}
    for lhs, rhs, prob in rules:
        if len(rhs) == 1 and rhs[0][0] == "t":
            lexical[:, rhs[0][1]] += closure[:, lhs] * prob
        elif len(rhs) == 2:
            binary.setdefault((rhs[0][1], rhs[1][1]), np.zeros(m))
            binary[rhs[0][1], rhs[1][1]] += closure[:, lhs] * prob
    parent, left, right, weight = [], [], [], []
    for (b, c), column in binary.items():
        for a in np.flatnonzero(column > 0):
            parent.append(a), left.append(b), right.append(c), weight.append(column[a])
    p_left = np.zeros((m, m))
    np.add.at(p_left, (np.array(parent, dtype=int), np.array(left, dtype=int)), weight)
    corner = np.linalg.inv(np.eye(m) - p_left)

    def t(x, dtype=torch.float64):
        return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)

    return NormalForm(m, t(left, torch.long), t(right, torch.long), t(parent, torch.long),
                      t(weight), t(lexical), t(corner))

"""Unconstrained strings of a PCFG: top-down, leftmost, one rule draw per nonterminal.

Each nonterminal is rewritten by a rule drawn with its probability (the grammar's own law;
the string law is the grammar's, exactly). Seeded: the same seed gives the same strings. Given
an event's degrees (its count per rule,
:func:`~cfl_lightning.sampling.pcfg.count_law.event_degrees`) the draw also sums them over each
string's derivation: the string's count of a ``rule`` event, which an ambiguous grammar's
string does not tell. Counting draws nothing: the strings of a seed are the same with or
without it.
"""

from __future__ import annotations

import numpy as np
import torch

from cfl_lightning.automata.pcfg.grammar import Grammar
from cfl_lightning.sampling.corpus import Corpus

__all__ = ["generate_strings"]


def _tables(grammar: Grammar):
    """Per nonterminal: cumulative probabilities and the right sides as (is terminal, index)."""
    tables = []
    for lhs in range(grammar.num_nonterminals):
        rules = grammar.rules_of(lhs)
        cum = np.cumsum([r.prob for r in rules])
        cum /= cum[-1]
        tables.append((cum, [tuple((s.terminal, s.index) for s in r.rhs) for r in rules]))
    return tables


def generate_strings(grammar: Grammar, num_strings: int, *, seed: int,
                     max_length: int = 100_000, degrees: np.ndarray | None = None) -> Corpus:
    """Draw ``num_strings`` strings of ``grammar`` (checked consistent beforehand).

    Args:
        grammar: the grammar.
        num_strings: ``K``.
        seed: seed of the draw.
        max_length: a string that grows past this many symbols stops the draw with an error
            (never truncated: truncation would bias the law).
        degrees: ``[num_rules]`` the event's count added by each rule (``grammar.rules``
            order), or None.

    Returns:
        the corpus; ``counts`` ``[K]``, the degrees summed over each string's derivation
        (None without ``degrees``).

    Raises:
        ValueError: a string longer than ``max_length``.
    """
    rng = np.random.default_rng(seed)
    tables = _tables(grammar)
    added = _added(grammar, degrees)
    tokens: list[int] = []
    offsets, counts = [0], []
    for _ in range(num_strings):
        stack: list[tuple[bool, int]] = [(False, 0)]
        count = 0
        while stack:
            terminal, index = stack.pop()
            if terminal:
                tokens.append(index)
                if len(tokens) - offsets[-1] > max_length:
                    raise ValueError(f"a string grew past {max_length} symbols")
                continue
            cum, rhs = tables[index]
            choice = min(int(np.searchsorted(cum, rng.random(), side="right")), len(rhs) - 1)
            stack.extend(reversed(rhs[choice]))
            count += added[index][choice]
        offsets.append(len(tokens))
        counts.append(count)
    return Corpus(torch.tensor(tokens, dtype=torch.long), torch.tensor(offsets, dtype=torch.long),
                  None if degrees is None else torch.tensor(counts, dtype=torch.long))


def _added(grammar: Grammar, degrees: np.ndarray | None) -> list[list[int]]:
    """Per nonterminal, the count each of its rules adds (in :func:`_tables`' order; zeros
    without ``degrees``)."""
    index = {id(r): i for i, r in enumerate(grammar.rules)}
    return [[0 if degrees is None else int(degrees[index[id(r)]]) for r in grammar.rules_of(lhs)]
            for lhs in range(grammar.num_nonterminals)]

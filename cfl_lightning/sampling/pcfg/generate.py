"""Unconstrained strings of a PCFG: top-down, leftmost, one rule draw per nonterminal.

Each nonterminal is rewritten by a rule drawn with its probability (the grammar's own law;
the string law is the grammar's, exactly). Seeded: the same seed gives the same strings.
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
                     max_length: int = 100_000) -> Corpus:
    """Draw ``num_strings`` strings of ``grammar`` (checked consistent beforehand).

    Args:
        grammar: the grammar.
        num_strings: ``K``.
        seed: seed of the draw.
        max_length: a string that grows past this many symbols stops the draw with an error
            (never truncated: truncation would bias the law).

    Returns:
        the corpus (``counts`` is ``None``).

    Raises:
        ValueError: a string longer than ``max_length``.
    """
    rng = np.random.default_rng(seed)
    tables = _tables(grammar)
    tokens: list[int] = []
    offsets = [0]
    for _ in range(num_strings):
        stack: list[tuple[bool, int]] = [(False, 0)]
        while stack:
            terminal, index = stack.pop()
            if terminal:
                tokens.append(index)
                if len(tokens) - offsets[-1] > max_length:
                    raise ValueError(f"a string grew past {max_length} symbols")
                continue
            cum, rhs = tables[index]
            choice = int(np.searchsorted(cum, rng.random(), side="right"))
            stack.extend(reversed(rhs[min(choice, len(rhs) - 1)]))
        offsets.append(len(tokens))
    return Corpus(torch.tensor(tokens, dtype=torch.long), torch.tensor(offsets, dtype=torch.long))

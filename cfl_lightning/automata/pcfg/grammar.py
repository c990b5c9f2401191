"""A probabilistic context-free grammar: nonterminals, terminals and weighted rules.

A rule rewrites one nonterminal into a non-empty sequence of symbols, each a terminal (an index
into :attr:`Grammar.alphabet`) or a nonterminal (an index into :attr:`Grammar.nonterminals`).
The start symbol is nonterminal 0 (the left side of the file's first rule). Empty right sides
are not part of the model: the text reader refuses them in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from cfl_lightning.errors import EventError

__all__ = ["Symbol", "Rule", "Grammar", "rule_degrees"]


@dataclass(frozen=True)
class Symbol:
    """One symbol of a right side: ``terminal`` says which table ``index`` points into."""

    terminal: bool
    index: int


@dataclass(frozen=True)
class Rule:
    """``lhs -> rhs [prob]``; ``line`` is where the file wrote it (0 when built in code)."""

    lhs: int
    rhs: tuple[Symbol, ...]
    prob: float
    line: int = 0

    @property
    def is_unit(self) -> bool:
        """A single nonterminal on the right side (``A -> B``)."""
        return len(self.rhs) == 1 and not self.rhs[0].terminal


@dataclass(frozen=True)
class Grammar:
    """A PCFG over ``alphabet`` (terminals in order of first use), start ``nonterminals[0]``.

    Attributes:
        nonterminals: ``N`` names; index 0 is the start.
        alphabet: ``S`` terminal names (token ids ``0 .. S-1``; ``EOS = S``).
        rules: every rule, in file order.
        source: the file it came from, for messages; or ``None``.
    """

    nonterminals: tuple[str, ...]
    alphabet: tuple[str, ...]
    rules: tuple[Rule, ...]
    source: str | None = None
    _by_lhs: dict = field(default=None, init=False, repr=False, compare=False)

    @property
    def num_nonterminals(self) -> int:
        """``N``."""
        return len(self.nonterminals)

    @property
    def num_symbols(self) -> int:
        """``S``, the number of terminals."""
        return len(self.alphabet)

    @property
    def eos(self) -> int:
        """Index of EOS in next-symbol distributions: ``S``."""
        return self.num_symbols

    def rules_of(self, lhs: int) -> tuple[Rule, ...]:
        """The rules whose left side is nonterminal ``lhs``, in file order."""
        if self._by_lhs is None:
            table: dict[int, list[Rule]] = {a: [] for a in range(self.num_nonterminals)}
            for rule in self.rules:
                table[rule.lhs].append(rule)
            object.__setattr__(self, "_by_lhs", {a: tuple(r) for a, r in table.items()})
        return self._by_lhs[lhs]

    def expectation_matrix(self) -> np.ndarray:
        """``[N, N]`` float64: expected occurrences of ``B`` on the right side of a rule of ``A``."""
        m = np.zeros((self.num_nonterminals, self.num_nonterminals))
        for rule in self.rules:
            for sym in rule.rhs:
                if not sym.terminal:
                    m[rule.lhs, sym.index] += rule.prob
        return m

    def terminal_counts(self) -> np.ndarray:
        """``[N]`` float64: expected terminals written directly by one rewrite of each nonterminal."""
        t = np.zeros(self.num_nonterminals)
        for rule in self.rules:
            t[rule.lhs] += rule.prob * sum(sym.terminal for sym in rule.rhs)
        return t

    def rule_text(self, rule: Rule) -> str:
        """``A -> 'a' B`` (without the probability), the form rule events are named by."""
        rhs = " ".join(f"'{self.alphabet[s.index]}'" if s.terminal else self.nonterminals[s.index]
                       for s in rule.rhs)
        return f"{self.nonterminals[rule.lhs]} -> {rhs}"


def _squash(text: str) -> str:
    """A rule's text without spaces, quotes made single: how rule events are compared."""
    return re.sub(r"\s+", "", text.replace('"', "'"))


def rule_degrees(grammar: Grammar, rule: str) -> np.ndarray:
    """``[num_rules]`` int64: 1 for the rule written ``rule``, 0 for the others.

    Args:
        grammar: the grammar.
        rule: ``A -> 'a' B`` as :meth:`Grammar.rule_text` writes it (the text after ``rule:``
            of a rule event); spaces and the quote style are not significant.

    Raises:
        EventError: no rule of the grammar is written so (one line with an example).
    """
    hits = [_squash(grammar.rule_text(r)) == _squash(rule) for r in grammar.rules]
    if not any(hits):
        raise EventError(f"event rule:{rule}: no such rule (write it as the grammar does, "
                         f"e.g. rule:{grammar.rule_text(grammar.rules[0])})")
    return np.array(hits, dtype=np.int64)

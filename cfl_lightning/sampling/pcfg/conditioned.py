"""Exact corpora of a PCFG under count interventions on an event (``symbol:X``, ``rule:...``).

A corpus of ``K`` strings is the grammar's ``K`` i.i.d. strings conditioned on

* ``exact``: the corpus total of the event is exactly ``N``;
* ``at_least``: the total is at least ``N``;
* ``at_least_once``: exactly ``M`` of the ``K`` strings contain the event.

Sampling is exact in two stages. First the budget is split over the strings: the strings are
halved recursively, and a group's total is split between its halves with the laws of their
totals (convolution powers of the one-string count law, :mod:`.count_law`; ``O(log K)`` of
them). For ``at_least`` a group under ``>= n`` gives its first half either exactly ``i < n``
(the second then ``>= n - i``) or ``>= n`` (the second unconstrained). Under
``at_least_once`` the ``M`` strings that contain the event are a uniform ``M``-subset (the
strings are exchangeable); each of them is drawn under ``>= 1``, the others under ``= 0``.

Then every string is generated top-down (leftmost) conditioned on its own budget: nonterminal
``A`` under ``= n`` takes rule ``r`` with probability ``p_r [z^n] z^{d_r} prod_j F_{c_j} /
[z^n] F_A`` and splits ``n - d_r`` over its nonterminal children one at a time with the suffix
products (child ``j`` gets ``i`` with weight ``F_{c_j}[i] S_{j+1}[m - i]``); under ``>= n`` the
same with tails. A unit rule ``A -> B`` passes its budget on unchanged. All weights are
logarithms; one ``numpy`` generator from an explicit seed draws everything.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from cfl_lightning.automata.pcfg.grammar import Grammar
from cfl_lightning.errors import InterventionError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.pcfg.count_law import (
    CountSeries,
    count_series,
    event_degrees,
    log_convolve,
    log_tail_convolve,
)

__all__ = ["EXACT", "AT_LEAST", "sample_exact", "sample_at_least", "sample_at_least_once",
           "split_budget", "generate_conditioned", "generate_corpus"]

EXACT, AT_LEAST = 0, 1  # a budget's mode: count exactly n, or at least n


def _pick(rng: np.random.Generator, log_w: np.ndarray) -> int:
    """An index drawn with probability proportional to ``exp(log_w)`` (never a zero weight).

    Raises:
        InterventionError: every weight is zero (a budget of probability 0).
    """
    peak = np.max(log_w)
    if peak == -math.inf:
        raise InterventionError("a budget of probability 0 was asked of the grammar")
    w = np.exp(log_w - peak)
    cum = np.cumsum(w)
    i = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
    return min(i, int(np.flatnonzero(w > 0)[-1]))


class _Powers:
    """Log laws (and tails) of the total over ``s`` strings, memoized per ``s``."""

    def __init__(self, series: CountSeries) -> None:
        tail = None if series.log_t is None else series.log_t[0]
        self.memo = {1: (series.log_f[0], tail)}

    def __call__(self, size: int) -> tuple[np.ndarray, np.ndarray | None]:
        if size not in self.memo:
            (fa, ta), (fb, tb) = self(size // 2), self(size - size // 2)
            tail = None if ta is None else log_tail_convolve(fa, ta, tb)
            self.memo[size] = (log_convolve(fa, fb), tail)
        return self.memo[size]


def split_budget(series: CountSeries, num_strings: int, mode: int, count: int,
                 rng: np.random.Generator, powers: _Powers | None = None) -> list[tuple[int, int]]:
    """Per string ``(mode, n)``: the corpus budget split exactly (see the module).

    Args:
        series: the count series (with tails for ``AT_LEAST``), up to at least ``count``.
        num_strings: ``K``.
        mode: :data:`EXACT` or :data:`AT_LEAST`.
        count: the corpus budget ``N`` (its total must have positive probability).
        rng: the generator.
        powers: the laws of group totals already computed (else computed here).
    """
    powers = _Powers(series) if powers is None else powers
    out: list[tuple[int, int]] = []
    todo = [(num_strings, mode, count)]
    while todo:
        size, m, n = todo.pop()
        if size == 1 or (m == AT_LEAST and n == 0):
            out.extend([(m, n)] * size)
            continue
        a, b = size // 2, size - size // 2
        (fa, ta), (fb, tb) = powers(a), powers(b)
        if m == EXACT:
            i = _pick(rng, fa[: n + 1] + fb[n::-1])
            todo += [(b, EXACT, n - i), (a, EXACT, i)]
            continue
        i = _pick(rng, np.append(fa[:n] + tb[n:0:-1], ta[n]))
        todo += [(b, AT_LEAST, n - i), (a, EXACT, i)] if i < n else [(b, AT_LEAST, 0),
                                                                       (a, AT_LEAST, n)]
    return out


def _rule_indices(grammar: Grammar) -> list[np.ndarray]:
    """Per nonterminal, the indices (into ``grammar.rules``) of its rules."""
    lhs = np.array([r.lhs for r in grammar.rules])
    return [np.flatnonzero(lhs == a) for a in range(grammar.num_nonterminals)]


def _choose_rule(series: CountSeries, rules: np.ndarray, mode: int, n: int,
                 rng: np.random.Generator) -> int:
    """A rule of the nonterminal (its ``rules``) under budget ``(mode, n)``."""
    grammar = series.grammar
    with np.errstate(divide="ignore"):
        log_p = np.log([grammar.rules[r].prob for r in rules])
    rest = series.log_rule if mode == EXACT else series.log_rule_tail
    return int(rules[_pick(rng, log_p + np.array([rest(int(r), n) for r in rules]))])


def _split_children(series: CountSeries, r: int, mode: int, n: int,
                    rng: np.random.Generator) -> list[tuple[int, int]]:
    """``(mode, n)`` of each nonterminal child of rule ``r`` under the rule's budget."""
    kids = series.children[r]
    m = max(n - int(series.degrees[r]), 0)
    out: list[tuple[int, int]] = []
    for j, c in enumerate(kids):
        if j == len(kids) - 1 or (mode == AT_LEAST and m == 0):
            out.append((mode, m))
            continue
        if mode == EXACT:
            i = _pick(rng, series.log_f[c, : m + 1] + series.suffix[r][j + 1, m::-1])
            out.append((EXACT, i))
            m -= i
            continue
        weights = np.append(series.log_f[c, :m] + series.suffix_tail[r][j + 1, m:0:-1],
                            series.log_t[c, m])
        i = _pick(rng, weights)
        out.append((EXACT, i) if i < m else (AT_LEAST, m))
        m = m - i if i < m else 0
    return out


def generate_conditioned(series: CountSeries, budget: tuple[int, int], rng: np.random.Generator,
                         tokens: list[int], *, max_length: int = 10_000_000) -> int:
    """Append one string generated from the start under ``budget`` to ``tokens``.

    Args:
        series: the count series (with tails for ``AT_LEAST`` budgets).
        budget: ``(mode, n)`` of the string, of positive probability.
        rng: the generator.
        tokens: the corpus's flat token list (appended to).
        max_length: a string growing past this many symbols raises ``ValueError``.

    Returns:
        the string's count of the event.
    """
    rules_of = _rule_indices(series.grammar)
    start, count = len(tokens), 0
    stack: list[tuple] = [(False, 0, budget)]
    while stack:
        terminal, index, (mode, n) = stack.pop()
        if terminal:
            tokens.append(index)
            if len(tokens) - start > max_length:
                raise ValueError(f"a string grew past {max_length} symbols")
            continue
        r = _choose_rule(series, rules_of[index], mode, n, rng)
        count += int(series.degrees[r])
        budgets = iter(_split_children(series, r, mode, n, rng))
        items = [(True, s.index, (EXACT, 0)) if s.terminal else (False, s.index, next(budgets))
                 for s in series.grammar.rules[r].rhs]
        stack.extend(reversed(items))
    return count


def generate_corpus(series: CountSeries, budgets: list[tuple[int, int]],
            rng: np.random.Generator, progress: Progress | None = None) -> Corpus:
    """Generate every string under its budget; the corpus with its per-string counts."""
    tokens: list[int] = []
    offsets, counts = [0], []
    for budget in budgets:
        counts.append(generate_conditioned(series, budget, rng, tokens))
        offsets.append(len(tokens))
        if progress is not None:
            progress.update(1)
    return Corpus(torch.tensor(tokens, dtype=torch.long), torch.tensor(offsets, dtype=torch.long),
                  torch.tensor(counts, dtype=torch.long))


def _prepare(grammar: Grammar, event: str, num_strings: int, count: int, tails: bool):
    """Validate the request; the event's count series up to ``count``."""
    if num_strings < 1:
        raise InterventionError(f"the number of strings must be at least 1, got {num_strings}")
    if count < 0:
        raise InterventionError(f"the count of {event} must be at least 0, got {count}")
    degrees = event_degrees(grammar, event)
    if count > 0 and not any(d > 0 and r.prob > 0 for d, r in zip(degrees, grammar.rules)):
        raise InterventionError(f"event {event} cannot occur in this grammar (no rule of "
                                f"positive probability writes it), so a count of {count} is "
                                "impossible")
    return count_series(grammar, degrees, count, tails=tails)


def sample_exact(grammar: Grammar, event: str, num_strings: int, count: int, *,
                 seed: int) -> Corpus:
    """``K`` strings whose total count of ``event`` is exactly ``count`` (exact law).

    Raises:
        InterventionError: the total ``count`` has probability 0 (one line).
        EventError: an unknown event.
    """
    series = _prepare(grammar, event, num_strings, count, tails=False)
    rng = np.random.default_rng(seed)
    powers = _Powers(series)
    if powers(num_strings)[0][count] == -math.inf:
        raise InterventionError(f"event {event} cannot occur exactly {count} times in "
                                f"{num_strings} strings of this grammar (probability 0)")
    return generate_corpus(series, split_budget(series, num_strings, EXACT, count, rng, powers), rng)


def sample_at_least(grammar: Grammar, event: str, num_strings: int, count: int, *,
                    seed: int) -> Corpus:
    """``K`` strings whose total count of ``event`` is at least ``count`` (exact law).

    Raises:
        InterventionError: a total of at least ``count`` has probability 0 (one line).
        EventError: an unknown event.
    """
    series = _prepare(grammar, event, num_strings, count, tails=True)
    rng = np.random.default_rng(seed)
    powers = _Powers(series)
    if powers(num_strings)[1][count] == -math.inf:
        raise InterventionError(f"event {event} cannot occur {count} or more times in "
                                f"{num_strings} strings of this grammar (probability 0)")
    return generate_corpus(series, split_budget(series, num_strings, AT_LEAST, count, rng, powers),
                   rng)


def sample_at_least_once(grammar: Grammar, event: str, num_strings: int, containing: int, *,
                         seed: int) -> Corpus:
    """``K`` strings of which exactly ``containing`` contain ``event`` (exact law).

    Raises:
        InterventionError: ``containing`` outside ``0 .. K``, or a string with (or without)
            the event has probability 0 while one is asked for (one line).
        EventError: an unknown event.
    """
    if not 0 <= containing <= num_strings:
        raise InterventionError(f"{containing} strings containing {event} asked of a corpus of "
                                f"{num_strings} strings (must be between 0 and {num_strings})")
    _prepare(grammar, event, num_strings, 1 if containing else 0, tails=False)  # checks only
    series = count_series(grammar, event_degrees(grammar, event), 1, tails=True)
    if containing and series.log_t[0, 1] == -math.inf:
        raise InterventionError(f"no string of this grammar contains {event}")
    if containing < num_strings and series.log_f[0, 0] == -math.inf:
        raise InterventionError(f"every string of this grammar contains {event}, so "
                                f"{num_strings - containing} strings without it are impossible")
    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(num_strings, size=containing, replace=False).tolist())
    budgets = [(AT_LEAST, 1) if k in chosen else (EXACT, 0) for k in range(num_strings)]
    return generate_corpus(series, budgets, rng)

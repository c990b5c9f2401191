"""The ``pcfg`` kind's count source for the product's intervention samplers.

:class:`PCFGEventCounts` implements the
:class:`~cfl_lightning.sampling.backend.EventCounts` protocol on the count law over derivations
(:mod:`~cfl_lightning.sampling.pcfg.count_law`) and the top-down generation conditioned on a
string's count (:func:`~cfl_lightning.sampling.pcfg.conditioned.generate_conditioned`), so that
``exact``, ``at_least`` and ``at_least_once`` run through :func:`~cfl_lightning.sampling.draw`
for a grammar as for the other kinds: the registered samplers split the corpus's budget over
strings with the per-string law, then each string is generated given its budget.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.automata.pcfg.grammar import Grammar
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import CountLaw
from cfl_lightning.sampling.pcfg.conditioned import AT_LEAST, EXACT, generate_corpus
from cfl_lightning.sampling.pcfg.count_law import CountSeries, count_series, event_degrees

__all__ = ["PCFGEventCounts"]


class PCFGEventCounts:
    """One event's per-string counts on one grammar (``symbol:X`` or ``rule:...``).

    Args:
        grammar: the grammar.
        event: the event's text (``symbol:X``, ``rule:A -> 'a' B``).
    """

    def __init__(self, grammar: Grammar, event: str) -> None:
        self.grammar = grammar
        self.event = event
        self.degrees = event_degrees(grammar, event)  # EventError for an unknown event
        self._series: CountSeries | None = None

    def _series_upto(self, upto: int, tails: bool = False) -> CountSeries:
        held = self._series
        if held is None or held.max_count < upto or (tails and held.log_t is None):
            top = max(upto, 0 if held is None else held.max_count)
            self._series = count_series(self.grammar, self.degrees, top, tails=tails)
        return self._series

    def law(self, upto: int) -> CountLaw:
        """The complete per-string count law on ``0 .. upto`` (log pmf, float64)."""
        series = self._series_upto(int(upto))
        return CountLaw(torch.from_numpy(np.array(series.log_f[0, : upto + 1])))  # the start

    def law_for_total(self, num_strings: int, total: int) -> CountLaw:
        """The law up to the corpus total (no certified window: grammars here are small)."""
        return self.law(int(total))

    def max_per_string(self) -> int | None:
        """``None``: the count of one string is not bounded structurally here."""
        return None

    def none_probability(self) -> float:
        """``P(count = 0)`` of one string."""
        return float(np.exp(self._series_upto(0).log_f[0, 0]))

    def generate(
        self,
        budgets: Tensor,
        generator: torch.Generator,
        *,
        at_least: bool = False,
        progress: Progress | None = None,
    ) -> Corpus:
        """One string per budget, each from the grammar conditioned on its count (exactly, or
        at least with ``at_least``); seeded from ``generator`` (the same stream, the same
        strings)."""
        budgets = budgets.to("cpu").long()
        top = int(budgets.max()) if budgets.numel() else 0
        series = self._series_upto(top, tails=at_least)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        rng = np.random.default_rng(seed)
        mode = AT_LEAST if at_least else EXACT
        corpus = generate_corpus(series, [(mode, int(n)) for n in budgets.tolist()], rng, progress)
        return corpus.to(generator.device)

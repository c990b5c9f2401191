"""The PFSA's sampler backend: backward bins of the binning-lifted automaton, the conditioned walk.

The ``backend`` of the ``pfsa`` automaton kind (:mod:`cfl_lightning.kinds.automata`). The
count law comes from the ``(I - W0)^-1 W1`` recurrence (:class:`~cfl_lightning.sampling.law.
CountSource`, only as far as a target needs it), generation conditioned on a per-string count
walks the lifted automaton with backward bins up to the largest budget
(:func:`~cfl_lightning.sampling.paths.sample_paths`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import CountLaw
from cfl_lightning.sampling.feasibility import max_occurrences
from cfl_lightning.sampling.law import CountSource, law_for_total, law_upto
from cfl_lightning.sampling.paths import sample_paths
from cfl_lightning.semiring.backward import backward_fast

__all__ = ["PFSABackend", "PFSAEventCounts"]


class PFSAEventCounts:
    """One event's count source on a PFSA (the operator is built on first use).

    Args:
        pfsa: the automaton (sampling runs on its device).
        event: the counted event.
    """

    def __init__(self, pfsa: PFSA, event: Event) -> None:
        self.pfsa = pfsa
        self.table = pfsa.event_table(event)  # raises EventError on unknown names
        self._source: CountSource | None = None
        self._upto: Callable[[int], CountLaw] | None = None

    @property
    def source(self) -> CountSource:
        if self._source is None:
            self._source = CountSource(self.pfsa, self.table)
        return self._source

    def law(self, upto: int) -> CountLaw:
        if self._upto is None:
            self._upto = law_upto(self.pfsa, self.table, self.source)
        return self._upto(upto)

    def law_for_total(self, num_strings: int, total: int) -> CountLaw:
        return law_for_total(self.pfsa, self.table, num_strings, total, self.source)

    def max_per_string(self) -> int | None:
        return max_occurrences(self.pfsa, self.table)

    def none_probability(self) -> float:
        bins = backward_fast(self.pfsa, self.table, 1)
        return float(bins.dense()[0, self.pfsa.initial])

    def generate(
        self,
        budgets: Tensor,
        generator: torch.Generator,
        *,
        at_least: bool = False,
        progress: Progress | None = None,
    ) -> Corpus:
        budgets = budgets.to(self.pfsa.device)
        num_bins = int(budgets.max()) + 1
        if at_least:
            bins = backward_fast(self.pfsa, self.table, num_bins, tail=True)
        else:
            bins = self.source.bins(num_bins)
        return sample_paths(
            self.pfsa, budgets.numel(), generator, event_fn=self.table, budgets=budgets,
            bins=bins, at_least=at_least, progress=progress,
        )


class PFSABackend:
    """Unconstrained sampling and count sources of one PFSA."""

    def __init__(self, pfsa: PFSA) -> None:
        self.pfsa = pfsa

    def unconstrained(
        self,
        num_strings: int,
        generator: torch.Generator,
        *,
        event: Event | None = None,
        progress: Progress | None = None,
    ) -> Corpus:
        table = None if event is None else self.pfsa.event_table(event)
        return sample_paths(self.pfsa, num_strings, generator, event_fn=table, progress=progress)

    def event_counts(self, event: Event) -> PFSAEventCounts:
        return PFSAEventCounts(self.pfsa, event)


"""The built-in intervention kinds' samplers, and :class:`SamplingJob`, what every sampler takes.

Each intervention kind's registry entry names its sampler
(:attr:`InterventionKind.sampler <cfl_lightning.kinds.InterventionKind.sampler>`);
:func:`~cfl_lightning.sampling.draw` builds one :class:`SamplingJob` (the automaton's sampler
backend, ``K``, the checked intervention, the two random streams, the progress bar) and calls the
kind's sampler on it, whatever the kind (``exact``, ``at_least``, ``at_least_once`` and ``none``
are entries like any other):

* :func:`unconstrained` (``none``): ``K`` i.i.d. strings, realized counts recorded with an event;
* :func:`exact`: per-string counts from the law conditioned on the total
  (:func:`~cfl_lightning.sampling.counts.split_exact`), then each string given its count;
* :func:`at_least`: the corpus total drawn given ``>= N``, then split
  (:func:`~cfl_lightning.sampling.counts.split_at_least`);
* :func:`at_least_once`: a uniform ``M``-subset of positions holds the strings with an occurrence
  (exchangeability), those drawn given ``>= 1``, the rest given ``0``.

A sampler draws counts on ``job.counts_gen`` and strings on ``job.paths_gen`` (two streams of one
seed: ``seed`` and ``seed + 0x9E3779B9``), so the same seed and device give the same corpus.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cfl_lightning.errors import InterventionError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.backend import EventCounts, SamplerBackend
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import split_at_least, split_exact
from cfl_lightning.sampling.intervention import Intervention

__all__ = ["SamplingJob", "unconstrained", "exact", "at_least", "at_least_once"]


@dataclass
class SamplingJob:
    """What an intervention kind's sampler gets: everything checked, nothing parsed again.

    Attributes:
        backend: the automaton's sampler backend (on the sampling device).
        num_strings: ``K``.
        intervention: the validated intervention (its ``event`` and ``count``).
        paths_gen: the strings' random stream (seeded with the request's seed).
        counts_gen: the per-string counts' stream (``seed + 0x9E3779B9``), same device.
        progress: the progress bar (pass it to ``generate``).
    """

    backend: SamplerBackend
    num_strings: int
    intervention: Intervention
    paths_gen: torch.Generator
    counts_gen: torch.Generator
    progress: Progress | None = None
    _counts: EventCounts | None = field(default=None, repr=False)

    @property
    def count(self) -> int:
        """The target ``N`` (or ``M``); only for a kind that takes a count."""
        assert self.intervention.count is not None
        return self.intervention.count

    @property
    def counts(self) -> EventCounts:
        """The event's count source on the automaton (built on first use, then kept)."""
        if self._counts is None:
            assert self.intervention.event is not None
            self._counts = self.backend.event_counts(self.intervention.event)
        return self._counts

    def generate(self, budgets: torch.Tensor, *, at_least: bool = False) -> Corpus:
        """One string per budget ``[K']`` (exactly, or at least, its count), on ``paths_gen``."""
        return self.counts.generate(
            budgets, self.paths_gen, at_least=at_least, progress=self.progress
        )


def unconstrained(job: SamplingJob) -> Corpus:
    """``none``: ``K`` i.i.d. strings (ancestral sampling), counts recorded with an event."""
    return job.backend.unconstrained(
        job.num_strings, job.paths_gen, event=job.intervention.event, progress=job.progress
    )


def exact(job: SamplingJob) -> Corpus:
    """``exact``: the corpus total is exactly ``N``; the law only as far as ``N`` needs."""
    k, n = job.num_strings, job.count
    return job.generate(split_exact(job.counts.law_for_total(k, n), k, n, job.counts_gen))


def at_least(job: SamplingJob) -> Corpus:
    """``at_least``: the corpus total is at least ``N`` (the law in growing prefixes)."""
    return job.generate(split_at_least(job.counts.law, job.num_strings, job.count, job.counts_gen))


def at_least_once(job: SamplingJob) -> Corpus:
    """``m`` uniformly chosen positions get strings with >= 1 occurrence, the rest none.

    By exchangeability, which strings contain the event is a uniform ``m``-subset (the paper's
    Theorem "Sampling Path Event Counts (3)"); each string is then drawn from the automaton
    conditioned on its own constraint (exactly zero, or at least one).

    Raises:
        InterventionError: ``m < K`` but every string contains the event.
    """
    k, m, gen = job.num_strings, job.count, job.counts_gen
    if m < k and job.counts.none_probability() <= 0:
        raise InterventionError(
            f"at_least_once count {m} is impossible: every string contains the event"
        )
    order = torch.randperm(k, generator=gen, device=gen.device)
    hit, miss = order[:m].sort().values, order[m:].sort().values
    parts = []
    for positions, budget, least in ((hit, 1, True), (miss, 0, False)):
        if positions.numel():
            budgets = torch.full(
                (positions.numel(),), budget, dtype=torch.long, device=positions.device
            )
            parts.append((positions, job.generate(budgets, at_least=least)))
    return Corpus.interleave(parts, k)

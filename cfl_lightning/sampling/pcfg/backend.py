"""The ``pcfg`` kind's sampler backend and sampling estimate.

Unconstrained strings come from the top-down sampler
(:func:`~cfl_lightning.sampling.pcfg.generate_strings`), seeded from the caller's random stream
(the same stream gives the same strings). ``symbol:X`` events have a count source
(:class:`~cfl_lightning.sampling.pcfg.event_counts.PCFGEventCounts`: the count law over
derivations and conditioned generation), so the registered intervention samplers run on a
grammar; other event kinds are refused in one line.
"""

from __future__ import annotations

from typing import Any

import torch

from cfl_lightning.automata.pcfg.automaton import PCFG
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.estimates import Estimate
from cfl_lightning.sampling.pcfg.event_counts import PCFGEventCounts
from cfl_lightning.sampling.pcfg.generate import generate_strings

__all__ = ["PCFGBackend", "pcfg_estimate", "PCFG_TOKEN", "PCFG_STRING"]

#: CPU seconds per symbol and per string of the top-down sampler (a Python loop over the
#: rewrites; measured on the project's CPU machine: 1,000 strings of mean length ~30)
PCFG_TOKEN, PCFG_STRING = 4e-6, 2e-5


class PCFGBackend:
    """Unconstrained sampling of one grammar, and its ``symbol:X`` count sources."""

    def __init__(self, pcfg: PCFG) -> None:
        self.pcfg = pcfg
        self._counts: dict[str, PCFGEventCounts] = {}

    def unconstrained(
        self,
        num_strings: int,
        generator: torch.Generator,
        *,
        event: Any = None,
        progress: Progress | None = None,
    ) -> Corpus:
        """``num_strings`` i.i.d. strings; with a ``symbol:X`` event, its realized counts."""
        table = None if event is None else self.pcfg.event_table(event)  # refuses other kinds
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        corpus = generate_strings(self.pcfg.grammar, int(num_strings), seed=seed)
        if table is not None:  # realized counts of the event, recounted from the tokens
            hits = table[0].cpu()[corpus.tokens]
            owner = torch.repeat_interleave(torch.arange(len(corpus)), corpus.lengths)
            counts = torch.zeros(len(corpus), dtype=torch.long).index_add_(0, owner, hits)
            corpus = Corpus(corpus.tokens, corpus.offsets, counts)
        return corpus.to(generator.device)

    def event_counts(self, event: Any) -> Any:
        """The count source of a ``symbol:X`` event (others refused in one line)."""
        self.pcfg.event_table(event)  # validates the kind and the symbol
        if self._counts.get(str(event)) is None:
            self._counts[str(event)] = PCFGEventCounts(self.pcfg.grammar, str(event))
        return self._counts[str(event)]


def pcfg_estimate(automaton: Any, request: Any) -> Estimate:
    """The top-down sampler's time: per symbol and per string (unconstrained only)."""
    k = int(request.num_strings)
    seconds = PCFG_TOKEN * k * float(automaton.expected_length()) + PCFG_STRING * k
    return Estimate(seconds, seconds)

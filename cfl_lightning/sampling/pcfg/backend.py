"""The ``pcfg`` kind's sampler backend and sampling estimate.

Unconstrained strings come from the top-down sampler
(:func:`~cfl_lightning.sampling.pcfg.generate_strings`), seeded from the caller's random stream
(the same stream gives the same strings); with an event, the sampler sums its count over each
string's derivation as it draws (the same strings: counting draws nothing). ``symbol:X`` and
``rule:A -> 'a' B`` events have a count source
(:class:`~cfl_lightning.sampling.pcfg.event_counts.PCFGEventCounts`: the count law over
derivations and conditioned generation), so the registered intervention samplers run on a
grammar; other event kinds are refused in one line. A rule's count is the derivation's, not the
string's: the counts these corpora carry are the only record of it.
"""

from __future__ import annotations

from typing import Any

import torch

from cfl_lightning.automata.pcfg.automaton import PCFG
from cfl_lightning.automata.protocol import counting_table
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
    """Unconstrained sampling of one grammar, and its ``symbol:X`` and ``rule:`` count sources."""

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
        """``num_strings`` i.i.d. strings; with an event, each string's count of it (the rule
        uses, or occurrences of ``X``, summed over the derivation drawn)."""
        degrees = None if event is None else self.event_counts(event).degrees  # checks the event
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        corpus = generate_strings(self.pcfg.grammar, int(num_strings), seed=seed, degrees=degrees)
        return corpus.to(generator.device)

    def event_counts(self, event: Any) -> Any:
        """The count source of a ``symbol:X`` or ``rule:`` event (others refused in one line)."""
        counting_table(self.pcfg, event)  # checks the kind and the names
        if self._counts.get(str(event)) is None:
            self._counts[str(event)] = PCFGEventCounts(self.pcfg.grammar, str(event))
        return self._counts[str(event)]


def pcfg_estimate(automaton: Any, request: Any) -> Estimate:
    """The top-down sampler's time: per symbol and per string (unconstrained only)."""
    k = int(request.num_strings)
    seconds = PCFG_TOKEN * k * float(automaton.expected_length()) + PCFG_STRING * k
    return Estimate(seconds, seconds)

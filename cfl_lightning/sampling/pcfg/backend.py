"""The ``pcfg`` kind's sampler backend and sampling estimate.

Unconstrained strings come from the top-down sampler
(:func:`~cfl_lightning.sampling.pcfg.generate_strings`), seeded from the caller's random stream
(the same stream gives the same strings). Count laws, and with them every intervention, are not
implemented yet: :meth:`PCFGBackend.event_counts` refuses in one line.
"""

from __future__ import annotations

from typing import Any

import torch

from cfl_lightning.automata.pcfg.automaton import NO_EVENTS, PCFG
from cfl_lightning.errors import EventError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.estimates import Estimate
from cfl_lightning.sampling.pcfg.generate import generate_strings

__all__ = ["PCFGBackend", "pcfg_estimate", "PCFG_TOKEN", "PCFG_STRING"]

#: CPU seconds per symbol and per string of the top-down sampler (a Python loop over the
#: rewrites; measured on the project's CPU machine: 1,000 strings of mean length ~30)
PCFG_TOKEN, PCFG_STRING = 4e-6, 2e-5


class PCFGBackend:
    """Unconstrained sampling of one grammar; no count sources yet."""

    def __init__(self, pcfg: PCFG) -> None:
        self.pcfg = pcfg

    def unconstrained(
        self,
        num_strings: int,
        generator: torch.Generator,
        *,
        event: Any = None,
        progress: Progress | None = None,
    ) -> Corpus:
        """``num_strings`` i.i.d. strings; an ``event`` is refused (:data:`NO_EVENTS`)."""
        if event is not None:
            raise EventError(f"{event}: {NO_EVENTS}")
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        corpus = generate_strings(self.pcfg.grammar, int(num_strings), seed=seed)
        return corpus.to(generator.device)

    def event_counts(self, event: Any) -> Any:
        """Refused in one line (:data:`NO_EVENTS`)."""
        raise EventError(f"{event}: {NO_EVENTS}")


def pcfg_estimate(automaton: Any, request: Any) -> Estimate:
    """The top-down sampler's time: per symbol and per string (unconstrained only)."""
    k = int(request.num_strings)
    seconds = PCFG_TOKEN * k * float(automaton.expected_length()) + PCFG_STRING * k
    return Estimate(seconds, seconds)

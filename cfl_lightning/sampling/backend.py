"""Sampler backends: one per automaton kind, named by the kind's registry entry.

The intervention samplers (:func:`~cfl_lightning.sampling.draw`) are generic: the corpus split
(:func:`~cfl_lightning.sampling.counts.split_exact`, ``split_at_least``, the at-least-once
subset) needs only an event's *per-string count law*, and the last step needs *generation
conditioned on a per-string count*. A backend supplies those two, plus unconstrained sampling,
for one kind of automaton (:class:`~cfl_lightning.automata.protocol.Automaton`):

* ``"pfsa"``: backward bins of the binning-lifted automaton and the conditioned walk;
* ``"pushdown"``: the count law as the start symbol's value in the binning semiring over the
  automaton's excursions (a polynomial fixed point), and top-down conditioned generation.

Adding an automaton kind: implement the protocol in ``automata/``, a backend in ``sampling/``,
and name both in its one registration,
``register_automaton_kind(AutomatonKind(name, ..., loader=..., backend=...))``
(:mod:`cfl_lightning.kinds.automata`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from cfl_lightning.errors import CflError
from cfl_lightning.kinds.automata import AUTOMATON_KINDS
from cfl_lightning.kinds.registry import call

if TYPE_CHECKING:
    from cfl_lightning.automata.events import Event
    from cfl_lightning.automata.protocol import Automaton
    from cfl_lightning.progress import Progress
    from cfl_lightning.sampling.corpus import Corpus
    from cfl_lightning.sampling.counts import CountLaw

__all__ = ["EventCounts", "SamplerBackend", "backend_for", "backend_kinds"]


class EventCounts(Protocol):
    """One event's per-string occurrence counts on one automaton (built once, reused)."""

    def law(self, upto: int) -> CountLaw:
        """The complete per-string count law on ``0 .. upto`` (log pmf, float64)."""
        ...

    def law_for_total(self, num_strings: int, total: int) -> CountLaw:
        """The count law as far as an exact corpus total ``total`` over ``K`` strings needs.

        A backend may stop below ``total`` where the law tilted to the mean ``total / K`` has a
        negligible tail beyond its window (certified), else it returns :meth:`law` up to ``total``.
        """
        ...

    def max_per_string(self) -> int | None:
        """The most occurrences one string can hold (structurally), or ``None`` if unbounded."""
        ...

    def none_probability(self) -> float:
        """``P(count = 0)`` of one string (0 when every string contains the event)."""
        ...

    def generate(
        self,
        budgets: Tensor,
        generator: torch.Generator,
        *,
        at_least: bool = False,
        progress: Progress | None = None,
    ) -> Corpus:
        """One string per budget, from the automaton conditioned on its count.

        Args:
            budgets: ``[K]`` int64 per-string counts.
            generator: random stream on the automaton's device.
            at_least: string ``k`` has at least ``budgets[k]`` occurrences instead of exactly.
            progress: optional progress reporter.

        Returns:
            The corpus; ``counts`` holds every string's realized count.
        """
        ...


class SamplerBackend(Protocol):
    """Unconstrained sampling and count sources for one automaton."""

    def unconstrained(
        self,
        num_strings: int,
        generator: torch.Generator,
        *,
        event: Event | None = None,
        progress: Progress | None = None,
    ) -> Corpus:
        """``K`` i.i.d. strings (ancestral sampling); realized counts recorded with an event."""
        ...

    def event_counts(self, event: Event) -> EventCounts:
        """The count source of ``event`` (raises ``EventError`` for a bad event)."""
        ...


def backend_kinds() -> tuple[str, ...]:
    """The automaton kinds that have a sampler backend."""
    return tuple(k.name for k in AUTOMATON_KINDS if k.backend is not None)


def backend_for(automaton: Automaton) -> SamplerBackend:
    """The sampler backend of ``automaton`` (its kind's registry entry's ``backend``).

    Raises:
        CflError: no backend is registered for the automaton's kind.
    """
    kind = automaton.kind
    factory = AUTOMATON_KINDS.get(kind).backend if kind in AUTOMATON_KINDS else None
    if factory is None:
        raise CflError(
            f"no sampler for automata of kind {kind!r} (known: {', '.join(backend_kinds())})"
        )
    return call(factory, automaton)

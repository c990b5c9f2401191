"""``Intervention``: what a training corpus is conditioned on, as one frozen value.

Kinds (:data:`INTERVENTIONS`, registered in :mod:`cfl_lightning.kinds.interventions`):

* ``none`` -- i.i.d. strings; an optional event's realized counts are only recorded;
* ``exact`` -- the corpus traverses the event exactly ``count`` times in total;
* ``at_least`` -- at least ``count`` times in total;
* ``at_least_once`` -- exactly ``count`` of the ``K`` strings contain the event.

Every layer (the sampler, the data module, ``results.json``, the analysis) reads the kinds, their
validation messages and the "corpus meets its intervention" check from the kind's registry entry
(:class:`~cfl_lightning.kinds.interventions.InterventionKind`) through this one class. Pure
core: no Lightning imports.

Example:
    >>> from cfl_lightning.automata import parity_starfree_pfsa
    >>> iv = Intervention.create("exact", "state:odd", 12)
    >>> _ = iv.validate(parity_starfree_pfsa(0.3), num_strings=10)
    >>> iv.realized(torch.tensor([3, 0, 9])), iv.satisfied(torch.tensor([3, 0, 9]))
    (12, True)
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.protocol import Automaton, counting_table
from cfl_lightning.errors import EventError, InterventionError
from cfl_lightning.kinds.interventions import (
    INTERVENTION_KINDS,
    INTERVENTIONS,
    InterventionKind,
    intervention_kind,
)
from cfl_lightning.sampling.backend import backend_for

__all__ = ["Intervention", "INTERVENTIONS", "COUNT_UNITS", "as_int"]

# how to leave the count out, for the Python API and the fit command (the data module)
OMIT_COUNT = "count=None; on the command line --data.count=null"
#: what ``count`` (and the realized value) counts under each kind: event occurrences in the
#: corpus, or strings that contain the event.
COUNT_UNITS: Mapping[str, str] = INTERVENTION_KINDS.mapping("unit")


def as_int(value: Any, name: str) -> int:
    """``value`` as a Python int (numpy integers accepted; bools, floats and text refused).

    Raises:
        InterventionError: naming ``name`` and the value.
    """
    if isinstance(value, bool):
        raise InterventionError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise InterventionError(f"{name} must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class Intervention:
    """A kind, an event and a target count; immutable and hashable.

    Build it with :meth:`create` (parses the event text, checks the combination), then call
    :meth:`validate` against an automaton and a corpus size before sampling.

    Attributes:
        kind: one of :data:`INTERVENTIONS`.
        event: the counted transitions (required unless ``kind == "none"``, optional then).
        count: the target ``N`` (occurrences) or ``M`` (strings, ``at_least_once``); None for
            ``none``.
    """

    kind: str = "none"
    event: Event | None = None
    count: int | None = None

    @classmethod
    def create(
        cls,
        kind: str = "none",
        event: str | Event | None = None,
        count: Any = None,
        *,
        omit_count: str = OMIT_COUNT,
    ) -> Intervention:
        """Check the combination of ``kind``, ``event`` and ``count`` (without an automaton).

        This is where an intervention is parsed: every entry point (``sample_corpus``, the
        ``sample`` command, the data module) calls it once and passes the value on.

        Args:
            kind: one of :data:`INTERVENTIONS`.
            event: ``state:NAME``, ``symbol:SYM``, ``transition:SOURCE:SYM``, an :class:`Event`
                or None.
            count: the target (any integer type, numpy's included), or None.
            omit_count: how the caller leaves the count out, in its own terms, for the message
                that refuses a count without an intervention (``sample``: ``"omit --count"``).

        Raises:
            InterventionError: unknown kind, a count without an intervention, a missing event or
                count, a count that is not a non-negative integer.
            EventError: a malformed event text, or an event that is neither text nor an
                :class:`Event`.
        """
        spec = intervention_kind(kind)  # unknown kind: one line naming the known ones
        if event is not None and not isinstance(event, (str, Event)):
            raise EventError(f"event must be text such as 'state:NAME' or an Event, got {event!r}")
        parsed = Event.parse(event) if isinstance(event, str) else event
        if count is not None:
            count = as_int(count, "count")
        if not spec.takes_count:
            if count is not None:
                others = [k.name for k in INTERVENTION_KINDS if k.takes_count]
                raise InterventionError(
                    f"a count ({count}) was given but intervention is {kind!r} (the corpus is "
                    f"unconstrained): for a correlational run leave the count out ({omit_count}), "
                    f"or constrain the corpus with intervention {', '.join(others[:-1])} or "
                    f"{others[-1]}"
                )
            return cls(kind, parsed, None)
        if parsed is None:
            raise InterventionError(f"intervention {kind!r} needs an event")
        if count is None:
            raise InterventionError(f"intervention {kind!r} needs a count")
        if count < 0:
            raise InterventionError(f"count must be non-negative, got {count}")
        return cls(kind, parsed, count)

    @property
    def spec(self) -> InterventionKind:
        """The kind's registry entry."""
        return intervention_kind(self.kind)

    @property
    def constrained(self) -> bool:
        """Whether the corpus is conditioned on anything (``kind != "none"``)."""
        return self.spec.constrained

    @property
    def unit(self) -> str:
        """``"occurrences"`` or ``"strings"``: what :attr:`count` and :meth:`realized` count."""
        return self.spec.unit

    def validate(self, automaton: Automaton, num_strings: int) -> Tensor | None:
        """Check the target against an automaton and a corpus of ``num_strings`` strings.

        Args:
            automaton: the automaton (any kind with a sampler backend).
            num_strings: ``K``.

        Returns:
            the ``[C, |S|]`` int64 event table on ``automaton``'s device; None without an event,
            or for an event not counted from the tokens (a grammar's ``rule``: its per-string
            counts are the sampler's, :func:`~cfl_lightning.automata.counting_table`).

        Raises:
            InterventionError: a bad ``num_strings``; an at-least-once count above ``K``; an event
                that cannot occur with a positive count; a total above ``K`` times the most
                occurrences one string can hold.
            EventError: the event names an unknown state or symbol.
        """
        if isinstance(num_strings, bool) or not isinstance(num_strings, numbers.Integral) or (
            num_strings < 1
        ):
            raise InterventionError(f"num_strings must be a positive integer, got {num_strings!r}")
        k = int(num_strings)
        function = None if self.event is None else counting_table(automaton, self.event)
        if not self.constrained:
            return function
        assert self.event is not None and self.count is not None
        n = self.count
        if self.unit == "strings":
            self.spec.check_count(n, k, None, str(self.event))
        bound = backend_for(automaton).event_counts(self.event).max_per_string()  # None: unbounded
        if bound == 0 and n > 0:
            raise InterventionError(
                f"event {self.event} cannot occur in this automaton (no transition of positive "
                f"weight traverses it) but count is {n}: choose an event it can emit, or count 0"
            )
        self.spec.check_count(n, k, bound, str(self.event))
        return function

    def realized(self, counts: Tensor) -> int:
        """The corpus value the target constrains, from per-string event counts.

        Args:
            counts: ``[K]`` integer occurrences per string.

        Returns:
            the total occurrences, or (``at_least_once``) the strings with at least one.
        """
        return int(self.spec.realized(counts))

    def satisfied(self, counts: Tensor) -> bool:
        """Whether a corpus with per-string ``counts`` ``[K]`` meets the target (always for none)."""
        if not self.constrained:
            return True
        assert self.count is not None
        return bool(self.spec.accepts(self.realized(counts), self.count))

    def satisfied_batched(self, counts: Tensor) -> Tensor:
        """:meth:`satisfied` for ``[B, K]`` counts of ``B`` corpora: ``[B]`` bool."""
        if not self.constrained:
            return torch.ones(counts.shape[0], dtype=torch.bool, device=counts.device)
        return self.spec.accepts(self.spec.realized(counts), self.count)

    def __str__(self) -> str:
        if not self.constrained:
            return "none" if self.event is None else f"none (recording {self.event})"
        return f"{self.kind} {self.count} ({self.event})"

"""Intervention kinds: what a training corpus can be conditioned on, one entry each.

Built in (:data:`INTERVENTION_KINDS`, registration order):

* ``none`` -- i.i.d. strings; an optional event's realized counts are only recorded;
* ``exact`` -- the corpus traverses the event exactly `count` times in total;
* ``at_least`` -- at least `count` times in total;
* ``at_least_once`` -- exactly `count` of the ``K`` strings contain the event.

An :class:`InterventionKind` says everything the layers ask of a kind: whether it takes a count
and what the count counts (its ``unit``), when a corpus meets it (``accepts``), its memory
estimate, how the analysis names and draws its runs, and its sampling function. The
:class:`~cfl_lightning.sampling.Intervention` value, the sampler's memory check, the data
module's validation, the CLI's ``--intervention`` choices, ``analyze`` and the docs read it.
Pure Python (no torch at import): the analysis reads the labels without torch.

Adding a kind (see docs/design.md, "Where things vary"): write its sampling function, then
``register_intervention(InterventionKind(...))``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cfl_lightning.errors import InterventionError
from cfl_lightning.kinds.registry import Names, Ref, Registry

__all__ = [
    "InterventionName",
    "InterventionKind",
    "INTERVENTION_KINDS",
    "INTERVENTIONS",
    "intervention_kind",
    "register_intervention",
    "count_law_memory",
    "presence_memory",
    "UNITS",
]

#: what a count can count: event occurrences in the corpus, or strings containing the event
UNITS = ("occurrences", "strings")

#: ``memory(num_strings, count, num_states, per_string, length) -> (tokens, bins_bytes)``:
#: the expected corpus tokens under the kind and the bytes of its count laws / backward bins;
#: ``per_string()`` is the event's expected count per string (computed only when called).
MemoryHook = Callable[[int, "int | None", int, Callable[[], float], float], "tuple[float, int]"]


@dataclass(frozen=True)
class InterventionKind:
    """One intervention kind.

    Attributes:
        name: the value of ``--intervention`` / ``data.intervention`` / ``results.json``'s
            ``intervention``.
        description: one line for the docs and ``--help``.
        takes_count: whether the kind has a target count (``none``: no; a count is refused).
        unit: what the count and the realized value count: ``"occurrences"`` (total over the
            corpus) or ``"strings"`` (strings with at least one occurrence).
        count_help: what `count` means under this kind (docs, ``--count`` help).
        accepts: ``accepts(value, count)``: whether a corpus whose realized value (in ``unit``)
            is ``value`` meets the target; works on ints and on tensors alike
            (``operator.eq``, ``operator.ge``).
        setting: the analysis setting of its runs (``causal_exact``; ``correlational`` for the
            unconstrained kind): the curve a run belongs to.
        label: the setting's legend label (``"causal (exact count)"``).
        style: the plot's ``(linestyle, marker, band alpha)``.
        memory: the memory estimate hook (:data:`MemoryHook`), or None (no extra memory).
        sampler: the kind's sampling function ``sampler(job) -> Corpus``, a callable or a
            ``"module:function"`` reference: :func:`~cfl_lightning.sampling.draw` calls it on a
            :class:`~cfl_lightning.sampling.samplers.SamplingJob` (the automaton's sampler
            backend, ``K``, the intervention, the two random streams) whatever the kind. None:
            the kind is sampled only by ``method="rejection"`` (the exact one refuses it).
    """

    name: str
    description: str
    takes_count: bool
    unit: str = "occurrences"
    count_help: str = ""
    accepts: Callable[[Any, Any], Any] = operator.eq
    setting: str = ""
    label: str = ""
    style: tuple[str, str, float] = ("-", "x", 0.15)
    memory: MemoryHook | None = None
    sampler: Ref | None = None

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise InterventionError(
                f"intervention kind {self.name!r}: unit must be one of {', '.join(UNITS)}, "
                f"got {self.unit!r}"
            )
        if not self.setting:
            object.__setattr__(self, "setting", f"causal_{self.name}")
        if not self.label:
            object.__setattr__(self, "label", f"causal ({self.name.replace('_', ' ')})")

    @property
    def constrained(self) -> bool:
        """Whether a corpus is conditioned on anything (every kind with a count)."""
        return self.takes_count

    def realized(self, counts: Any) -> Any:
        """The corpus value the target constrains, from per-string counts ``[..., K]``.

        Returns the total occurrences, or the strings with at least one (``unit="strings"``),
        summed over the last axis (a tensor for a batch of corpora).
        """
        return (counts > 0).sum(-1) if self.unit == "strings" else counts.sum(-1)

    def check_count(self, count: int, num_strings: int, bound: int | None, event: str) -> None:
        """Refuse a target that no corpus of ``num_strings`` strings can meet.

        Args:
            count: the target (non-negative).
            num_strings: ``K``.
            bound: the most occurrences one string can hold (None: unbounded).
            event: the event's text, for the message.

        Raises:
            InterventionError: a string count above ``K``; an occurrence total above
                ``K * bound``.
        """
        if self.unit == "strings" and count > num_strings:
            raise InterventionError(
                f"{self.name} count {count} exceeds the number of strings {num_strings}"
            )
        if bound is not None and self.unit == "occurrences" and count > num_strings * bound:
            raise InterventionError(
                f"count {count} is impossible: a string contains {event} at most {bound} "
                f"time{'s' if bound != 1 else ''}, so {num_strings} strings hold at most "
                f"{num_strings * bound}"
            )


def count_law_memory(
    num_strings: int, count: int | None, num_states: int, per_string: Callable[[], float],
    length: float,
) -> tuple[float, int]:
    """Kinds split a count law over the strings (``exact``, ``at_least``): bins ``[N+1, Q]``.

    Strings stretch to hold ``N`` occurrences above the natural ``K x E[count]``; the bins and
    the count laws of the split tree grow with ``N``.
    """
    tokens = num_strings * length
    if count is None:
        return tokens, 0
    n = int(count)
    expected = per_string()
    if expected > 0 and n > num_strings * expected:
        tokens = max(tokens, n * length / expected)
    depth = math.log2(max(num_strings, 2)) + 8
    return tokens, int((n + 2) * (num_states + 2 * depth) * 8)


def presence_memory(
    num_strings: int, count: int | None, num_states: int, per_string: Callable[[], float],
    length: float,
) -> tuple[float, int]:
    """Kinds that condition each string on containing the event or not: bins up to 2."""
    return num_strings * length, int(4 * num_states * 8)


_REGISTRY: Registry[InterventionKind] = Registry("intervention", InterventionError)
#: the registry of intervention kinds
INTERVENTION_KINDS = _REGISTRY
#: the kinds' names, a live tuple-like view
INTERVENTIONS: Names = _REGISTRY.view()


def intervention_kind(name: str) -> InterventionKind:
    """The kind ``name`` (``InterventionError`` naming the known kinds otherwise)."""
    return _REGISTRY.get(name)


def register_intervention(kind: InterventionKind, *, replace: bool = False) -> None:
    """Register an intervention kind (see :class:`InterventionKind`)."""
    _REGISTRY.register(kind, replace=replace)


_SAMPLER = "cfl_lightning.sampling.samplers"
for _kind in (
    InterventionKind(
        "none",
        "i.i.d. strings; an event's realized counts are only recorded (correlational)",
        takes_count=False,
        setting="correlational",
        label="correlational",
        style=(":", "D", 0.0),
        sampler=f"{_SAMPLER}:unconstrained",
    ),
    InterventionKind(
        "exact",
        "the corpus traverses the event exactly count times in total",
        takes_count=True,
        count_help="N: total occurrences of the event in the corpus",
        label="causal (exact count)",
        style=("-", "o", 0.15),
        memory=count_law_memory,
        sampler=f"{_SAMPLER}:exact",
    ),
    InterventionKind(
        "at_least",
        "the corpus traverses the event at least count times in total",
        takes_count=True,
        count_help="N: least total occurrences of the event in the corpus",
        accepts=operator.ge,
        label="causal (at least N)",
        style=("-", "s", 0.15),
        memory=count_law_memory,
        sampler=f"{_SAMPLER}:at_least",
    ),
    InterventionKind(
        "at_least_once",
        "exactly count of the K strings contain the event",
        takes_count=True,
        unit="strings",
        count_help="M: strings containing the event (at most K)",
        label="causal (at least once)",
        style=("-", "^", 0.15),
        memory=presence_memory,
        sampler=f"{_SAMPLER}:at_least_once",
    ),
):
    register_intervention(_kind)
del _kind


class InterventionName(str):
    """A registered intervention kind's name: the type of ``data.intervention``.

    Constructing it checks the name against the registry (so a config parser that builds it,
    jsonargparse's, refuses an unknown kind with the registry's one-line message).
    """

    def __new__(cls, value: str) -> InterventionName:
        intervention_kind(value)
        return super().__new__(cls, value)

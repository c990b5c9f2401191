"""Non-target controls: the target's contribution against the run's other events (issue 48).

An exact-count corpus with N occurrences of the target in K strings grows with N, and everything
else in it grows too, so a causal curve mixes "more data about the target" with "more data".
The **non-target control** of a run about event ``E`` (a causal run's intervened event, or a
correlational run seen as a run about ``E``, :func:`~cfl_lightning.analysis.selection.for_target`)
is the mean of the same measure -- the per-state, per-symbol or per-transition contribution,
weighted (``kl_target``) or unweighted (``kl_target_unweighted``) -- over the run's *other*
events of ``E``'s kind (:func:`control_value`):

* every recorded event of that kind (the results' ``kl`` / ``kl_unweighted`` maps) except ``E``
  (a pushdown automaton's ``class:STATE/TOP``: every other class, its ``state`` entries);
* the end of string (``EOS``, a symbol's or a transition's name) is left out: it is not an
  event a corpus can be constrained on;
* an event is used only where the test strings visit it at least ``max(1, min_visits)`` times
  (``test_visits``; an event with unknown visits is used where its value is known) and its value
  is known (null values are unknown contributions, never 0).

The **difference-in-differences** ``did`` of a run is its target value minus its control. A
curve point's ``did`` is averaged per automaton first (a pooled target's pairs: each pair's
control is its run's other events), then its mean and 95% Student-t interval are taken over
automata (:func:`did_summary`), as for any signed quantity of the curves
(:mod:`cfl_lightning.analysis.stats`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from cfl_lightning.analysis.pooling import cluster_means, event_kind
from cfl_lightning.analysis.records import RunRecord, as_entry
from cfl_lightning.analysis.stats import LEVEL, mean_sem, t_interval

__all__ = [
    "CONTROLS",
    "NON_TARGET",
    "EOS",
    "CONTROL_METRICS",
    "control_value",
    "with_controls",
    "control_of",
    "OFS",
    "value_of",
    "DidSummary",
    "did_summary",
]

NON_TARGET = "non-target"
CONTROLS = (NON_TARGET,)
# the end-of-string column's name in the results' maps (``cfl_lightning.metrics.EOS_NAME``,
# which imports torch; a test checks that the two agree)
EOS = "EOS"
# the measures a control exists for: per-event values (``kl_total`` has none)
CONTROL_METRICS = ("kl_target_unweighted", "kl_target")
# where each measure sits in a run's ``(weighted, unweighted)`` pairs (``target_kl``, ``control``)
_COLUMN = {"kl_target": 0, "kl_target_unweighted": 1}
_NAN = math.nan


def _is_eos(event: str) -> bool:
    """``symbol:EOS``, ``transition:q0:EOS``: the end of string, never a target of a corpus."""
    return event.rsplit(":", 1)[-1] == EOS


def control_value(record: RunRecord, metric: str, min_visits: int = 1) -> float | None:
    """The non-target control of ``record`` under ``metric`` (module docstring), or None where
    the run records no other event of its target's kind with a known value and enough visits.

    Args:
        record: a run about one concrete event (``record.event``), with its per-event maps.
        metric: ``kl_target`` or ``kl_target_unweighted``.
        min_visits: the curves' ``--min-visits``; an event needs at least ``max(1, min_visits)``.
    """
    if metric not in CONTROL_METRICS:
        raise ValueError(f"a control exists for {' and '.join(CONTROL_METRICS)}, not {metric!r}")
    if record.event is None or not record.target_kl:
        return None
    target = as_entry(record.event)
    kind, column = event_kind(target), _COLUMN[metric]
    visits, need = record.test_visits or {}, max(1, min_visits)
    values = []
    for event, pair in record.target_kl.items():
        if event == target or event_kind(event) != kind or _is_eos(event):
            continue
        seen = visits.get(event)
        if pair[column] is not None and (seen is None or seen >= need):
            values.append(pair[column])
    return sum(values) / len(values) if values else None


def with_controls(records: Iterable[RunRecord], min_visits: int = 1) -> list[RunRecord]:
    """Each record with its ``control`` set: ``(weighted, unweighted)`` (:func:`control_value`).

    Call it on runs about concrete events (before a pooled target relabels them ``KIND:*``).
    """
    return [
        replace(r, control=(control_value(r, "kl_target", min_visits),
                           control_value(r, "kl_target_unweighted", min_visits)))
        for r in records
    ]


def control_of(record: RunRecord, metric: str) -> float | None:
    """The control :func:`with_controls` attached to ``record`` under ``metric`` (None: none)."""
    if record.control is None or metric not in CONTROL_METRICS:
        return None
    return record.control[_COLUMN[metric]]


# what a plan's contrast may read of a run: the target's value, its control, or their difference
OFS = ("target", "control", "did")


def value_of(record: RunRecord, metric: str, of: str = "target") -> float | None:
    """The run's value under ``metric`` (``of="target"``), its control (``"control"``), or target
    minus control (``"did"``); None where one is missing."""
    value = getattr(record, metric)
    if of == "target":
        return value
    control = control_of(record, metric)
    if of == "control":
        return control
    return None if value is None or control is None else value - control


@dataclass(frozen=True)
class DidSummary:
    """A point's control and difference-in-differences over automata.

    ``control``: the mean over automata of the runs' controls; ``did``, ``low``, ``high``: the
    mean over automata of ``target - control`` and its Student-t interval (NaN for fewer than
    two automata); ``n``: the automata, ``pairs``: the (run, event) pairs with a control.
    """

    control: float
    did: float
    low: float
    high: float
    n: int
    pairs: int


def did_summary(
    items: Sequence[tuple[float, float | None, str]], level: float = LEVEL
) -> DidSummary:
    """The :class:`DidSummary` of a point's ``(target value, control or None, automaton)`` pairs.

    Pairs without a control are left out; the rest are reduced to one mean per automaton
    (:func:`~cfl_lightning.analysis.pooling.cluster_means`) before the mean and the interval.
    """
    kept = [(v, c, a) for v, c, a in items if c is not None]
    if not kept:
        return DidSummary(_NAN, _NAN, _NAN, _NAN, 0, 0)
    automata = [a for _, _, a in kept]
    controls, pairs = cluster_means([c for _, c, _ in kept], automata)
    dids, _ = cluster_means([v - c for v, c, _ in kept], automata)
    did, _, n = mean_sem(dids)
    low, high = t_interval(dids, level)
    return DidSummary(mean_sem(controls)[0], did, low, high, n, pairs)

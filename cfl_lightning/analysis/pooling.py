"""Pooled targets: ``symbol:*`` (``state:*``, ``transition:*``) is every event of that kind.

A pooled target puts every symbol (state, transition) of every run at its own count: the
realized count of that event in a correlational run, the intervened count in a causal run (a
causal run is only about its intervened event). One run thus gives several (run, event) *pairs*.
The pairs of one automaton are not independent -- in a correlational run they share one corpus
and one trained model -- so the independent unit stays the automaton: every mean and interval
over a point's pairs is taken over their *cluster means*, one per automaton
(:func:`cluster_means`), never over the pairs as if they were independent.

The functions here only name and relabel; the curves are
:func:`cfl_lightning.analysis.aggregate.aggregate`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from cfl_lightning.analysis.records import RunRecord

__all__ = [
    "WILDCARD",
    "is_pooled",
    "event_kind",
    "covers",
    "concrete_targets",
    "pool_records",
    "cluster_means",
]

WILDCARD = "*"


def is_pooled(target: str | None) -> bool:
    """Whether ``target`` is a pooled target (``KIND:*``)."""
    return bool(target) and target.partition(":")[2] == WILDCARD


def event_kind(event: str) -> str:
    """``symbol:a`` -> ``symbol``; ``transition:q1:a`` -> ``transition``."""
    return event.partition(":")[0]


def covers(target: str, event: str | None) -> bool:
    """Whether curve ``target`` takes the (concrete) ``event``: itself, or its kind pooled."""
    if event is None or is_pooled(event):
        return False
    if is_pooled(target):
        return event_kind(event) == event_kind(target)
    return event == target


def concrete_targets(targets: Sequence[str], known: Iterable[str]) -> list[str]:
    """The concrete events behind ``targets``: the named ones, and every ``known`` event of a
    pooled target's kind (sorted, each once)."""
    known = sorted({k for k in known if k and not is_pooled(k)})
    out = [t for t in targets if not is_pooled(t)]
    for target in targets:
        if is_pooled(target):
            out += [k for k in known if covers(target, k)]
    return list(dict.fromkeys(out))


def pool_records(records: Iterable[RunRecord], targets: Sequence[str]) -> list[RunRecord]:
    """Each record once per target of ``targets`` that covers its event, relabelled with that
    target as its event (a pooled curve's records carry ``event="symbol:*"``).

    Records should be one per (run, concrete event), already reduced to the best repeat.
    Without a pooled target the records about ``targets`` are returned unchanged, in order.
    """
    out = []
    for record in records:
        for target in targets:
            if covers(target, record.event):
                out.append(record if target == record.event else replace(record, event=target))
    return out


def cluster_means(
    values: Sequence[float], clusters: Sequence[str]
) -> tuple[list[float], int]:
    """One value per cluster (its mean), in order of first appearance, and the number of values.

    A cluster with one value keeps it exactly (no arithmetic), so data with one value per
    automaton give the same numbers as before pooling existed.

    Args:
        values: ``[P]`` values of the pairs.
        clusters: ``[P]`` each pair's cluster (its automaton).

    Returns:
        ``([C] cluster means, P)``.
    """
    groups: dict[str, list[float]] = {}
    for value, cluster in zip(values, clusters):
        groups.setdefault(cluster, []).append(value)
    means = [v[0] if len(v) == 1 else sum(v) / len(v) for v in groups.values()]
    return means, len(values)

"""Which runs feed which curve: the best repeat, a run seen as a run about a target, the
default targets, and the runs left out for too few test visits (the first steps of
:func:`~cfl_lightning.analysis.aggregate.aggregate`; see its module docstring)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from cfl_lightning.analysis.records import RunRecord, known_contribution
from cfl_lightning.errors import CflError

__all__ = [
    "best_of_repeats",
    "REPEATS",
    "for_target",
    "default_targets",
    "expand_correlational",
    "curve_key",
    "corpus_size",
    "VisitSplit",
    "split_by_visits",
    "UNITS",
    "seed_units",
]

# the independent unit of the intervals: automata (the default), or the training seeds of one
# automaton (``analyze --unit seed``)
UNITS = ("automaton", "seed")


#: how repeats of one corpus (same automaton, model, intervention, target, count and size) are
#: reduced: ``best`` keeps the lowest ``kl_total``; ``mean`` keeps one run per training seed
#: (the best of each seed), so that the per-automaton means average the trainings
REPEATS = ("best", "mean")


def best_of_repeats(records: Iterable[RunRecord], repeats: str = "best") -> list[RunRecord]:
    """The lowest-``kl_total`` run per (automaton, model, intervention, target, count, size), and
    with ``repeats="mean"`` per training seed too (:data:`REPEATS`).

    Runs without a finite ``kl_total`` lose to any run with one; ``repeats`` of the kept record is
    the group size.
    """
    if repeats not in REPEATS:
        raise ValueError(f"unknown repeats {repeats!r}; expected one of {REPEATS}")
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for record in records:
        key = (
            record.automaton_id,
            record.model,
            record.intervention,
            record.event,
            record.count,
            record.num_strings,
            record.seed if repeats == "mean" else None,
        )
        groups[key].append(record)
    best = []
    for members in groups.values():
        chosen = min(
            members, key=lambda r: (r.kl_total is None, r.kl_total if r.kl_total is not None else 0)
        )
        best.append(replace(chosen, repeats=len(members)))
    return best


def for_target(record: RunRecord, target: str) -> RunRecord | None:
    """``record`` seen as a run about ``target``, or None when it holds nothing about it.

    A run about its own event is returned as is. An unconstrained (correlational) run that
    recorded every event's occurrences and decomposed KL is re-targeted: its realized counts,
    target KL and test visits (unknown unless the results hold ``test_visits``) become
    ``target``'s. A causal run is only about its intervened event.
    """
    if record.event == target:
        visits = (record.test_visits or {}).get(target)
        if record.target_test_visits is None and visits is not None:
            weighted, unweighted = known_contribution(
                record.kl_target, record.kl_target_unweighted, visits
            )
            return replace(
                record,
                target_test_visits=visits,
                kl_target=weighted,
                kl_target_unweighted=unweighted,
            )
        return record
    if record.setting != "correlational" or not record.occurrences or not record.target_kl:
        return None
    if target not in record.occurrences or target not in record.target_kl:
        return None
    count, strings = record.occurrences[target]
    visits = (record.test_visits or {}).get(target)
    weighted, unweighted = known_contribution(*record.target_kl[target], visits)
    return replace(
        record,
        event=target,
        realized_count=count,
        realized_strings=strings,
        kl_target=weighted,
        kl_target_unweighted=unweighted,
        target_test_visits=visits,
    )


def default_targets(records: Iterable[RunRecord]) -> list[str]:
    """The intervened events of the causal runs; without causal runs, the runs' own events."""
    records = list(records)
    causal = {r.event for r in records if r.setting != "correlational" and r.event is not None}
    if causal:
        return sorted(causal)
    return sorted({r.event for r in records if r.event is not None})


def expand_correlational(records: Iterable[RunRecord], targets: Sequence[str]) -> list[RunRecord]:
    """Causal runs about ``targets``, and every correlational run once per target it covers."""
    out = []
    for record in records:
        if record.setting != "correlational":
            if record.event in targets:
                out.append(record)
            continue
        for target in targets:
            view = for_target(record, target)
            if view is not None:
                out.append(view)
    return out


def corpus_size(record: RunRecord) -> int | None:
    """The corpus size a run's curve is drawn at: its training strings, or None for a
    token-matched run (``data.tokens``: K is chosen per run, so it names no curve)."""
    return record.num_strings if record.tokens is None else None


def curve_key(record: RunRecord) -> tuple[str | None, str, str, int | None]:
    """The curve a run belongs to: (target, model, setting, :func:`corpus_size`)."""
    return (record.event, record.model, record.setting, corpus_size(record))


@dataclass(frozen=True)
class VisitSplit:
    """Runs kept and left out by :func:`split_by_visits`.

    ``excluded`` and ``unknown`` count runs per :func:`curve_key`: below ``min_visits`` (left
    out), and without ``target_test_visits`` (kept: results written before the key existed).
    """

    kept: list[RunRecord]
    excluded: dict[tuple, int]
    unknown: dict[tuple, int]


def split_by_visits(records: Iterable[RunRecord], min_visits: int = 1) -> VisitSplit:
    """Leave out runs whose target the test strings visit fewer than ``min_visits`` times.

    The same rule for causal and correlational runs. A run with unknown visits is kept.
    """
    kept, excluded, unknown = [], defaultdict(int), defaultdict(int)
    for record in records:
        visits = record.target_test_visits
        if visits is None:
            unknown[curve_key(record)] += 1
        elif visits < min_visits:
            excluded[curve_key(record)] += 1
            continue
        kept.append(record)
    return VisitSplit(kept, dict(excluded), dict(unknown))



def seed_units(records: Sequence[RunRecord]) -> list[RunRecord]:
    """The runs of one automaton with their training seed as the independent unit.

    Every interval of the analysis is over the records' ``automaton_id``; here each record's
    becomes ``seed N`` (its ``seed``, ``seed_everything``), so that repeats of one corpus with
    different training seeds are kept apart by :func:`best_of_repeats` and intervals are taken
    over training seeds. Such intervals say how much training varies on this one automaton; they
    do not generalize over automata.

    Raises:
        CflError: the runs hold more than one automaton, or a run records no seed (one line
            naming it).
    """
    automata = sorted({r.automaton_id for r in records})
    if len(automata) > 1:
        raise CflError(
            f"--unit seed: the runs hold {len(automata)} automata ({', '.join(automata[:3])}"
            f"{', ...' if len(automata) > 3 else ''}); intervals over training seeds are for "
            "one automaton: give the runs of one"
        )
    unseeded = next((r for r in records if r.seed is None), None)
    if unseeded is not None:
        raise CflError(f"--unit seed: {unseeded.source} records no seed (seed_everything)")
    return [replace(r, automaton_id=f"seed {r.seed}") for r in records]

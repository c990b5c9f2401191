"""``sample_pushdown_corpus``: the four interventions on a pushdown automaton, through its backend.

The same plan as :func:`~cfl_lightning.sampling.draw` for a PFSA (the seam routes ``draw`` to
any backend; this entry keeps the pushdown path testable on its own):

* ``none``: ancestral sampling (realized counts recorded with an event);
* ``exact``: per-string counts from the law conditioned on the total
  (:func:`~cfl_lightning.sampling.counts.split_exact`), then each string given its count;
* ``at_least``: the corpus total drawn given ``>= N``, then split
  (:func:`~cfl_lightning.sampling.counts.split_at_least`);
* ``at_least_once``: a uniform ``M``-subset of positions holds the strings with an occurrence
  (exchangeability), those drawn given ``>= 1``, the rest given ``0``.

Two generators from one seed: ``seed`` for the strings, ``seed + 0x9E3779B9`` for the counts
(as the PFSA sampler).
"""

from __future__ import annotations

import torch

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.pushdown_events import parse_event
from cfl_lightning.errors import InterventionError
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import split_at_least, split_exact
from cfl_lightning.sampling.intervention import INTERVENTIONS, as_int
from cfl_lightning.sampling.pushdown_backend import PushdownBackend, PushdownEventCounts

__all__ = ["sample_pushdown_corpus"]


def _check(kind: str, event, count, num_strings: int) -> tuple[Event | None, int | None]:
    if kind not in INTERVENTIONS:
        raise InterventionError(
            f"unknown intervention {kind!r}; expected one of {', '.join(INTERVENTIONS)}"
        )
    parsed = parse_event(event) if isinstance(event, str) else event
    if kind == "none":
        if count is not None:
            raise InterventionError(f"a count ({count}) was given but intervention is 'none'")
        return parsed, None
    if parsed is None or count is None:
        raise InterventionError(f"intervention {kind!r} needs an event and a count")
    n = as_int(count, "count")
    if n < 0:
        raise InterventionError(f"count must be non-negative, got {n}")
    if kind == "at_least_once" and n > num_strings:
        raise InterventionError(
            f"at_least_once count {n} exceeds the number of strings {num_strings}"
        )
    return parsed, n


def sample_pushdown_corpus(
    pda,
    num_strings: int,
    *,
    seed: int,
    intervention: str = "none",
    event: str | Event | None = None,
    count: int | None = None,
) -> Corpus:
    """Sample ``num_strings`` strings from ``pda`` under an intervention (on the CPU).

    Args:
        pda: a :class:`~cfl_lightning.automata.pushdown.PushdownAutomaton`.
        num_strings: ``K`` (positive).
        seed: seed of every random draw.
        intervention: ``none``, ``exact``, ``at_least`` or ``at_least_once``.
        event: ``symbol:SYM``, ``state:NAME``, ``transition:STATE/TOP:SYM``, ``push:X`` or an
            :class:`Event`.
        count: ``N`` (occurrences) or ``M`` (strings, ``at_least_once``).

    Returns:
        The corpus, with per-string ``counts`` when an event is given.

    Raises:
        EventError: a malformed event or unknown name.
        InterventionError: bad arguments or an impossible target.
    """
    k = as_int(num_strings, "num_strings")
    if k < 1:
        raise InterventionError(f"num_strings must be a positive integer, got {num_strings!r}")
    parsed, n = _check(intervention, event, count, k)
    backend = PushdownBackend(pda.to("cpu"))
    paths_gen = torch.Generator().manual_seed(seed)
    if intervention == "none":
        return backend.unconstrained(k, paths_gen, event=parsed)
    assert parsed is not None and n is not None
    counts = backend.event_counts(parsed)
    counts_gen = torch.Generator().manual_seed((seed + 0x9E3779B9) % 2**64)
    if intervention == "at_least_once":
        return _at_least_once(counts, k, n, counts_gen, paths_gen)
    bound = counts.max_per_string()
    if bound is not None and n > k * bound:
        raise InterventionError(
            f"count {n} is impossible: a string holds at most {bound} occurrences of {parsed}, "
            f"so {k} strings hold at most {k * bound}"
        )
    if intervention == "exact":
        budgets = split_exact(counts.law_for_total(k, n), k, n, counts_gen)
    else:
        budgets = split_at_least(counts.law, k, n, counts_gen)
    return counts.generate(budgets, paths_gen)


def _at_least_once(
    counts: PushdownEventCounts,
    k: int,
    m: int,
    counts_gen: torch.Generator,
    paths_gen: torch.Generator,
) -> Corpus:
    """``m`` uniformly chosen positions get strings with >= 1 occurrence, the rest none."""
    if m < k and counts.none_probability() <= 0:
        raise InterventionError(
            f"at_least_once count {m} is impossible: every string contains the event"
        )
    if m > 0 and counts.max_per_string() == 0:
        raise InterventionError(
            f"at_least_once count {m} is impossible: no string contains the event"
        )
    order = torch.randperm(k, generator=counts_gen)
    hit, miss = order[:m].sort().values, order[m:].sort().values
    parts = []
    for positions, budget, at_least in ((hit, 1, True), (miss, 0, False)):
        if positions.numel():
            budgets = torch.full((positions.numel(),), budget, dtype=torch.long)
            parts.append((positions, counts.generate(budgets, paths_gen, at_least=at_least)))
    return Corpus.interleave(parts, k)

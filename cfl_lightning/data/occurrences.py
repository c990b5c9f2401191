"""Every event's occurrences in a corpus, realized and expected (correlational analysis).

One unconstrained run thus serves every target: ``results.json`` records, for every built-in
event of the automaton (``state:NAME``, ``symbol:SYM``, every existing
``transition:SOURCE:SYM``; a pushdown automaton adds its own), the training corpus's total
occurrences and strings with at least one (:func:`occurrences`), and ``K`` times the expected
occurrences in an unconstrained string (:func:`expected_occurrences`). The events and their
expectations come from the automaton
(:meth:`~cfl_lightning.automata.Automaton.expected_occurrences`), the counts from its event
tables at the annotated classes.
"""

from __future__ import annotations

from typing import Any

import torch

from cfl_lightning.automata import Automaton, Event
from cfl_lightning.data.batching import TokenizedCorpus
from cfl_lightning.kinds.events import counted_from_tokens
from cfl_lightning.sampling import Corpus

__all__ = ["occurrences", "expected_occurrences", "counted_by_sampler", "sampler_counts"]


def occurrences(automaton: Automaton, tok: TokenizedCorpus) -> dict[str, dict[str, int]]:
    """Realized occurrences of every event in a tokenized corpus.

    Args:
        automaton: the automaton the corpus was sampled from (any kind).
        tok: its per-position arrays (``targets`` and ``states``, ``[sum of n + 1]``).

    Returns:
        ``{"count": {spec: n}, "strings": {spec: m}}`` over every built-in event of the
        automaton, in its order: total occurrences, and strings with at least one.
    """
    events = automaton.expected_occurrences()
    if not events:  # a kind without events: nothing to count
        return {"count": {}, "strings": {}}
    tables = {spec: automaton.event_table(Event.parse(spec)).cpu() for spec in events}
    s = automaton.num_symbols
    moves = tok.targets < s  # positions that emit a symbol (not EOS)
    string_of = torch.repeat_interleave(torch.arange(len(tok)), tok.positions)[moves]
    pairs = tok.states[moves] * s + tok.targets[moves]  # (class, symbol) of every emission
    # the tables' classes (a kind without position classes, a PCFG, has one placeholder class)
    width = next(iter(tables.values())).shape[0] * s
    totals = torch.bincount(pairs, minlength=width)  # [C * S] emissions per pair
    held = torch.unique(string_of * width + pairs)  # (string, pair) with at least one emission
    held_string, held_pair = held // width, held % width
    count: dict[str, int] = {}
    strings: dict[str, int] = {}
    for spec, table in tables.items():
        table = table.reshape(-1)
        count[spec] = int((totals * table).sum())
        hit = table.take(held_pair) > 0
        strings[spec] = int(torch.unique(held_string[hit]).numel())
    return {"count": count, "strings": strings}


def expected_occurrences(automaton: Automaton, num_strings: int) -> dict[str, float]:
    """``num_strings`` x expected occurrences per unconstrained string, for every event."""
    return {spec: num_strings * v for spec, v in automaton.expected_occurrences().items()}


def counted_by_sampler(intervention: Any) -> bool:
    """Whether ``intervention`` (or None) is about an event the tokens cannot recount (a
    grammar's rule uses): its per-string counts are the sampler's (:func:`sampler_counts`)."""
    event = getattr(intervention, "event", None)
    return event is not None and not counted_from_tokens(event)


def sampler_counts(split: str, corpus: Corpus, intervention: Any) -> torch.Tensor:
    """``[K]`` the sampler's per-string counts of an event the tokens cannot recount (a
    grammar's rule uses: the derivation's), as drawn or as cached with the corpus.

    Raises:
        RuntimeError: the corpus carries no such counts (one line).
    """
    if corpus.counts is None or len(corpus.counts) != len(corpus):
        raise RuntimeError(
            f"the {split} corpus carries no per-string counts of {intervention.event} (its count "
            "belongs to the derivation, recorded only by the sampler)"
        )
    return corpus.counts.cpu().long()

r"""Strings conditioned on their length: ``P(y | |y| >= L)``, exactly, for every automaton kind.

:func:`sample_min_length` is rejection on the unconstrained sampler: i.i.d. strings are drawn
and the first ``K`` with at least ``L`` symbols are kept, so their law is exactly the
conditional one. It is bounded by :func:`length_tail`, ``P(|y| >= L)``, computed before
anything is drawn; a split whose expected number of draws, ``K / P(|y| >= L)``, exceeds
:data:`MAX_DRAWS` is refused in one line with the probability.

``P(|y| >= L)`` per kind:

* a PFSA: ``alpha^T W^L 1`` with ``W`` the state-to-state transition matrix (the mass still
  emitting after ``L`` symbols; every reachable state ends with probability 1), ``L``
  vector-matrix products in float64, no cancellation;
* a pushdown automaton: ``1 - sum_{n < L} P(|y| = n)``, the length law being the count law of
  the event "every symbol" in the binning semiring over excursions
  (:class:`~cfl_lightning.sampling.pushdown_law.ExcursionSeries`, exact);
* any other kind with a sampler backend: a seeded pilot of :data:`PILOT_STRINGS` strings (an
  estimate; it only sizes the rounds and the refusal, the draw stays exact).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from cfl_lightning.automata.protocol import Automaton
from cfl_lightning.errors import CflError, RejectionExhaustedError
from cfl_lightning.sampling.backend import backend_for
from cfl_lightning.sampling.corpus import Corpus

__all__ = [
    "MAX_DRAWS",
    "PILOT_STRINGS",
    "length_tail",
    "check_min_length",
    "pilot_length_tail",
    "sample_min_length",
    "select_strings",
    "concat_corpora",
]

#: the most strings a length-conditioned split may be expected to draw (``K / P(|y| >= L)``)
MAX_DRAWS = 10_000_000
#: strings of the pilot that estimates ``P(|y| >= L)`` for kinds without an exact length law
PILOT_STRINGS = 20_000
_PILOT_SEED = 0x5EED_1E46
_ROUND_MAX = 1 << 20  # strings drawn per round at most


def _pfsa_tail(pfsa, min_length: int) -> float:
    """``alpha^T W^L 1`` (module docstring)."""
    matrix = pfsa.transition_matrix().double().cpu()
    mass = torch.zeros(pfsa.num_states, dtype=torch.float64)
    mass[pfsa.initial] = 1.0
    for _ in range(min_length):
        mass = mass @ matrix
    return float(mass.sum().clamp(0.0, 1.0))


def _pushdown_tail(pda, min_length: int) -> float:
    """``1 - sum_{n < L} P(|y| = n)`` from the length law (module docstring)."""
    from cfl_lightning.sampling.pushdown_law import ExcursionSeries

    if min_length == 0:
        return 1.0
    pda = pda.to("cpu")
    every_symbol = (pda.target >= 0).long().reshape(-1, pda.num_symbols)
    log_law = ExcursionSeries.of(pda, every_symbol).log_law(min_length - 1)
    return min(1.0, max(0.0, 1.0 - float(log_law.exp().sum())))


_EXACT: dict[str, Callable[[Automaton, int], float]] = {
    "pfsa": _pfsa_tail, "pushdown": _pushdown_tail,
}


def pilot_length_tail(automaton: Automaton, min_length: int) -> float:
    """A seeded estimate of ``P(|y| >= L)``: the share of :data:`PILOT_STRINGS` unconstrained
    strings with at least ``L`` symbols (with none, the rule-of-three bound ``3 / n``)."""
    generator = torch.Generator(device=automaton.device).manual_seed(_PILOT_SEED)
    pilot = backend_for(automaton).unconstrained(PILOT_STRINGS, generator)
    hits = int((pilot.lengths >= min_length).sum())
    return hits / PILOT_STRINGS if hits else 3.0 / PILOT_STRINGS


def length_tail(automaton: Automaton, min_length: int) -> float:
    """``P(|y| >= L)`` of one string of ``automaton`` (exact for a PFSA and a pushdown
    automaton, else :func:`pilot_length_tail`).

    Args:
        automaton: any automaton with a sampler backend.
        min_length: ``L >= 0``.
    """
    exact = _EXACT.get(automaton.kind)
    return exact(automaton, min_length) if exact else pilot_length_tail(automaton, min_length)


def select_strings(corpus: Corpus, index: Tensor) -> Corpus:
    """The strings ``index`` ``[n]`` of ``corpus``, in that order (counts dropped)."""
    lengths = corpus.lengths[index]
    offsets = torch.zeros(index.numel() + 1, dtype=torch.long)
    offsets[1:] = lengths.cumsum(0)
    shift = torch.repeat_interleave(corpus.offsets[:-1][index] - offsets[:-1], lengths)
    tokens = corpus.tokens[torch.arange(int(offsets[-1])) + shift]
    return Corpus(tokens, offsets)


def concat_corpora(parts: list[Corpus]) -> Corpus:
    """The strings of ``parts``, one corpus after the other (counts dropped)."""
    lengths = torch.cat([torch.zeros(1, dtype=torch.long)] + [p.lengths for p in parts])
    tokens = torch.cat([torch.zeros(0, dtype=torch.long)] + [p.tokens for p in parts])
    return Corpus(tokens, lengths.cumsum(0))


def check_min_length(automaton: Automaton, num_strings: int, min_length: int, what: str) -> float:
    """``P(|y| >= L)``, after refusing a split that cannot be drawn in reasonable time.

    Args:
        automaton: any automaton with a sampler backend.
        num_strings: ``K``.
        min_length: ``L``.
        what: names the split in messages.

    Raises:
        CflError: no string has ``L`` symbols, or ``K / P(|y| >= L)`` exceeds :data:`MAX_DRAWS`.
    """
    tail = length_tail(automaton, min_length)
    if tail <= 0.0:
        raise CflError(f"{what}: no string of this automaton has {min_length} symbols or more")
    if num_strings / tail > MAX_DRAWS:
        raise CflError(
            f"{what}: P(length >= {min_length}) = {tail:.3g}, so {num_strings:,} such strings "
            f"need about {num_strings / tail:.3g} draws, over the limit of {MAX_DRAWS:,} (lower "
            "the minimum length or the number of strings)"
        )
    return tail


def sample_min_length(
    automaton: Automaton,
    num_strings: int,
    min_length: int,
    seed: int,
    *,
    device: torch.device | str = "cpu",
    what: str = "the long split",
) -> Corpus:
    """``K`` i.i.d. strings of ``automaton`` conditioned on ``|y| >= L``, exactly.

    Rejection on the unconstrained sampler in rounds of about ``1.1 (K - kept) / P(|y| >= L)``
    strings (one random stream seeded with ``seed``); the first ``K`` long enough are kept.

    Args:
        automaton: any automaton with a sampler backend.
        num_strings: ``K >= 0``.
        min_length: ``L >= 0``.
        seed: the random stream's seed.
        device: where to sample (the corpus is returned on the CPU).
        what: names the split in messages (e.g. ``"data.long_min_length 40"``).

    Raises:
        CflError: no string has ``L`` symbols, or ``K / P(|y| >= L)`` exceeds :data:`MAX_DRAWS`.
    """
    if num_strings == 0:
        return Corpus(torch.zeros(0, dtype=torch.long), torch.zeros(1, dtype=torch.long))
    automaton = automaton.to(device)
    tail = check_min_length(automaton, num_strings, min_length, what)
    backend = backend_for(automaton)
    generator = torch.Generator(device=automaton.device).manual_seed(seed)
    parts, kept, drawn = [], 0, 0
    while kept < num_strings:
        if drawn > 10 * MAX_DRAWS:  # pragma: no cover - only if the tail were badly wrong
            raise RejectionExhaustedError(f"{what}: {drawn:,} draws found {kept} strings")
        need = num_strings - kept
        size = min(_ROUND_MAX, math.ceil(1.1 * need / tail) + 8)
        batch = backend.unconstrained(size, generator).to("cpu")
        drawn += size
        index = torch.nonzero(batch.lengths >= min_length).flatten()[:need]
        parts.append(select_strings(batch, index))
        kept += int(index.numel())
    return concat_corpora(parts)

"""Targeted test strings: extra test strings that surely reach the event's at-stake states.

With ``test_target_strings`` a data module's test set is ``test_strings`` unconstrained strings
followed by ``test_target_strings`` strings conditioned on reaching a state where the event is
at stake (:func:`~cfl_lightning.sampling.visits.sample_visiting`); test batches then carry
``weights``, the importance weights ``P(y) / mix(y)`` that keep every test value an estimate
under the automaton's own distribution (:func:`~cfl_lightning.sampling.visits.mixture_weights`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from cfl_lightning.automata import Automaton, Event
from cfl_lightning.data.batching import BatchDataset, TokenizedCorpus
from cfl_lightning.errors import CflError
from cfl_lightning.sampling import Corpus
from cfl_lightning.sampling.visits import (
    mixture_weights,
    reach_probability,
    sample_visiting,
    stake_states,
)

__all__ = ["at_stake", "sample_targeted", "mix", "test_weights", "WithWeights"]


def at_stake(
    automaton: Automaton, event: Optional[Event], test_target_strings: int
) -> tuple[Optional[Tensor], Optional[float]]:
    """The event's at-stake states, and ``P(reach)`` when targeted strings are asked for.

    Args:
        automaton: the automaton.
        event: the data module's event (None without one).
        test_target_strings: the number of targeted strings asked for.

    Returns:
        ``(stake, p_reach)``: ``[C]`` bool (None without an event) and the probability that a
        string reaches an at-stake state (None without targeted strings).

    Raises:
        CflError: targeted strings without an event, or an event whose at-stake states no
            string reaches.
    """
    stake = None if event is None else stake_states(automaton, event)
    if not test_target_strings:
        return stake, None
    if stake is None:
        raise CflError("test_target_strings needs an event (data.event)")
    probability = reach_probability(automaton, stake)
    if probability <= 0:
        raise CflError(f"no string of the automaton reaches a state where {event} is at stake")
    return stake, probability


def sample_targeted(
    automaton: Automaton, num_strings: int, seed: int, stake: Tensor, device: torch.device
) -> Corpus:
    """``num_strings`` strings conditioned on reaching an at-stake state, sampled on ``device``.

    Returns:
        the corpus on the CPU (no event counts).
    """
    on_device = automaton.to(device)
    gen = torch.Generator(device=on_device.device).manual_seed(seed)
    return sample_visiting(on_device, num_strings, gen, stake).to("cpu")


def mix(plain: Corpus, target: Corpus) -> Corpus:
    """The plain test strings followed by the targeted ones (no event counts)."""
    k, m = len(plain), len(target)
    parts = [(torch.arange(k), plain), (torch.arange(k, k + m), target)]
    parts = [(i, Corpus(c.tokens, c.offsets, None)) for i, c in parts if len(c)]
    return Corpus.interleave(parts, k + m)


def test_weights(
    tokenized: TokenizedCorpus, stake: Tensor, num_plain: int, num_target: int, p_reach: float
) -> Tensor:
    """``[K]`` float64 importance weights ``P(y) / mix(y)`` of a mixed test set.

    Args:
        tokenized: the test strings' per-position arrays (``states`` ``[sum of n + 1]``).
        stake: ``[C]`` bool at-stake classes.
        num_plain: the unconstrained strings (``test_strings``).
        num_target: the targeted strings (``test_target_strings``).
        p_reach: ``P(reach)`` (:func:`at_stake`).
    """
    at_stake = stake[tokenized.states]
    owner = torch.repeat_interleave(torch.arange(len(tokenized)), tokenized.positions)
    reached = torch.zeros(len(tokenized), dtype=torch.long).index_add_(
        0, owner, at_stake.long()
    ) > 0
    return mixture_weights(reached, num_plain, num_target, p_reach)


class WithWeights(torch.utils.data.Dataset):
    """A :class:`BatchDataset` whose batches also carry ``weights`` ``[B]`` (one per string)."""

    def __init__(self, batches: BatchDataset, weights: Tensor) -> None:
        self.batches, self.weights = batches, weights

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        batch = self.batches[i]
        batch["weights"] = self.weights[self.batches.batches[i]]
        return batch

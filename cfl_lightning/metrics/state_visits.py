"""``StateVisits``: how many evaluation positions fall in each automaton state (torchmetrics).

A target's unweighted contribution is an average over the positions at which it is at stake
(:func:`cfl_lightning.sampling.visits.stake_states`); these counts say how many there were --
with none, the contribution is unknown. Counts are plain (not importance-weighted) and summed
across processes, so under DDP every process sees the single-process value.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from cfl_lightning.sampling.visits import position_counts

__all__ = ["StateVisits"]


class StateVisits(Metric):
    """Number of real positions in each state, over every batch fed to :meth:`update`.

    Args:
        num_states: ``Q``.
        kwargs: passed to :class:`torchmetrics.Metric`.

    Example:
        >>> visits = StateVisits(3)
        >>> visits.update(torch.tensor([[0, 1, 1, 2]]), torch.tensor([[True, True, True, False]]))
        >>> visits.compute().tolist()
        [1, 2, 0]
    """

    full_state_update = False
    is_differentiable = False

    counts: Tensor

    def __init__(self, num_states: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_states = int(num_states)
        zeros = torch.zeros(self.num_states, dtype=torch.long)
        self.add_state("counts", zeros, dist_reduce_fx="sum")

    def update(self, states: Tensor, mask: Tensor) -> None:
        """Add one batch: ``states`` ``[B, T]`` (state after each prefix), ``mask`` ``[B, T]``."""
        self.counts += position_counts(states, mask, self.num_states).to(self.counts)

    def compute(self) -> Tensor:
        """``[Q]`` int64 positions per state."""
        return self.counts.clone()

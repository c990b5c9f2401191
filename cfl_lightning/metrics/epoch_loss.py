"""``EpochLoss``: exact epoch aggregates of the per-position KL and cross-entropy.

A torchmetrics ``Metric`` with four float64 sum states (``dist_reduce_fx="sum"``: summed across
processes on ``compute``): the per-position KL to the automaton and the next-symbol cross-entropy
over all real positions, the number of strings and the number of real positions. The logged
values are ratios of these global sums, so they do not depend on how batches are split between
processes. ``reset``, device moves and ``merge_state`` are torchmetrics'.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from cfl_lightning.losses import cross_entropy_per_position, kl_per_position

__all__ = ["EpochLoss", "EPOCH_LOSS_NAMES"]

#: the names :meth:`EpochLoss.compute` returns (logged as ``STAGE/NAME``)
EPOCH_LOSS_NAMES = ("kl_per_string", "kl_per_token", "ce_per_string")
_SUMS = ("kl", "ce", "strings", "tokens")


class EpochLoss(Metric):
    """Running sums of the KL and CE over an epoch's strings; exact per-string/per-token ratios.

    Example:
        >>> batch = {"target_probs": torch.tensor([[[0.5, 0.5], [1.0, 0.0]]]),
        ...          "target_ids": torch.tensor([[0, 1]]), "mask": torch.tensor([[True, True]])}
        >>> loss = EpochLoss()
        >>> loss.update(torch.full((1, 2, 2), 0.5).log(), batch)
        >>> {k: round(float(v), 4) for k, v in loss.compute().items()}
        {'kl_per_string': 0.6931, 'kl_per_token': 0.3466, 'ce_per_string': 1.3863}
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    kl: Tensor
    ce: Tensor
    strings: Tensor
    tokens: Tensor

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("compute_with_cache", False)  # callers add keys to the returned dict
        super().__init__(**kwargs)
        for name in _SUMS:
            self.add_state(name, default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self._strings = 0

    def update(self, log_probs: Tensor, batch: Mapping[str, Tensor]) -> None:
        """Add one batch.

        Args:
            log_probs: ``[B, T, |S|+1]`` model log-probabilities (EOS last).
            batch: ``target_probs`` ``[B, T, |S|+1]``, ``target_ids`` ``[B, T]``, ``mask`` ``[B, T]``,
                optionally ``weights`` ``[B]`` (per-string importance weights; the epoch values
                are then weighted averages).
        """
        mask = batch["mask"].bool()
        log_probs = log_probs.detach()
        kl = kl_per_position(batch["target_probs"], log_probs, mask).sum(dim=1)
        ce = cross_entropy_per_position(log_probs, batch["target_ids"], mask).sum(dim=1)
        weights = batch.get("weights")
        if weights is None:
            values = {
                "kl": kl.sum(),
                "ce": ce.sum(),
                "strings": torch.tensor(float(mask.shape[0])),
                "tokens": mask.sum(),
            }
        else:  # importance-weighted strings (e.g. test sets with targeted strings)
            w = weights.to(device=kl.device, dtype=torch.float64)
            values = {
                "kl": (w * kl.double()).sum(),
                "ce": (w * ce.double()).sum(),
                "strings": w.sum(),
                "tokens": (w * mask.sum(dim=1)).sum(),
            }
        for name, value in values.items():
            state = getattr(self, name)
            setattr(self, name, state + value.to(device=state.device, dtype=torch.float64))

    def compute(self) -> dict[str, Tensor]:
        """``kl_per_string``, ``kl_per_token``, ``ce_per_string`` (float64 scalars, global).

        Under DDP every process gets the same values (the sums are reduced first). Without any
        string, the values are NaN; use :meth:`num_strings` to tell.
        """
        strings, tokens = self.strings, self.tokens
        nan = torch.full_like(strings, float("nan"))
        self._strings = int(strings)
        return {
            "kl_per_string": torch.where(strings > 0, self.kl / strings.clamp_min(1), nan),
            "kl_per_token": torch.where(tokens > 0, self.kl / tokens.clamp_min(1), nan),
            "ce_per_string": torch.where(strings > 0, self.ce / strings.clamp_min(1), nan),
        }

    def _wrap_compute(self, compute: Any) -> Any:
        """torchmetrics' compute (sync, unsync), quiet about a process that saw no batch: under
        DDP it still joins the reduction, and its values are the global ones."""
        wrapped = super()._wrap_compute(compute)

        def quiet(*args: Any, **kwargs: Any) -> Any:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*before the ``update`` method")
                return wrapped(*args, **kwargs)

        return quiet

    def num_strings(self) -> int:
        """Strings counted by the last :meth:`compute` (all processes)."""
        return self._strings

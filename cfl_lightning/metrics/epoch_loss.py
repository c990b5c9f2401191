"""``EpochLoss``: exact epoch aggregates of the per-position KL and cross-entropy.

Four torchmetrics ``SumMetric`` s (float64, summed across processes on ``compute``) hold the
epoch's sums: the per-position KL to the automaton and the next-symbol cross-entropy over all
real positions, the number of strings and the number of real positions. The logged values are
ratios of these global sums, so they do not depend on how batches are split between processes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch
from torch import Tensor, nn
from torchmetrics import SumMetric

from cfl_lightning.losses import cross_entropy_per_position, kl_per_position

__all__ = ["EpochLoss", "EPOCH_LOSS_NAMES"]

#: the names :meth:`EpochLoss.compute` returns (logged as ``STAGE/NAME``)
EPOCH_LOSS_NAMES = ("kl_per_string", "kl_per_token", "ce_per_string")
_SUMS = ("kl", "ce", "strings", "tokens")


class EpochLoss(nn.Module):
    """Running sums of the KL and CE over an epoch's strings; exact per-string/per-token ratios.

    Example:
        >>> batch = {"target_probs": torch.tensor([[[0.5, 0.5], [1.0, 0.0]]]),
        ...          "target_ids": torch.tensor([[0, 1]]), "mask": torch.tensor([[True, True]])}
        >>> loss = EpochLoss()
        >>> _ = loss.update(torch.full((1, 2, 2), 0.5).log(), batch)
        >>> {k: round(float(v), 4) for k, v in loss.compute().items()}
        {'kl_per_string': 0.6931, 'kl_per_token': 0.3466, 'ce_per_string': 1.3863}
    """

    def __init__(self) -> None:
        super().__init__()
        self.sums = nn.ModuleDict(
            {name: SumMetric(nan_strategy="disable").set_dtype(torch.float64) for name in _SUMS}
        )
        self._strings = 0

    def update(self, log_probs: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Add one batch.

        Args:
            log_probs: ``[B, T, |S|+1]`` model log-probabilities (EOS last).
            batch: ``target_probs`` ``[B, T, |S|+1]``, ``target_ids`` ``[B, T]``, ``mask`` ``[B, T]``,
                optionally ``weights`` ``[B]`` (per-string importance weights; the epoch values
                are then weighted averages).

        Returns:
            ``(kl, ce)``: ``[B]`` per-string sums over the real positions (in ``log_probs``'s
            dtype, differentiable).
        """
        mask = batch["mask"].bool()
        kl = kl_per_position(batch["target_probs"], log_probs, mask).sum(dim=1)
        ce = cross_entropy_per_position(log_probs, batch["target_ids"], mask).sum(dim=1)
        weights = batch.get("weights")
        if weights is None:
            values = {
                "kl": kl.detach().sum(),
                "ce": ce.detach().sum(),
                "strings": torch.tensor(float(mask.shape[0])),
                "tokens": mask.sum(),
            }
        else:  # importance-weighted strings (e.g. test sets with targeted strings)
            w = weights.to(device=kl.device, dtype=torch.float64)
            values = {
                "kl": (w * kl.detach().double()).sum(),
                "ce": (w * ce.detach().double()).sum(),
                "strings": w.sum(),
                "tokens": (w * mask.sum(dim=1)).sum(),
            }
        for name, value in values.items():
            self.sums[name].update(value.to(torch.float64))
        return kl, ce

    def compute(self) -> dict[str, Tensor]:
        """``kl_per_string``, ``kl_per_token``, ``ce_per_string`` (float64 scalars, global).

        Under DDP every process gets the same values (the sums are reduced first). Without any
        string, the values are NaN; use :meth:`num_strings` to tell.
        """
        with warnings.catch_warnings():  # a process without batches still joins the reduction
            warnings.filterwarnings("ignore", message=".*before the ``update`` method")
            total = {name: metric.compute() for name, metric in self.sums.items()}
        strings, tokens = total["strings"], total["tokens"]
        nan = torch.full_like(strings, float("nan"))
        self._strings = int(strings)
        return {
            "kl_per_string": torch.where(strings > 0, total["kl"] / strings.clamp_min(1), nan),
            "kl_per_token": torch.where(tokens > 0, total["kl"] / tokens.clamp_min(1), nan),
            "ce_per_string": torch.where(strings > 0, total["ce"] / strings.clamp_min(1), nan),
        }

    def num_strings(self) -> int:
        """Strings counted by the last :meth:`compute` (all processes)."""
        return self._strings

    def reset(self) -> None:
        """Start a new epoch."""
        for metric in self.sums.values():
            metric.reset()

    def merge_state(self, other: EpochLoss) -> None:
        """Add another instance's sums (e.g. one fed the other half of the data)."""
        for name, metric in self.sums.items():
            metric.merge_state(other.sums[name])

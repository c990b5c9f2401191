"""One member's end-of-epoch bookkeeping: LR plateau schedule, checkpoint, early stopping.

The same decisions a sequential ``python -m cfl_lightning fit`` takes after every validation,
from the member's own ``val/kl_per_string``:

* the learning rate follows ``torch.optim.lr_scheduler.ReduceLROnPlateau`` (mode min, the model's
  ``lr_factor`` and ``lr_patience``; the real class drives a one-parameter dummy optimizer, so
  its threshold and patience semantics are PyTorch's own);
* the best checkpoint is replaced when the value is strictly below the best so far (Lightning's
  ``ModelCheckpoint`` in mode min; a non-finite value counts as ``+inf``);
* training stops after ``patience`` validations without a strict improvement larger than
  ``min_delta``, or at once on a non-finite value (Lightning's ``EarlyStopping`` defaults).
"""

from __future__ import annotations

import math

import torch

__all__ = ["MemberSchedule"]


class MemberSchedule:
    """The plateau schedule, best score and early stopping of one member.

    Args:
        lr: initial learning rate.
        lr_factor: ``ReduceLROnPlateau`` factor.
        lr_patience: ``ReduceLROnPlateau`` patience.
        patience: early-stopping patience (validations without improvement).
        min_delta: early-stopping minimum improvement.
    """

    def __init__(
        self, lr: float, lr_factor: float, lr_patience: int, patience: int = 10, min_delta: float = 0.0
    ) -> None:
        self._dummy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
        self._plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self._dummy, mode="min", factor=lr_factor, patience=lr_patience
        )
        self.patience, self.min_delta = int(patience), float(min_delta)
        self.best = math.inf  # best checkpoint score
        self._stop_best = math.inf  # early stopping's reference
        self.wait = 0
        self.epochs = 0
        self.stopped = False

    @property
    def lr(self) -> float:
        """The current learning rate."""
        return float(self._dummy.param_groups[0]["lr"])

    def update(self, value: float) -> bool:
        """Record one epoch's validation ``value``; returns whether it is a new best checkpoint."""
        self.epochs += 1
        self._plateau.step(value)
        finite = math.isfinite(value)
        improved = (value if finite else math.inf) < self.best
        if improved:
            self.best = value
        if not finite:
            self.stopped = True
        elif value < self._stop_best - self.min_delta:
            self._stop_best, self.wait = value, 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped = True
        return improved

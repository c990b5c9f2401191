"""One member's end-of-epoch bookkeeping: LR plateau schedule, checkpoint, early stopping.

The same decisions a sequential ``python -m cfl_lightning fit`` takes after every validation,
from the member's own ``val/kl_per_string``:

* the learning rate follows the scheduler of the member's own ``configure_optimizers()`` (the
  shipped models' ``ReduceLROnPlateau``), stepped with the value; the optimizer it returns
  holds the current learning rate (the batched trainer reads it from there, the loop trainer
  trains with that optimizer itself);
* the best checkpoint is replaced when the value is strictly below the best so far (Lightning's
  ``ModelCheckpoint`` in mode min; a non-finite value counts as ``+inf``);
* training stops after ``patience`` validations without a strict improvement larger than
  ``min_delta``, or at once on a non-finite value (Lightning's ``EarlyStopping`` defaults).
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["MemberSchedule"]


class MemberSchedule:
    """The plateau schedule, best score and early stopping of one member.

    Args:
        model: the member's ``LanguageModel`` (its ``configure_optimizers()`` gives the Adam
            optimizer and the plateau scheduler of its sequential run).
        patience: early-stopping patience (validations without improvement).
        min_delta: early-stopping minimum improvement.

    Raises:
        ValueError: the model's optimizer is not Adam or its scheduler is not a plateau one.
    """

    def __init__(self, model: Any, patience: int = 10, min_delta: float = 0.0) -> None:
        config = model.configure_optimizers()
        self.optimizer = config["optimizer"]
        scheduler = config["lr_scheduler"]
        self._plateau = scheduler["scheduler"] if isinstance(scheduler, dict) else scheduler
        if type(self.optimizer) is not torch.optim.Adam or not isinstance(
            self._plateau, torch.optim.lr_scheduler.ReduceLROnPlateau
        ):
            raise ValueError("the ensemble reproduces Adam with ReduceLROnPlateau only")
        self.patience, self.min_delta = int(patience), float(min_delta)
        self.best = math.inf  # best checkpoint score
        self._stop_best = math.inf  # early stopping's reference
        self.wait = 0
        self.epochs = 0
        self.stopped = False

    @property
    def lr(self) -> float:
        """The current learning rate."""
        return float(self.optimizer.param_groups[0]["lr"])

    @property
    def stopped_early(self) -> bool:
        """Lightning's ``EarlyStopping.stopped_epoch > 0`` (a stop after the first epoch)."""
        return self.stopped and self.epochs > 1

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

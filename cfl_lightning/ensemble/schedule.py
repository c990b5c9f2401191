"""Every member's end-of-epoch bookkeeping at once: LR plateau schedule, best checkpoint, early stop.

The decisions a sequential ``python -m cfl_lightning fit`` takes after every validation, from
the member's own ``val/kl_per_string`` (as Lightning logs it: rounded to float32), one entry
per member:

* the learning rate follows ``torch.optim.lr_scheduler.ReduceLROnPlateau`` with the settings of
  the members' own ``configure_optimizers()`` (mode min; read from the scheduler object, see
  :meth:`MemberSchedules.from_model`);
* the best checkpoint is replaced when the value is strictly below the best so far (Lightning's
  ``ModelCheckpoint`` in mode min; a non-finite value counts as ``+inf``);
* training stops after ``patience`` validations without an improvement larger than
  ``min_delta`` (compared in float32, as Lightning's ``EarlyStopping`` does), or at once on a
  non-finite value (``check_finite``).

All of it is module state (buffers, saved in checkpoints); a stopped member's entries are frozen.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["MemberSchedules"]


class MemberSchedules(nn.Module):
    """Plateau schedules, best scores and early stopping of M members (``[M]`` buffers).

    Args:
        members: ``M``.
        factor: the plateau scheduler's ``factor``.
        plateau_patience: its ``patience``.
        threshold: its ``threshold``.
        threshold_mode: its ``threshold_mode`` (``"rel"`` or ``"abs"``).
        cooldown: its ``cooldown``.
        min_lr: its ``min_lrs[0]``.
        eps: its ``eps``.
        patience: early-stopping patience (validations without improvement).
        min_delta: early-stopping minimum improvement.
    """

    stopped: Tensor
    epochs: Tensor

    def __init__(
        self,
        members: int,
        *,
        factor: float = 0.1,
        plateau_patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float = 0.0,
        eps: float = 1e-8,
        patience: int = 10,
        min_delta: float = 0.0,
    ) -> None:
        super().__init__()
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        self.factor, self.plateau_patience = float(factor), int(plateau_patience)
        self.threshold, self.threshold_mode = float(threshold), threshold_mode
        self.cooldown, self.min_lr, self.eps = int(cooldown), float(min_lr), float(eps)
        self.patience, self.min_delta = int(patience), float(min_delta)
        inf64 = torch.full((members,), math.inf, dtype=torch.float64)
        zeros = torch.zeros(members, dtype=torch.long)
        self.register_buffer("plateau_best", inf64.clone())
        self.register_buffer("plateau_bad", zeros.clone())
        self.register_buffer("plateau_cooldown", zeros.clone())
        self.register_buffer("best", inf64.clone())  # best checkpoint score
        self.register_buffer("stop_best", torch.full((members,), math.inf))  # float32, as Lightning
        self.register_buffer("wait", zeros.clone())
        self.register_buffer("epochs", zeros.clone())
        self.register_buffer("stopped", torch.zeros(members, dtype=torch.bool))

    @classmethod
    def from_model(cls, model: Any, members: int, patience: int, min_delta: float) -> MemberSchedules:
        """The schedules of ``members`` copies of ``model``'s ``configure_optimizers()``.

        Raises:
            ValueError: the model's optimizer is not Adam (default betas and eps, no weight decay)
                or its scheduler is not a ``ReduceLROnPlateau`` in mode min.
        """
        config = model.configure_optimizers()
        optimizer = config["optimizer"]
        scheduler = config["lr_scheduler"]
        plateau = scheduler["scheduler"] if isinstance(scheduler, dict) else scheduler
        group = optimizer.param_groups[0]
        if (
            type(optimizer) is not torch.optim.Adam
            or tuple(group["betas"]) != (0.9, 0.999)
            or group["eps"] != 1e-8
            or group["weight_decay"] != 0
            or group["amsgrad"]
            or not isinstance(plateau, torch.optim.lr_scheduler.ReduceLROnPlateau)
            or plateau.mode != "min"
        ):
            raise ValueError(
                "the ensemble reproduces Adam (default betas, eps, no weight decay) with "
                "ReduceLROnPlateau in mode min only"
            )
        return cls(
            members,
            factor=plateau.factor,
            plateau_patience=plateau.patience,
            threshold=plateau.threshold,
            threshold_mode=plateau.threshold_mode,
            cooldown=plateau.cooldown,
            min_lr=float(plateau.min_lrs[0]),
            eps=plateau.eps,
            patience=patience,
            min_delta=min_delta,
        )

    @property
    def stopped_early(self) -> Tensor:
        """``[M]`` bool: Lightning's ``EarlyStopping.stopped_epoch > 0`` (a stop after epoch 1)."""
        return self.stopped & (self.epochs > 1)

    @torch.no_grad()
    def update(self, values: Tensor, lr: Tensor, live: Tensor) -> tuple[Tensor, Tensor]:
        """Record one validation of the ``live`` members.

        Args:
            values: ``[M]`` float32 ``val/kl_per_string`` (anything where not ``live``).
            lr: ``[M]`` float64 current learning rates.
            live: ``[M]`` bool, members that trained this epoch.

        Returns:
            ``(improved, lr)``: ``[M]`` bool new best checkpoints and the ``[M]`` float64 learning
            rates for the next epoch (unchanged where not ``live``).
        """
        values = values.to(self.best.device, torch.float32)
        live = live.to(self.best.device)
        lr = lr.to(self.best.device, torch.float64)
        current = values.to(torch.float64)
        finite = torch.isfinite(current)
        self.epochs += live.long()
        # ReduceLROnPlateau.step (mode min)
        if self.threshold_mode == "rel":
            better = current < self.plateau_best * (1.0 - self.threshold)
        else:
            better = current < self.plateau_best - self.threshold
        self.plateau_best.copy_(torch.where(live & better, current, self.plateau_best))
        bad = torch.where(better, 0, self.plateau_bad + 1)
        cooling = self.plateau_cooldown > 0
        cooldown = torch.where(cooling, self.plateau_cooldown - 1, self.plateau_cooldown)
        bad = torch.where(cooling, 0, bad)
        reduce = bad > self.plateau_patience
        reduced = torch.clamp_min(lr * self.factor, self.min_lr)
        new_lr = torch.where(reduce & (lr - reduced > self.eps), reduced, lr)
        cooldown = torch.where(reduce, self.cooldown, cooldown)
        bad = torch.where(reduce, 0, bad)
        self.plateau_bad.copy_(torch.where(live, bad, self.plateau_bad))
        self.plateau_cooldown.copy_(torch.where(live, cooldown, self.plateau_cooldown))
        new_lr = torch.where(live, new_lr, lr)
        # ModelCheckpoint (mode min, top 1)
        improved = live & (torch.where(finite, current, math.inf) < self.best)
        self.best.copy_(torch.where(improved, current, self.best))
        # EarlyStopping (mode min, check_finite): float32 arithmetic, as Lightning's tensors
        gain = (values + self.min_delta) < self.stop_best
        self.stop_best.copy_(torch.where(live & finite & gain, values, self.stop_best))
        wait = torch.where(gain, 0, self.wait + 1)
        self.wait.copy_(torch.where(live & finite, wait, self.wait))
        stop = ~finite | (self.wait >= self.patience)
        self.stopped |= live & stop
        return improved, new_lr

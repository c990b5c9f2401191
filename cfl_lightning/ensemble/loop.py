"""Members trained one after another in one process, each with its own shipped model.

On a CPU the batched networks of :class:`~cfl_lightning.ensemble.EnsembleTrainer` are no faster
per token than the shipped models (oneDNN's fused LSTM does the same small matrix products; see
``benchmarks/bench_ensemble.py``), so there the gain of an ensemble is the one process: no
interpreter, import and Lightning start-up per run, no Lightning per-step hooks.
:class:`LoopTrainer` trains each member with its own module in a plain loop with the sequential
run's semantics (the same batches in the same order, loss, clipping, Adam, plateau schedule,
early stopping and best checkpoint as :class:`~cfl_lightning.ensemble.EnsembleTrainer`;
tested equal to the Lightning run) and offers the same ``fit``/``predict`` interface.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from cfl_lightning.ensemble.schedule import MemberSchedule
from cfl_lightning.ensemble.trainer import MemberOutcome, TrainSettings
from cfl_lightning.losses import cross_entropy_per_position, kl_per_position

__all__ = ["LoopTrainer"]


def _to(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


class LoopTrainer:
    """Trains members (shipped model instances + data modules) one after another.

    Args:
        models: the members' freshly built ``LanguageModel`` instances.
        datamodules: their ``PFADataModule`` instances.
        settings: the runs' Trainer / early-stopping settings.
        device: where to train.
        record_steps: keep every step's loss (for tests).
    """

    def __init__(
        self,
        models: list[Any],
        datamodules: list[Any],
        settings: TrainSettings = TrainSettings(),
        *,
        device: torch.device | str = "cpu",
        record_steps: bool = False,
    ) -> None:
        if not models or len(models) != len(datamodules):
            raise ValueError("need one data module per model, and at least one model")
        self.models, self.datamodules, self.settings = models, datamodules, settings
        self.device = torch.device(device)
        self.record_steps = record_steps

    def _loss(self, model: Any, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(optimized loss, kl sum)`` of one batch (mean over strings of per-string sums)."""
        log_probs = torch.log_softmax(model(batch["input_ids"]), dim=-1)
        mask = batch["mask"].bool()
        kl = kl_per_position(batch["target_probs"], log_probs, mask).sum(dim=1)
        if model.loss_name == "kl":
            return kl.mean(), kl.sum()
        ce = cross_entropy_per_position(log_probs, batch["target_ids"], mask).sum(dim=1)
        return ce.mean(), kl.sum()

    def _cached(self, loader: Any) -> list[dict[str, Tensor]]:
        """Every batch of ``loader``'s dataset, collated once and moved to the device.

        The corpus is fixed; an epoch only reorders its batches (``loader.sampler.order``), so
        collating them again every epoch, as a ``DataLoader`` does, is wasted work.
        """
        dataset = loader.dataset
        return [_to(dataset[i], self.device) for i in range(len(dataset))]

    @torch.no_grad()
    def _validate(self, model: Any, batches: list[dict[str, Tensor]]) -> float:
        model.eval()
        kl = torch.zeros((), dtype=torch.float64, device=self.device)
        strings = 0
        for batch in batches:
            kl += self._loss(model, batch)[1].to(torch.float64)
            strings += int(batch["mask"].shape[0])
        value = float(kl) / max(strings, 1)
        return float(torch.tensor(value, dtype=torch.float32))  # as Lightning logs it

    def _fit_one(self, model: Any, dm: Any) -> MemberOutcome:
        started = time.perf_counter()
        dm.setup("fit")
        model.to(self.device)
        settings = self.settings
        schedule = MemberSchedule(model, settings.patience, settings.min_delta)
        optimizer = schedule.optimizer  # the model's own Adam, driven by its own scheduler
        for group in optimizer.param_groups:  # same arithmetic, one kernel per operation
            group["foreach"] = True
        best = {k: v.detach().clone() for k, v in model.state_dict().items()}
        loader = dm.train_dataloader()
        train, val = self._cached(loader), self._cached(dm.val_dataloader())
        history: list[float] = []
        steps: list[float] = []
        for epoch in range(settings.max_epochs):
            model.train()
            for index in loader.sampler.order(epoch):  # the DataLoader's order in this epoch
                batch = train[index]
                optimizer.zero_grad(set_to_none=True)
                loss, _ = self._loss(model, batch)
                loss.backward()
                if settings.gradient_clip_val is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), settings.gradient_clip_val)
                optimizer.step()
                if self.record_steps:
                    steps.append(float(loss.detach()))
            value = self._validate(model, val)
            history.append(value)
            if schedule.update(value):
                best = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if schedule.stopped:
                break
        return MemberOutcome(
            best_state={k: v.cpu() for k, v in best.items()},
            best_val_loss=schedule.best if schedule.best != float("inf") else None,
            epochs=schedule.epochs,
            train_time_s=time.perf_counter() - started,
            val_history=history,
            step_losses=steps,
            stopped_early=schedule.stopped_early,
            steps=schedule.epochs * len(train),
        )

    def fit(self) -> list[MemberOutcome]:
        """Train every member to its early stop (or ``max_epochs``); one outcome per member."""
        return [self._fit_one(m, dm) for m, dm in zip(self.models, self.datamodules)]

    @torch.no_grad()
    def predict(
        self,
        split: str,
        states: list[dict[str, Tensor]],
        update: Callable[[int, Tensor, Tensor, Tensor], None],
    ) -> None:
        """As :meth:`EnsembleTrainer.predict`, with each member's own batches of ``split``."""
        for i, (model, dm, state) in enumerate(zip(self.models, self.datamodules, states)):
            dm.setup("test" if split == "test" else "fit")
            model.load_state_dict(state)
            model.to(self.device).eval()
            loader = {"test": dm.test_dataloader, "val": dm.val_dataloader}[split]()
            for batch in loader:
                batch = _to(batch, self.device)
                log_probs = torch.log_softmax(model(batch["input_ids"]), dim=-1)
                update(i, log_probs, batch["states"], batch["mask"].bool())

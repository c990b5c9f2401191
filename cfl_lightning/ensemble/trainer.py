"""Train M language models of one architecture at once, each as its own sequential run would.

A plain PyTorch loop rather than a Lightning ``Trainer``: the members are small (about 128k
parameters) and a Trainer's per-step hooks would cost more than a batched step, while none of
its machinery (one optimizer, one monitored scalar, one early-stopping state) fits M members
that each schedule, checkpoint and stop on their own. What every member gets is the sequential
run's, member by member:

* initial weights: the member's own model instance (built by the caller under its seed, exactly
  as ``python -m cfl_lightning fit`` builds it), stacked ``[M, P]``
  (:class:`~cfl_lightning.ensemble.stacking.ParameterLayout`);
* data: its own ``PFADataModule`` corpus and batches, in the epoch's order of the data module's
  own ``BatchOrderSampler`` (``order(epoch)``). Within an epoch the members need not move in
  lockstep (:mod:`~cfl_lightning.ensemble.ticks`): a tick trains some of them, each on its next
  batch, and only those are packed and computed; a member that has finished its epoch waits for
  the others. Each member's sequence of updates is the sequential one;
* loss: the shipped ``kl_per_position`` / ``cross_entropy_per_position``, summed per member and
  divided by its batch's strings (the mean over strings of the per-string sums);
* gradient clipping by its own norm, Adam with its own state and learning rate
  (:mod:`~cfl_lightning.ensemble.optim`);
* after every epoch, its own ``val/kl_per_string`` drives ``ReduceLROnPlateau``, the best
  checkpoint and early stopping (:class:`~cfl_lightning.ensemble.schedule.MemberSchedule`);
  a stopped member is frozen and dropped from the batched tensors, and training ends when all
  members have stopped or ``max_epochs`` is reached.

Dropout masks are drawn per member from the global generator, so with dropout the members'
trajectories are statistically, not bitwise, those of sequential runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.ensemble.lstm import StackedLSTM
from cfl_lightning.ensemble.optim import StackedAdam, clip_rows_
from cfl_lightning.ensemble.packing import PackedBatch, PackedCorpora
from cfl_lightning.ensemble.schedule import MemberSchedule
from cfl_lightning.ensemble.stacking import ParameterLayout
from cfl_lightning.ensemble.ticks import by_width, lockstep
from cfl_lightning.ensemble.transformer import StackedTransformer
from cfl_lightning.losses import cross_entropy_per_position, kl_per_position

__all__ = ["TrainSettings", "MemberOutcome", "EnsembleTrainer", "stacked_network"]

# the model hyperparameters that every member must share
_SHARED = ("num_layers", "dropout", "loss", "lr", "lr_factor", "lr_patience")


@dataclass(frozen=True)
class TrainSettings:
    """The Trainer / callback settings of a sequential run that the ensemble reproduces.

    Args:
        max_epochs: ``trainer.max_epochs``.
        gradient_clip_val: ``trainer.gradient_clip_val`` (norm clipping; None: no clipping).
        patience: ``early_stopping.patience``.
        min_delta: ``early_stopping.min_delta``.
    """

    max_epochs: int = 50
    gradient_clip_val: float | None = 5.0
    patience: int = 10
    min_delta: float = 0.0


@dataclass
class MemberOutcome:
    """What training left for one member.

    Attributes:
        best_state: the best checkpoint's parameters (``model.load_state_dict`` ready, on CPU).
        best_val_loss: its ``val/kl_per_string`` (None if no finite value was seen).
        epochs: completed training epochs (Lightning's ``trainer.current_epoch`` after fit).
        train_time_s: wall time from the start of :meth:`EnsembleTrainer.fit` to the member's
            last epoch (the ensemble's time, shared by all members).
        val_history: ``val/kl_per_string`` after every epoch.
        step_losses: the optimized loss at each of its steps (only with ``record_steps``).
        stopped_early: whether early stopping ended its training (Lightning's rule).
        steps: its optimizer steps.
    """

    best_state: dict[str, Tensor]
    best_val_loss: float | None
    epochs: int
    train_time_s: float
    stopped_early: bool = False
    steps: int = 0
    val_history: list[float] = field(default_factory=list)
    step_losses: list[float] = field(default_factory=list)


def stacked_network(model: torch.nn.Module) -> Any:
    """The batched forward matching a shipped language model's class."""
    from cfl_lightning.models import LSTMLanguageModel, TransformerLanguageModel

    if isinstance(model, LSTMLanguageModel):
        return StackedLSTM.from_model(model)
    if isinstance(model, TransformerLanguageModel):
        return StackedTransformer.from_model(model)
    raise TypeError(f"no stacked network for {type(model).__name__}")


def _packed(datamodules: list[Any], split: str, device: torch.device) -> PackedCorpora:
    return PackedCorpora(
        [dm.tokenized(split) for dm in datamodules],
        [dm.batches(split) for dm in datamodules],
        [dm.pfsa.next_symbol_probs() for dm in datamodules],
        datamodules[0].pad_id,
        device=device,
    )


class EnsembleTrainer:
    """Trains M members (shipped model instances + their data modules) as one batched model.

    Args:
        models: the members' freshly built ``LanguageModel`` instances, one class and one
            architecture (their weights are the initial weights; they are not modified).
        datamodules: the members' ``PFADataModule`` instances (``setup("fit")`` is called).
        settings: the runs' Trainer / early-stopping settings.
        device: where to train.
        record_steps: keep every step's per-member loss (a host sync per step; for tests).
        pacing: ``"width"`` (default) or ``"lockstep"`` (see
            :mod:`~cfl_lightning.ensemble.ticks`).
        recurrence: the LSTM's recurrence (see :class:`StackedLSTM`; ignored otherwise).
    """

    def __init__(
        self,
        models: list[Any],
        datamodules: list[Any],
        settings: TrainSettings = TrainSettings(),
        *,
        device: torch.device | str = "cpu",
        record_steps: bool = False,
        pacing: str = "width",
        recurrence: str = "function",
    ) -> None:
        if not models or len(models) != len(datamodules):
            raise ValueError("need one data module per model, and at least one model")
        first = models[0]
        for model in models[1:]:
            if type(model) is not type(first) or any(
                model.hparams.get(k) != first.hparams.get(k) for k in _SHARED
            ):
                raise ValueError("ensemble members must share the model class and hyperparameters")
        self.models, self.datamodules, self.settings = models, datamodules, settings
        self.device = torch.device(device)
        self.record_steps = record_steps
        self.layout = ParameterLayout.of(first)
        self.network = stacked_network(first)
        if isinstance(self.network, StackedLSTM):
            self.network = StackedLSTM(self.network.num_layers, self.network.dropout, recurrence)
        if pacing not in ("lockstep", "width"):
            raise ValueError(f"pacing must be 'width' or 'lockstep', got {pacing!r}")
        self.pacing = pacing
        # tick costs in time steps: launch-bound on CUDA, arithmetic-bound (cells) elsewhere
        self._cost = (
            dict(overhead=8.0, cell_cost=0.0)
            if self.device.type == "cuda"
            else dict(overhead=2.0, cell_cost=0.5)
        )
        self.loss_name = first.loss_name

    # ------------------------------------------------------------------ losses
    def _sums(self, params: Tensor, batch: PackedBatch, training: bool) -> tuple[Tensor, Tensor]:
        """Per-member ``(optimized loss sum, kl sum)`` ``[M]`` over a packed batch."""
        m, r, length = batch.input_ids.shape
        log_probs = self.network(
            self.layout.views(params), batch.input_ids, batch.position, batch.slot, training
        )
        classes = log_probs.shape[-1]
        mask = batch.mask.view(m * r, length)
        flat_lp = log_probs.view(m * r, length, classes)
        kl = kl_per_position(batch.target_probs.view(m * r, length, classes), flat_lp, mask)
        kl = kl.view(m, -1).sum(1)
        if self.loss_name == "kl":
            return kl, kl
        ce = cross_entropy_per_position(flat_lp, batch.target_ids.view(m * r, length), mask)
        return ce.view(m, -1).sum(1), kl

    # ------------------------------------------------------------------ epochs
    def _train_epoch(
        self, params: Tensor, optimizer: StackedAdam, live: list[int], epoch: int, steps: list
    ) -> None:
        orders = [self.train.global_ids(i, self._samplers[i].order(epoch)) for i in live]
        if self.pacing == "width":
            ids = by_width(orders, self.train.widths, self.train.sizes, **self._cost)
        else:
            ids = lockstep(orders)
        clip = self.settings.gradient_clip_val
        everyone = len(live)
        for s in range(ids.shape[1]):
            column = ids[:, s]
            taking = np.nonzero(column >= 0)[0]
            if len(taking) == everyone:  # every row trains: no gather
                rows, leaf = None, params
            else:  # only this tick's members are packed and computed
                rows = torch.as_tensor(taking, device=self.device)
                leaf = params.detach()[rows].requires_grad_(True)
            batch = self.train.step(column[taking])
            leaf.grad = None
            loss_sums, _ = self._sums(leaf, batch, training=True)
            losses = loss_sums / batch.strings.to(loss_sums.dtype)
            losses.sum().backward()
            if clip is not None:
                clip_rows_(leaf.grad, clip)
            optimizer.step(leaf.grad, rows)
            leaf.grad = None
            if self.record_steps:
                steps.append((column[taking].copy(), losses.detach().cpu()))

    @torch.no_grad()
    def _validate(self, params: Tensor, live: list[int]) -> Tensor:
        """``val/kl_per_string`` ``[M_live]`` (float64, on the CPU)."""
        counts = [self.val.num_batches[i] for i in live]
        kl = torch.zeros(len(live), dtype=torch.float64, device=self.device)
        strings = torch.zeros_like(kl)
        for s in range(max(counts)):
            ids = np.array(
                [self.val.first_batch[i] + s if s < n else -1 for i, n in zip(live, counts)]
            )
            batch = self.val.step(ids)
            _, sums = self._sums(params, batch, training=False)
            kl += sums.to(torch.float64)
            strings += batch.strings.to(torch.float64)
        return (kl / strings.clamp_min(1)).cpu()

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def predict(
        self,
        split: str,
        states: list[dict[str, Tensor]],
        update: Callable[[int, Tensor, Tensor, Tensor], None],
    ) -> None:
        """Feed every member's log-probabilities on its ``split`` strings to ``update``.

        The members' networks (weights ``states``, e.g. the best checkpoints) run in eval mode
        on their own batches of ``split``, packed side by side; for each member ``i`` and each
        of its batches, ``update(i, log_probs [R, L, S+1], states [R, L], mask [R, L])`` is
        called with the member's packed rows (position-additive consumers such as
        ``DecomposedKL.update`` see exactly the positions of its own batches).
        """
        for dm in self.datamodules:
            dm.setup("test" if split == "test" else "fit")
        packed = _packed(self.datamodules, split, self.device)
        params = self.layout.stack_states(states).to(self.device, self.models[0].dtype)
        views = self.layout.views(params)
        counts = packed.num_batches
        for s in range(max(counts)):
            ids = np.array([packed.first_batch[i] + s if s < n else -1 for i, n in enumerate(counts)])
            taking = np.nonzero(ids >= 0)[0]
            rows = torch.as_tensor(taking, device=self.device)
            batch = packed.step(ids[taking])
            sub = {k: v[rows] for k, v in views.items()} if len(taking) < len(ids) else views
            log_probs = self.network(sub, batch.input_ids, batch.position, batch.slot, False)
            for row, i in enumerate(taking):
                update(int(i), log_probs[row], batch.states[row], batch.mask[row])

    # ------------------------------------------------------------------ fit
    def fit(self) -> list[MemberOutcome]:
        """Train every member to its early stop (or ``max_epochs``); one outcome per member."""
        started = time.perf_counter()
        for dm in self.datamodules:
            dm.setup("fit")
        self.train = _packed(self.datamodules, "train", self.device)
        self.val = _packed(self.datamodules, "val", self.device)
        self._samplers = [dm.train_dataloader().sampler for dm in self.datamodules]
        params = self.layout.stack(self.models).to(self.device).requires_grad_(True)
        best = params.detach().clone()
        schedules = [
            MemberSchedule(model, self.settings.patience, self.settings.min_delta)
            for model in self.models
        ]
        optimizer = StackedAdam(
            params.detach(), torch.tensor([s.lr for s in schedules], dtype=torch.float64)
        )
        live = list(range(len(self.models)))  # global member index of each row
        best_states: dict[int, Tensor] = {}
        finish: dict[int, float] = {}
        histories: list[list[float]] = [[] for _ in self.models]
        step_log: list = []
        for epoch in range(self.settings.max_epochs):
            self._train_epoch(params, optimizer, live, epoch, step_log)
            # rounded to float32 as Lightning logs them: the sequential run's LR schedule, early
            # stopping and checkpointing compare these logged values
            values = self._validate(params.detach(), live).to(torch.float32).tolist()
            improved = []
            for row, i in enumerate(live):
                histories[i].append(values[row])
                improved.append(schedules[i].update(values[row]))
            with torch.no_grad():
                mask = torch.tensor(improved, device=self.device).unsqueeze(1)
                best = torch.where(mask, params.detach(), best)
                optimizer.lr = torch.tensor(
                    [schedules[i].lr for i in live], dtype=torch.float64, device=self.device
                )
            keep = [row for row, i in enumerate(live) if not schedules[i].stopped]
            now = time.perf_counter() - started
            for row, i in enumerate(live):
                if schedules[i].stopped or epoch + 1 == self.settings.max_epochs:
                    best_states[i], finish[i] = best[row].detach().cpu(), now
            if len(keep) < len(live):
                if not keep:
                    live = []
                    break
                rows = torch.tensor(keep, device=self.device)
                params = params.detach()[rows].requires_grad_(True)
                best = best[rows]
                optimizer.select(rows, params.detach())
                live = [live[row] for row in keep]
        return [
            MemberOutcome(
                best_state=self.layout.state_dict(best_states[i]),
                best_val_loss=schedules[i].best if np.isfinite(schedules[i].best) else None,
                epochs=schedules[i].epochs,
                train_time_s=finish[i],
                val_history=histories[i],
                step_losses=self._member_steps(step_log, i),
                stopped_early=schedules[i].stopped_early,
                steps=schedules[i].epochs * self.train.num_batches[i],
            )
            for i in range(len(self.models))
        ]

    def _member_steps(self, step_log: list, member: int) -> list[float]:
        """Member ``member``'s recorded step losses, in order (empty without ``record_steps``)."""
        out = []
        first, count = self.train.first_batch[member], self.train.num_batches[member]
        for ids, losses in step_log:
            hits = np.nonzero((ids >= first) & (ids < first + count))[0]
            if hits.size:
                out.append(float(losses[hits[0]]))
        return out

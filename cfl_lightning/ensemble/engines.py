"""How an ensemble computes: the stacked network on packed rows, or each member's own network.

Both engines train the members' rows of one ``[M, P]`` parameter with per-member clipping and
:class:`~cfl_lightning.ensemble.optim.StackedAdam`, and evaluate them, one tick at a time:

* :class:`StackedEngine`: the members' batches of a tick packed side by side ``[M, R, L]``
  (:mod:`~cfl_lightning.ensemble.packing`) through the architecture's stacked network
  (``LanguageModel.stacked_network``: :class:`~cfl_lightning.models.StackedLSTM`,
  :class:`~cfl_lightning.models.StackedTransformer`): one batched computation for all
  members; training steps by :class:`~cfl_lightning.ensemble.step.TrainStep` (optionally CUDA
  graphs). For GPUs, where one small model leaves the device idle.
* :class:`LoopEngine`: each member of a tick runs the model's own forward on its own collated
  batch, one after the other: in training the model's parameters are pointed at the member's
  row (and their ``.grad`` at the member's row of an ``[M, P]`` gradient buffer, which the
  backward fills in place); evaluation uses ``torch.func.functional_call`` with the row it is
  given. Their gradients are clipped and stepped together. For CPUs,
  where the shipped LSTM's fused kernel beats the batched recurrence
  (``benchmarks/bench_ensemble.py``) and the gain of an ensemble is one process and one
  Lightning loop for all members; and for any ``LanguageModel`` without a stacked network
  (a user's own architecture).

Evaluation yields :class:`EvalBatch` es: log-probabilities of some members on their own
positions, shaped ``[M', R, L, |S|+1]`` (a loop member's batch is ``[1, B, T, ...]``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.data.batching import collate
from cfl_lightning.ensemble.data import EnsembleData, member_table
from cfl_lightning.ensemble.optim import StackedAdam, clip_rows_
from cfl_lightning.ensemble.stacking import ParameterLayout
from cfl_lightning.ensemble.step import TrainStep, epoch_sums
from cfl_lightning.losses import kl_per_position, training_loss

__all__ = ["EvalBatch", "StackedEngine", "LoopEngine", "ENGINES"]

ENGINES = ("stacked", "loop")


@dataclass
class EvalBatch:
    """Some members' predictions on one evaluation tick.

    Attributes:
        members: ``[M']`` int64 which members (on the device).
        log_probs: ``[M', R, L, |S|+1]`` their log-probabilities.
        target_probs: ``[M', R, L, |S|+1]`` the automata's next-symbol distributions.
        states: ``[M', R, L]`` automaton states.
        mask: ``[M', R, L]`` bool real positions.
        weights: ``[M', R, L]`` string weights, or None (all 1).
        strings: ``[M']`` strings of each member in this tick.
        target_ids: ``[M', R, L]`` next symbols.
        starts: ``[M', R, L]`` bool, True at each string's first position (weighted string
            counts: :class:`~cfl_lightning.ensemble.metrics.MemberSymbolKL`), or None.
    """

    members: Tensor
    log_probs: Tensor
    target_probs: Tensor
    states: Tensor
    mask: Tensor
    weights: Tensor | None
    strings: Tensor
    target_ids: Tensor
    starts: Tensor | None = None

    def epoch_sums(self) -> Tensor:
        """``[4, M']`` float64 :func:`~cfl_lightning.ensemble.step.epoch_sums` (unweighted)."""
        return epoch_sums(self.log_probs, self.target_probs, self.target_ids, self.mask,
                          self.strings)

    def kl_sums(self) -> Tensor:
        """``[M']`` per-member sums of the per-position KL (in the log-probabilities' dtype)."""
        m, r, length, c = self.log_probs.shape
        kl = kl_per_position(
            self.target_probs.reshape(m * r, length, c),
            self.log_probs.reshape(m * r, length, c),
            self.mask.reshape(m * r, length),
        )
        return kl.view(m, -1).sum(1)


class StackedEngine:
    """Packed batches through the stacked network (see the module docstring).

    Args:
        network: the stacked network.
        layout: the parameters' layout.
        data: the members' data.
        param: the ``[M, P]`` parameter.
        loss: ``"kl"`` or ``"ce"``.
        clip: per-member clipping norm (None: none).
        mode: :class:`~cfl_lightning.ensemble.step.TrainStep`'s mode.
    """

    def __init__(
        self, network: Any, layout: ParameterLayout, data: EnsembleData, param: Tensor,
        loss: str, clip: float | None, mode: str,
    ) -> None:
        self.network, self.layout, self.data, self.param = network, layout, data, param
        self.loss, self.clip, self.mode = loss, clip, mode
        self.device = param.device
        self.step: TrainStep | None = None

    def train(
        self, ids: np.ndarray, device_ids: Tensor | None, record: bool, optimizer: StackedAdam
    ) -> Tensor | None:
        """One training tick (see :meth:`TrainStep.__call__`)."""
        if self.step is None or self.step.optimizer is not optimizer:
            self.step = TrainStep(
                self.network, self.layout, self.param, optimizer,
                self.data.packed("train", self.device), self.loss, self.clip, self.mode,
            )
        return self.step(ids, device_ids, record)

    def take_losses(self) -> Tensor:
        """``[M]`` float64 training loss sums since the last call."""
        if self.step is None:
            return torch.zeros(self.param.shape[0], dtype=torch.float64)
        return self.step.take_losses()

    def take_epoch_sums(self) -> Tensor:
        """``[4, M]`` float64 training epoch sums since the last call (:func:`epoch_sums`)."""
        if self.step is None:
            return torch.zeros(4, self.param.shape[0], dtype=torch.float64)
        return self.step.take_epoch_sums()

    @torch.no_grad()
    def evaluate(self, split: str, params: Tensor, ids: np.ndarray) -> Iterator[EvalBatch]:
        """Eval-mode predictions of the members with ``ids >= 0`` on their batches ``ids`` (packed)."""
        packed = self.data.packed(split, self.device)
        taking = np.nonzero(ids >= 0)[0]
        members = torch.as_tensor(taking, device=self.device)
        if len(taking) < params.shape[0]:
            params = params[members]
        batch = packed.step(ids[taking])
        log_probs = self.network(
            self.layout.views(params), batch.input_ids, batch.position, batch.slot, False
        )
        yield EvalBatch(members, log_probs, batch.target_probs, batch.states, batch.mask,
                        batch.weights, batch.strings, batch.target_ids,
                        batch.mask & (batch.position == 0))


class LoopEngine:
    """Each member's own network on its own batches (see the module docstring).

    Args:
        template: one member's ``LanguageModel`` (copied; its parameters are never used).
        layout: the parameters' layout.
        data: the members' data.
        param: the ``[M, P]`` parameter.
        loss: ``"kl"`` or ``"ce"``.
        clip: per-member clipping norm (None: none).
    """

    def __init__(
        self, template: torch.nn.Module, layout: ParameterLayout, data: EnsembleData,
        param: Tensor, loss: str, clip: float | None,
    ) -> None:
        self.model = copy.deepcopy(template).to(param.device)
        self.layout, self.data, self.param = layout, data, param
        self.loss, self.clip = loss, clip
        self.device = param.device
        self._batches: dict[str, list[list[dict[str, Tensor]]]] = {}
        self._loss_sums = torch.zeros(param.shape[0], dtype=torch.float64, device=self.device)
        self._epoch_sums = torch.zeros(4, param.shape[0], dtype=torch.float64, device=self.device)
        named = dict(self.model.named_parameters())
        self._params = [named[name] for name in layout.names]  # in the row's order
        self._bound: tuple[int, ...] | None = None  # (data_ptr, shape) the views below are of
        self._grads = torch.zeros_like(param.detach())
        self._rows: list[list[Tensor]] = []  # per member: its parameter views of ``param``
        self._grad_rows: list[list[Tensor]] = []  # per member: its views of ``_grads``

    def _batch(self, split: str, member: int, global_id: int) -> dict[str, Tensor]:
        """Member ``member``'s collated batch ``global_id`` of ``split``, on the device (cached)."""
        if split not in self._batches:
            out = []
            for k, dm in enumerate(self.data.datamodules):
                corpus, probs = dm.tokenized(split), member_table(dm, split)
                weights = dm.test_weights() if split == "test" else None
                batches = []
                for index in self.data.batches(split, k):
                    batch = collate(corpus, index, probs, dm.pad_id)
                    if weights is not None:
                        batch["weights"] = weights[index]
                    batches.append({k: v.to(self.device) for k, v in batch.items()})
                out.append(batches)
            self._batches[split] = out
        first = self.data.first_batch(split)[member]
        return self._batches[split][member][int(global_id) - first]

    def _log_probs(self, row: Tensor, input_ids: Tensor) -> Tensor:
        views = self.layout.row_views(row)
        return torch.func.functional_call(self.model, views, (input_ids,))

    def _views(self) -> None:
        """(Re)build every member's parameter and gradient views when ``param``'s storage is new
        (first use; a move to another device replaces it)."""
        key = (self.param.data_ptr(), *self.param.shape)
        if self._bound == key:
            return
        if self._grads.shape != self.param.shape or self._grads.device != self.param.device:
            self._grads = torch.zeros_like(self.param.detach())
        data = self.param.detach()
        self._rows = [list(self.layout.row_views(data[m]).values()) for m in range(data.shape[0])]
        self._grad_rows = [
            list(self.layout.row_views(self._grads[m]).values()) for m in range(data.shape[0])
        ]
        self._bound = key

    def _backward(self, m: int, input_ids: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Member ``m``'s loss on ``batch``; its gradient lands in ``_grads[m]`` (zeroed before).

        The model's parameters are pointed at the member's row (``.data``: no copy, Adam's
        in-place updates of ``param`` are seen) and their ``.grad`` at its gradient row, which
        the backward accumulates into in place (a defined ``.grad`` is added to, not replaced).
        """
        for p, value, grad in zip(self._params, self._rows[m], self._grad_rows[m]):
            p.data = value
            p.grad = grad
        # the loss of LanguageModel.training_step
        scores = self.model(input_ids)
        loss = training_loss(self.loss, scores, batch)
        with torch.no_grad():  # its epoch values (LanguageModel.train_loss)
            mask = batch["mask"].bool()
            self._epoch_sums[:, m] += epoch_sums(
                torch.log_softmax(scores.detach(), dim=-1)[None], batch["target_probs"][None],
                batch["target_ids"][None], mask[None],
                torch.tensor([mask.shape[0]], device=self.device),
            )[:, 0]
        loss.backward()
        for p, grad in zip(self._params, self._grad_rows[m]):
            if p.grad is not grad:  # replaced rather than accumulated (e.g. a sparse gradient)
                grad.copy_(p.grad)
            p.grad = None
        return loss.detach()

    def train(
        self, ids: np.ndarray, device_ids: Tensor | None, record: bool, optimizer: StackedAdam
    ) -> Tensor | None:
        """One tick: every member with ``ids[m] >= 0`` steps on its batch, one after the other."""
        taking = np.nonzero(ids >= 0)[0]
        if not len(taking):
            return None
        self.model.train()
        self._views()
        everyone = len(taking) == self.param.shape[0]  # no gather: one pass over [M, P]
        rows = torch.as_tensor(taking, device=self.device)
        self._grads.zero_()
        losses = torch.empty(len(taking), dtype=torch.float64, device=self.device)
        for k, m in enumerate(taking):
            batch = self._batch("train", int(m), int(ids[m]))
            losses[k] = self._backward(int(m), batch["input_ids"], batch)
        grads = self._grads if everyone else self._grads[rows]
        if self.clip is not None:
            clip_rows_(grads, self.clip)
        optimizer.update(grads, rows=None if everyone else rows)
        self._loss_sums.index_add_(0, rows, losses)
        if not record:
            return None
        out = torch.full((self.param.shape[0],), torch.nan, dtype=torch.float64)
        out[torch.as_tensor(taking)] = losses.cpu()
        return out

    def take_losses(self) -> Tensor:
        """``[M]`` float64 training loss sums since the last call."""
        out = self._loss_sums.to("cpu", copy=True)
        self._loss_sums.zero_()
        return out

    def take_epoch_sums(self) -> Tensor:
        """``[4, M]`` float64 training epoch sums since the last call (:func:`epoch_sums`)."""
        out = self._epoch_sums.to("cpu", copy=True)
        self._epoch_sums.zero_()
        return out

    @torch.no_grad()
    def evaluate(self, split: str, params: Tensor, ids: np.ndarray) -> Iterator[EvalBatch]:
        """Eval-mode predictions of each member with ``ids >= 0``, one batch at a time."""
        self.model.eval()
        for m in np.nonzero(ids >= 0)[0]:
            batch = self._batch(split, int(m), int(ids[m]))
            log_probs = torch.log_softmax(self._log_probs(params[m], batch["input_ids"]), dim=-1)
            weights = batch.get("weights")
            mask = batch["mask"].bool()
            starts = torch.zeros_like(mask)
            starts[:, :1] = mask[:, :1]
            yield EvalBatch(
                members=torch.tensor([int(m)], device=self.device),
                log_probs=log_probs[None],
                target_probs=batch["target_probs"][None],
                states=batch["states"][None],
                mask=mask[None],
                weights=None if weights is None else weights[:, None].expand_as(batch["mask"])[None],
                strings=torch.tensor([batch["mask"].shape[0]], device=self.device),
                target_ids=batch["target_ids"][None],
                starts=starts[None],
            )

"""One training step of M members: pack, forward, loss, backward, per-member clipping, Adam.

Three ways to run the same step (:class:`TrainStep`, ``mode``):

* ``"gather"`` (the CPU's default): the packed batch has the tick's natural ``(R, L)`` and only
  the members that train at this tick are computed (their rows of the ``[M, P]`` parameters
  are gathered; Adam updates those rows). Fewest cells: on a CPU the cost is arithmetic.
* ``"static"``: shapes fixed by the member count and a *bucket* (``(R, L)`` rounded up to
  1, 2, 3, 4, 6, 8, 12, ...; :func:`~cfl_lightning.ensemble.packing.bucket`): every member is
  computed, and one idle or stopped is masked (zero loss and gradient, no Adam update, no step
  counted). The packing, forward, loss, backward, clipping and Adam read their inputs from
  static buffers (the tick's batch ids and which members train), and nothing reads a tensor on
  the host.
* ``"graph"`` (CUDA): ``"static"``, with each bucket's step captured once in a CUDA graph and
  replayed: no Python and no kernel launches per operation. Capture follows PyTorch's recipe
  (warm-up on a side stream, then ``torch.cuda.graph``); the warm-up steps train no member
  (``active`` all False: exactly no update) and all buckets share one memory pool. If a capture
  fails, a warning says so and the steps run as ``"static"``.

``"static"`` is ``"graph"`` without the capture, so the CPU runs (and the tests check) the
code that the GPU captures. Every mode gives each member its sequential run's update.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.ensemble.optim import StackedAdam, clip_rows_
from cfl_lightning.ensemble.packing import PackedBatch, PackedCorpora, bucket
from cfl_lightning.ensemble.stacking import ParameterLayout
from cfl_lightning.losses import cross_entropy_per_position, kl_per_position, loss_per_position

__all__ = ["MODES", "EPOCH_SUMS", "epoch_sums", "loss_sums", "TrainStep"]

#: the rows of :func:`epoch_sums` (a plain fit's ``EpochLoss`` sums)
EPOCH_SUMS = ("kl", "ce", "tokens", "strings")

MODES = ("gather", "static", "graph")


def loss_sums(
    network: Any, layout: ParameterLayout, params: Tensor, batch: PackedBatch, loss: str,
    training: bool, sums_out: Tensor | None = None, active: Tensor | None = None,
) -> Tensor:
    """Per-member ``[M]`` sums of the optimized loss over a packed batch's real positions.

    Args:
        network: a stacked network (``LanguageModel.stacked_network``).
        layout: the parameters' layout.
        params: ``[M, P]`` parameters of the batch's members.
        batch: the packed ``[M, R, L]`` batch.
        loss: ``"kl"`` or ``"ce"`` (the members' ``loss``).
        training: dropout on.
        sums_out: optional ``[4, M]`` float64: the batch's :func:`epoch_sums` are added to it
            (detached; the loss and its gradient are unchanged).
        active: optional ``[M]`` bool: only these members' epoch sums are added.
    """
    m, r, length = batch.input_ids.shape
    log_probs = network(layout.views(params), batch.input_ids, batch.position, batch.slot, training)
    classes = log_probs.shape[-1]
    values = loss_per_position(
        loss, log_probs.view(m * r, length, classes),
        batch.target_probs.view(m * r, length, classes), batch.target_ids.view(m * r, length),
        batch.mask.view(m * r, length),
    )
    if sums_out is not None:
        with torch.no_grad():
            sums = epoch_sums(log_probs.detach(), batch.target_probs, batch.target_ids,
                              batch.mask, batch.strings)
            if active is not None:
                sums = torch.where(active, sums, 0.0)
            sums_out += sums
    return values.view(m, -1).sum(1)


def epoch_sums(
    log_probs: Tensor, target_probs: Tensor, target_ids: Tensor, mask: Tensor, strings: Tensor
) -> Tensor:
    """Per-member sums of a plain fit's epoch values (``EpochLoss``, unweighted strings).

    Args:
        log_probs: ``[M', R, L, |S|+1]`` log-probabilities.
        target_probs: ``[M', R, L, |S|+1]`` the automata's next-symbol distributions.
        target_ids: ``[M', R, L]`` next symbols.
        mask: ``[M', R, L]`` bool real positions.
        strings: ``[M']`` strings of each member.

    Returns:
        ``[4, M']`` float64 rows :data:`EPOCH_SUMS`: KL, cross-entropy, tokens, strings.
    """
    m, r, length, classes = log_probs.shape
    flat = (m * r, length)
    lp = log_probs.reshape(*flat, classes)
    mask = mask.reshape(flat).bool()
    kl = kl_per_position(target_probs.reshape(*flat, classes), lp, mask)
    ce = cross_entropy_per_position(lp, target_ids.reshape(flat), mask)
    return torch.stack([
        kl.view(m, -1).sum(1).to(torch.float64), ce.view(m, -1).sum(1).to(torch.float64),
        mask.view(m, -1).sum(1).to(torch.float64), strings.to(torch.float64),
    ])


def _release_capture_rng(device: torch.device, state: Tensor) -> None:
    """Give the device's default generator a state that is not stuck in a failed capture.

    A capture that fails after dropout drew random numbers leaves the default CUDA generator in
    capture mode (its epilogue never ran), and every later eager dropout then fails ("Offset
    increment outside graph capture"). A fresh generator's state, set to the state saved before
    the capture, replaces it (``graphsafe_set_state`` swaps the state object itself).

    Args:
        device: the CUDA device.
        state: ``torch.cuda.get_rng_state(device)`` from before the capture.
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    fresh = torch.Generator(device=device)
    fresh.set_state(state)
    torch.cuda.default_generators[index].graphsafe_set_state(fresh)


@dataclass
class _Static:
    """A bucket's static inputs (and, in graph mode, its captured graph)."""

    ids: Tensor  # [M] int64 global batch ids (-1: idle)
    losses: Tensor  # [M] the step's per-member losses (output)
    graph: Any = None


class TrainStep:
    """Runs training steps of M members (see the module docstring for the modes).

    Args:
        network: the stacked network.
        layout: the parameters' layout.
        param: the ``[M, P]`` parameter (updated in place).
        optimizer: its :class:`StackedAdam`.
        packed: the members' packed training corpora (on the parameter's device).
        loss: ``"kl"`` or ``"ce"``.
        clip: per-member gradient norm clipping (None: none).
        mode: ``"gather"``, ``"static"`` or ``"graph"`` (CUDA only).
    """

    def __init__(
        self,
        network: Any,
        layout: ParameterLayout,
        param: Tensor,
        optimizer: StackedAdam,
        packed: PackedCorpora,
        loss: str,
        clip: float | None,
        mode: str = "gather",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "graph" and param.device.type != "cuda":
            raise ValueError("mode 'graph' (CUDA graphs) needs the parameters on a CUDA device")
        self.network, self.layout, self.param, self.optimizer = network, layout, param, optimizer
        self.packed, self.loss, self.clip, self.mode = packed, loss, clip, mode
        self.device = param.device
        self.members = int(param.shape[0])
        self._buckets: dict[tuple[int, int], _Static] = {}
        self._pool: Any = None
        #: ``[M]`` float64 sums of the per-member losses of the steps since :meth:`take_losses`
        self.loss_sums = torch.zeros(self.members, dtype=torch.float64, device=self.device)
        #: ``[4, M]`` float64 :func:`epoch_sums` of the steps since :meth:`take_losses` (what a
        #: plain fit's ``train/*_per_string`` and ``train/kl_per_token`` are computed from)
        self.epoch_sums = torch.zeros(4, self.members, dtype=torch.float64, device=self.device)
        #: graphs captured so far (graph mode)
        self.captures = 0

    def shape(self, ids: np.ndarray) -> tuple[int, int]:
        """The packed ``(R, L)`` of a tick (bucketed except in gather mode)."""
        rows, length = self.packed.shape(ids)
        return (rows, length) if self.mode == "gather" else (bucket(rows), bucket(length))

    def __call__(
        self, ids: np.ndarray, device_ids: Tensor | None = None, record: bool = False
    ) -> Tensor | None:
        """One step: member ``m`` trains on global batch ``ids[m]`` (``-1``: it does not train).

        Args:
            ids: ``[M]`` int64 (host) global batch ids.
            device_ids: the same ids already on the device (e.g. a column of the epoch's plan,
                uploaded once per epoch), so that the step copies nothing from the host.
            record: return the ``[M]`` per-member losses (a host synchronization; for tests).

        Returns:
            with ``record``, ``[M]`` float64 CPU losses (NaN where idle), else None.
        """
        if self.mode == "gather":
            return self._gather(ids, record)
        shape = self.shape(ids)
        static = self._static(shape)
        static.ids.copy_(torch.as_tensor(ids, dtype=torch.long) if device_ids is None else device_ids)
        if static.graph is not None:
            static.graph.replay()
        else:
            self._body(static, shape)
        if not record:
            return None
        out = static.losses.detach().to("cpu", torch.float64)
        return torch.where(torch.as_tensor(ids) >= 0, out, torch.nan)

    def take_losses(self) -> Tensor:
        """``[M]`` float64 loss sums since the last call (then reset); one host read."""
        out = self.loss_sums.to("cpu", copy=True)
        self.loss_sums.zero_()
        return out

    def take_epoch_sums(self) -> Tensor:
        """``[4, M]`` float64 :func:`epoch_sums` since the last call (then reset)."""
        out = self.epoch_sums.to("cpu", copy=True)
        self.epoch_sums.zero_()
        return out

    # ------------------------------------------------------------------ gather
    def _gather(self, ids: np.ndarray, record: bool) -> Tensor | None:
        taking = np.nonzero(ids >= 0)[0]
        if len(taking) == self.members:  # every member trains: no gather
            rows, leaf = None, self.param
        else:  # only this tick's members are packed and computed
            rows = torch.as_tensor(taking, device=self.device)
            leaf = self.param.detach()[rows].requires_grad_(True)
        batch = self.packed.step(ids[taking])
        part = torch.zeros(4, len(taking), dtype=torch.float64, device=self.device)
        sums = loss_sums(self.network, self.layout, leaf, batch, self.loss, True, part)
        losses = sums / batch.strings.to(sums.dtype)
        (grad,) = torch.autograd.grad(losses.sum(), leaf)
        if self.clip is not None:
            clip_rows_(grad, self.clip)
        self.optimizer.update(grad, rows=rows)
        detached = losses.detach().to(torch.float64)
        if rows is None:
            self.loss_sums += detached
            self.epoch_sums += part
        else:
            self.loss_sums.index_add_(0, rows, detached)
            self.epoch_sums.index_add_(1, rows, part)
        if not record:
            return None
        out = torch.full((self.members,), torch.nan, dtype=torch.float64)
        out[torch.as_tensor(taking)] = detached.cpu()
        return out

    # ------------------------------------------------------------------ static / graph
    def _body(self, static: _Static, shape: tuple[int, int]) -> None:
        """The fixed-shape step on ``static``'s buffers (what a CUDA graph captures)."""
        batch = self.packed.pack(static.ids, *shape)
        active = static.ids >= 0
        sums = loss_sums(self.network, self.layout, self.param, batch, self.loss, True,
                         self.epoch_sums, active)
        losses = sums / batch.strings.clamp_min(1).to(sums.dtype)  # idle: 0 / 1
        (grad,) = torch.autograd.grad(losses.sum(), self.param)
        if self.clip is not None:
            clip_rows_(grad, self.clip)
        self.optimizer.update(grad, active=active)
        detached = losses.detach()
        static.losses.copy_(detached)
        self.loss_sums += torch.where(active, detached.to(torch.float64), 0.0)

    def _static(self, shape: tuple[int, int]) -> _Static:
        static = self._buckets.get(shape)
        if static is None:
            static = _Static(
                ids=torch.full((self.members,), -1, dtype=torch.long, device=self.device),
                losses=torch.zeros(self.members, dtype=self.param.dtype, device=self.device),
            )
            if self.mode == "graph":
                rng = torch.cuda.get_rng_state(self.device)
                try:
                    self._capture(static, shape)
                except RuntimeError as err:  # an operation that cannot be captured
                    torch.cuda.synchronize(self.device)
                    _release_capture_rng(self.device, rng)
                    warnings.warn(
                        f"CUDA graph capture failed ({' '.join(str(err).split())[:200]}); the "
                        "ensemble's training steps run without graphs", RuntimeWarning, stacklevel=2,
                    )
                    self.mode = "static"
            self._buckets[shape] = static
        return static

    def _capture(self, static: _Static, shape: tuple[int, int]) -> None:
        """Capture ``_body`` on ``static`` in a CUDA graph (warm-up steps train no member)."""
        static.ids.fill_(-1)  # every member idle: the warm-up and capture change nothing
        sums, epoch = self.loss_sums.clone(), self.epoch_sums.clone()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._body(static, shape)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._body(static, shape)
        if self._pool is None:
            self._pool = graph.pool()
        self.loss_sums.copy_(sums)
        self.epoch_sums.copy_(epoch)
        static.graph = graph
        self.captures += 1

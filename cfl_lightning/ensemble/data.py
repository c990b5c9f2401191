"""The members' data, packed: their corpora on the device and each epoch's plan of ticks.

Every member keeps its own ``PFADataModule``: its corpora, its length batches and its epoch
orders (the data module's own ``BatchOrderSampler``, deterministic given the member's data seed
and the epoch). :class:`EnsembleData` gathers the splits of all members into
:class:`~cfl_lightning.ensemble.packing.PackedCorpora` on the training device and turns an
epoch's orders into ticks (:mod:`~cfl_lightning.ensemble.ticks`): column ``s`` of a plan holds
the global batch id each member trains on at tick ``s`` (``-1``: none). Evaluation plans cover
every batch of a split once, members side by side.

Evaluation ticks take :func:`eval_batches`: a member's consecutive (length-sorted) batches
merged up to :data:`EVAL_CELLS` padded positions. Evaluation sums over strings, so its values do
not depend on how the strings are batched (up to float rounding), and few large ticks cost far
fewer kernel launches and Python calls than many small ones (on an H200, an M=128 LSTM
ensemble spent as long validating as training with the training batches).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from cfl_lightning.data.batching import BatchOrderSampler, derive_seed
from cfl_lightning.ensemble.packing import PackedCorpora
from cfl_lightning.ensemble.ticks import by_width, lockstep

__all__ = ["EnsembleData", "Ticks", "PACINGS", "EVAL_CELLS", "eval_batches", "member_table"]

PACINGS = ("width", "lockstep")

#: padded positions (strings x widest string) of one member's merged evaluation batch
EVAL_CELLS = 4096


def eval_batches(
    batches: list[torch.Tensor], positions: torch.Tensor, cells: int = EVAL_CELLS
) -> list[torch.Tensor]:
    """Consecutive batches merged while ``strings x widest`` stays within ``cells``.

    Args:
        batches: ``[B_i]`` string-index batches in the data module's (length) order.
        positions: ``[K]`` positions of each string of the split.
        cells: the merged batches' budget of padded positions (a batch larger than it stays
            alone).

    Returns:
        the merged ``[B'_j]`` batches, every string once, in the same order.
    """
    out: list[torch.Tensor] = []
    group: list[torch.Tensor] = []
    width = strings = 0
    for index in batches:
        w = int(positions[index].max()) if index.numel() else 1
        if group and max(width, w) * (strings + int(index.numel())) > cells:
            out.append(torch.cat(group))
            group, width, strings = [], 0, 0
        group.append(index)
        width, strings = max(width, w), strings + int(index.numel())
    if group:
        out.append(torch.cat(group))
    return out


def member_table(datamodule: Any, split: str) -> torch.Tensor | None:
    """The class table a member's batches of ``split`` index (``[C, S+1]``: its
    ``target_table``), or None when its corpus carries the law of every position
    (``tokenized(split).target_probs``: an automaton without position classes, a PCFG), as the
    data module's own loaders decide."""
    if getattr(datamodule.tokenized(split), "target_probs", None) is not None:
        return None
    return datamodule.target_table


class Ticks:
    """A plan's ticks as a dataloader: ``(index, [M] global batch ids)`` per tick.

    Not a ``list``: Lightning would take a list for several dataloaders.

    Args:
        plan: ``[M, ticks]`` global batch ids (``-1``: the member takes no batch).
    """

    def __init__(self, plan: np.ndarray) -> None:
        self.plan = plan

    def __len__(self) -> int:
        return int(self.plan.shape[1])

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        for s in range(len(self)):
            yield s, self.plan[:, s]


class EnsembleData:
    """The splits of M members' data modules, packed on one device.

    Args:
        datamodules: the members' ``PFADataModule`` instances (set up on first use).
        pacing: ``"width"`` (ticks group members whose next batches are about as wide) or
            ``"lockstep"`` (tick ``s`` is every member's ``s``-th batch).
    """

    def __init__(self, datamodules: list[Any], pacing: str = "width") -> None:
        if pacing not in PACINGS:
            raise ValueError(f"pacing must be one of {PACINGS}, got {pacing!r}")
        if not datamodules:
            raise ValueError("an ensemble needs at least one member")
        self.datamodules, self.pacing = list(datamodules), pacing
        self._packed: dict[tuple[str, str], PackedCorpora] = {}
        self._orders: list[BatchOrderSampler] | None = None
        self._eval: dict[str, list[list[torch.Tensor]]] = {}

    def __len__(self) -> int:
        return len(self.datamodules)

    def batches(self, split: str, member: int) -> list[torch.Tensor]:
        """Member ``member``'s batches of ``split``: the data module's for training, else merged
        (:func:`eval_batches`)."""
        dm = self.datamodules[member]
        if split == "train":
            return dm.batches(split)
        if split not in self._eval:
            self._eval[split] = [
                eval_batches(d.batches(split), d.tokenized(split).positions)
                for d in self.datamodules
            ]
        return self._eval[split][member]

    def packed(self, split: str, device: torch.device) -> PackedCorpora:
        """Split ``split`` of every member, packed on ``device`` (built once per device)."""
        key = (split, str(device))
        if key not in self._packed:
            dms = self.datamodules
            self._packed[key] = PackedCorpora(
                [dm.tokenized(split) for dm in dms],
                [self.batches(split, m) for m in range(len(dms))],
                [member_table(dm, split) for dm in dms],
                dms[0].pad_id,
                device=device,
                weights=[dm.test_weights() for dm in dms] if split == "test" else None,
            )
        return self._packed[key]

    def first_batch(self, split: str) -> list[int]:
        """Global id of each member's first batch of ``split`` (as in :class:`PackedCorpora`)."""
        counts = [len(self.batches(split, m)) for m in range(len(self))]
        return [int(x) for x in np.cumsum([0, *counts[:-1]])]

    def _samplers(self) -> list[BatchOrderSampler]:
        """Each member's training order (its data module's ``train_dataloader().sampler``)."""
        if self._orders is None:
            self._orders = [
                BatchOrderSampler(
                    len(dm.batches("train")), shuffle=True,
                    seed=derive_seed(dm.hparams.seed, "batch-order"),
                )
                for dm in self.datamodules
            ]
        return self._orders

    def _ticks(
        self, packed: PackedCorpora, orders: list[np.ndarray], cost: dict, pacing: str | None
    ) -> np.ndarray:
        if not any(len(o) for o in orders):
            return np.zeros((len(orders), 0), dtype=np.int64)
        if (pacing or self.pacing) == "lockstep":
            return lockstep(orders)
        return by_width(orders, packed.widths, packed.sizes, **cost)

    def train_plan(
        self, epoch: int, live: np.ndarray, device: torch.device, cost: dict,
        pacing: str | None = None,
    ) -> np.ndarray:
        """``[M, ticks]`` global training batch ids of ``epoch`` (``-1``: idle; none if not ``live``).

        Args:
            epoch: the epoch (orders are the members' own shuffles of it).
            live: ``[M]`` bool, members still training.
            device: the device of the packed corpora.
            cost: ``by_width``'s ``overhead`` and ``cell_cost``.
            pacing: overrides the data's pacing.
        """
        packed = self.packed("train", device)
        orders = [
            packed.global_ids(m, sampler.order(epoch)) if live[m] else np.zeros(0, dtype=np.int64)
            for m, sampler in enumerate(self._samplers())
        ]
        return self._ticks(packed, orders, cost, pacing)

    def eval_plan(
        self, split: str, members: np.ndarray, device: torch.device, cost: dict,
        pacing: str | None = None,
    ) -> np.ndarray:
        """``[M, ticks]`` covering every batch of ``split`` of the ``members`` (bool ``[M]``) once."""
        packed = self.packed(split, device)
        orders = [
            packed.global_ids(m, np.arange(packed.num_batches[m])) if members[m]
            else np.zeros(0, dtype=np.int64)
            for m in range(len(self))
        ]
        return self._ticks(packed, orders, cost, pacing)

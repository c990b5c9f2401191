"""The corpora of M ensemble members, and one training step's batches packed side by side.

Every member keeps its own corpus and its own list of length batches (exactly the batches of its
``PFADataModule``). At a step, member ``m`` contributes one of its batches, ``B_m`` strings of at
most ``w_m`` positions each. Padding all members' batches to a common ``[B_max, T_max]`` would
waste most of the work (one member may hold 100 one-position strings while another holds two
60-position ones), so the batches are *packed*: with a common row length ``L = max_m w_m``, member
``m`` lays its strings into slots of width ``w_m``, ``k_m = L // w_m`` slots per row, so it needs
``ceil(B_m / k_m)`` rows. Every member gets ``R = max_m ceil(B_m / k_m)`` rows of ``L``
positions: a ``[M, R, L]`` layout holding at most about twice the real positions. The models
reset their state at every slot start (``position == 0``), so each string is read exactly as in
its own sequential run.

All index arithmetic runs as a handful of tensor operations on the device, whatever ``M``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.data.batching import TokenizedCorpus

__all__ = ["PackedBatch", "PackedCorpora", "bucket"]


@dataclass
class PackedBatch:
    """One step's batches of all members, packed ``[M, R, L]`` (see the module docstring).

    Attributes:
        input_ids: ``[M, R, L]`` int64 token ids (``pad_id`` off the real positions).
        target_ids: ``[M, R, L]`` int64 next-symbol ids.
        target_probs: ``[M, R, L, S+1]`` automaton next-symbol distributions (0 off ``mask``).
        states: ``[M, R, L]`` int64 automaton states (0 off ``mask``).
        mask: ``[M, R, L]`` bool, True on real positions.
        position: ``[M, R, L]`` int64 position of each cell inside its string's slot (0 starts a
            string: recurrent state is reset there; sinusoidal positions use it).
        slot: ``[M, R, L]`` int64 slot id inside the row (attention stays inside a slot).
        strings: ``[M]`` number of strings of each member's batch (0 for an idle member).
        weights: ``[M, R, L]`` float64 importance weight of each cell's string (0 off ``mask``),
            or None when no member's corpus has weights.
    """

    input_ids: Tensor
    target_ids: Tensor
    target_probs: Tensor
    states: Tensor
    mask: Tensor
    position: Tensor
    slot: Tensor
    strings: Tensor
    weights: Tensor | None = None


class PackedCorpora:
    """The flat corpora and batch lists of M members, gathered into packed steps.

    Args:
        corpora: per member, the tokenized corpus (``PFADataModule.tokenized(split)``).
        batches: per member, its list of ``[B]`` string-index batches
            (``PFADataModule.batches(split)``), in the data module's (unshuffled) order.
        probs: per member, the ``[C_m, S+1]`` next-symbol table of its automaton's classes
            (``PFADataModule.target_table``, from :func:`~cfl_lightning.automata.class_tables`),
            or None for a corpus with per-position laws (``corpus.target_probs`` ``[N_m, S+1]``:
            an automaton without position classes, a PCFG); ``S`` must be the same for all
            members.
        pad_id: the padding token id (``S + 2``).
        device: where the packed tensors live.
        weights: per member, ``[K_m]`` importance weights of its strings or None (all 1; e.g.
            ``PFADataModule.test_weights()``); packed batches then carry ``weights``.
    """

    def __init__(
        self,
        corpora: list[TokenizedCorpus],
        batches: list[list[Tensor]],
        probs: list[Tensor | None],
        pad_id: int,
        device: torch.device | str = "cpu",
        weights: list[Tensor | None] | None = None,
    ) -> None:
        if not (len(corpora) == len(batches) == len(probs)) or not corpora:
            raise ValueError("corpora, batches and probs need one entry per member (M >= 1)")
        laws = [_position_laws(c, p) for c, p in zip(corpora, probs)]  # [N_m, S+1] each
        classes = {int(p.shape[-1]) for p in laws}
        if len(classes) != 1:
            raise ValueError(f"members disagree on the number of classes: {sorted(classes)}")
        self.num_members, self.pad_id = len(corpora), int(pad_id)
        self.device = torch.device(device)
        inputs, targets, states, table = [], [], [], []
        string_offset, string_len = [], []
        batch_strings, batch_start, batch_size, batch_width = [], [], [], []
        self.first_batch, self.num_batches = [], []
        flat_base = string_base = strings_used = 0
        for corpus, member_batches, member_laws in zip(corpora, batches, laws):
            inputs.append(corpus.inputs)
            targets.append(corpus.targets)
            states.append(corpus.states)
            table.append(member_laws)
            positions = corpus.positions
            string_offset.append(corpus.offsets[:-1] + flat_base)
            string_len.append(positions)
            self.first_batch.append(len(batch_start))
            self.num_batches.append(len(member_batches))
            for index in member_batches:
                batch_strings.append(index + string_base)
                batch_start.append(strings_used)
                batch_size.append(int(index.numel()))
                batch_width.append(int(positions[index].max()) if index.numel() else 1)
                strings_used += int(index.numel())
            flat_base += int(corpus.inputs.numel())
            string_base += len(corpus)
        put = lambda t: t.to(self.device)  # noqa: E731
        self.inputs, self.targets = put(torch.cat(inputs)), put(torch.cat(targets))
        self.states, self.probs = put(torch.cat(states)), put(torch.cat(table))
        self.string_offset = put(torch.cat(string_offset))
        self.string_len = put(torch.cat(string_len))
        self.batch_strings = put(torch.cat(batch_strings) if batch_strings else torch.zeros(0))
        self.batch_start = put(torch.tensor(batch_start, dtype=torch.long))
        self.batch_size = put(torch.tensor(batch_size, dtype=torch.long))
        self.batch_width = put(torch.tensor(batch_width, dtype=torch.long))
        self.string_weight: Tensor | None = None
        if weights is not None and any(w is not None for w in weights):
            self.string_weight = put(torch.cat([
                torch.ones(len(c), dtype=torch.float64) if w is None else w.to(torch.float64).cpu()
                for c, w in zip(corpora, weights)
            ]))
        #: host copies of the batch sizes and widths (sizing steps without a device sync)
        self.sizes = np.asarray(batch_size, dtype=np.int64)
        self.widths = np.asarray(batch_width, dtype=np.int64)

    def global_ids(self, member: int, local: list[int] | np.ndarray) -> np.ndarray:
        """Global batch ids of ``member``'s batches ``local`` (indices into its own list)."""
        return self.first_batch[member] + np.asarray(local, dtype=np.int64)

    def shape(self, batch_ids: np.ndarray) -> tuple[int, int]:
        """``(R, L)`` of the packed step of global batch ids ``batch_ids`` (``-1``: idle)."""
        live = batch_ids[batch_ids >= 0]
        if live.size == 0:
            return 1, 1
        width, size = self.widths[live], self.sizes[live]
        length = int(width.max())
        rows = int(np.max(-(-size // (length // width))))
        return max(rows, 1), length

    def step(self, batch_ids: np.ndarray, shape: tuple[int, int] | None = None) -> PackedBatch:
        """Pack one step: member ``m`` contributes global batch ``batch_ids[m]`` (``-1``: idle).

        Args:
            batch_ids: ``[M']`` int64 global batch ids (``M'`` may be fewer than the members:
                the live ones of a compacted ensemble).
            shape: ``(R, L)`` at least :meth:`shape` ``(batch_ids)`` (a bucket); default: that.
        """
        rows, length = self.shape(batch_ids) if shape is None else shape
        ids = torch.as_tensor(batch_ids, dtype=torch.long).to(self.device, non_blocking=True)
        return self.pack(ids, rows, length)

    def pack(self, ids: Tensor, rows: int, length: int) -> PackedBatch:
        """:meth:`step` on the device: ``ids`` ``[M']`` int64 global batch ids (``-1``: idle).

        Only tensor operations with shapes fixed by ``(M', rows, length)``, no host
        synchronization: this can be captured in a CUDA graph, ``ids`` being a static input.
        ``(rows, length)`` must be at least the natural :meth:`shape` of the ids; extra rows and
        columns are padding (``mask`` False).
        """
        idle = ids < 0
        gb = ids.clamp_min(0)
        size = torch.where(idle, 0, self.batch_size[gb])  # [M]
        width = self.batch_width[gb]
        per_row = length // width  # [M] slots per row
        r = torch.arange(rows, device=self.device)[None, :, None]
        c = torch.arange(length, device=self.device)[None, None, :]
        slot_in_row = c // width[:, None, None]
        position = c - slot_in_row * width[:, None, None]
        slot = r * per_row[:, None, None] + slot_in_row  # [M, R, L] slot index within the batch
        in_slot = (slot_in_row < per_row[:, None, None]) & (slot < size[:, None, None])
        pick = self.batch_start[gb][:, None, None] + torch.minimum(
            slot, (size[:, None, None] - 1).clamp_min(0)
        )
        string = self.batch_strings[pick.clamp(max=max(self.batch_strings.numel() - 1, 0))]
        mask = in_slot & (position < self.string_len[string])
        flat = torch.where(mask, self.string_offset[string] + position, 0)
        pad = torch.full_like(flat, self.pad_id)
        weights = None
        if self.string_weight is not None:
            weights = torch.where(mask, self.string_weight[string], 0.0)
        return PackedBatch(
            input_ids=torch.where(mask, self.inputs[flat], pad),
            target_ids=torch.where(mask, self.targets[flat], pad),
            target_probs=self.probs[flat] * mask[..., None],
            states=torch.where(mask, self.states[flat], 0),
            mask=mask,
            position=position.expand(mask.shape[0], rows, length),
            slot=slot_in_row.expand(mask.shape[0], rows, length),
            strings=size,
            weights=weights,
        )


def _position_laws(corpus: TokenizedCorpus, probs: Tensor | None) -> Tensor:
    """``[N, S+1]`` float32 CPU next-symbol law of every position of ``corpus``: its class's row
    of ``probs`` (``[C, S+1]``), or the corpus's own ``target_probs`` when ``probs`` is None."""
    if probs is not None:
        return probs.detach().cpu().to(torch.float32)[corpus.states]
    if corpus.target_probs is None:
        raise ValueError("a member without a class table needs its corpus's target_probs")
    return corpus.target_probs.detach().cpu().to(torch.float32)


def bucket(size: int) -> int:
    """``size`` rounded up to the next of 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, ... (``2^k``, ``3 * 2^k``).

    Packed steps are padded to bucketed ``(rows, length)`` so that a few shapes recur (one CUDA
    graph each) at a cost of at most 1.5x the cells per dimension.

    Example:
        >>> [bucket(n) for n in (1, 5, 7, 9, 13, 33, 100)]
        [1, 6, 8, 12, 16, 48, 128]
    """
    if size <= 2:
        return max(int(size), 1)
    power = 1 << (int(size) - 1).bit_length()  # next power of two >= size
    three = 3 * power // 4
    return three if three >= size else power

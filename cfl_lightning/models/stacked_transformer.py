"""M causal transformer language models evaluated at once from stacked ``[M, ...]`` weights.

The network is :class:`~cfl_lightning.models.TransformerLanguageModel`'s: scaled embedding plus
sinusoidal positions, dropout, pre-LN encoder layers (``x + Dropout(SelfAttn(LN(x)))``,
``x + Dropout(W2 Dropout(ReLU(W1 LN(x))))``, attention-weight dropout inside), final layer norm,
linear, log-softmax. Linear layers are ``baddbmm`` over the member axis; attention is one
``scaled_dot_product_attention`` over ``[M * R]`` packed rows with a block-causal mask: a cell
attends to the cells of its own slot (its own string) at or before it, which is exactly what the
causal mask of a string's own run lets it see. Positions restart at every slot. It is
:meth:`TransformerLanguageModel.stacked_network
<cfl_lightning.models.TransformerLanguageModel.stacked_network>`.

Two forms of the same computation (the same values on every real position; tests hold them
against each model's own forward):

* **dense**: every cell of the ``[M, R, L]`` layout goes through every layer. Its shapes depend
  only on ``(M, R, L)``, so a step can be captured in a CUDA graph: the form on CUDA.
* **compact** (elsewhere, e.g. on the CPU, when the compact cells are at most
  :data:`COMPACT_FILL` of the layout's): the position-wise work (embedding, layer norms,
  linear layers, dropout, output) runs on each member's real cells only, ``[M, N, d]`` with
  ``N`` the most real cells of any member; only attention scatters ``q, k, v`` back to the
  packed layout (zeros or padding values on padding cells: a padding cell always follows its
  slot's real cells, so no real query sees it) and gathers its output. ``N`` is read on the
  host, which a CUDA graph cannot do. Dropout then draws random numbers for ``[M, N]`` cells
  instead of ``[M, R*L]``, so the two forms' dropout streams differ (each is dropout with
  probability ``p`` on every real cell).

On the CPU at the headline recipe's batches, evaluation's merged batches are about half padding
(the compact form then runs) and training ticks under width pacing under a tenth (the dense
form runs; compacting them cost more than it saved): docs/benchmarks_cpu.md.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from cfl_lightning.models.base import sinusoidal_positions

__all__ = ["StackedTransformer", "COMPACT_FILL"]

#: the compact form is used when its ``[M, N]`` cells are at most this fraction of the packed
#: layout's (above it the gathers and scatters cost more than the padding they skip). Set between
#: the two fills measured (docs/benchmarks_cpu.md): 0.49, where compact was faster, and 0.93,
#: where it was slower; not tuned further.
COMPACT_FILL = 0.8


class StackedTransformer:
    """Functional forward of M transformer language models sharing one architecture.

    Args:
        num_layers: encoder layers.
        num_heads: attention heads.
        dropout: dropout probability.
        eps: layer-norm epsilon.
        pad_id: the padding token id of ``input_ids`` (real cells are the others); None: the
            dense form always.
        compact: the compact form where it skips enough padding (True), the dense one always
            (False), or None: the former unless the input is on CUDA (see the module
            docstring).
    """

    def __init__(
        self, num_layers: int, num_heads: int, dropout: float, eps: float = 1e-5,
        pad_id: int | None = None, compact: bool | None = None,
    ) -> None:
        self.num_layers, self.num_heads = int(num_layers), int(num_heads)
        self.dropout, self.eps = float(dropout), float(eps)
        self.pad_id = None if pad_id is None else int(pad_id)
        self.compact = compact
        if compact and pad_id is None:
            raise ValueError("the compact form needs pad_id")

    def _norm(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        y = F.layer_norm(x, x.shape[-1:], eps=self.eps)
        return y * weight.view(shape) + bias.view(shape)

    @staticmethod
    def _linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """``[M, N, in]`` -> ``[M, N, out]`` with ``[M, out, in]`` weights."""
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def compact_cells(self, input_ids: Tensor) -> Tensor | None:
        """``[M, N]`` the cells the compact form computes, or None for the dense form.

        Each member's real cells first, in layout order (a member with fewer than ``N`` real
        cells fills its tail with padding cells); None when the form is dense (on CUDA, without
        ``pad_id``, ``compact=False``) or ``N`` exceeds :data:`COMPACT_FILL` of the row cells.
        """
        if self.pad_id is None or self.compact is False:
            return None
        if self.compact is None and input_ids.device.type == "cuda":
            return None
        ids = input_ids.reshape(input_ids.shape[0], -1)
        real = ids != self.pad_id
        n = max(int(real.sum(1).max()), 1)
        if n > COMPACT_FILL * ids.shape[1]:
            return None
        return torch.argsort((~real).to(torch.int8), dim=1, stable=True)[:, :n]

    def __call__(
        self, w: dict[str, Tensor], input_ids: Tensor, position: Tensor, slot: Tensor, training: bool
    ) -> Tensor:
        """``[M, R, L]`` packed token ids -> ``[M, R, L, S+1]`` log-probabilities.

        The arguments are :meth:`StackedLSTM.__call__
        <cfl_lightning.models.stacked_lstm.StackedLSTM.__call__>`'s (``w``, ``input_ids``,
        ``training`` alike), except: ``position`` feeds the sinusoidal encodings, and ``slot``
        (``[M, R, L]``, the slot id inside the row) keeps attention inside a slot. Padding cells
        get finite log-probabilities that mean nothing.
        """
        members, rows, length = input_ids.shape
        cells = rows * length
        p = self.dropout if training else 0.0
        embedding = w["net.embedding.weight"]  # [M, V, d]
        d = embedding.shape[-1]
        ids, pos = input_ids.reshape(members, cells), position.reshape(members, cells)
        order = self.compact_cells(input_ids)
        spread = None if order is None else order[:, :, None]
        if order is not None:
            ids, pos = ids.gather(1, order), pos.gather(1, order)
        index = torch.arange(members, device=input_ids.device)[:, None]
        table = sinusoidal_positions(length, d, device=input_ids.device).to(embedding.dtype)
        x = F.dropout(embedding[index, ids] * math.sqrt(d) + table[pos], p, training)  # [M, N, d]
        allowed = (slot.unsqueeze(-1) == slot.unsqueeze(-2)) & (
            position.unsqueeze(-1) >= position.unsqueeze(-2)
        )  # [M, R, L, L]: same slot, key not after query
        allowed = allowed.reshape(members * rows, 1, length, length)
        heads, head = self.num_heads, d // self.num_heads
        for i in range(self.num_layers):
            pre = f"net.layers.layers.{i}."
            y = self._norm(x, w[pre + "norm1.weight"], w[pre + "norm1.bias"])
            qkv = self._linear(y, w[pre + "self_attn.in_proj_weight"], w[pre + "self_attn.in_proj_bias"])
            if spread is not None:  # to the packed layout (no real query sees a padding cell)
                qkv = _scatter_cells(qkv, spread, cells)
            qkv = qkv.view(members * rows, length, 3, heads, head).permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(
                qkv[0], qkv[1], qkv[2], attn_mask=allowed, dropout_p=p
            )  # [M*R, heads, L, head]
            attn = attn.transpose(1, 2).reshape(members, cells, d)
            if order is not None:  # back to the real cells
                attn = attn.gather(1, order[:, :, None].expand(-1, -1, d))
            attn = self._linear(attn, w[pre + "self_attn.out_proj.weight"], w[pre + "self_attn.out_proj.bias"])
            x = x + F.dropout(attn, p, training)
            y = self._norm(x, w[pre + "norm2.weight"], w[pre + "norm2.bias"])
            y = F.dropout(torch.relu(self._linear(y, w[pre + "linear1.weight"], w[pre + "linear1.bias"])), p, training)
            y = self._linear(y, w[pre + "linear2.weight"], w[pre + "linear2.bias"])
            x = x + F.dropout(y, p, training)
        x = self._norm(x, w["net.norm.weight"], w["net.norm.bias"])
        logits = self._linear(x, w["net.output.weight"], w["net.output.bias"])
        out = torch.log_softmax(logits, dim=-1)
        if spread is not None:
            out = _scatter_cells(out, spread, cells)
        return out.view(members, rows, length, -1)


def _scatter_cells(values: Tensor, spread: Tensor, cells: int) -> Tensor:
    """``[M, N, C]`` values of the compact cells -> ``[M, cells, C]``, zeros elsewhere.

    ``spread`` is ``[M, N, 1]``: each entry's cell (distinct within a member).
    """
    members, _, width = values.shape
    full = values.new_zeros(members, cells, width)
    return full.scatter(1, spread.expand(-1, -1, width), values)

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
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from cfl_lightning.models.base import sinusoidal_positions

__all__ = ["StackedTransformer"]


class StackedTransformer:
    """Functional forward of M transformer language models sharing one architecture.

    Args:
        num_layers: encoder layers.
        num_heads: attention heads.
        dropout: dropout probability.
        eps: layer-norm epsilon.
    """

    def __init__(self, num_layers: int, num_heads: int, dropout: float, eps: float = 1e-5) -> None:
        self.num_layers, self.num_heads = int(num_layers), int(num_heads)
        self.dropout, self.eps = float(dropout), float(eps)

    def _norm(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        y = F.layer_norm(x, x.shape[-1:], eps=self.eps)
        return y * weight.view(shape) + bias.view(shape)

    @staticmethod
    def _linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """``[M, N, in]`` -> ``[M, N, out]`` with ``[M, out, in]`` weights."""
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def __call__(
        self, w: dict[str, Tensor], input_ids: Tensor, position: Tensor, slot: Tensor, training: bool
    ) -> Tensor:
        """``[M, R, L]`` packed token ids -> ``[M, R, L, S+1]`` log-probabilities.

        The arguments are :meth:`StackedLSTM.__call__
        <cfl_lightning.models.stacked_lstm.StackedLSTM.__call__>`'s (``w``, ``input_ids``,
        ``training`` alike), except: ``position`` feeds the sinusoidal encodings, and ``slot``
        (``[M, R, L]``, the slot id inside the row) keeps attention inside a slot.
        """
        members, rows, length = input_ids.shape
        p = self.dropout if training else 0.0
        embedding = w["net.embedding.weight"]  # [M, V, d]
        d = embedding.shape[-1]
        index = torch.arange(members, device=input_ids.device)[:, None, None]
        table = sinusoidal_positions(length, d, device=input_ids.device).to(embedding.dtype)
        x = embedding[index, input_ids] * math.sqrt(d) + table[position]
        x = F.dropout(x, p, training).reshape(members, rows * length, d)
        allowed = (slot.unsqueeze(-1) == slot.unsqueeze(-2)) & (
            position.unsqueeze(-1) >= position.unsqueeze(-2)
        )  # [M, R, L, L]: same slot, key not after query
        allowed = allowed.reshape(members * rows, 1, length, length)
        heads, head = self.num_heads, d // self.num_heads
        for i in range(self.num_layers):
            pre = f"net.layers.layers.{i}."
            y = self._norm(x, w[pre + "norm1.weight"], w[pre + "norm1.bias"])
            qkv = self._linear(y, w[pre + "self_attn.in_proj_weight"], w[pre + "self_attn.in_proj_bias"])
            qkv = qkv.view(members * rows, length, 3, heads, head).permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(
                qkv[0], qkv[1], qkv[2], attn_mask=allowed, dropout_p=p
            )  # [M*R, heads, L, head]
            attn = attn.transpose(1, 2).reshape(members, rows * length, d)
            attn = self._linear(attn, w[pre + "self_attn.out_proj.weight"], w[pre + "self_attn.out_proj.bias"])
            x = x + F.dropout(attn, p, training)
            y = self._norm(x, w[pre + "norm2.weight"], w[pre + "norm2.bias"])
            y = F.dropout(torch.relu(self._linear(y, w[pre + "linear1.weight"], w[pre + "linear1.bias"])), p, training)
            y = self._linear(y, w[pre + "linear2.weight"], w[pre + "linear2.bias"])
            x = x + F.dropout(y, p, training)
        x = self._norm(x, w["net.norm.weight"], w["net.norm.bias"])
        logits = self._linear(x, w["net.output.weight"], w["net.output.bias"])
        return torch.log_softmax(logits, dim=-1).view(members, rows, length, -1)

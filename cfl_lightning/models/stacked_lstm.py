"""M LSTM language models evaluated at once from stacked ``[M, ...]`` weights.

The network is :class:`~cfl_lightning.models.LSTMLanguageModel`'s (embedding -> dropout ->
LSTM -> dropout -> linear -> log-softmax, dropout between LSTM layers), written with batched
matrix products over the member axis: the input projection of all positions is one ``baddbmm``,
each time step one ``baddbmm`` plus element-wise gates (PyTorch's gate order ``i, f, g, o``).
cuDNN's fused LSTM cannot be batched over weights (``vmap`` has no rule for it), hence the
explicit recurrence; ``benchmarks/bench_ensemble.py`` compares it with ``vmap``.

It is :meth:`LSTMLanguageModel.stacked_network
<cfl_lightning.models.LSTMLanguageModel.stacked_network>`. Inputs are packed rows
(:class:`~cfl_lightning.models.base.StackedNetwork`; built by
:class:`~cfl_lightning.ensemble.packing.PackedBatch`): the hidden and
cell states are reset to zero wherever ``position == 0`` (a string starts), which is the state
``nn.LSTM`` starts every string from.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from cfl_lightning.models.lstm_recurrence import lstm_recurrence

__all__ = ["StackedLSTM", "lstm_cell"]


def lstm_cell(
    gates_in: Tensor, h: Tensor, c: Tensor, keep: Tensor, w_hh_t: Tensor
) -> tuple[Tensor, Tensor]:
    """One time step of M LSTMs.

    Args:
        gates_in: ``[M, R, 4H]`` input projection plus both biases at this step.
        h: ``[M, R, H]`` previous hidden state.
        c: ``[M, R, H]`` previous cell state.
        keep: ``[M, R, 1]`` 0 where a string starts (state reset), else 1.
        w_hh_t: ``[M, H, 4H]`` transposed recurrent weights.

    Returns:
        the new ``(h, c)``.
    """
    h, c = h * keep, c * keep
    gates = torch.baddbmm(gates_in, h, w_hh_t)
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


class StackedLSTM:
    """Functional forward of M LSTM language models sharing one architecture.

    Args:
        num_layers: LSTM layers.
        dropout: dropout probability (embeddings, between layers, before the output layer).
        recurrence: ``"function"`` (default: :func:`~cfl_lightning.models.lstm_recurrence.
            lstm_recurrence`, a hand-written backward through time) or ``"autograd"`` (the loop
            of :func:`lstm_cell` under autograd; the reference of the tests).
    """

    RECURRENCES = ("function", "autograd")

    def __init__(self, num_layers: int, dropout: float, recurrence: str = "function") -> None:
        self.num_layers, self.dropout = int(num_layers), float(dropout)
        if recurrence not in self.RECURRENCES:
            raise ValueError(f"recurrence must be one of {self.RECURRENCES}, got {recurrence!r}")
        self.recurrence = recurrence

    def __call__(
        self, w: dict[str, Tensor], input_ids: Tensor, position: Tensor, slot: Tensor, training: bool
    ) -> Tensor:
        """``[M, R, L]`` packed token ids -> ``[M, R, L, S+1]`` log-probabilities.

        Args:
            w: ``[M, ...]`` stacked parameters named as in the model's ``named_parameters``.
            input_ids: ``[M, R, L]`` int64.
            position: ``[M, R, L]`` position inside the string (0 resets the state).
            slot: unused (the recurrence needs only the resets); for a common signature.
            training: apply dropout.
        """
        members, rows, length = input_ids.shape
        p = self.dropout if training else 0.0
        embedding = w["net.embedding.weight"]  # [M, V, H]
        index = torch.arange(members, device=input_ids.device)[:, None, None]
        x = F.dropout(embedding[index, input_ids], p, training)  # [M, R, L, H]
        keep = (position != 0).to(x.dtype).unsqueeze(-1)  # [M, R, L, 1]
        for layer in range(self.num_layers):
            if layer > 0:
                x = F.dropout(x, p, training)
            x = self._layer(w, layer, x, keep)
        x = F.dropout(x, p, training)
        hidden = x.shape[-1]
        logits = torch.baddbmm(
            w["net.output.bias"].unsqueeze(1),
            x.reshape(members, rows * length, hidden),
            w["net.output.weight"].transpose(1, 2),
        )
        return torch.log_softmax(logits, dim=-1).view(members, rows, length, -1)

    def _layer(self, w: dict[str, Tensor], layer: int, x: Tensor, keep: Tensor) -> Tensor:
        members, rows, length, width = x.shape
        w_ih, w_hh = w[f"net.lstm.weight_ih_l{layer}"], w[f"net.lstm.weight_hh_l{layer}"]
        bias = (w[f"net.lstm.bias_ih_l{layer}"] + w[f"net.lstm.bias_hh_l{layer}"]).unsqueeze(1)
        gates_in = torch.baddbmm(
            bias, x.reshape(members, rows * length, width), w_ih.transpose(1, 2)
        ).view(members, rows, length, -1)
        w_hh_t = w_hh.transpose(1, 2)  # [M, H, 4H]
        if self.recurrence == "function":
            return lstm_recurrence(gates_in, keep, w_hh_t)
        hidden = w_hh.shape[-1]
        h = x.new_zeros(members, rows, hidden)
        c = x.new_zeros(members, rows, hidden)
        outputs = []
        for t in range(length):
            h, c = lstm_cell(gates_in[:, :, t], h, c, keep[:, :, t], w_hh_t)
            outputs.append(h)
        return torch.stack(outputs, dim=2)

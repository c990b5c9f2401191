"""The LSTM language model, in its two forms: one model, and M models from stacked weights.

Everything about the LSTM is written here once: the network's layers and their parameter names
(:class:`_LSTMNet`), the width chosen from a parameter budget, the gate layout (PyTorch's
``i, f, g, o``: :func:`gate_slices`), the model (:class:`LSTMLanguageModel`, whose forward is
``nn.LSTM``: cuDNN's or oneDNN's fused kernel) and its stacked form (:class:`StackedLSTM`, the
forward of M members from stacked ``[M, ...]`` weights, which ensembles train as one
computation: :meth:`LSTMLanguageModel.stacked_network`).

The stacked form is written with batched matrix products over the member axis: the input
projection of all positions is one ``baddbmm``, each time step one ``baddbmm`` plus element-wise
gates. cuDNN's fused LSTM cannot be batched over weights (``vmap`` has no rule for it), hence the
explicit recurrence; ``benchmarks/bench_ensemble.py`` compares it with ``vmap``. Its inputs are
packed rows (:class:`~cfl_lightning.models.base.StackedNetwork`; built by
:class:`~cfl_lightning.ensemble.packing.PackedBatch`): the hidden and cell states are reset to
zero wherever ``position == 0`` (a string starts), which is the state ``nn.LSTM`` starts every
string from.

**The recurrence with a hand-written backward** (:class:`LSTMRecurrence`, the stacked form's
default). Autograd through a Python loop of time steps records about ten nodes per step and
replays them one by one; on small batches that bookkeeping, not arithmetic, is the cost (on a
CPU, and in kernel launches on a GPU). :class:`LSTMRecurrence` runs the forward loop without a
graph (ten operations per step), keeps the activations in time-major buffers, computes every
derivative factor for all steps at once after the loop, and runs the backward loop in eleven
operations per step; the recurrent weight gradient is one batched product over all steps. The
result equals autograd's through :func:`lstm_cell` (tested in float64). The cell gate uses
``tanh(x) = 2 sigmoid(2x) - 1``: its pre-activations are doubled once (input part and recurrent
weights), so one ``sigmoid`` covers all four gates at every step.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cfl_lightning.models.base import LanguageModel
from cfl_lightning.models.sizing import count_parameters, largest_within_budget

__all__ = [
    "LSTMLanguageModel",
    "StackedLSTM",
    "LSTMRecurrence",
    "lstm_cell",
    "lstm_recurrence",
    "gate_slices",
]


# ---------------------------------------------------------------------- the network and its size
class _LSTMNet(nn.Module):
    """Embedding -> dropout -> LSTM -> dropout -> linear output (log-softmax in the caller).

    Dropout also acts between LSTM layers. Its parameters, under the model's ``net`` attribute,
    are the names the stacked form reads (:meth:`names`).
    """

    #: the embedding's and the output layer's parameter names in the model
    EMBEDDING, OUTPUT_WEIGHT, OUTPUT_BIAS = (
        "net.embedding.weight", "net.output.weight", "net.output.bias"
    )

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, hidden_size, device=device)
        self.lstm = nn.LSTM(
            hidden_size,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
            device=device,
        )
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(hidden_size, num_classes, device=device)

    def forward(self, input_ids: Tensor) -> Tensor:
        hidden, _ = self.lstm(self.dropout(self.embedding(input_ids)))
        return self.output(self.dropout(hidden))

    @staticmethod
    def names(layer: int) -> tuple[str, str, str, str]:
        """Layer ``layer``'s ``(weight_ih, weight_hh, bias_ih, bias_hh)`` names in the model."""
        return tuple(  # type: ignore[return-value]
            f"net.lstm.{kind}_l{layer}" for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )


@functools.lru_cache(maxsize=256)
def _hidden_size(vocab_size: int, num_classes: int, num_layers: int, budget: int) -> int:
    """The largest hidden size within ``budget`` (cached: ensemble members share their sizing)."""

    def count(size: int) -> int:
        return count_parameters(_LSTMNet(vocab_size, num_classes, size, num_layers, 0.0, "meta"))

    return largest_within_budget(count, budget)


# ---------------------------------------------------------------------- the model
class LSTMLanguageModel(LanguageModel):
    """An LSTM next-symbol model (Hochreiter & Schmidhuber, 1997).

    Architecture: embedding of the ``S+3`` token ids (width = hidden size), dropout, a
    ``num_layers``-layer LSTM (dropout between layers), dropout, a linear layer to ``S+1`` logits,
    log-softmax. Padding needs no packing: the LSTM reads left to right and every padding position
    comes after the real ones and is masked out of the loss.

    Sizing: the hidden size is the largest one whose total parameter count does not exceed
    ``param_budget`` (e.g. 125 for ``|S| = 2`` at 128k: 127,003 parameters), unless
    ``hidden_size`` is given, which then wins over the budget.

    Args:
        num_symbols: alphabet size ``|S|`` (linked from ``data.num_symbols`` by the CLI).
        param_budget: parameter budget (ignored when ``hidden_size`` is given).
        num_layers: LSTM layers.
        hidden_size: explicit hidden size (default: chosen from ``param_budget``).
        **training: ``dropout``, ``lr``, ``lr_factor``, ``lr_patience``, ``loss``: see
            :class:`~cfl_lightning.models.base.LanguageModel`.
    """

    def __init__(
        self,
        num_symbols: int = 2,
        param_budget: int = 128_000,
        num_layers: int = 1,
        hidden_size: Optional[int] = None,
        **training: Any,
    ) -> None:
        super().__init__(
            num_symbols=num_symbols, param_budget=param_budget, num_layers=num_layers, **training
        )

        if hidden_size is not None and hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        size = hidden_size
        if size is None:
            size = _hidden_size(self.vocab_size, self.num_classes, num_layers, param_budget)
        self.hidden_size = int(size)
        self.net = _LSTMNet(
            self.vocab_size, self.num_classes, self.hidden_size, num_layers, self.dropout_p
        )

    def chosen_sizes(self) -> dict[str, int]:
        """``{"hidden_size_actual": ...}``: the hidden size, given or chosen from the budget."""
        return {"hidden_size_actual": self.hidden_size}

    def forward(self, input_ids: Tensor) -> Tensor:
        """``[B, T]`` token ids -> ``[B, T, S+1]`` next-symbol log-probabilities."""
        return torch.log_softmax(self.net(input_ids), dim=-1)

    #: on a CPU oneDNN's fused LSTM kernel, one member at a time, beats the batched recurrence
    #: per token (``benchmarks/bench_ensemble.py``)
    ENSEMBLE_CPU_ENGINE = "loop"

    def stacked_network(self) -> StackedLSTM:
        """M of these LSTMs at once: :class:`StackedLSTM`."""
        return StackedLSTM(self.net.lstm.num_layers, self.net.dropout.p)


# ---------------------------------------------------------------------- the gates
def gate_slices(hidden: int) -> tuple[slice, slice, slice, slice]:
    """The ``i, f, g, o`` gates' slices of a ``4 * hidden`` pre-activation (PyTorch's order)."""
    i, f, g, o = (slice(k * hidden, (k + 1) * hidden) for k in range(4))
    return i, f, g, o


def lstm_cell(
    gates_in: Tensor, h: Tensor, c: Tensor, keep: Tensor, w_hh_t: Tensor
) -> tuple[Tensor, Tensor]:
    """One time step of M LSTMs (under autograd: the reference of :class:`LSTMRecurrence`).

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
    i, f, g, o = (gates[..., s] for s in gate_slices(h.shape[-1]))
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


class LSTMRecurrence(torch.autograd.Function):
    """``hs = LSTM(gates_in, w_hh)`` with state resets; see :func:`lstm_recurrence`."""

    @staticmethod
    def forward(ctx, gates_in: Tensor, keep: Tensor, w_hh_t: Tensor) -> Tensor:
        members, rows, length, four = gates_in.shape
        hidden = four // 4
        i_gate, f_gate, cell, o_gate = gate_slices(hidden)
        double = torch.ones(four, dtype=gates_in.dtype, device=gates_in.device)
        double[cell] = 2.0
        g_in = (gates_in * double).permute(2, 0, 1, 3).contiguous()  # [L, M, R, 4H]
        w2 = w_hh_t * double  # [M, H, 4H]
        k = keep.permute(2, 0, 1, 3).contiguous()  # [L, M, R, 1]
        acts = gates_in.new_empty(length, members, rows, four)  # i, f, o: sigmoid; g: tanh
        h_in = gates_in.new_empty(length, members, rows, hidden)  # h_{t-1} after reset
        c_in = gates_in.new_empty(length, members, rows, hidden)  # c_{t-1} after reset
        tanh_c = gates_in.new_empty(length, members, rows, hidden)
        hs = gates_in.new_empty(length, members, rows, hidden)
        h = gates_in.new_zeros(members, rows, hidden)
        c = gates_in.new_zeros(members, rows, hidden)
        for t in range(length):
            torch.mul(h, k[t], out=h_in[t])
            torch.mul(c, k[t], out=c_in[t])
            a = acts[t]
            torch.baddbmm(g_in[t], h_in[t], w2, out=a)
            a.sigmoid_()
            a[..., cell].mul_(2.0).sub_(1.0)  # tanh of the (undoubled) cell pre-activation
            c = torch.addcmul(a[..., f_gate] * c_in[t], a[..., i_gate], a[..., cell])
            torch.tanh(c, out=tanh_c[t])
            torch.mul(a[..., o_gate], tanh_c[t], out=hs[t])
            h = hs[t]
        slopes = acts * (1 - acts)  # sigmoid'
        slopes[..., cell] = 1 - acts[..., cell] ** 2  # tanh'
        o_slope = acts[..., o_gate] * (1 - tanh_c**2)  # d h / d c
        ctx.save_for_backward(acts, slopes, h_in, c_in, tanh_c, o_slope, k, w_hh_t)
        return hs.permute(1, 2, 0, 3)

    @staticmethod
    def backward(ctx, grad_hs: Tensor) -> tuple[Tensor, None, Tensor]:
        acts, slopes, h_in, c_in, tanh_c, o_slope, k, w_hh_t = ctx.saved_tensors
        length, members, rows, four = acts.shape
        hidden = four // 4
        i_gate, f_gate, cell, o_gate = gate_slices(hidden)
        dh_out = grad_hs.permute(2, 0, 1, 3)  # [L, M, R, H] view
        d_gates = torch.empty_like(acts)
        w_hh = w_hh_t.transpose(1, 2)  # [M, 4H, H]
        dh = torch.zeros_like(h_in[0])
        dc = torch.zeros_like(h_in[0])
        for t in range(length - 1, -1, -1):
            a, d = acts[t], d_gates[t]
            dh = dh + dh_out[t]
            dc = torch.addcmul(dc, dh, o_slope[t])
            torch.mul(dc, a[..., cell], out=d[..., i_gate])
            torch.mul(dc, c_in[t], out=d[..., f_gate])
            torch.mul(dc, a[..., i_gate], out=d[..., cell])
            torch.mul(dh, tanh_c[t], out=d[..., o_gate])
            d.mul_(slopes[t])
            dh = torch.bmm(d, w_hh).mul_(k[t])
            dc = (dc * a[..., f_gate]).mul_(k[t])
        flat_h = h_in.permute(1, 0, 2, 3).reshape(members, length * rows, hidden)
        flat_d = d_gates.permute(1, 0, 2, 3).reshape(members, length * rows, four)
        grad_w = torch.bmm(flat_h.transpose(1, 2), flat_d)  # [M, H, 4H]
        return d_gates.permute(1, 2, 0, 3), None, grad_w


def lstm_recurrence(gates_in: Tensor, keep: Tensor, w_hh_t: Tensor) -> Tensor:
    """Hidden states of M LSTMs over packed rows.

    Args:
        gates_in: ``[M, R, L, 4H]`` input projections plus both biases (gate order i, f, g, o).
        keep: ``[M, R, L, 1]`` 0 where a string starts (hidden and cell state reset), else 1.
        w_hh_t: ``[M, H, 4H]`` transposed recurrent weights.

    Returns:
        ``[M, R, L, H]`` hidden states (differentiable in ``gates_in`` and ``w_hh_t``).
    """
    return LSTMRecurrence.apply(gates_in, keep, w_hh_t)


# ---------------------------------------------------------------------- the stacked form
class StackedLSTM:
    """Functional forward of M LSTM language models sharing one architecture (:class:`_LSTMNet`'s
    layers, read from stacked weights).

    Args:
        num_layers: LSTM layers.
        dropout: dropout probability (embeddings, between layers, before the output layer).
        recurrence: ``"function"`` (default: :func:`lstm_recurrence`, a hand-written backward
            through time) or ``"autograd"`` (the loop of :func:`lstm_cell` under autograd; the
            reference of the tests).
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
        embedding = w[_LSTMNet.EMBEDDING]  # [M, V, H]
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
            w[_LSTMNet.OUTPUT_BIAS].unsqueeze(1),
            x.reshape(members, rows * length, hidden),
            w[_LSTMNet.OUTPUT_WEIGHT].transpose(1, 2),
        )
        return torch.log_softmax(logits, dim=-1).view(members, rows, length, -1)

    def _layer(self, w: dict[str, Tensor], layer: int, x: Tensor, keep: Tensor) -> Tensor:
        members, rows, length, width = x.shape
        w_ih, w_hh, b_ih, b_hh = (w[name] for name in _LSTMNet.names(layer))
        gates_in = torch.baddbmm(
            (b_ih + b_hh).unsqueeze(1), x.reshape(members, rows * length, width),
            w_ih.transpose(1, 2),
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

"""The LSTM recurrence of M members with a hand-written backward pass through time.

Autograd through a Python loop of time steps records about ten nodes per step and replays them
one by one; on small batches that bookkeeping, not arithmetic, is the cost (on a CPU, and in
kernel launches on a GPU). :class:`LSTMRecurrence` runs the forward loop without a graph (ten
operations per step), keeps the activations in time-major buffers, computes every derivative
factor for all steps at once after the loop, and runs the backward loop in eleven operations
per step; the recurrent weight gradient is one batched product over all steps. The result
equals autograd's (tested in float64).

The cell gate uses ``tanh(x) = 2 sigmoid(2x) - 1``: its pre-activations are doubled once (input
part and recurrent weights), so one ``sigmoid`` covers all four gates at every step.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["LSTMRecurrence", "lstm_recurrence"]


class LSTMRecurrence(torch.autograd.Function):
    """``hs = LSTM(gates_in, w_hh)`` with state resets; see :func:`lstm_recurrence`."""

    @staticmethod
    def forward(ctx, gates_in: Tensor, keep: Tensor, w_hh_t: Tensor) -> Tensor:
        members, rows, length, four = gates_in.shape
        hidden = four // 4
        cell = slice(2 * hidden, 3 * hidden)
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
            c = torch.addcmul(a[..., hidden : 2 * hidden] * c_in[t], a[..., :hidden], a[..., cell])
            torch.tanh(c, out=tanh_c[t])
            torch.mul(a[..., 3 * hidden :], tanh_c[t], out=hs[t])
            h = hs[t]
        slopes = acts * (1 - acts)  # sigmoid'
        slopes[..., cell] = 1 - acts[..., cell] ** 2  # tanh'
        o_slope = acts[..., 3 * hidden :] * (1 - tanh_c**2)  # d h / d c
        ctx.save_for_backward(acts, slopes, h_in, c_in, tanh_c, o_slope, k, w_hh_t)
        return hs.permute(1, 2, 0, 3)

    @staticmethod
    def backward(ctx, grad_hs: Tensor) -> tuple[Tensor, None, Tensor]:
        acts, slopes, h_in, c_in, tanh_c, o_slope, k, w_hh_t = ctx.saved_tensors
        length, members, rows, four = acts.shape
        hidden = four // 4
        dh_out = grad_hs.permute(2, 0, 1, 3)  # [L, M, R, H] view
        d_gates = torch.empty_like(acts)
        w_hh = w_hh_t.transpose(1, 2)  # [M, 4H, H]
        dh = torch.zeros_like(h_in[0])
        dc = torch.zeros_like(h_in[0])
        for t in range(length - 1, -1, -1):
            a, d = acts[t], d_gates[t]
            dh = dh + dh_out[t]
            dc = torch.addcmul(dc, dh, o_slope[t])
            torch.mul(dc, a[..., 2 * hidden : 3 * hidden], out=d[..., :hidden])  # input gate
            torch.mul(dc, c_in[t], out=d[..., hidden : 2 * hidden])  # forget gate
            torch.mul(dc, a[..., :hidden], out=d[..., 2 * hidden : 3 * hidden])  # cell gate
            torch.mul(dh, tanh_c[t], out=d[..., 3 * hidden :])  # output gate
            d.mul_(slopes[t])
            dh = torch.bmm(d, w_hh).mul_(k[t])
            dc = (dc * a[..., hidden : 2 * hidden]).mul_(k[t])
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

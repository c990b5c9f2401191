"""The LSTM recurrence of M members with a hand-written backward pass through time.

Autograd through a Python loop of time steps records about ten nodes per step and replays them
one by one; on small batches that bookkeeping, not arithmetic, is the cost (on a CPU, and in
kernel launches on a GPU). :class:`LSTMRecurrence` runs the forward loop without a graph, keeps
the activations in time-major buffers, and computes the gradients in one reverse loop of about a
dozen operations per step; the recurrent weight gradient is one batched product over all steps.
The result equals autograd's (tested in float64).
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
        g_in = gates_in.permute(2, 0, 1, 3)  # [L, M, R, 4H] view
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
            torch.baddbmm(g_in[t], h_in[t], w_hh_t, out=a)
            g = a[..., 2 * hidden : 3 * hidden]
            torch.tanh(g, out=g)
            a[..., : 2 * hidden].sigmoid_()
            a[..., 3 * hidden :].sigmoid_()
            c = torch.addcmul(a[..., hidden : 2 * hidden] * c_in[t], a[..., :hidden], g)
            torch.tanh(c, out=tanh_c[t])
            torch.mul(a[..., 3 * hidden :], tanh_c[t], out=hs[t])
            h = hs[t]
        ctx.save_for_backward(acts, h_in, c_in, tanh_c, k, w_hh_t)
        return hs.permute(1, 2, 0, 3)

    @staticmethod
    def backward(ctx, grad_hs: Tensor) -> tuple[Tensor, None, Tensor]:
        acts, h_in, c_in, tanh_c, k, w_hh_t = ctx.saved_tensors
        length, members, rows, four = acts.shape
        hidden = four // 4
        dh_out = grad_hs.permute(2, 0, 1, 3)  # [L, M, R, H] view
        d_gates = torch.empty_like(acts)
        w_hh = w_hh_t.transpose(1, 2)  # [M, 4H, H]
        dh = torch.zeros_like(h_in[0])
        dc = torch.zeros_like(h_in[0])
        for t in range(length - 1, -1, -1):
            a = acts[t]
            i, f = a[..., :hidden], a[..., hidden : 2 * hidden]
            g, o = a[..., 2 * hidden : 3 * hidden], a[..., 3 * hidden :]
            dh = dh + dh_out[t]
            tc = tanh_c[t]
            dc = dc + dh * o * (1 - tc * tc)
            d = d_gates[t]
            torch.mul(dc * g, i * (1 - i), out=d[..., :hidden])
            torch.mul(dc * c_in[t], f * (1 - f), out=d[..., hidden : 2 * hidden])
            torch.mul(dc * i, 1 - g * g, out=d[..., 2 * hidden : 3 * hidden])
            torch.mul(dh * tc, o * (1 - o), out=d[..., 3 * hidden :])
            dh = torch.bmm(d, w_hh) * k[t]
            dc = dc * f * k[t]
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

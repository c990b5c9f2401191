r"""The binning semiring over the reals or the log semiring, vectorized in torch.

An element of the ``N``-th order binning semiring is a vector ``v = (v_0, ..., v_N)``: ``v_n`` is
the weight of exactly ``n`` event occurrences for ``n < N`` and ``v_N`` the weight of ``>= N``
occurrences (the overflow bin). Elements are tensors whose **last** axis has ``N + 1`` entries;
all leading axes are batch axes, so every operation works elementwise over matrices of elements.

.. math::
    (v \otimes w)_n = \sum_{i=0}^{n} v_i w_{n-i} \ (n < N), \qquad
    (v \otimes w)_N = \sum_{i + j \ge N} v_i w_j .

With ``log=True`` the base semiring is the log semiring (``plus`` = logaddexp, ``times`` = +):
every weight is stored as its logarithm, ``-inf`` is zero and never produces NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["BinningSemiring"]


def _logsumexp(x: Tensor, dim: int) -> Tensor:
    """``logsumexp`` that returns ``-inf`` (not NaN) when every entry is ``-inf``."""
    peak = x.amax(dim=dim, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    return (x - peak).exp().sum(dim=dim).log() + peak.squeeze(dim)


class BinningSemiring:
    """The ``order``-th binning semiring (bins ``0 .. order``, the last one overflow).

    Args:
        order: ``N``; elements have ``N + 1`` bins.
        log: store weights in log space (the base semiring is then the log semiring).

    Example:
        >>> S = BinningSemiring(3)
        >>> a = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)
        >>> S.times(a, a)
        tensor([0.2500, 0.5000, 0.2500, 0.0000], dtype=torch.float64)
    """

    def __init__(self, order: int, *, log: bool = False) -> None:
        if order < 0:
            raise ValueError(f"order must be >= 0, got {order}")
        self.order = int(order)
        self.log = bool(log)
        self.size = self.order + 1

    # ------------------------------------------------------------------ constants
    def zero(self, *shape: int, dtype=torch.float64, device=None) -> Tensor:
        """``[*shape, N + 1]`` additive identity."""
        fill = float("-inf") if self.log else 0.0
        return torch.full((*shape, self.size), fill, dtype=dtype, device=device)

    def one(self, *shape: int, dtype=torch.float64, device=None) -> Tensor:
        """``[*shape, N + 1]`` multiplicative identity ``(1, 0, ..., 0)``."""
        out = self.zero(*shape, dtype=dtype, device=device)
        out[..., 0] = 0.0 if self.log else 1.0
        return out

    def lift(self, weight: Tensor, count: Tensor) -> Tensor:
        """Place ``weight`` at bin ``min(count, N)`` (the paper's lifting function).

        Args:
            weight: ``[*]`` base weights (log weights when ``log``).
            count: ``[*]`` non-negative integer event counts.

        Returns:
            ``[*, N + 1]``.
        """
        out = self.zero(*weight.shape, dtype=weight.dtype, device=weight.device)
        index = count.long().clamp(max=self.order).unsqueeze(-1)
        return out.scatter(-1, index, weight.unsqueeze(-1))

    # ------------------------------------------------------------------ operations
    def plus(self, a: Tensor, b: Tensor) -> Tensor:
        """Elementwise sum of two broadcastable elements ``[..., N + 1]``."""
        return torch.logaddexp(a, b) if self.log else a + b

    def sum(self, a: Tensor, dim: int) -> Tensor:
        """Semiring sum over a batch axis ``dim`` (not the bin axis)."""
        if dim < 0:
            dim = a.dim() + dim
        if dim == a.dim() - 1:
            raise ValueError("cannot sum over the bin axis")
        return _logsumexp(a, dim) if self.log else a.sum(dim)

    def _tail(self, b: Tensor) -> Tensor:
        """``t_k = sum_{j >= k} b_j`` (``[..., N + 1]``), by a reverse cumulative sum."""
        if self.log:
            return torch.logcumsumexp(b.flip(-1), dim=-1).flip(-1)
        return b.flip(-1).cumsum(-1).flip(-1)

    def times(self, a: Tensor, b: Tensor) -> Tensor:
        """Overflow-accumulating convolution of broadcastable elements ``[..., N + 1]``.

        Bins ``n < N`` are the ordinary convolution; bin ``N`` is ``sum_i a_i * tail(b)_{N-i}``,
        summed directly (no subtraction, so no cancellation). Cost ``O(N^2)`` per element.
        """
        a, b = torch.broadcast_tensors(a, b)
        n = self.size
        idx = torch.arange(n, device=a.device)
        diff = idx[:, None] - idx[None, :]  # [k, i] -> k - i
        valid = diff >= 0
        gathered = b[..., diff.clamp(min=0)]  # [..., k, i] = b_{k-i}
        tail = self._tail(b)
        over = tail[..., (self.order - idx)]  # [..., i] = tail_{N-i}
        if self.log:
            neg = torch.tensor(float("-inf"), dtype=a.dtype, device=a.device)
            terms = torch.where(valid, a[..., None, :] + gathered, neg)
            low = _logsumexp(terms, -1)
            high = _logsumexp(a + over, -1)
        else:
            terms = torch.where(valid, a[..., None, :] * gathered, torch.zeros_like(gathered))
            low = terms.sum(-1)
            high = (a * over).sum(-1)
        return torch.cat([low[..., : self.order], high[..., None]], dim=-1)

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """Semiring matrix product of ``[..., I, J, N+1]`` and ``[..., J, K, N+1]``."""
        return self.sum(self.times(a[..., :, :, None, :], b[..., None, :, :, :]), dim=-3)

    def power(self, a: Tensor, exponent: int) -> Tensor:
        """``a`` multiplied by itself ``exponent`` times (``one`` for 0), by squaring."""
        if exponent < 0:
            raise ValueError("exponent must be >= 0")
        result = self.one(*a.shape[:-1], dtype=a.dtype, device=a.device)
        base = a
        while exponent:
            if exponent & 1:
                result = self.times(result, base)
            exponent >>= 1
            if exponent:
                base = self.times(base, base)
        return result

    def star(self, v: Tensor) -> Tensor:
        r"""Kleene star ``v* = sum_k v^k`` by the closed form of the paper's appendix.

        .. math::
            x_0 = v_0^*, \quad x_n = v_0^* \sum_{j=1}^{n} v_j x_{n-j} \ (0 < n < N), \quad
            x_N = \Big(\sum_i v_i\Big)^* \Big( [N = 0] + \sum_{i + j \ge N,\ j < N} v_i x_j \Big)

        with the real star ``a* = 1 / (1 - a)`` (``inf`` for ``a >= 1``). Cost ``O(N^2)``.

        Args:
            v: ``[..., N + 1]``.

        Returns:
            ``[..., N + 1]``; finite whenever ``sum_i v_i < 1`` (the PFSA case).
        """
        n = self.order
        bins: list[Tensor] = []
        base_star = self._base_star(v[..., 0])
        for k in range(n):
            if k == 0:
                value = base_star
            else:
                prev = torch.stack(bins[::-1], dim=-1)  # x_{k-1} ... x_0
                value = self._mul(base_star, self._dot(v[..., 1 : k + 1], prev))
            bins.append(value)
        # Overflow bin: sum over i + j >= N with j < N of v_i x_j, plus one_N.
        total = self._reduce(v)
        if n == 0:
            rest = torch.zeros_like(v[..., 0]) if self.log else torch.ones_like(v[..., 0])
        else:
            x = torch.stack(bins, dim=-1)  # [..., N]  (x_0 .. x_{N-1})
            tail_v = self._tail(v)  # tail_v[k] = sum_{i >= k} v_i
            j = torch.arange(n, device=v.device)
            rest = self._dot(tail_v[..., n - j], x)  # sum_j x_j * sum_{i >= N - j} v_i
        bins.append(self._mul(self._base_star(total), rest))
        return torch.stack(bins, dim=-1)

    # ------------------------------------------------------------------ base helpers
    def _base_star(self, a: Tensor) -> Tensor:
        if self.log:
            inf = torch.full_like(a, float("inf"))
            safe = torch.where(a < 0, a, torch.full_like(a, -1.0))
            return torch.where(a < 0, -torch.log1p(-safe.exp()), inf)
        inf = torch.full_like(a, float("inf"))
        safe = torch.where(a < 1, a, torch.zeros_like(a))
        return torch.where(a < 1, 1.0 / (1.0 - safe), inf)

    def _mul(self, a: Tensor, b: Tensor) -> Tensor:
        return a + b if self.log else a * b

    def _reduce(self, v: Tensor) -> Tensor:
        return _logsumexp(v, -1) if self.log else v.sum(-1)

    def _dot(self, a: Tensor, b: Tensor) -> Tensor:
        return _logsumexp(a + b, -1) if self.log else (a * b).sum(-1)

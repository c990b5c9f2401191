r"""Power series of tensors with one log scale per degree (no underflow, no overflow).

The count law of a pushdown automaton is a vector of power series in ``z`` (one per variable
of the excursion system, :mod:`cfl_lightning.automata.pushdown_fixpoint`). At ``N`` in the
thousands their coefficients span far more than float64's range (``1e-300`` and below), so a
:class:`ScaledSeries` keeps coefficient ``n`` as ``values[n] * exp(log_scale[n])`` with the
largest entry of ``values[n]`` equal to 1 (all zero and ``log_scale[n] = -inf`` for a zero
coefficient). Products of coefficients are formed relative to the largest product's scale
(:func:`convolve`), sums of terms relative to the largest term's (:func:`combine`), so every
factor ``exp(.)`` is at most 1: a term can only underflow where it is below ``1e-308`` of the
largest one, which is the float64 rounding of the sum anyway. A structurally zero coefficient
stays exactly zero (sums and products of nonnegative numbers, no cancellation), which keeps the
count law's support and lattice exact.

Arrays are numpy (float64): the recursion runs degree by degree over small matrices, where a
numpy call costs a fraction of a torch call; :meth:`ScaledSeries.log` hands torch tensors out.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = ["ScaledSeries", "Term", "combine", "convolve"]

Term = tuple[np.ndarray, float]  # (values, log scale): the array values * exp(log scale)


class ScaledSeries:
    """Coefficients ``x_0, x_1, ...`` of one array shape, each with its own log scale.

    Args:
        shape: the shape of one coefficient.
        capacity: initial number of coefficients to allocate (doubled when full).
    """

    def __init__(self, shape: tuple[int, ...], capacity: int = 64) -> None:
        self.shape = tuple(shape)
        cap = max(capacity, 1)
        self.values = np.zeros((cap, *self.shape))
        self.log_scale = np.full(cap, -math.inf)
        self.size = 0
        # Product layouts of 3-d coefficients [B, D1, D2] for :func:`convolve` (views, no copy):
        # ``ahead[:, :, n]`` = x_n and ``behind[:, capacity - 1 - n]`` = x_n (reversed in n).
        self.ahead: np.ndarray | None = None
        self.behind: np.ndarray | None = None
        if len(self.shape) == 3:
            b, d1, d2 = self.shape
            self.ahead = np.zeros((b, d1, cap, d2))
            self.behind = np.zeros((b, cap, d1, d2))

    @classmethod
    def view(cls, values: np.ndarray, log_scale: np.ndarray, size: int) -> ScaledSeries:
        """Another shape of the same coefficients (``values`` ``[capacity, *shape]``)."""
        out = cls.__new__(cls)
        out.shape = tuple(values.shape[1:])
        out.values, out.log_scale, out.size = values, log_scale, size
        out.ahead = out.behind = None
        return out

    def __len__(self) -> int:
        return self.size

    def _grow(self) -> None:
        grow = self.values.shape[0]
        self.values = np.concatenate([self.values, np.zeros_like(self.values)])
        self.log_scale = np.concatenate([self.log_scale, np.full(grow, -math.inf)])
        if self.ahead is not None and self.behind is not None:
            self.ahead = np.concatenate([self.ahead, np.zeros_like(self.ahead)], axis=2)
            self.behind = np.concatenate([np.zeros_like(self.behind), self.behind], axis=1)

    def append(self, term: Term | None) -> None:
        """Store the next coefficient, given relative to a log scale (``None``: zero).

        Raises:
            FloatingPointError: the coefficient holds NaN or an infinity.
        """
        if self.size == self.values.shape[0]:
            self._grow()
        n = self.size
        self.size += 1
        if term is None or term[1] == -math.inf:
            return
        values = np.maximum(term[0], 0.0)  # rounding of a solve; the series is nonnegative
        peak = float(values.max()) if values.size else 0.0
        if peak == 0.0:
            return
        if not (math.isfinite(peak) and math.isfinite(term[1])):
            raise FloatingPointError("a power-series coefficient is not finite")
        values = values / peak
        self.values[n] = values
        self.log_scale[n] = term[1] + math.log(peak)
        if self.ahead is not None and self.behind is not None:
            self.ahead[:, :, n] = values
            self.behind[:, self.behind.shape[1] - 1 - n] = values

    def term(self, n: int) -> Term:
        """Coefficient ``n`` as ``(values, log scale)``."""
        return self.values[n], float(self.log_scale[n])

    def log(self, upto: int | None = None) -> Tensor:
        """``[n, *shape]`` float64 tensor of log coefficients (``-inf`` for zero entries)."""
        n = self.size if upto is None else upto
        scale = self.log_scale[:n].reshape(n, *([1] * len(self.shape)))
        with np.errstate(divide="ignore"):
            return torch.from_numpy(np.log(self.values[:n]) + scale)


def combine(terms: list[Term | None]) -> Term | None:
    """The sum of scaled terms, relative to the largest scale (``None`` when all are zero)."""
    live = [t for t in terms if t is not None and t[1] > -math.inf]
    if not live:
        return None
    ref = max(s for _, s in live)
    total = live[0][0] * math.exp(live[0][1] - ref)
    for values, s in live[1:]:
        total = total + values * math.exp(s - ref)
    return total, ref


def convolve(
    left: ScaledSeries,
    right: ScaledSeries,
    m: int,
    lo: int,
    hi: int,
    *,
    part: tuple[slice, int] | None = None,
) -> Term | None:
    """``sum_{i = lo}^{hi} left_i @ right_{m - i}``, batched over the leading axis.

    Coefficients are ``[B, R, K]`` (left) and ``[B, K, C]`` (right); the sum runs as one batched
    matrix product over the stacked ``(i, k)`` axis, each ``left_i`` weighted by
    ``exp(scale_i + scale_{m-i} - ref)`` with ``ref`` the largest such exponent.

    Args:
        part: ``(batches, columns)``: only those batch entries and the first ``columns``
            columns of ``right`` (product layouts only; the scales are per coefficient, so parts
            share ``ref``).

    Returns:
        ``([B, R, C] values, ref)``, or ``None`` for an empty or all-zero sum.
    """
    if hi < lo:
        return None
    logs = left.log_scale[lo : hi + 1] + right.log_scale[m - hi : m - lo + 1][::-1]
    ref = float(logs.max())
    if ref == -math.inf:
        return None
    weights = np.exp(logs - ref)
    batch, rows, _ = left.shape
    cols = right.shape[-1]
    if left.ahead is not None and right.behind is not None:  # views of the product layouts
        which, cols = (slice(None), cols) if part is None else part
        ahead, behind = left.ahead[which], right.behind[which, :, :, :cols]
        batch = ahead.shape[0]
        a = (ahead[:, :, lo : hi + 1] * weights[None, None, :, None]).reshape(batch, rows, -1)
        top = right.behind.shape[1] - 1
        b = behind[:, top - m + lo : top - m + hi + 1].reshape(batch, -1, cols)
        return np.matmul(a, b), ref
    a = left.values[lo : hi + 1] * weights.reshape(-1, *([1] * len(left.shape)))
    b = right.values[m - hi : m - lo + 1][::-1]
    a = a.transpose(1, 2, 0, 3).reshape(batch, rows, -1)  # [B, R, (i, k)]
    b = b.transpose(1, 0, 2, 3).reshape(batch, -1, cols)  # [B, (i, k), C]
    return np.matmul(a, b), ref

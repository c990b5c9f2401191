r"""Rescaled powers of a non-negative matrix by doubling: ``O(log n)`` matrix products.

The backward bins and the count law of the initial state are sequences ``x A^j`` (a row vector
times powers of a non-negative ``[Q, Q]`` matrix ``A``). Computed one ``j`` at a time they cost
``n`` sequential mat-vecs (``n`` kernel launches on a GPU). By doubling, rows ``0 .. m - 1``
times ``A^m`` give rows ``m .. 2m - 1``, and ``A^m`` squared gives ``A^{2m}``: ``log2 n`` matrix
products, the same ``O(n Q^2)`` arithmetic.

Numerics: everything is non-negative (no cancellation; every product has entrywise relative
error ``O(Q eps)``). Every row is rescaled to max 1 with its log scale kept apart, and so is every
power of ``A`` (by its largest entry), so ``n`` in the millions neither underflows nor overflows.
As with per-bin rescaling, an entry below ``1e-308`` of the largest entry of its own row (or of
its power of ``A``) is flushed to zero.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ScaledRows", "first_row_law", "power_rows", "scaled_power"]


class ScaledRows:
    """Rows ``exp(log_scale[j]) * values[j]``, each row of ``values`` scaled to max 1 (or all 0).

    Attributes:
        values: ``[n, Q]`` float64.
        log_scale: ``[n]`` float64 (``-inf`` for an all-zero row).
    """

    def __init__(self, values: Tensor, log_scale: Tensor) -> None:
        self.values, self.log_scale = values, log_scale

    @classmethod
    def rescale(cls, raw: Tensor, offset: Tensor | float = 0.0) -> ScaledRows:
        """Rescale raw non-negative rows ``[n, Q]`` (true rows are ``exp(offset) * raw``)."""
        peak = raw.amax(dim=1)
        safe = torch.where(peak > 0, peak, torch.ones_like(peak))
        return cls(raw / safe[:, None], peak.log() + offset)


def scaled_power(matrix: Tensor, log_scale: Tensor | float = 0.0) -> tuple[Tensor, Tensor]:
    """``matrix`` scaled to max entry 1: ``(values, log_scale)`` with ``matrix = e^s values``."""
    peak = matrix.max()
    safe = torch.where(peak > 0, peak, torch.ones_like(peak))
    return matrix / safe, peak.log() + log_scale


def power_rows(
    start: Tensor, matrix: Tensor, count: int, block: int | None = None
) -> tuple[ScaledRows, tuple[Tensor, Tensor]]:
    """Rows ``start @ matrix^j`` for ``j = 0 .. count - 1`` by doubling.

    Args:
        start: ``[Q]`` non-negative float64.
        matrix: ``[Q, Q]`` non-negative float64.
        count: number of rows (``>= 1``).
        block: stop doubling at this many rows per product (a power of two) and continue in
            blocks of ``block`` rows (``O(count / block)`` products); ``None``: always double.

    Returns:
        The rows (:class:`ScaledRows`, ``[count, Q]``) and ``matrix^m`` as ``(values, log_scale)``
        where ``m`` is the number of rows added by the last product (with ``block=None`` and
        ``count`` a power of two, ``m = count``).
    """
    if count < 1:
        raise ValueError("count must be >= 1")
    rows = ScaledRows.rescale(start.clamp(min=0.0)[None, :])
    power, scale = scaled_power(matrix.clamp(min=0.0))
    values, log_scale = [rows.values], [rows.log_scale]
    done = width = 1
    while done < count:
        grown = ScaledRows.rescale(rows.values @ power)
        rows = ScaledRows(grown.values, grown.log_scale + rows.log_scale + scale)
        values.append(rows.values)
        log_scale.append(rows.log_scale)
        done += width
        if block is None or width < block:  # double: the next block is all rows so far
            rows = ScaledRows(torch.cat(values), torch.cat(log_scale))
            values, log_scale = [rows.values], [rows.log_scale]
            power, scale = scaled_power(power @ power, 2 * scale)
            width *= 2
    rows = ScaledRows(torch.cat(values), torch.cat(log_scale))
    return ScaledRows(rows.values[:count], rows.log_scale[:count]), (power, scale)


def first_row_law(
    initial: int, matrix: Tensor, end: Tensor, length: int
) -> tuple[Tensor, ScaledRows]:
    r"""``p_n = e_initial^T A^n end`` for ``n < L``, by baby steps and giant steps.

    With ``B`` about ``sqrt(length)`` (a power of two): columns ``A^r end`` for ``r < B`` (baby
    steps) and rows ``e^T A^{jB}`` for ``j <= J = ceil(length / B)`` (giant steps, powers of
    ``A^B``), both by doubling; then ``p_{jB + r}`` is one ``[J, Q] @ [Q, B]`` product. Cost
    ``O(L Q + sqrt(L) Q^2)``, ``O(log L)`` kernel launches, never an ``[L, Q]`` array.

    Args:
        initial: the start state ``q``.
        matrix: ``A`` ``[Q, Q]`` non-negative.
        end: ``[Q]`` non-negative.
        length: number of terms wanted.

    Returns:
        ``log p`` ``[L]`` float64 on ``matrix.device`` with ``L = J B >= length`` (``-inf`` for
        zero), and the row ``e^T A^L`` (one scaled row) for tail bounds beyond ``L``.
    """
    if length < 1:
        raise ValueError("length must be >= 1")
    baby = 1 << ((max(length, 2) - 1).bit_length() + 1) // 2
    giant = -(-length // baby)
    columns, (power_t, scale) = power_rows(end, matrix.T, baby)  # rows = (A^r end)^T; A^B too
    start = torch.zeros_like(end)
    start[initial] = 1.0
    rows, _ = power_rows(start, power_t.T, giant + 1)
    # Row j carries j factors of A^B's scale. Row 0 carries none: when A is nilpotent (a
    # counted transition that no string can take twice) A^B = 0, its scale is -inf, and
    # -inf * 0 would be NaN where the true factor is 1.
    j = torch.arange(giant + 1, dtype=torch.float64, device=matrix.device)
    rows.log_scale = rows.log_scale + torch.where(j > 0, scale * j, torch.zeros_like(j))
    law = rows.values[:giant] @ columns.values.T  # [J, B]
    log_law = law.log() + rows.log_scale[:giant, None] + columns.log_scale[None, :]
    last = ScaledRows(rows.values[giant:], rows.log_scale[giant:])
    return log_law.reshape(-1), last

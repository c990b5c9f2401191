r"""Log tables of the top-down conditioned walk on a pushdown automaton.

The walk keeps, per string, a stack of *frames* ``(t, r, b, m)``: the stack symbol ``t`` (``G``
for the empty stack), the state ``r`` its excursion must pop into (0, unused, on the empty
stack), the occurrences ``b`` still to place inside it, and the mode ``m`` (0: exactly ``b``;
1: at least ``b``). With the count series ``V`` (:mod:`~cfl_lightning.sampling.pushdown.law`),
a step from state ``q`` in frame ``(t, r, b, m)`` on symbol ``a`` (weight ``w``, target ``s``,
event count ``d``, ``n = b - d``) has weight

* keep: ``w V^m_n[t, s, r]``;
* pop (``t < G``): ``w [s = r]`` if ``n = 0`` (exact) or ``n <= 0`` (at least);
* push ``Y``: ``w C^m_n[Y, t, s, r]`` with ``C_n[Y, t, s, r] = sum_{i, u} E_i[Y, s, u]
  V_{n-i}[t, u, r]`` (exact) or its tail ``sum_{i < n} E_i Vbar_{n-i} + Ebar_n Vbar_0``;
* end (``t = G``, ``b = 0``): ``final[q]``;

(``V^1 = Vbar``, ``n`` clamped at 0 in mode 1). The rows' total is ``V^m_b[t, q, r]``, so
normalizing each row gives the exact conditional law. After a push, the pushed excursion's exit
state and budget ``(u, i)`` are drawn jointly with weights ``E^{m'}_i[Y, s, u] V^m_{n-i}[t, u, r]``
(``m' = m [i = n]``: in mode 1 the last column is "at least ``n``" inside, at least 0 after).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.sampling.pushdown.law import ExcursionSeries
from cfl_lightning.sampling.pushdown.series import ScaledSeries, combine, convolve

__all__ = ["WalkTables", "walk_tables"]


class WalkTables:
    """Log tables of the conditioned walk for budgets ``0 .. B``.

    Attributes:
        lv: ``[2, B + 1, G + 1, Q, Q]`` ``log V^m_n[t, p, r]`` (mode 1 ``-inf`` unless tails).
        lc: ``[2, B + 1, G, G + 1, Q, Q]`` ``log C^m_n[Y, t, s, r]``.
        budget: ``B``.
    """

    def __init__(self, lv: Tensor, lc: Tensor) -> None:
        self.lv, self.lc = lv, lc
        self.budget = int(lv.shape[1]) - 1


def _push_table(e_left: ScaledSeries, right: ScaledSeries, n: int, tail_of: ScaledSeries | None):
    """``C_n`` (exact: ``sum_{i <= n} E_i V_{n-i}``) or its tail (``right`` = ``Vbar``)."""
    if tail_of is None:
        return convolve(e_left, right, n, 0, n)
    head = convolve(e_left, right, n, 0, n - 1)
    last_values, last_scale = tail_of.term(n)
    first_values, first_scale = right.term(0)
    return combine([head, (np.matmul(last_values, first_values), last_scale + first_scale)])


def _views(v: ScaledSeries, g: int, q: int) -> tuple[ScaledSeries, ScaledSeries]:
    """``E`` as ``[1, (Y, s), u]`` and ``V`` as ``[1, u, (t, r)]`` views of one series."""
    cap = v.values.shape[0]
    left = v.values[:, :g].reshape(cap, 1, g * q, q)
    right = v.values.transpose(0, 2, 1, 3).reshape(cap, 1, q, (g + 1) * q)
    return (
        ScaledSeries.view(left, v.log_scale, v.size),
        ScaledSeries.view(right, v.log_scale, v.size),
    )


def walk_tables(series: ExcursionSeries, budget: int, tails: bool = False) -> WalkTables:
    """The walk's log tables up to ``budget`` (with the at-least tables when ``tails``).

    Cost: ``O(B^2 G^2 Q^3)`` for the push tables, on top of the series up to ``B``.
    """
    g, q = series.num_stack, series.num_states
    series.ensure(budget)
    modes = [(series.v, None)]
    if tails:
        vbar, _ = series.ensure_tails(budget)
        modes.append((vbar, vbar))
    lv = torch.full((2, budget + 1, g + 1, q, q), -math.inf, dtype=torch.float64)
    lc = torch.full((2, budget + 1, g, g + 1, q, q), -math.inf, dtype=torch.float64)
    e_left, _ = _views(series.v, g, q)
    for m, (v, tail) in enumerate(modes):
        lv[m] = v.log(budget + 1)
        _, right = _views(v, g, q)
        tail_left = None if tail is None else _views(tail, g, q)[0]
        for n in range(budget + 1):
            term = _push_table(e_left, right, n, tail_left)
            if term is not None:
                c = term[0].reshape(g, q, g + 1, q).transpose(0, 2, 1, 3)  # [Y, t, s, r]
                with np.errstate(divide="ignore"):
                    lc[m, n] = torch.from_numpy(np.log(c) + term[1])
    return WalkTables(lv, lc)

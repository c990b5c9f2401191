r"""The per-string count law, computed only as far as a corpus target needs it.

An exact total ``N`` over ``K`` strings is split (:func:`~cfl_lightning.sampling.counts.
split_exact`) with the law exponentially tilted to mean ``N / K``: ``p_theta(n) ∝ p(n) e^{theta
n}``. Counts whose tilted weight is below ``e^-92`` (about ``1e-40``) of the whole never matter
(the split trims them anyway), so the law is needed only up to a length ``L`` that is often far
below ``N``. :func:`law_for_total` computes the initial state's law for growing ``L``
(:func:`~cfl_lightning.semiring.backward.initial_count_law`, no ``[N, Q]`` array) and stops
once the tilted mass beyond ``L`` is certified negligible by the closed form

.. math::
    \sum_{n \ge L} p_n e^{\theta n} = e^{\theta L}\, (e^T A^L)\, (I - e^{\theta} A)^{-1} \beta_0
    \qquad (e^{\theta} \rho(A) < 1),

or ``L`` reaches ``N + 1`` (then the law is complete: no string of an exact-``N`` corpus holds
more than ``N``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.sampling.counts import CountLaw, tilt
from cfl_lightning.semiring.backward import ScaledBins, bins_from_operator, count_operator
from cfl_lightning.semiring.powers import first_row_law

__all__ = ["CountSource", "law_for_total", "law_upto", "NEGLIGIBLE"]

NEGLIGIBLE = 92.0  # tilted tail mass below e^-92 (~1e-40) of the window is dropped


class CountSource:
    """``A``, ``beta_0`` and ``rho(A)`` of one automaton and event, computed once.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` 0/1 event function.
    """

    def __init__(self, pfsa: PFSA, event_fn: Tensor) -> None:
        self.initial = pfsa.initial
        self.step, self.start = count_operator(pfsa, event_fn)
        self._radius: float | None = None

    @property
    def radius(self) -> float:
        if self._radius is None:
            self._radius = float(torch.linalg.eigvals(self.step.cpu()).abs().max())
        return self._radius

    def bins(self, num_bins: int) -> ScaledBins:
        """Exact-count backward bins ``0 .. num_bins - 1`` of every state (for the walk)."""
        return bins_from_operator(self.step, self.start, num_bins)

    def law(self, length: int) -> tuple[Tensor, Tensor, float]:
        """``log p`` ``[L >= length]`` (CPU) and the row ``e^T A^L`` ``(values [Q], log scale)``."""
        log_pmf, last = first_row_law(self.initial, self.step, self.start, length)
        return log_pmf.cpu(), last.values[0].cpu(), float(last.log_scale[0])

    def log_tail(self, row: Tensor, row_scale: float, length: int, theta: float) -> float:
        """``log sum_{n >= L} p_n e^{theta (n - L)}``, or ``inf`` when not certifiably finite."""
        if not math.isfinite(row_scale):
            return -math.inf  # e^T A^L = 0: nothing beyond L
        if theta > 700 or math.exp(theta) * self.radius >= 1.0 - 1e-9:
            return math.inf  # sum_m (e^theta A)^m diverges (or nearly): not certifiable
        step, start = self.step.cpu(), self.start.cpu()  # Q x Q: cheapest on the host
        eye = torch.eye(step.shape[0], dtype=torch.float64)
        try:
            resolvent = torch.linalg.solve(eye - math.exp(theta) * step, start)
        except RuntimeError:  # numerically singular: not certifiable
            return math.inf
        if not bool(torch.isfinite(resolvent).all()) or bool((resolvent < 0).any()):
            return math.inf
        total = float(row @ resolvent)
        return math.log(total) + row_scale if total > 0 else -math.inf


def law_for_total(
    pfsa: PFSA, event_fn: Tensor, num_strings: int, total: int, source: CountSource | None = None
) -> CountLaw:
    """The initial state's count law, as far as an exact total ``total`` over ``K`` strings needs.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` 0/1.
        num_strings: ``K``.
        total: ``N``.
        source: the automaton's :class:`CountSource` when already built.

    Returns:
        A :class:`CountLaw` on ``0 .. L - 1`` whose tilted mass beyond ``L`` is below ``e^-92``
        of the window's, or on ``0 .. N`` (complete).
    """
    source = CountSource(pfsa, event_fn) if source is None else source
    k, n = num_strings, total
    length = min(n + 1, max(256, 1 << (8 * (n // k + 1)).bit_length()))
    while True:
        log_pmf, row, row_scale = source.law(length)
        if log_pmf.numel() >= n + 1 or k == 1:
            if log_pmf.numel() < n + 1:  # a single string: its count is N itself
                length = n + 1
                continue
            return CountLaw(log_pmf[: n + 1])
        finite = bool(torch.isfinite(log_pmf).any())
        if finite and _certified(source, log_pmf, row, row_scale, k, n):
            return CountLaw(log_pmf)
        length = min(n + 1, 4 * log_pmf.numel())


def _certified(
    source: CountSource, log_pmf: Tensor, row: Tensor, row_scale: float, k: int, n: int
) -> bool:
    """Whether the tilted mass beyond the window is negligible for the target ``n / k``."""
    law = CountLaw(log_pmf)
    top = (law.high - law.low) // law.period
    target = (n - k * law.low) / (law.period * k)
    if not 0 < target < top:
        return target == 0  # all strings at their minimum: nothing beyond the window matters
    theta = tilt(law.lattice(law.high), target) / law.period  # per occurrence
    length = log_pmf.numel()
    ns = torch.arange(length, dtype=torch.float64)
    window = float(torch.logsumexp(log_pmf + theta * (ns - length), 0))
    return source.log_tail(row, row_scale, length, theta) < window - NEGLIGIBLE


def law_upto(
    pfsa: PFSA, event_fn: Tensor, source: CountSource | None = None
) -> Callable[[int], CountLaw]:
    """``upto -> CountLaw`` on ``0 .. upto`` (the complete law there), for the at-least split."""
    source = CountSource(pfsa, event_fn) if source is None else source
    memo: dict[int, CountLaw] = {}

    def get(upto: int) -> CountLaw:
        if upto not in memo:
            memo.clear()
            memo[upto] = CountLaw(source.law(upto + 1)[0][: upto + 1])
        return memo[upto]

    return get

r"""The pushdown automaton's sampler backend (``kind = "pushdown"``).

* Unconstrained: ancestral sampling with a per-string stack
  (:func:`~cfl_lightning.sampling.pushdown_unconstrained.sample_unconstrained`).
* Count law: the coefficients of ``T[initial](z)`` in the binning semiring over excursions
  (:class:`~cfl_lightning.sampling.pushdown_law.ExcursionSeries`). :meth:`law_for_total` stops
  below ``N`` when the law tilted to the mean ``N / K`` (``p_n e^{theta n}``) has a certified
  negligible tail beyond its window ``L``: for any ``z = e^{theta + delta}`` inside the radius of
  convergence,

  .. math::
      \sum_{n \ge L} p_n e^{\theta n} \le e^{-\delta L}\, T[initial](z),

  with ``T(z)`` the least fixed point of the system at ``z`` (Newton; no convergence = beyond the
  radius, not certified). Below ``e^{-92}`` of the window's mass the tail is dropped, as for the
  PFSA (:mod:`~cfl_lightning.sampling.law`); otherwise the law is complete up to ``N``.
* Generation given a per-string count: top-down
  (:mod:`~cfl_lightning.sampling.pushdown_conditioned`), on the CPU (a generator on another
  device seeds a CPU one: still one stream per seed).

The ``backend`` of the ``pushdown`` automaton kind (:mod:`cfl_lightning.kinds.automata`):
:func:`~cfl_lightning.sampling.draw` runs every intervention kind's sampler against it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cfl_lightning.automata.events import Event
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import CountLaw, tilt
from cfl_lightning.sampling.pushdown_bounds import max_occurrences
from cfl_lightning.sampling.pushdown_conditioned import ConditionedWalk, generate_conditioned
from cfl_lightning.sampling.pushdown_law import ExcursionSeries
from cfl_lightning.sampling.pushdown_tables import walk_tables
from cfl_lightning.sampling.pushdown_unconstrained import sample_unconstrained

__all__ = ["PushdownBackend", "PushdownEventCounts", "NEGLIGIBLE"]

NEGLIGIBLE = 92.0  # tilted tail mass below e^-92 (~1e-40) of the window is dropped
_FRACTIONS = (0.95, 0.8, 0.6, 0.4, 0.25)  # tries of delta, as fractions of the estimated gap


def _cpu_generator(generator: torch.Generator) -> torch.Generator:
    if generator.device.type == "cpu":
        return generator
    seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
    return torch.Generator().manual_seed(seed)


def _decay(log_pmf: Tensor) -> float:
    """Estimated ``log`` of the radius of convergence: the law's decay rate over its second half."""
    finite = torch.nonzero(torch.isfinite(log_pmf)).flatten()
    if finite.numel() < 4:
        return 0.0
    last, mid = int(finite[-1]), int(finite[finite.numel() // 2])
    return float(log_pmf[mid] - log_pmf[last]) / max(last - mid, 1)


class PushdownEventCounts:
    """One event's count source on a pushdown automaton (series and tables built on first use).

    Args:
        pda: the automaton.
        event: the counted event (its table raises ``EventError`` for unknown names).
    """

    def __init__(self, pda, event: Event) -> None:
        self.pda = pda.to("cpu")
        self.table = self.pda.event_table(event)
        self.degrees = self.table.reshape(self.pda.target.shape)
        self._series: ExcursionSeries | None = None
        self._walks: dict[tuple[int, bool], ConditionedWalk] = {}
        self._diverged = math.inf  # smallest log z where the system at z had no fixed point

    @property
    def series(self) -> ExcursionSeries:
        if self._series is None:
            self._series = ExcursionSeries.of(self.pda, self.table)
        return self._series

    def law(self, upto: int) -> CountLaw:
        """The complete count law on ``0 .. upto``."""
        return CountLaw(self.series.log_law(upto))

    def law_for_total(self, num_strings: int, total: int) -> CountLaw:
        """The law up to a certified window ``L <= N`` (module docstring), else up to ``N``.

        A window that is not certified yet is extended to the length its best bound asks for
        (``L = (log T(z) - window + 92) / delta``), at least doubled while no bound exists.
        """
        k, n = num_strings, total
        if n < 64:  # short: the law on 0 .. 63 (also shows a lowest count above a small N)
            return self.law(63)
        length = min(n + 1, max(64, 8 * (n // k + 1)))
        while True:
            log_pmf = self.series.log_law(length - 1)
            if length >= n + 1 or k == 1:
                if length < n + 1:
                    length = n + 1
                    continue
                return CountLaw(log_pmf[: n + 1])
            needed = 2 * length
            if bool(torch.isfinite(log_pmf).any()):
                needed = self._needed(log_pmf, k, n)
                if needed <= length:
                    return CountLaw(log_pmf)
            length = min(n + 1, max(needed, length + 64))
            if 4 * length > 3 * (n + 1):  # a certificate would save little: the complete law
                length = n + 1  # (the law costs O(L^2): a window of 3/4 N saves 44%)

    def _needed(self, log_pmf: Tensor, k: int, n: int) -> int:
        """The window length the best tail bound certifies (``<= L`` when ``L`` suffices)."""
        law = CountLaw(log_pmf)
        top = (law.high - law.low) // law.period
        target = (n - k * law.low) / (law.period * k)
        length = log_pmf.numel()
        if not 0 < target < top:
            return length if target == 0 else 2 * length
        theta = tilt(law.lattice(law.high), target) / law.period
        window = float(torch.logsumexp(log_pmf + theta * torch.arange(length).double(), 0))
        gap = _decay(log_pmf) - theta  # estimated log(radius) - theta
        best = math.inf
        for fraction in _FRACTIONS if gap > 1e-3 else ():
            delta = fraction * gap
            log_z = theta + delta
            if log_z > 700 or log_z >= self._diverged:
                continue  # beyond the radius of convergence (monotone): no certificate there
            value = self.series.log_value(math.exp(log_z))
            if value == math.inf:
                self._diverged = log_z
                continue
            # sum_{n >= L} p_n e^{theta n} <= e^{-delta L} T(z): negligible once L >= this
            need = (value - window + NEGLIGIBLE) / delta
            if need > best:
                break  # the bound is convex in delta: smaller ones only get worse
            best = need
        return 2 * length if best == math.inf else math.floor(best) + 1

    def max_per_string(self) -> int | None:
        return max_occurrences(self.pda, self.degrees)

    def none_probability(self) -> float:
        return float(self.series.log_law(0)[0].exp())

    def walk(self, budget: int, at_least: bool) -> ConditionedWalk:
        """The conditioned walk with tables covering ``budget`` (cached)."""
        key = (budget, at_least)
        if key not in self._walks:
            tables = walk_tables(self.series, budget, tails=at_least)
            self._walks = {key: ConditionedWalk(self.pda, self.degrees, tables)}
        return self._walks[key]

    def generate(
        self,
        budgets: Tensor,
        generator: torch.Generator,
        *,
        at_least: bool = False,
        progress: Progress | None = None,
    ) -> Corpus:
        budgets = budgets.cpu().long()
        top = int(budgets.max()) if budgets.numel() else 0
        walk = self.walk(top, at_least)
        return generate_conditioned(
            walk, self.pda.initial, budgets, _cpu_generator(generator), at_least=at_least,
            progress=progress,
        )


class PushdownBackend:
    """Unconstrained sampling and count sources of one pushdown automaton."""

    def __init__(self, pda) -> None:
        self.pda = pda

    def unconstrained(
        self,
        num_strings: int,
        generator: torch.Generator,
        *,
        event: Event | None = None,
        progress: Progress | None = None,
    ) -> Corpus:
        table = None if event is None else self.pda.event_table(event)
        return sample_unconstrained(
            self.pda, num_strings, generator, event_table=table, progress=progress
        )

    def event_counts(self, event: Event) -> PushdownEventCounts:
        return PushdownEventCounts(self.pda, event)


r"""Phase 1 of corpus sampling: per-string counts ``(n_1, ..., n_K)`` given the corpus total.

The strings are i.i.d., each with count law ``p`` (``p_n = beta_n(q_init)``). We draw the counts
from their exact joint law given ``sum_k n_k = N`` by **recursive halving**: a block of ``s``
strings with total ``T`` is split into blocks of ``s_1 = floor(s/2)`` and ``s_2 = s - s_1``
strings, the left total drawn from

.. math::
    P(m \mid T) \propto p^{*s_1}(m) \, p^{*s_2}(T - m),

then each half is split again until blocks hold one string (``ceil(log2 K)`` levels, every level
vectorized over its blocks). Only about ``2 log2 K`` distinct convolution powers ``p^{*s}`` are
needed, computed by halving as well (FFT, or a direct convolution for short arrays). This gives
exactly the law of the paper's sequential Theorem "Sampling Path Event Counts" in
``O(N log N log K + K)`` instead of ``O(K N^2)``.

Numerics: powers are formed from the *exponentially tilted* law ``p_theta(n) ∝ p(n) e^{theta n}``
with ``theta`` chosen so that ``K E_theta[n] = N``. The tilt cancels in every ``P(m | T)`` above
(both factors carry ``e^{theta m} e^{theta (T - m)} = e^{theta T}``), so the law is unchanged,
but all powers are concentrated where the draws fall: far tails are never read from the noise
floor of an FFT. FFT outputs below ``1e-13`` of their peak (the float64 noise floor) are zeroed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.errors import InterventionError
from cfl_lightning.sampling.draw import inverse_cdf

__all__ = ["CountLaw", "split_exact", "split_at_least"]

_FFT_FLOOR = 1e-13  # relative noise floor of float64 FFT convolutions
_TRIM = 1e-40  # relative threshold under which a tilted base probability is dropped
_DIRECT_MAX = 4_000_000  # direct convolution when len(a) * len(b) is at most this


class CountLaw:
    """A per-string count law on ``{0, ..., n_max}`` from its log pmf; support and lattice.

    Args:
        log_pmf: ``[n_max + 1]`` float64 log probabilities (``-inf`` = impossible).
    """

    def __init__(self, log_pmf: Tensor) -> None:
        self.log_pmf = log_pmf.detach().double().cpu()
        support = torch.nonzero(torch.isfinite(self.log_pmf)).flatten()
        if support.numel() == 0:
            raise InterventionError("the automaton generates no string (empty count law)")
        self.low = int(support[0])
        self.high = int(support[-1])
        self.period = max(int(np.gcd.reduce((support - self.low).numpy())), 1)

    def lattice(self, upto: int) -> Tensor:
        """Log pmf of ``j`` where ``n = low + period * j``, for ``n <= upto``."""
        return self.log_pmf[self.low : upto + 1 : self.period]

    def mean(self) -> float:
        probs = torch.softmax(self.log_pmf, 0)
        return float((probs * torch.arange(probs.numel(), dtype=torch.float64)).sum())


def _tilt(log_q: Tensor, target: float) -> float:
    """``theta`` with ``E_theta[j] = target`` for ``p_theta(j) ∝ q(j) e^{theta j}``."""
    j = torch.arange(log_q.numel(), dtype=torch.float64)
    finite = torch.isfinite(log_q)

    def moments(theta: float) -> tuple[float, float]:
        logits = torch.where(finite, log_q + theta * j, log_q)
        probs = torch.softmax(logits, 0)
        mean = float((probs * j).sum())
        return mean, float((probs * (j - mean) ** 2).sum())

    lo, hi = -1.0, 1.0
    while moments(lo)[0] > target and lo > -1e6:
        lo *= 2
    while moments(hi)[0] < target and hi < 1e6:
        hi *= 2
    theta = 0.0 if lo < 0 < hi else (lo + hi) / 2
    for _ in range(200):
        mean, var = moments(theta)
        if abs(mean - target) <= 1e-7 * max(1.0, target):
            break
        if mean < target:
            lo = theta
        else:
            hi = theta
        step = theta - (mean - target) / var if var > 0 else math.nan
        theta = step if lo < step < hi else (lo + hi) / 2
    return theta


class _Powers:
    """Convolution powers ``p_theta^{*s}`` as ``(offset, values)``, truncated at ``limit``."""

    def __init__(self, base: Tensor, limit: int) -> None:
        self.limit = limit
        self._memo: dict[int, tuple[int, Tensor]] = {1: self._trim(0, base, _TRIM)}

    def _trim(self, offset: int, values: Tensor, floor: float) -> tuple[int, Tensor]:
        values = values[: max(self.limit - offset + 1, 0)]
        peak = float(values.max()) if values.numel() else 0.0
        if peak <= 0:
            raise InterventionError("numerical failure: a convolution power vanished")
        values = torch.where(values >= floor * peak, values, torch.zeros_like(values))
        nz = torch.nonzero(values).flatten()
        first, last = int(nz[0]), int(nz[-1])
        return offset + first, values[first : last + 1].clone()

    def get(self, size: int) -> tuple[int, Tensor]:
        if size not in self._memo:
            half = size // 2
            (o1, a), (o2, b) = self.get(half), self.get(size - half)
            if a.numel() * b.numel() <= _DIRECT_MAX:
                conv = torch.from_numpy(np.convolve(a.numpy(), b.numpy()))
                self._memo[size] = self._trim(o1 + o2, conv, 1e-300)
            else:
                n = a.numel() + b.numel() - 1
                length = 1 << (n - 1).bit_length()
                spec = torch.fft.rfft(a, length) * torch.fft.rfft(b, length)
                conv = torch.fft.irfft(spec, length)[:n].clamp(min=0.0)
                self._memo[size] = self._trim(o1 + o2, conv, _FFT_FLOOR)
        return self._memo[size]


def _sample_split(
    left: tuple[int, Tensor], right: tuple[int, Tensor], totals: Tensor, gen: torch.Generator
) -> Tensor:
    """Draw ``m`` with ``P(m) ∝ left(m) right(T - m)`` for each total ``T`` in ``totals`` ``[G]``."""
    (o1, a), (o2, b) = left, right
    lo = torch.clamp(totals - (o2 + b.numel() - 1), min=o1)
    hi = torch.clamp(totals - o2, max=o1 + a.numel() - 1)
    if bool((hi < lo).any()):
        raise InterventionError("numerical failure: a block total fell outside its support")
    out = torch.empty_like(totals)
    width_all = hi - lo + 1
    rows = max(1, _DIRECT_MAX // max(int(width_all.max()), 1))
    for start in range(0, totals.numel(), rows):
        sl = slice(start, start + rows)
        t, l, h = totals[sl], lo[sl], hi[sl]
        width = int((h - l).max()) + 1
        m = l[:, None] + torch.arange(width)
        valid = m <= h[:, None]
        wa = a[(m - o1).clamp(0, a.numel() - 1)]
        wb = b[(t[:, None] - m - o2).clamp(0, b.numel() - 1)]
        weights = torch.where(valid, wa * wb, torch.zeros_like(wa))
        if bool((weights.sum(1) <= 0).any()):
            raise InterventionError(
                "the count is unreachable: no split of a block total has positive probability"
            )
        u = torch.rand(t.numel(), generator=gen, dtype=torch.float64)
        out[sl] = l + inverse_cdf(weights, u)
    return out


def _split_tree(powers: _Powers, num_strings: int, totals: Tensor, gen: torch.Generator) -> Tensor:
    """Recursive halving (module docstring) of ``D`` independent corpora at once.

    Args:
        powers: convolution powers of the (tilted) lattice law.
        num_strings: ``K``.
        totals: ``[D]`` lattice totals, one per corpus.
        gen: CPU generator.

    Returns:
        ``[D, K]`` lattice counts; row ``d`` sums to ``totals[d]``.
    """
    draws = totals.numel()
    sizes = torch.full((draws,), num_strings, dtype=torch.long)
    totals = totals.clone().long()
    while bool((sizes > 1).any()):
        s1 = sizes // 2
        s2 = sizes - s1
        m = torch.zeros_like(totals)
        for size in torch.unique(sizes).tolist():
            a, b = size // 2, size - size // 2
            if a == 0:
                continue
            sel = sizes == size
            m[sel] = _sample_split(powers.get(a), powers.get(b), totals[sel], gen)
        sizes = torch.stack([s1, s2], 1).reshape(-1)
        totals = torch.stack([m, totals - m], 1).reshape(-1)
        keep = sizes > 0
        sizes, totals = sizes[keep], totals[keep]
    return totals.view(draws, num_strings)


def split_exact(
    law: CountLaw, num_strings: int, total: int, gen: torch.Generator, draws: int | None = None
) -> Tensor:
    """Per-string counts, i.i.d. from ``law`` conditioned on summing to ``total``.

    Args:
        law: per-string count law covering at least ``0 .. total``.
        num_strings: ``K``.
        total: ``N``.
        gen: CPU generator.
        draws: draw this many independent count vectors at once (``[draws, K]`` result).

    Returns:
        ``[K]`` int64 counts (CPU), or ``[draws, K]``.

    Raises:
        InterventionError: ``total`` cannot be reached by ``K`` strings.
    """
    k = num_strings
    if total < k * law.low:
        raise InterventionError(
            f"count {total} is impossible: every string has at least {law.low} occurrences, "
            f"so {k} strings have at least {k * law.low}"
        )
    if total > k * law.high:
        raise InterventionError(
            f"count {total} is impossible: a string has at most {law.high} occurrences, "
            f"so {k} strings hold at most {k * law.high}"
        )
    if (total - k * law.low) % law.period:
        raise InterventionError(
            f"count {total} is impossible: per-string counts are {law.low} plus multiples of "
            f"{law.period}"
        )
    target = (total - k * law.low) // law.period
    top = (law.high - law.low) // law.period
    rows = 1 if draws is None else draws
    if k == 1:
        if not math.isfinite(float(law.log_pmf[total])):
            raise InterventionError(f"count {total} is impossible for a single string")
        lattice = torch.full((rows, 1), target, dtype=torch.long)
    elif target in (0, k * top):
        lattice = torch.full((rows, k), target // k, dtype=torch.long)
    else:
        log_q = law.lattice(law.low + law.period * min(target, top))
        theta = _tilt(log_q, target / k)
        base = torch.softmax(log_q + theta * torch.arange(log_q.numel()), 0)
        lattice = _split_tree(_Powers(base, target), k, torch.full((rows,), target), gen)
    counts = law.low + law.period * lattice
    return counts[0] if draws is None else counts


def split_at_least(
    law_upto: Callable[[int], CountLaw],
    num_strings: int,
    total: int,
    gen: torch.Generator,
    draws: int | None = None,
) -> Tensor:
    """Per-string counts, i.i.d., conditioned on summing to at least ``total``.

    Draws the corpus total ``S`` from ``P(S = s | S >= total)`` -- the ``K``-fold power, tilted
    towards ``max(total, K E[n])`` and untilted again when weighing ``s`` -- then splits ``S``
    exactly with :func:`split_exact`'s tree. The range ``total <= s <= s_max`` is widened until
    its top tenth carries less than ``e^-70`` of the peak weight (or ``s_max`` exceeds what the
    strings can hold). Feasibility (the corpus can reach ``total``) is the caller's check.

    Args:
        law_upto: returns the per-string count law covering ``0 .. n`` for a requested ``n``.
        num_strings: ``K``.
        total: ``N``.
        gen: CPU generator.
        draws: draw this many independent count vectors at once (``[draws, K]`` result).

    Returns:
        ``[K]`` int64 counts whose sum is ``>= total`` (or ``[draws, K]``).
    """
    k = num_strings
    natural = law_upto(max(2 * total, 64)).mean() * k
    center = max(total, math.ceil(natural))
    extra = max(64, center // 4)
    while True:
        s_max = center + extra
        law = law_upto(s_max)
        log_q = law.lattice(s_max)
        top = log_q.numel() - 1
        limit = (s_max - k * law.low) // law.period
        goal = (center - k * law.low) / (law.period * k)
        theta = 0.0 if total <= natural or top == 0 else _tilt(log_q, min(max(goal, 0.0), top * 0.999))
        base = torch.softmax(log_q + theta * torch.arange(log_q.numel()), 0)
        powers = _Powers(base, max(limit, 0))
        offset, values = powers.get(k)
        j = offset + torch.arange(values.numel())
        s = law.low * k + law.period * j
        logw = torch.where((s >= total) & (values > 0), values.log() - theta * j, -math.inf)
        feasible = bool(torch.isfinite(logw).any())
        if feasible:
            peak = float(logw.max())
            window = s >= s_max - max(1, (s_max - total) // 10)
            if not bool(window.any()) or float(logw[window].max()) < peak - 70:
                break
        if law.high * k < s_max and law.high < s_max - law.period:
            if feasible:
                break  # bounded counts: the whole range is covered
            raise InterventionError(f"count {total} is impossible for {k} strings")
        extra *= 2
    rows = 1 if draws is None else draws
    u = torch.rand(rows, generator=gen, dtype=torch.float64)
    probs = torch.softmax(logw, 0)
    chosen = j[inverse_cdf(probs.cumsum(0).expand(rows, -1), u, cumulative=True)]
    lattice = _split_tree(powers, k, chosen, gen) if k > 1 else chosen[:, None]
    counts = law.low + law.period * lattice
    return counts[0] if draws is None else counts

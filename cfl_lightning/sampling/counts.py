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
floor of an FFT. FFT outputs below ``1e-13`` of their peak (the float64 noise floor) are zeroed;
direct convolutions, like the base law, drop entries below ``1e-40`` of their peak.

Drawing ``m`` is ``#{j : cdf_j <= u}`` over the cumulative split weights, computed per block, or
per distinct block total and gathered, or with a guide table
(:func:`~cfl_lightning.sampling.draw.guided_pick`), whichever costs least; every level runs on
the generator's device.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.errors import InterventionError
from cfl_lightning.sampling.draw import guided_pick, inverse_cdf

__all__ = ["CountLaw", "split_exact", "split_at_least", "tilt"]

_FFT_FLOOR = 1e-13  # relative noise floor of float64 FFT convolutions
_TRIM = 1e-40  # relative threshold under which a tilted probability (base or power) is dropped
_DIRECT_MAX = 4_000_000  # direct convolution when len(a) * len(b) is at most this


class CountLaw:
    """A per-string count law on ``{0, ..., n_max}`` from its log pmf; support and lattice.

    Args:
        log_pmf: ``[n_max + 1]`` float64 log probabilities (``-inf`` = impossible).
    """

    def __init__(self, log_pmf: Tensor) -> None:
        self.log_pmf = log_pmf.detach().double().cpu()
        if bool(torch.isnan(self.log_pmf).any()):
            raise InterventionError(
                "numerical failure: the per-string count law holds NaN (please report this)"
            )
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


def tilt(log_q: Tensor, target: float) -> float:
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
    """Convolution powers ``p_theta^{*s}`` as ``(offset, values)``, truncated at ``limit``.

    Computed on the CPU (they are short); :meth:`on` returns a cached copy on a device.
    """

    def __init__(self, base: Tensor, limit: int) -> None:
        self.limit = limit
        self._memo: dict[int, tuple[int, Tensor]] = {1: self._trim(0, base, _TRIM)}
        self._device: dict[tuple[int, str], Tensor] = {}

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
                self._memo[size] = self._trim(o1 + o2, conv, _TRIM)
            else:
                n = a.numel() + b.numel() - 1
                length = 1 << (n - 1).bit_length()
                spec = torch.fft.rfft(a, length) * torch.fft.rfft(b, length)
                conv = torch.fft.irfft(spec, length)[:n].clamp(min=0.0)
                self._memo[size] = self._trim(o1 + o2, conv, _FFT_FLOOR)
        return self._memo[size]

    def on(self, size: int, device: torch.device) -> tuple[int, Tensor]:
        offset, values = self.get(size)
        key = (size, str(device))
        if key not in self._device:
            self._device[key] = values.to(device)
        return offset, self._device[key]


_CHUNK = 1 << 22  # elements of one [rows, width] weight block


def few_launches(device: torch.device) -> bool:
    """Whether to prefer fewer, bigger operations (a GPU: launches cost more than memory)."""
    return device.type != "cpu"


def _split_weights(
    left: tuple[int, Tensor], right: tuple[int, Tensor], totals: Tensor
) -> tuple[Tensor, Tensor]:
    """Cumulative split weights ``left(m) right(T - m)`` over each total's window of ``m``.

    Args:
        left, right: ``(offset, values)`` of the two halves' laws (on the totals' device).
        totals: ``[R]`` block totals.

    Returns:
        ``lo`` ``[R]`` (the first ``m`` of each window) and ``[R, W]`` cumulative weights
        divided by each row's total, so a row ends in exact 1.0 (NaN for an unreachable total).
    """
    (o1, a), (o2, b) = left, right
    lo = torch.clamp(totals - (o2 + b.numel() - 1), min=o1)
    hi = torch.clamp(totals - o2, max=o1 + a.numel() - 1)
    width = max(int((hi - lo).max()) + 1, 1)
    m = lo[:, None] + torch.arange(width, device=totals.device)
    valid = m <= hi[:, None]
    wa = a[(m - o1).clamp(0, a.numel() - 1)]
    wb = b[(totals[:, None] - m - o2).clamp(0, b.numel() - 1)]
    cum = torch.where(valid, wa * wb, 0.0).cumsum(dim=1)
    return lo, cum / cum[:, -1:]


def _split_table(
    left: tuple[int, Tensor], right: tuple[int, Tensor], low: int, high: int
) -> tuple[Tensor, Tensor]:
    """:func:`_split_weights` for every total in ``low .. high`` at once, on a common window.

    Row ``T`` needs ``right(T - m)`` for consecutive ``m``: a window of the reversed ``right``
    that slides by one per row, so all rows are one strided view (``unfold``) times ``left``.

    Returns:
        ``lo`` ``[R]`` (the same first ``m`` for every row) and ``[R, W]`` cumulative weights
        divided by each row's total (NaN rows for unreachable totals).
    """
    (o1, a), (o2, b) = left, right
    device = a.device
    rows = high - low + 1
    first = max(o1, low - (o2 + b.numel() - 1))
    last = min(o1 + a.numel() - 1, high - o2)
    if last < first:  # no total in the range can be split: all rows unreachable
        return torch.full((rows,), o1, dtype=torch.long, device=device), torch.full(
            (rows, 1), math.nan, dtype=a.dtype, device=device
        )
    width = last - first + 1
    # Row T, column j reads b[T - first - j - o2] = reversed_b[shift - T + j].
    shift = b.numel() - 1 + first + o2
    pad_left = max(0, -(shift - high))
    pad_right = max(0, shift - low + width - b.numel())
    padded = torch.cat([b.new_zeros(pad_left), b.flip(0), b.new_zeros(pad_right)])
    windows = padded.unfold(0, width, 1)[shift - high + pad_left : shift - low + pad_left + 1]
    cum = (windows.flip(0) * a[first - o1 : last - o1 + 1]).cumsum(dim=1)
    lo = torch.full((rows,), first, dtype=torch.long, device=device)
    return lo, cum / cum[:, -1:]


def _sample_split(
    left: tuple[int, Tensor], right: tuple[int, Tensor], totals: Tensor, u: Tensor
) -> Tensor:
    """Draw ``m`` with ``P(m) ∝ left(m) right(T - m)`` for each total ``T`` in ``totals`` ``[G]``.

    When it costs less, the cumulative weights are tabulated once per value in
    ``[min T, max T]`` (:func:`_split_table`) and gathered; otherwise computed per block. The
    draw is ``#{j : cdf_j <= u}``: never a zero-weight ``m`` (equal cumulative entries) and
    never past a row's last positive entry (its ``cdf`` is exactly 1 > u).

    Args:
        left, right: ``(offset, values)`` on the totals' device.
        totals: ``[G]`` int64 block totals.
        u: ``[G]`` float64 uniforms.

    Returns:
        ``[G]`` int64 left totals ``m``.

    Raises:
        InterventionError: some total has no split with positive probability.
    """
    low, high = int(totals.min()), int(totals.max())
    out = torch.empty_like(totals)
    # Per block: ~12 passes over [G, W]; tabulated: ~4 over [R, W + R], then ~3 over [G, W + R].
    width, num, draws = min(left[1].numel(), right[1].numel()), high - low + 1, totals.numel()
    table = 4 * num * (width + num) + 3 * draws * (width + num) < 12 * draws * width
    cpu = not few_launches(totals.device)
    chunk = _CHUNK if cpu else 4 * _CHUNK  # on a GPU, launches cost more than memory
    if table:  # one row per distinct total value, gathered per block
        lo_all, cdf_all = _split_table(left, right, low, high)
        rows = max(1, chunk // cdf_all.shape[1])
        num_rows, width = cdf_all.shape
        # A guide table costs ~ R * 2W * log2(W) once and ~10 operations per draw, against
        # ~3W per draw for the full comparison; on a GPU its few extra launches cost more.
        guided = cpu and num_rows * 2 * width * width.bit_length() + 10 * draws < 3 * width * draws
    else:
        rows = max(1, chunk // min(left[1].numel(), right[1].numel()))
    for start in range(0, totals.numel(), rows):
        part = slice(start, start + rows)
        if table:
            index = totals[part] - low
            lo, ends = lo_all.index_select(0, index), cdf_all[:, -1].index_select(0, index)
            if not bool((ends == 1.0).all()):
                raise InterventionError(
                    "the count is unreachable: no split of a block total has positive probability"
                )
            if guided:
                out[part] = lo + guided_pick(cdf_all, index, u[part])
            else:
                out[part] = lo + (cdf_all.index_select(0, index) <= u[part, None]).sum(dim=1)
            continue
        lo, cdf = _split_weights(left, right, totals[part])
        if not bool((cdf[:, -1] == 1.0).all()):
            raise InterventionError(
                "the count is unreachable: no split of a block total has positive probability"
            )
        out[part] = lo + (cdf <= u[part, None]).sum(dim=1)
    return out


def _split_tree(powers: _Powers, num_strings: int, totals: Tensor, gen: torch.Generator) -> Tensor:
    """Recursive halving (module docstring) of ``D`` independent corpora at once.

    Runs on the generator's device: one uniform per block and level, every level vectorized
    over its blocks (block sizes take at most two values per level).

    Args:
        powers: convolution powers of the (tilted) lattice law.
        num_strings: ``K``.
        totals: ``[D]`` lattice totals, one per corpus.
        gen: generator on the device to run on.

    Returns:
        ``[D, K]`` lattice counts on ``gen.device``; row ``d`` sums to ``totals[d]``.
    """
    device = gen.device
    draws = totals.numel()
    sizes = torch.full((draws,), num_strings, dtype=torch.long, device=device)
    values = {num_strings}
    totals = totals.to(device).long()
    while max(values) > 1:
        u = torch.rand(sizes.numel(), generator=gen, dtype=torch.float64, device=device)
        m = torch.zeros_like(totals)
        for size in sorted(values):
            if size < 2:
                continue
            left = powers.on(size // 2, device)
            right = powers.on(size - size // 2, device)
            if len(values) == 1:
                m = _sample_split(left, right, totals, u)
            else:
                sel = torch.nonzero(sizes == size).squeeze(1)
                m.index_copy_(0, sel, _sample_split(left, right, totals[sel], u[sel]))
        s1 = sizes // 2
        sizes = torch.stack([s1, sizes - s1], 1).reshape(-1)
        totals = torch.stack([m, totals - m], 1).reshape(-1)
        values = {v // 2 for v in values} | {v - v // 2 for v in values}
        if 0 in values:
            keep = torch.nonzero(sizes > 0).squeeze(1)
            sizes, totals = sizes[keep], totals[keep]
            values.discard(0)
    return totals.view(draws, num_strings)


def split_exact(
    law: CountLaw, num_strings: int, total: int, gen: torch.Generator, draws: int | None = None
) -> Tensor:
    """Per-string counts, i.i.d. from ``law`` conditioned on summing to ``total``.

    Args:
        law: per-string count law covering at least ``0 .. total``.
        num_strings: ``K``.
        total: ``N``.
        gen: generator on the device to draw on.
        draws: draw this many independent count vectors at once (``[draws, K]`` result).

    Returns:
        ``[K]`` int64 counts on ``gen.device``, or ``[draws, K]``.

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
        lattice = torch.full((rows, 1), target, dtype=torch.long, device=gen.device)
    elif target in (0, k * top):
        lattice = torch.full((rows, k), target // k, dtype=torch.long, device=gen.device)
    else:
        log_q = law.lattice(law.low + law.period * min(target, top))
        theta = tilt(log_q, target / k)
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
        gen: generator on the device to draw on.
        draws: draw this many independent count vectors at once (``[draws, K]`` result).

    Returns:
        ``[K]`` int64 counts on ``gen.device`` whose sum is ``>= total`` (or ``[draws, K]``).
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
        theta = 0.0 if total <= natural or top == 0 else tilt(log_q, min(max(goal, 0.0), top * 0.999))
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
    u = torch.rand(rows, generator=gen, dtype=torch.float64, device=gen.device).cpu()
    probs = torch.softmax(logw, 0)
    chosen = j[inverse_cdf(probs.cumsum(0).expand(rows, -1), u, cumulative=True)]
    lattice = _split_tree(powers, k, chosen, gen) if k > 1 else chosen[:, None].to(gen.device)
    counts = law.low + law.period * lattice
    return counts[0] if draws is None else counts

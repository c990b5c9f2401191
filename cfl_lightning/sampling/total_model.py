"""A token-matched corpus's expected total as a function of its number of strings ``K``.

:class:`CorpusTotalModel` is the rule by which
:func:`~cfl_lightning.sampling.token_matched.sample_token_matched` chooses ``K``; it predicts,
it never draws: the corpus is drawn by the exact sampler and kept by rejection, so the model's
errors cost tries, not exactness.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import CountLaw

__all__ = ["CorpusTotalModel", "KNOT", "GRID"]

#: pilot strings a count needs to be a knot of the length model
KNOT = 20
#: ``K`` values where the model is evaluated (a geometric grid over the range)
GRID = 200
_RUNG_MASS = 1e-6  # the ladder reaches the counts with more of the tilted mass than this
_THETA = 60.0  # the tilt's bracket, |theta| <= this


class CorpusTotalModel:
    """``L(K) ~ K E_K[g(n)] + c K``: a corpus's expected total, the rule that chooses ``K``.

    * ``g(n)``: a string's mean length given its count ``n``, from the pilots' strings: the mean
      at every count that at least :data:`KNOT` strings have, linear between them, and beyond
      them a line fitted to the last (first) knots.
    * ``E_K``: the count law of one string of a corpus of ``K`` strings holding ``n(K)``
      occurrences, taken as the law tilted to the mean ``n(K) / K`` (:func:`_tilted`; exact as
      ``K`` grows). Where ``n(K) / K`` lies beyond the law held (truncated), the prediction is
      the upper line's ``K a + b n(K)``.
    * ``c``: the mean residual per string over the pilot and the corpora drawn since (a small
      corpus barely moves ``K``, a large one corrects the pilot's error).
    * ``n(K)``: ``N`` (``exact``), or ``max(N, K E[count])`` (``at_least``).

    The prediction need not be monotone in ``K``: in a Dyck language a string free of the
    target is a few symbols long and one holding it is many, so the total falls from ``K = 1``
    (few long strings) to about the natural number of strings and rises again (many nearly empty
    ones). A line ``a + b n`` cannot show that; :meth:`solve` searches a grid of ``K``.

    Args:
        kind: ``exact`` or ``at_least``.
        count: ``N``.
        natural: ``E[count]`` of one string.
        k_range: ``(k_min, k_max)``, the ``K`` considered.
        law: the per-string count law (log pmf ``[J]``), complete or truncated.
        complete: whether ``law`` holds every count a string of such a corpus can have.
        dense: the most occurrences per string, in multiples of ``natural``, that the ladder
            (:meth:`ladder`) prepares for.
    """

    def __init__(self, kind: str, count: int, natural: float, k_range: tuple[int, int],
                 law: CountLaw, complete: bool, dense: float = 20.0) -> None:
        self.kind, self.count, self.natural, self.dense = kind, count, natural, dense
        self.k_min, self.k_max = k_range
        self._log_pmf = law.log_pmf.numpy()
        self._low, self._period = law.low, law.period
        self._cap = math.inf if complete else (law.log_pmf.numel() - 1) / 2  # reliable means
        self._pilots: list[tuple[Tensor, Tensor]] = []
        self._knots = (np.zeros(0), np.zeros(0))
        self._head = self._tail = (1.0, 0.0)  # (a, b) of the lines below and above the knots
        self._grid: tuple[np.ndarray, np.ndarray] | None = None
        self.residual, self.strings = 0.0, 0

    def fit(self, corpus: Corpus) -> None:
        """``g`` from every pilot's strings so far (a refit adds its strings to the earlier
        pilots': each pilot sees the counts near its own ratio ``N / K``)."""
        assert corpus.counts is not None
        self.fit_strings(corpus.lengths, corpus.counts)

    def fit_strings(self, lengths: Tensor, counts: Tensor) -> None:
        """:meth:`fit` from ``[S]`` string lengths and ``[S]`` counts."""
        self._pilots.append((lengths.double().cpu(), counts.double().cpu()))
        every = torch.cat([p[0] for p in self._pilots]).numpy()
        values, index, sizes = np.unique(torch.cat([p[1] for p in self._pilots]).numpy(),
                                         return_inverse=True, return_counts=True)
        means = np.bincount(index, weights=every) / sizes
        keep = sizes >= KNOT
        xs, ys, ws = values[keep], means[keep], sizes[keep]
        line = _line(values, means, sizes)  # every string: where too few counts make knots
        if xs.size < 2:
            self._knots, self._head = (np.zeros(0), np.zeros(0)), line
            self._tail = line
        else:
            half = max(2, (xs.size + 1) // 2)
            self._knots = (xs, ys)
            self._head = _line(xs[:half], ys[:half], ws[:half], through=0)
            self._tail = _line(xs[-half:], ys[-half:], ws[-half:], through=-1)
        self._grid = None
        self.residual, self.strings = 0.0, every.size  # the knots' residuals sum to about 0

    def ladder(self, k: int, symbols: float) -> list[int]:
        """The counts where the pilots have fewer than :data:`KNOT` strings and where the count
        law of a corpus of ``K / 2`` strings (twice ``K``'s ratio) has over :data:`_RUNG_MASS`
        of its mass: every possible one up to 16, then every 1.25 x, while their strings'
        predicted lengths stay within ``symbols``."""
        mean = min(2 * self.occurrences(k) / k, self.dense * max(self.natural, 0.05))
        law = _tilted(self._log_pmf, np.array([mean]))[0]
        upper = int(np.nonzero(law > _RUNG_MASS)[0][-1])
        have = set(self._knots[0].tolist())
        rungs = sorted(set(range(17)) | {round(16 * 1.25**i) for i in range(1, 64)})
        out, spent = [], 0.0
        for n in rungs:
            if n > upper:
                break
            if n < self._low or (n - self._low) % self._period or n in have:
                continue
            spent += KNOT * float(self.g(np.array([float(n)]))[0])
            if spent > symbols:
                break
            out.append(n)
        return out

    def g(self, n: np.ndarray) -> np.ndarray:
        """A string's mean length given its count (``[J]`` counts to ``[J]`` lengths)."""
        xs, ys = self._knots
        head = self._head[0] + self._head[1] * n
        tail = self._tail[0] + self._tail[1] * n
        if not xs.size:
            return np.maximum(tail, 0.0)
        out = np.where(n < xs[0], head, np.where(n > xs[-1], tail, np.interp(n, xs, ys)))
        return np.maximum(out, 0.0)

    def occurrences(self, k: int) -> float:
        return self.count if self.kind == "exact" else max(self.count, k * self.natural)

    def _expected(self, k: int) -> float:
        """``K E_K[g(n)]``: on the grid, and between its points linear in ``log K``."""
        ks, values = self._curve()
        return float(np.interp(math.log(k), np.log(ks), values))

    def _curve(self) -> tuple[np.ndarray, np.ndarray]:
        """``K`` on a geometric grid of :data:`GRID` values over ``k_min .. k_max`` and
        ``K E_K[g(n)]`` at each, in one batch (cached per fit)."""
        if self._grid is None:
            ks = np.unique(np.round(np.geomspace(self.k_min, self.k_max, GRID)).astype(np.int64))
            occurrences = np.array([self.occurrences(int(k)) for k in ks], dtype=np.float64)
            means = occurrences / ks
            dense = means > self._cap
            values = self._tail[0] * ks + self._tail[1] * occurrences  # beyond the law held
            if (~dense).any():
                lengths = self.g(np.arange(self._log_pmf.size, dtype=np.float64))
                values[~dense] = ks[~dense] * (_tilted(self._log_pmf, means[~dense]) @ lengths)
            self._grid = ks, values
        return self._grid

    def _per_string(self) -> float:
        """``c``, the mean residual per string."""
        return self.residual / max(self.strings, 1)

    def predict(self, k: int) -> float:
        return self._expected(k) + self._per_string() * k

    def observe(self, k: int, totals: Tensor, occurrences: Tensor) -> None:
        """Correct the level by the residuals of drawn corpora (``[B]`` totals and occurrences)."""
        extra = occurrences.double().numpy() - self.occurrences(k)  # at_least: above n(K)
        fitted = self._expected(k) + self._tail[1] * extra
        self.residual += float((totals.double().numpy() - fitted).sum())
        self.strings += k * totals.numel()

    def grid(self) -> tuple[np.ndarray, np.ndarray]:
        """``K`` on a geometric grid over ``k_min .. k_max`` and their predictions."""
        ks, values = self._curve()
        return ks, values + self._per_string() * ks

    def solve(self, tokens: int, window: tuple[int, int] | None = None) -> int:
        """The ``K`` in ``k_min .. k_max`` whose prediction is nearest ``tokens``; with a
        ``window``, of the ``K`` whose prediction lies in its central half (a corpus at its edge
        would miss the window about half the time), the one nearest the natural number of
        strings ``n(K) / E[count]`` (the corpus least unlike the automaton's, where rejection is
        fast), not the first a search meets: where the prediction is flat (a Dyck language's
        length about proportional to its brackets), ``K`` = 1 holding every occurrence predicts
        the target as well as the natural ``K`` does.
        """
        ks, preds = self.grid()
        nearest = self._nearest(ks, preds, tokens)
        if window is None or self.natural <= 0 or self.count <= 0:
            return nearest
        band = ((tokens + window[0]) / 2, (tokens + window[1]) / 2)
        spans = self._spans(ks, preds, band)
        if not spans:
            return nearest
        natural = max(1, round(self.occurrences(nearest) / self.natural))
        return min((min(max(natural, a), b) for a, b in spans),
                   key=lambda k: abs(math.log(k / natural)))

    def _nearest(self, ks: np.ndarray, preds: np.ndarray, tokens: float) -> int:
        """The grid's nearest ``K``, or, where the prediction crosses ``tokens`` beside it, the
        nearer of the two integers around the crossing."""
        i = int(np.argmin(np.abs(preds - tokens)))
        for j in (i - 1, i + 1):
            if 0 <= j < ks.size and (preds[i] - tokens) * (preds[j] - tokens) < 0:
                above = preds[j] > tokens
                k = self._edge(int(ks[i]), int(ks[j]), lambda x: (self.predict(x) > tokens)
                               == above)
                pair = (k, k - 1 if ks[j] > ks[i] else k + 1)  # both in the grid's range
                return min(pair, key=lambda x: abs(self.predict(x) - tokens))
        return int(ks[i])

    def _spans(self, ks: np.ndarray, preds: np.ndarray,
               band: tuple[float, float]) -> list[tuple[int, int]]:
        """The intervals of ``K`` whose prediction lies in ``band``, ends exact to one string
        (the prediction is taken monotone between neighbouring grid points, where a narrow band
        may lie between them: a crossing of its middle is looked for there)."""
        def within(k: int) -> bool:
            return band[0] <= self.predict(k) <= band[1]

        inside = (preds >= band[0]) & (preds <= band[1])
        mid = (band[0] + band[1]) / 2
        seeds = [int(k) for k in ks[inside]]
        for i in np.nonzero(~inside[:-1] & ~inside[1:] & ((preds[:-1] - mid) *
                                                            (preds[1:] - mid) < 0))[0]:
            above = bool(preds[i + 1] > mid)
            k = self._edge(int(ks[i]), int(ks[i + 1]),
                           lambda x: (self.predict(x) > mid) == above)
            seeds += [c for c in (k - 1, k) if within(c)]
        spans: list[tuple[int, int]] = []
        for seed in sorted(seeds):
            if spans and seed <= spans[-1][1]:
                continue
            left = [int(k) for k in ks[(ks < seed) & ~inside]]
            right = [int(k) for k in ks[(ks > seed) & ~inside]]
            first = self._edge(left[-1], seed, within) if left else self.k_min
            last = self._edge(right[0], seed, within) if right else self.k_max
            spans.append((first, last))
        return spans

    @staticmethod
    def _edge(out: int, ins: int, test: Callable[[int], bool]) -> int:
        """The ``K`` nearest ``out`` on ``ins``'s side that passes ``test`` (``ins`` does, ``out``
        does not; one bisection)."""
        while abs(out - ins) > 1:
            mid = (out + ins) // 2
            if test(mid):
                ins = mid
            else:
                out = mid
        return ins


def _tilted(log_pmf: np.ndarray, means: np.ndarray) -> np.ndarray:
    """``[G, J]``: the count law ``[J]`` (log pmf) tilted to each of ``[G]`` means,
    ``p_theta(n) ∝ p(n) e^{theta n}`` (the rule of :func:`~cfl_lightning.sampling.counts.tilt`,
    batched: safeguarded Newton steps on ``theta``); a point mass at the support's end for a mean
    at or beyond it."""
    finite = np.isfinite(log_pmf)
    support = np.nonzero(finite)[0]
    j = np.arange(log_pmf.size, dtype=np.float64)
    out = np.zeros((means.size, log_pmf.size))
    low, high = means <= support[0], means >= support[-1]
    out[low, support[0]] = 1.0
    out[high, support[-1]] = 1.0
    todo = np.nonzero(~low & ~high)[0]
    if not todo.size:
        return out
    target = means[todo]
    theta, lo, hi = np.zeros(todo.size), np.full(todo.size, -_THETA), np.full(todo.size, _THETA)
    for _ in range(200):
        logits = log_pmf[None, :] + theta[:, None] * j[None, :]
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        mean = probs @ j
        var = probs @ (j * j) - mean * mean
        miss = mean - target
        if np.all(np.abs(miss) <= 1e-9 * np.maximum(1.0, target)):
            break
        lo, hi = np.where(miss < 0, theta, lo), np.where(miss > 0, theta, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = theta - miss / var
        theta = np.where((step > lo) & (step < hi), step, (lo + hi) / 2)
    out[todo] = probs
    return out


def _line(xs: np.ndarray, ys: np.ndarray, ws: np.ndarray,
          through: int | None = None) -> tuple[float, float]:
    """``(a, b)`` of the weighted least-squares line ``y ~ a + b x`` (flat for one ``x``);
    with ``through``, moved to pass through that point (the line continues the knots)."""
    w = ws / ws.sum()
    mx, my = float(np.dot(w, xs)), float(np.dot(w, ys))
    spread = float(np.dot(w, (xs - mx) ** 2))
    b = 0.0 if spread < 1e-12 else float(np.dot(w, (xs - mx) * (ys - my))) / spread
    if through is not None:
        return float(ys[through]) - b * float(xs[through]), b
    return my - b * mx, b

"""Intervals over automata: the mean of a curve point, and the causal / correlational gap.

The independent unit is the automaton (a weighting or a topology) behind a corpus; repeats of
one corpus are reduced to one value before anything here sees them. All intervals are Student-t
intervals (no resampling, so no seed and nothing random):

* the **mean** of ``n`` values: ``mean +- t(n-1) * sem`` (:func:`t_interval`), the interval of
  signed quantities and of the pre-registered plans (:mod:`cfl_lightning.analysis.plan`);
* the **mean of a non-negative quantity** (a KL or a per-state contribution, as drawn in the
  curves): the same t-interval on the log scale, by the delta method,
  ``mean * exp(-+ t(n-1) * sem / mean)`` (:func:`log_t_interval`): it stays above zero and is
  asymmetric, as the values' range is; a mean that is not positive has none (NaN). Such an
  interval spanning more than a factor :data:`WIDE_FACTOR` is too wide to read (:func:`too_wide`);
* the **gap** between a causal point (values ``c``) and the correlational runs near it (values
  ``r``), two independent samples:

  - ``ratio`` = ``mean(c) / mean(r)`` for non-negative quantities (KLs): a delta-method interval
    on the log ratio, ``log(mean(c)/mean(r)) +- t(df) * sqrt(rc^2 + rr^2)`` with the relative
    standard errors ``rc = sem(c)/mean(c)``, ``rr = sem(r)/mean(r)``, then exponentiated;
  - ``difference`` = ``mean(c) - mean(r)`` for signed quantities (per-transition and per-symbol
    log ratios): Welch's interval ``+- t(df) * sqrt(sem(c)^2 + sem(r)^2)``;

  both with Welch-Satterthwaite degrees of freedom (:func:`gap_interval`). "No gap" is 1 for a
  ratio and 0 for a difference.

With fewer than two values in an arm there is no interval (NaN), never a zero-width one. The
t quantile comes from the regularized incomplete beta function (:func:`t_quantile`), so the
runtime needs no scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "LEVEL",
    "GAP_FACTOR",
    "GAP_KINDS",
    "mean_sem",
    "t_quantile",
    "t_interval",
    "log_t_interval",
    "INTERVAL_METHODS",
    "WIDE_FACTOR",
    "point_interval",
    "too_wide",
    "Gap",
    "gap_interval",
    "no_gap",
    "excludes_no_gap",
]

LEVEL = 0.95  # every interval's coverage
GAP_FACTOR = math.sqrt(2.0)  # correlational runs within [N / GAP_FACTOR, N * GAP_FACTOR] of N
GAP_KINDS = ("ratio", "difference")
# a curve point's interval: Student-t on the log scale (non-negative quantities) or plain
INTERVAL_METHODS = ("log-t", "t")
WIDE_FACTOR = 10.0  # a log-scale interval with high / low above this is too wide to read
_NAN = math.nan


def mean_sem(values: Sequence[float | None]) -> tuple[float, float, int]:
    """Mean, standard error of the mean (sample std / sqrt(n); NaN for n < 2) and n.

    None and non-finite values are left out.
    """
    arr = _finite(values)
    n = int(arr.size)
    if n == 0:
        return _NAN, _NAN, 0
    mean = float(arr.mean())
    sem = float(arr.std(ddof=1) / math.sqrt(n)) if n >= 2 else _NAN
    return mean, sem, n


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``, ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` (real, > 0) degrees of freedom.

    Bisection on the CDF to double precision; ``df = inf`` gives the normal quantile.
    """
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if math.isinf(df):
        from statistics import NormalDist

        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        low, high = (mid, high) if _t_cdf(mid, df) < p else (low, mid)
    return 0.5 * (low + high)


def _half_width(sem: float, df: float, level: float) -> float:
    if not (math.isfinite(sem) and df > 0):
        return _NAN
    return t_quantile(0.5 + level / 2.0, df) * sem


def t_interval(values: Sequence[float | None], level: float = LEVEL) -> tuple[float, float]:
    """The Student-t interval of the mean of ``values``: ``mean +- t(n-1) * sem``.

    None and non-finite values are left out; fewer than two values give ``(nan, nan)``.
    """
    mean, sem, n = mean_sem(values)
    half = _half_width(sem, n - 1, level) if n >= 2 else _NAN
    return mean - half, mean + half


def log_t_interval(values: Sequence[float | None], level: float = LEVEL) -> tuple[float, float]:
    """The Student-t interval of the mean of a non-negative quantity, on the log scale.

    ``mean * exp(-+ t(n-1) * sem / mean)``: the delta method on ``log(mean)``, whose standard
    error is ``sem / mean``. Positive, containing the mean, wider above it than below. None and
    non-finite values are left out; fewer than two values, or a mean that is not positive (an
    estimate of a non-negative quantity can fall to or below zero), give ``(nan, nan)``.
    """
    mean, sem, n = mean_sem(values)
    if n < 2 or not mean > 0:
        return _NAN, _NAN
    half = _half_width(sem / mean, n - 1, level)
    return mean * math.exp(-half), mean * math.exp(half)


def point_interval(
    values: Sequence[float | None], method: str, level: float = LEVEL
) -> tuple[float, float]:
    """A curve point's interval by ``method`` (:data:`INTERVAL_METHODS`): ``"log-t"``
    (:func:`log_t_interval`) or ``"t"`` (:func:`t_interval`)."""
    if method == "log-t":
        return log_t_interval(values, level)
    if method == "t":
        return t_interval(values, level)
    raise ValueError(f"unknown interval method {method!r}; expected one of {INTERVAL_METHODS}")


def too_wide(method: str, low: float, high: float, n: int) -> bool:
    """Whether a point's interval is too wide to read: a ``"log-t"`` interval of ``n >= 2``
    values that spans more than a factor :data:`WIDE_FACTOR`, or that does not exist because
    the mean is not positive. A ``"t"`` interval (signed quantities, linear axes) never is."""
    if method != "log-t" or n < 2:
        return False
    return not (math.isfinite(low) and math.isfinite(high) and high <= WIDE_FACTOR * low)


@dataclass(frozen=True)
class Gap:
    """The causal / correlational gap at one causal point.

    ``kind`` is ``"ratio"`` or ``"difference"``; ``value`` and ``low``/``high`` are NaN where
    they cannot be estimated (an empty arm; for an interval, fewer than two values in an arm;
    for a ratio, a mean that is not positive). ``n_causal`` and ``n_corr`` count the values.
    """

    kind: str
    value: float
    low: float
    high: float
    n_causal: int
    n_corr: int

    def excludes_no_gap(self) -> bool:
        """Whether the interval lies entirely above or below "no gap" (:func:`no_gap`)."""
        return excludes_no_gap(self.kind, self.low, self.high)


def no_gap(kind: str) -> float:
    """The value meaning "no gap": 1 for a ratio, 0 for a difference."""
    if kind not in GAP_KINDS:
        raise ValueError(f"unknown gap kind {kind!r}; expected one of {GAP_KINDS}")
    return 1.0 if kind == "ratio" else 0.0


def excludes_no_gap(kind: str, low: float, high: float) -> bool:
    """Whether the interval ``[low, high]`` of a ``kind`` gap lies entirely on one side of "no
    gap" (:func:`no_gap`); False without an interval (NaN)."""
    reference = no_gap(kind)
    return bool(low > reference or high < reference)  # NaN compares False


def _welch_df(a: float, na: int, b: float, nb: int) -> float:
    """Welch-Satterthwaite degrees of freedom of ``sqrt(a^2 + b^2)`` (a, b: standard errors)."""
    num = (a * a + b * b) ** 2
    den = a**4 / (na - 1) + b**4 / (nb - 1)
    if den > 0:
        return num / den
    return float(na + nb - 2)  # both arms constant: any df gives a zero-width interval


def gap_interval(
    causal: Sequence[float | None],
    correlational: Sequence[float | None],
    kind: str = "ratio",
    level: float = LEVEL,
) -> Gap:
    """The gap between two independent samples of automata, with its Student-t interval.

    Args:
        causal: the causal point's values (one per automaton).
        correlational: the values of the correlational runs near it (one per run).
        kind: ``"ratio"`` (``mean(causal) / mean(correlational)``, delta method on the log
            ratio) or ``"difference"`` (``mean(causal) - mean(correlational)``, Welch).
        level: the interval's coverage.

    Returns:
        A :class:`Gap`; see the module docstring for the formulas.
    """
    no_gap(kind)  # validates kind
    mc, sc, nc = mean_sem(causal)
    mr, sr, nr = mean_sem(correlational)
    if nc == 0 or nr == 0:
        return Gap(kind, _NAN, _NAN, _NAN, nc, nr)
    if kind == "difference":
        value = mc - mr
        if nc < 2 or nr < 2:
            return Gap(kind, value, _NAN, _NAN, nc, nr)
        half = _half_width(math.hypot(sc, sr), _welch_df(sc, nc, sr, nr), level)
        return Gap(kind, value, value - half, value + half, nc, nr)
    if not (mc > 0 and mr > 0):
        return Gap(kind, _NAN, _NAN, _NAN, nc, nr)
    value = mc / mr
    if nc < 2 or nr < 2:
        return Gap(kind, value, _NAN, _NAN, nc, nr)
    rc, rr = sc / mc, sr / mr
    half = _half_width(math.hypot(rc, rr), _welch_df(rc, nc, rr, nr), level)
    return Gap(kind, value, value * math.exp(-half), value * math.exp(half), nc, nr)

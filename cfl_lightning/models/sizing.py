"""Choosing a model's width from a parameter budget.

A model's parameter count grows monotonically with its width (LSTM hidden size, transformer
``d_model`` or feed-forward size). :func:`largest_within_budget` finds, by bisection, the largest
width whose count does not exceed the budget, which is also the count closest to the budget from
below. Counting is done by the caller (the model classes build their layers on the ``meta`` device,
so a count costs no memory and is always exact; :func:`~cfl_lightning.results.count_parameters`,
the count ``results.json`` reports, re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable

from cfl_lightning.results import count_parameters

__all__ = ["count_parameters", "largest_within_budget"]


def largest_within_budget(
    count: Callable[[int], int],
    budget: int,
    *,
    low: int = 1,
    step: int = 1,
    high: int | None = None,
) -> int:
    """Largest ``size`` in ``low, low + step, ...`` with ``count(size) <= budget``.

    Args:
        count: parameter count as a function of the size; must be non-decreasing.
        budget: the parameter budget.
        low: smallest admissible size (a multiple of ``step``).
        step: sizes are multiples of ``step`` (e.g. the number of attention heads).
        high: an upper bound to search below; found by doubling when omitted.

    Returns:
        The size.

    Raises:
        ValueError: when even ``count(low)`` exceeds the budget.

    Example:
        >>> largest_within_budget(lambda h: h * h, 1000)
        31
        >>> largest_within_budget(lambda h: h * h, 1000, low=4, step=4)
        28
    """
    if step < 1 or low < step or low % step:
        raise ValueError(f"low ({low}) must be a positive multiple of step ({step})")
    if count(low) > budget:
        raise ValueError(
            f"parameter budget {budget} is too small: the smallest model (size {low}) already has "
            f"{count(low)} parameters"
        )
    lo = low // step  # in units of step; count(lo * step) <= budget
    if high is None:
        hi = lo * 2
        while count(hi * step) <= budget:
            lo, hi = hi, hi * 2
    else:
        hi = max(high // step, lo) + 1
    # invariant: count(lo * step) <= budget < count(hi * step)  (hi may be the open bound)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid * step) <= budget:
            lo = mid
        else:
            hi = mid
    return lo * step

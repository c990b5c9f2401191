"""The decision rules of a plan's contrasts and claims (:mod:`cfl_lightning.analysis.plan`'s
module docstring states them): a contrast's verdict from its interval, a gap's side against a
prediction, and a claim's verdict from its contrasts'."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["EQUIVALENCE_VERDICTS", "decide", "direction", "combine"]

#: an equivalence contrast's verdicts, read as a claim's
EQUIVALENCE_VERDICTS = {"equivalent": "reproduced", "not equivalent": "not reproduced"}


def decide(estimate: Any, expect: str) -> str:
    """The verdict of one contrast (an :class:`~cfl_lightning.analysis.plan.Estimate`) under its
    expectation."""
    low, high, ref = estimate.low, estimate.high, estimate.reference
    if not (math.isfinite(low) and math.isfinite(high)):
        return "not resolved"
    if expect == "equivalent":
        assert estimate.inner is not None and estimate.bounds is not None
        (lo90, hi90), (lo_m, hi_m) = estimate.inner, estimate.bounds
        if lo_m <= lo90 and hi90 <= hi_m:
            return "equivalent"
        return "not equivalent" if low > ref or high < ref else "not resolved"
    if expect == "nonzero":
        return "reproduced" if low > ref or high < ref else "not resolved"
    expected = low > ref if expect == "above" else high < ref
    opposite = high < ref if expect == "above" else low > ref
    return "reproduced" if expected else "not reproduced" if opposite else "not resolved"


def direction(estimate: Any, predicts: str | None) -> str:
    """A gap's side against a stated prediction: ``with``, ``against``, or ``–`` (no
    prediction, or the interval holds "no gap")."""
    low, high, ref = estimate.low, estimate.high, estimate.reference
    if predicts is None or not (low > ref or high < ref):
        return "–"
    above = low > ref
    return "with" if above == (predicts == "above") else "against"


def combine(verdicts: Sequence[str], rule: str = "all") -> str:
    """A claim's verdict from its contrasts' (module docstring); an equivalence contrast counts
    as reproduced when equivalent and as not reproduced when not equivalent."""
    verdicts = [EQUIVALENCE_VERDICTS.get(v, v) for v in verdicts]
    if rule == "all":
        if all(v == "reproduced" for v in verdicts):
            return "reproduced"
        return "not reproduced" if "not reproduced" in verdicts else "not resolved"
    if "reproduced" in verdicts:
        return "reproduced"
    return "not reproduced" if all(v == "not reproduced" for v in verdicts) else "not resolved"

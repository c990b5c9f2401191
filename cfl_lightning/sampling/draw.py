"""Inverse-CDF draws from rows of non-negative weights (shared by every sampler)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["inverse_cdf"]


def inverse_cdf(weights: Tensor, u: Tensor, cumulative: bool = False) -> Tensor:
    """Index drawn from each row of ``weights`` ``[B, A]`` (non-negative) with uniforms ``[B]``.

    Picks the first index whose cumulative weight exceeds ``u * total``, so a zero-weight entry is
    never picked; when rounding pushes ``u * total`` to the top (probability ~1e-16) the row falls
    back to its last positive entry.

    Args:
        weights: ``[B, A]`` unnormalized weights (or their cumulative sums).
        u: ``[B]`` uniforms in ``[0, 1)``.
        cumulative: the rows of ``weights`` are already cumulative sums.

    Returns:
        ``[B]`` int64 indices in ``0 .. A - 1``.
    """
    cum = weights if cumulative else weights.cumsum(dim=1)
    threshold = u * cum[:, -1]
    pick = (cum <= threshold[:, None]).sum(dim=1)
    top = weights.shape[1] - 1
    bad = pick > top
    if bool(bad.any()):
        rows = cum[bad]
        steps = torch.diff(rows, dim=1, prepend=torch.zeros_like(rows[:, :1]))
        pick[bad] = top - (steps > 0).flip(1).int().argmax(dim=1)
    return pick

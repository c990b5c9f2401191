"""Inverse-CDF draws from rows of non-negative weights (shared by every sampler)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["guided_pick", "inverse_cdf"]

_STEPS = 3  # guided steps before the remaining draws fall back to the full count


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


def guided_pick(cdf: Tensor, rows: Tensor, u: Tensor) -> Tensor:
    """``#{j : cdf[rows_i, j] <= u_i}`` for many draws from few rows, by a guide table.

    The guide table (Chen and Asau) holds ``g[r, b] = #{j : cdf[r, j] <= b / M}`` for ``M``
    buckets. For ``u`` in bucket ``b = floor(u M)`` every ``j < g[r, b]`` has ``cdf <= u``, so the
    search starts at ``g[r, b]`` and steps forward while ``cdf <= u``: the same comparisons as the
    full count, hence the same index, in about one step per draw instead of ``W`` comparisons.
    Draws still searching after a few steps (buckets crowded with tiny probabilities) get the
    full count, so the number of kernel launches stays bounded.

    Args:
        cdf: ``[R, W]`` float64 rows, non-decreasing, each ending in exactly 1.0.
        rows: ``[G]`` int64 row of each draw.
        u: ``[G]`` float64 uniforms in ``[0, 1)``.

    Returns:
        ``[G]`` int64 indices in ``0 .. W - 1``.
    """
    num_rows, width = cdf.shape
    buckets = 1 << max(width - 1, 1).bit_length() + 1  # a power of two, at least 2 W
    edges = torch.arange(buckets, dtype=cdf.dtype, device=cdf.device) / buckets
    guide = torch.searchsorted(cdf, edges.expand(num_rows, -1).contiguous(), right=True)
    pick = guide.reshape(-1).take(rows * buckets + (u * buckets).long())
    flat = cdf.reshape(-1)
    todo = torch.arange(rows.numel(), device=rows.device)
    start, at, bound = rows * width, pick, u
    for _ in range(_STEPS):
        more = torch.nonzero(flat.take(start + at) <= bound).squeeze(1)
        todo, start, bound = todo[more], start[more], bound[more]
        at = at[more] + 1
        pick.index_copy_(0, todo, at)
        if not todo.numel():
            return pick
    # Draws in crowded buckets (rare): the full count on their rows.
    full = (cdf.index_select(0, rows.index_select(0, todo)) <= bound[:, None]).sum(dim=1)
    pick.index_copy_(0, todo, full)
    return pick

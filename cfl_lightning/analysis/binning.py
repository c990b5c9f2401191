"""Bins of the correlational arm's realized counts (:func:`bin_edges`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["BINNINGS", "bin_edges", "assign"]

BINNINGS = ("quantile", "log", "linear")


def bin_edges(x: Sequence[float], bins: int, method: str = "quantile") -> np.ndarray:
    """Edges of at most ``bins`` bins covering ``x``.

    ``quantile``: equal-count bins (duplicate edges merged), ``log``: log-spaced between
    max(min(x), 1) and max(x) (smaller counts fall in the first bin), ``linear``: equal width.
    Always at least two edges; a single distinct value gives one bin.
    """
    arr = np.asarray(x, dtype=float)
    if arr.size == 0:
        raise ValueError("no values to bin")
    if method not in BINNINGS:
        raise ValueError(f"unknown binning {method!r}; expected one of {BINNINGS}")
    bins = max(int(bins), 1)
    lo, hi = float(arr.min()), float(arr.max())
    if hi <= lo:
        return np.array([lo, hi])
    if method == "quantile":
        edges = np.unique(np.quantile(arr, np.linspace(0.0, 1.0, bins + 1)))
    elif method == "log":
        edges = np.geomspace(max(lo, 1.0), hi, bins + 1) if hi > max(lo, 1.0) else np.array([hi])
        edges = np.unique(np.concatenate([[lo], edges[1:] if edges.size > 1 else edges]))
    else:
        edges = np.linspace(lo, hi, bins + 1)
    if edges.size < 2:
        edges = np.array([lo, hi])
    return edges


def assign(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index of each x: ``[e_i, e_{i+1})``, the last bin closed on the right."""
    return np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)


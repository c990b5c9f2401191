"""The figure's marks: one curve's line, interval bars and band, markers, n labels and bin extents.

Part of the curves figure (:mod:`cfl_lightning.analysis.plot`); matplotlib is imported inside
the functions that draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from cfl_lightning.analysis.aggregate import CurveRow
from cfl_lightning.analysis.labels import setting_order, setting_style
from cfl_lightning.analysis.plot_axes import x_position
from cfl_lightning.analysis.plot_text import HOLLOW_BELOW, is_causal

__all__ = ["setting_rank", "color_of", "draw_curve", "settle_labels", "N_LABEL"]

N_LABEL = "n-label"  # the gid of the n labels beside the points (:func:`settle_labels`)
# where an n label may sit, in points from its point: beside it (its first spot, then the
# other corners), then a line further up or down
_SPOTS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 2), (1, -2), (-1, 2), (-1, -2))
_MARKER_RADIUS = 2.5  # points: a marker's half width, kept clear of the labels

_MODEL_COLORS = {"LSTMLanguageModel": "C0", "TransformerLanguageModel": "C3"}


def setting_rank(setting: str) -> int:
    """A setting's place in the legend (registered causal kinds, then correlational)."""
    order = setting_order()
    return order.index(setting) if setting in order else 99


def color_of(model: str, models: Sequence[str]) -> str:
    """A model's colour: fixed for the shipped architectures, the next free one for others."""
    if model in _MODEL_COLORS:
        return _MODEL_COLORS[model]
    others = [m for m in models if m not in _MODEL_COLORS]
    return f"C{(others.index(model) + 4) % 10}"


def draw_curve(
    ax: object,
    points: Sequence[CurveRow],
    setting: str,
    color: str,
    floor: float | None,
    logx: bool,
) -> object:
    """One curve: line, 95% interval (bars and a band), markers (hollow where n < 3), n labels,
    and a correlational bin's x extent. Returns the legend handle."""
    from matplotlib.lines import Line2D

    style, marker, alpha = setting_style(setting)
    x = np.array([x_position(r, logx) for r in points], dtype=float)
    y = np.array([r.mean for r in points], dtype=float)
    n = np.array([r.n for r in points])
    ax.plot(x, y, linestyle=style, color=color, linewidth=1.6)
    _draw_intervals(ax, points, x, y, color, alpha, floor)
    size = 4.5 if marker != "D" else 3.5
    _draw_markers(ax, x, y, n >= HOLLOW_BELOW, marker, color, size)
    # n: causal above-left, correlational below-right, so that the labels of a causal point and
    # a bin at the same count sit on opposite sides, off both markers
    offset, align = ((-4, 4), "right") if is_causal(points[0]) else ((4, -9), "left")
    for xi, yi, ni in zip(x, y, n):
        if math.isfinite(xi) and math.isfinite(yi):
            ax.annotate(
                str(ni), (xi, yi), xytext=offset, textcoords="offset points", fontsize=6,
                color=color, ha=align, gid=N_LABEL,
            )
    return Line2D([], [], linestyle=style, marker=marker, color=color, markersize=size)


def _draw_intervals(
    ax: object,
    points: Sequence[CurveRow],
    x: np.ndarray,
    y: np.ndarray,
    color: str,
    alpha: float,
    floor: float | None,
) -> None:
    """The 95% intervals of ``points`` drawn at ``[K]`` positions ``x``, ``y``: a band (when
    ``alpha``) and vertical bars; a correlational bin's x extent as a horizontal bar. On a log
    axis (``floor`` given) an interval reaching zero or below ends at the floor. An interval
    too wide to read (``ci_wide``) is a dashed bar without caps, left out of the band."""
    low = np.array([r.ci_low for r in points], dtype=float)
    high = np.array([r.ci_high for r in points], dtype=float)
    if floor is not None:
        low = np.where(low > 0, low, floor)
    wide = np.array([r.ci_wide for r in points], dtype=bool)
    if alpha:  # the band leaves out intervals too wide to read
        ax.fill_between(x, np.where(wide, y, low), np.where(wide, y, high), color=color,
                        alpha=alpha, linewidth=0)
    has = np.isfinite(low) & np.isfinite(high) & np.isfinite(y)
    for keep, style in ((has & ~wide, "solid"), (has & wide, (0, (2, 2)))):
        if keep.any():
            bars = ax.errorbar(
                x[keep],
                y[keep],
                yerr=[y[keep] - low[keep], high[keep] - y[keep]],
                fmt="none",
                ecolor=color,
                elinewidth=0.9,
                capsize=2 if style == "solid" else 0,
                alpha=0.8 if style == "solid" else 0.5,
            )
            bars.lines[2][0].set_linestyle(style)
    if not is_causal(points[0]):
        lo = np.array([r.x_min for r in points], dtype=float)
        hi = np.array([r.x_max for r in points], dtype=float)
        ax.errorbar(
            x,
            y,
            xerr=[np.clip(x - lo, 0, None), np.clip(hi - x, 0, None)],
            fmt="none",
            ecolor=color,
            elinewidth=0.8,
            capsize=2,
            alpha=0.5,
        )


def _draw_markers(
    ax: object, x: np.ndarray, y: np.ndarray, solid: np.ndarray, marker: str, color: str,
    size: float,
) -> None:
    """Markers at ``[K]`` points: filled where ``solid``, hollow (white face) elsewhere."""
    ax.plot(x[solid], y[solid], linestyle="none", marker=marker, color=color, markersize=size)
    ax.plot(
        x[~solid],
        y[~solid],
        linestyle="none",
        marker=marker,
        markersize=size,
        markerfacecolor="white",
        markeredgecolor=color,
    )

def _spots(offset: tuple[float, float], align: str) -> list[tuple[tuple[float, float], str]]:
    """The spots an n label first placed at ``offset`` with ``align`` may move to, first its own
    (:data:`_SPOTS`: the same side, the other row, the other side, one row further)."""
    (dx, dy), step = offset, 13.0
    other_dy = -9.0 if dy > 0 else 4.0
    rows = {1: dy, -1: other_dy, 2: dy + step if dy > 0 else dy - step,
            -2: other_dy + step if other_dy > 0 else other_dy - step}
    flip = {"right": "left", "left": "right"}
    return [((dx * side, rows[row]), align if side == 1 else flip.get(align, align))
            for side, row in _SPOTS]


def settle_labels(fig: object) -> None:
    """Move each n label (gid :data:`N_LABEL`) that overlaps an earlier label or any point's
    marker of its panel to the first free spot beside its point (:func:`_spots`; it stays where
    it was if none is free).

    Labels of points at nearly one count (a causal point and a bin at 1,000, two models' bins)
    overlapped at their fixed offsets (issue 51). The figure is laid out (drawn) first, so the
    labels' extents are those of the saved figure.
    """
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    radius = _MARKER_RADIUS * fig.dpi / 72.0
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_gid() == N_LABEL]
        points = [ax.transData.transform(label.xy) for label in labels]
        placed = [Bbox.from_extents(x - radius, y - radius, x + radius, y + radius)
                  for x, y in points if np.isfinite(x) and np.isfinite(y)]
        for label in labels:
            spots = _spots(tuple(label.xyann), label.get_horizontalalignment())
            for offset, align in [*spots, spots[0]]:
                label.xyann = offset
                label.set_horizontalalignment(align)
                box = label.get_window_extent(renderer)
                if not any(box.overlaps(other) for other in placed):
                    break
            placed.append(label.get_window_extent(renderer))

"""The figure's axes: y scale and limits, x scale, limits and ticks of each panel.

Part of the curves figure (:mod:`cfl_lightning.analysis.plot`). Every plotted point lies inside
its panel and between two labelled x ticks (:func:`x_limits`): the ticks and limits cover the
points' positions and the correlational bins' x extents (issue 42). matplotlib is imported
inside the functions that need it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from cfl_lightning.analysis.aggregate import CurveRow
from cfl_lightning.analysis.plot_text import (
    DID_QUANTITY,
    X_LABELS,
    did_label,
    is_causal,
    metric_label,
    reading_name,
    target_title,
)

__all__ = ["y_scale", "panel_axes", "panel_means", "is_difference", "log_floor", "x_position", "x_extent",
           "nice_bounds", "NICE_MANTISSAS"]

_DECADES_LINEAR = 2.0  # signed values spanning at most this many decades get a linear axis


def y_scale(means: Sequence[float], difference: bool = False) -> tuple[str, float | None]:
    """The y axis for a panel's means: ``("log", None)``, ``("linear", None)`` or
    ``("symlog", linthresh)``.

    Linear for a ``difference`` panel (target minus control: read against 0 on a linear axis).
    Otherwise log when every finite mean is positive; linear when the nonzero magnitudes span at
    most two decades (or all are zero), else symmetric log, linear below the smallest nonzero
    magnitude (rounded down to a power of ten).
    """
    if difference:
        return "linear", None
    arr = np.asarray([m for m in means if math.isfinite(m)], dtype=float)
    if arr.size and (arr > 0).all():
        return "log", None
    mags = np.abs(arr[arr != 0])
    if mags.size == 0 or math.log10(mags.max() / mags.min()) <= _DECADES_LINEAR:
        return "linear", None
    return "symlog", float(10.0 ** math.floor(math.log10(mags.min())))


def is_difference(curves: dict[tuple, list[CurveRow]]) -> bool:
    """Whether a panel draws target-minus-control differences (a did panel)."""
    return any(r.quantity == DID_QUANTITY for c in curves.values() for r in c)


def panel_means(curves: dict[tuple, list[CurveRow]]) -> np.ndarray:
    """The ``[K]`` means of a panel's points, every curve's."""
    return np.array([r.mean for c in curves.values() for r in c], dtype=float)


def panel_axes(
    ax: object,
    x_kind: str,
    target: str,
    curves: dict[tuple, list[CurveRow]],
    *,
    metric: str,
    logx: bool,
    left_label: str | None = None,
    view: str = "value",
    reading: bool = False,
) -> None:
    """A panel's title (with its reading where a figure draws both, ``reading``; a did panel's
    says so), axis labels (no y label where the panel to the left, ``left_label``, has the
    same), y scale (:func:`y_scale`), x scale and x limits (:func:`nice_bounds` of
    :func:`x_extent`: a labelled tick at or beyond each end of what is drawn)."""
    suffix = " (strings containing it)" if x_kind == "strings" else ""
    if reading:
        suffix += f", {reading_name(metric)}"
    if view == "did":
        suffix += ", minus control"
    ax.set_title(target_title(target) + suffix, fontsize=11 if len(suffix) < 20 else 9)
    ax.set_xlabel(X_LABELS.get(x_kind, x_kind), fontsize=9)
    ylabel = metric_label(metric, target)
    ylabel = did_label(ylabel) if view == "did" else ylabel
    if left_label is None or left_label != ylabel:
        ax.set_ylabel(ylabel, fontsize=9)
    _y_axis(ax, curves)
    extent = x_extent(curves, logx)
    if logx:
        _x_axis_log(ax, curves, extent)
    elif extent is not None:
        _x_linear(ax, extent)
    ax.grid(True, which="major", alpha=0.3)
    ax.tick_params(which="both", labelsize=_TICK_FONT)


def _y_axis(ax: object, curves: dict[tuple, list[CurveRow]]) -> None:
    """Log (down to :func:`log_floor`; up to :func:`_log_top` where an interval is too wide to
    read), symmetric-log or linear with a zero line; a note in a
    panel without a finite value."""
    means = panel_means(curves)
    scale, linthresh = y_scale(means.tolist(), is_difference(curves))
    if scale == "log":
        _log_y(ax)
        floor = log_floor(curves.values())
        if floor is not None:
            ax.set_ylim(bottom=floor)
        if any(r.ci_wide for c in curves.values() for r in c):
            ax.set_ylim(top=_log_top(curves.values()))
    else:
        if scale == "symlog":
            ax.set_yscale("symlog", linthresh=linthresh)
        ax.axhline(0.0, color="0.5", linewidth=0.8, zorder=0)
    if not np.isfinite(means).any():
        ax.text(
            0.5,
            0.5,
            "no finite values",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=9,
            color="0.4",
        )


def x_extent(curves: dict[tuple, list[CurveRow]], logx: bool) -> tuple[float, float] | None:
    """``(lowest, highest)`` x of what a panel draws: its points' positions (:func:`x_position`)
    and its correlational bins' x extents (``x_min``..``x_max``); on a log axis only positive x
    (a zero goes to the symmetric-log axis's linear part). None when nothing is drawn."""
    xs = []
    for points in curves.values():
        for r in points:
            if not (math.isfinite(r.mean) and math.isfinite(x_position(r, logx))):
                continue
            xs.append(x_position(r, logx))
            if not is_causal(r):
                xs += [r.x_min, r.x_max]
    arr = np.array([x for x in xs if math.isfinite(x) and (x > 0 or not logx)], dtype=float)
    return (float(arr.min()), float(arr.max())) if arr.size else None


# the round numbers (times a power of ten) that may end a log x axis: at most a factor 4/3
# apart, so an axis reaches at most that far past its points (1, 2, 5 left up to 2.5x empty:
# data ending near 2,500 on an axis to 5,000, issue 51)
NICE_MANTISSAS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def nice_bounds(low: float, high: float) -> tuple[float, float]:
    """For a log axis: the largest round number (:data:`NICE_MANTISSAS` times a power of ten) at
    or below ``low`` (> 0) and the smallest at or above ``high``: the labelled ticks that
    enclose the panel's points."""
    below = max(v for v in _nice_around(low) if v <= low * (1 + 1e-9))
    above = min(v for v in _nice_around(high) if v >= high * (1 - 1e-9))
    if below == above:  # one point on a round number: the round numbers on either side
        below = max(v for v in _nice_around(low) if v < low * (1 - 1e-9))
        above = min(v for v in _nice_around(high) if v > high * (1 + 1e-9))
    return below, above


def _nice_around(x: float) -> list[float]:
    """The round numbers (:data:`NICE_MANTISSAS`) of the decades around ``x``, ascending."""
    decade = 10.0 ** math.floor(math.log10(x))
    return [m * decade * 10.0**k for k in (-1, 0, 1) for m in NICE_MANTISSAS]


def _free_ends(
    ends: tuple[float, float], extent: tuple[float, float], counts: Sequence[float],
    width: float, dpi: float,
) -> tuple[float, float]:
    """``ends`` moved outwards, one round number at a time (at most three), while an end's label
    would overlap a causal count's (:func:`_crowds`; ``width``: the panel's width in pixels) and
    the end of what is drawn (``extent``) is not itself a labelled count: every end of the drawn
    points has a labelled tick at or beyond it."""
    low, high = ends
    counted_low = any(math.isclose(c, extent[0]) for c in counts)
    counted_high = any(math.isclose(c, extent[1]) for c in counts)
    for _ in range(3):
        per_decade = width / math.log10(high / low)
        moved = False
        if not counted_low and _crowds(low, counts, per_decade, dpi):
            low, moved = max(v for v in _nice_around(low) if v < low * (1 - 1e-9)), True
        if not counted_high and _crowds(high, counts, per_decade, dpi):
            high, moved = min(v for v in _nice_around(high) if v > high * (1 + 1e-9)), True
        if not moved:
            break
    return low, high


def _crowds(x: float, counts: Sequence[float], per_decade: float, dpi: float) -> bool:
    """Whether the label of tick ``x`` would overlap a causal count's label (and is not one), on
    a log axis of ``per_decade`` pixels a decade (label widths estimated from their length at
    the tick font size)."""
    point = dpi / 72.0
    char = 0.6 * _TICK_FONT * point  # an average digit's width
    for c in counts:
        apart = abs(math.log10(x / c)) * per_decade
        need = (len(_count_label(x)) + len(_count_label(c))) / 2 * char + 3 * point
        if 0 < apart < need:
            return True
    return False


_X_MARGIN = 0.03  # the x limits lie this fraction of the axis beyond the enclosing ticks


def _x_linear(ax: object, extent: tuple[float, float]) -> None:
    """A linear x axis whose limits reach just past a tick at or below the lowest drawn x and
    one at or above the highest (ticks every ``step``, the step matplotlib would choose)."""
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    low, high = extent
    if high <= low:
        low, high = low - 0.5, high + 0.5
    ticks = MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
    step = float(ticks[1] - ticks[0])
    first, last = step * math.floor(low / step + 1e-9), step * math.ceil(high / step - 1e-9)
    margin = _X_MARGIN * (last - first)
    ax.xaxis.set_major_locator(MultipleLocator(step))
    ax.set_xlim(first - margin, last + margin)


def _x_axis_log(
    ax: object, curves: dict[tuple, list[CurveRow]], extent: tuple[float, float] | None
) -> None:
    """``--logx``: a log axis labelled at the causal counts and at the round numbers enclosing
    the drawn points (:func:`nice_bounds`, moved out where their labels would overlap a count's,
    :func:`_free_ends`), or, with a zero count, linear up to 1 and logarithmic
    beyond, from 0 to the decade at or above the highest point."""
    xs = np.array([x_position(r, True) for c in curves.values() for r in c], dtype=float)
    if extent is not None and xs.size and np.nanmin(xs) > 0:
        counts = sorted({r.x for c in curves.values() for r in c if is_causal(r)})
        ends = _free_ends(nice_bounds(*extent), extent, counts, ax.bbox.width, ax.figure.dpi)
        _log_x(ax, counts, ends)
        ax.set_xlim(ends[0] * (ends[1] / ends[0]) ** -_X_MARGIN,
                    ends[1] * (ends[1] / ends[0]) ** _X_MARGIN)
    else:
        ax.set_xscale("symlog", linthresh=1.0)
        top = 10.0 ** math.ceil(math.log10(max(extent[1], 1.0))) if extent else None
        ax.set_xlim(left=0, right=None if top is None else top * 1.1)


_FLOOR_DECADES = 1.0  # a log y axis reaches at most this far below the panel's smallest mean


def log_floor(curves: object) -> float | None:
    """The bottom of a log y panel: just below its smallest positive mean and interval end, but
    at most ``_FLOOR_DECADES`` below the smallest positive mean. Intervals reaching lower (or to
    zero and below) are drawn down to it, the panel's bottom edge."""
    means = np.array([r.mean for c in curves for r in c], dtype=float)
    lows = np.array([r.ci_low for c in curves for r in c], dtype=float)
    means = means[np.isfinite(means) & (means > 0)]
    lows = lows[np.isfinite(lows) & (lows > 0)]
    if not means.size:
        return None
    lowest = float(min(means.min(), lows.min() if lows.size else math.inf))
    return max(lowest, float(means.min()) * 10.0**-_FLOOR_DECADES) * 0.8


def _log_top(curves: object) -> float:
    """The top of a log y panel with intervals too wide to read: just above its highest mean
    and the highest end of its other intervals; the wide ones run dashed to the edge."""
    tops = [v for c in curves for r in c
            for v in (r.mean, math.nan if r.ci_wide else r.ci_high) if math.isfinite(v) and v > 0]
    return max(tops) * 1.25


def x_position(row: CurveRow, logx: bool) -> float:
    """Where a point is drawn: a correlational bin at its median x on a log axis (when known),
    else at its mean x; a causal point at its count."""
    if logx and not is_causal(row) and math.isfinite(row.x_median):
        return row.x_median
    return row.x


def _log_y(ax: object) -> None:
    """Log y axis with plain decimal tick labels (0.05, 0.1, 0.2) rather than 5 x 10^-2."""
    from matplotlib.ticker import LogFormatter

    class PlainLogFormatter(LogFormatter):
        """LogFormatter's choice of which ticks to label, with ``%g`` text."""

        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{x:g}" if super().__call__(x, pos) else ""

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PlainLogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _count_label(x: float) -> str:
    """``25``, ``1,000``, ``0.5``: counts in plain digits with thousands separators."""
    return f"{x:,.0f}" if x >= 1 and float(x).is_integer() else f"{x:g}"


_TICK_FONT = 8  # tick label size (points)


def _log_x(ax: object, counts: Sequence[float] = (), ends: Sequence[float] = ()) -> None:
    """Log x axis labelled in plain counts: the causal ``counts``, every decade, the ``ends``
    (:func:`nice_bounds`) and 2x and 5x ticks in between.

    The causal counts are major ticks (besides the decades), so a reader sees where the causal
    points sit. Matplotlib's default labels every minor tick of a panel that spans about a
    decade in scientific notation (``2x10^3 3x10^3 4x10^3``), which overlap; here a minor tick
    is labelled only at 2 and 5 times a power of ten, only on a panel spanning at most two
    decades, and no decade or minor label is drawn where it would overlap a count's label
    (label widths estimated from their length at the tick font size).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator

    counts = sorted({float(c) for c in counts if c > 0})

    class WithCounts(LogLocator):
        """The decades plus the causal counts and the ends."""

        def tick_values(self, vmin: float, vmax: float) -> np.ndarray:
            return np.union1d(super().tick_values(vmin, vmax), [*counts, *ends])

    def crowds(x: float) -> bool:
        """Whether ``x``'s label would overlap a causal count's label (and is not one)."""
        low, high = ax.get_xlim()
        if low <= 0 or high <= low:
            return False
        return _crowds(x, counts, ax.bbox.width / math.log10(high / low), ax.figure.dpi)

    def major(x: float, pos: int | None = None) -> str:
        if x <= 0 or (x not in counts and crowds(x)):
            return ""
        return _count_label(x)

    def minor(x: float, pos: int | None = None) -> str:
        low, high = ax.get_xlim()
        if x <= 0 or low <= 0 or math.log10(high / low) > 2.0:
            return ""
        if any(math.isclose(x, c) for c in counts) or crowds(x):
            return ""
        lead = x / 10.0 ** math.floor(math.log10(x) + 1e-9)
        return _count_label(x) if round(lead, 6) in (2.0, 5.0) else ""

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(WithCounts(base=10.0))
    ax.xaxis.set_major_formatter(FuncFormatter(major))
    ax.xaxis.set_minor_formatter(FuncFormatter(minor))
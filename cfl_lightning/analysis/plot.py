"""Causal vs correlational learnability curves (matplotlib, Agg canvas, no pyplot state).

One panel per target (and per x axis: occurrences or strings containing the target), one colour
per architecture, causal curves solid, correlational curves dotted -- the layout of the paper's
Figures 2, 4 and 5 -- with what a reader needs to judge them:

* each point's 95% interval over automata (``ci_low``/``ci_high``) as a vertical bar and a light
  band, not +-1 SE; its ``n`` as a small number beside it, and a hollow marker where n < 3;
* correlational bins with their x extent (``x_min``..``x_max``) as a horizontal bar, placed at
  their median x on log x axes (``x_median``) and at their mean x on linear ones;
* on log x axes, ticks labelled at the causal counts;
* a legend note on these conventions, and on the correlational runs drawn in both rows (by
  occurrences and by strings containing the target) when a figure has both.

The y axis of each panel is chosen from its values (:func:`y_scale`): logarithmic when every
mean is positive, as in the paper; per-transition and per-symbol contributions are single-symbol
log ratios and can be negative, so a panel with a zero or negative mean gets a linear axis, or a
symmetric-log one when its values span more than two decades. Every finite point is drawn.
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cfl_lightning.analysis.aggregate import DEFAULT_METRIC, CurveRow, quantity_name
from cfl_lightning.analysis.labels import setting_label, setting_order, setting_style
from cfl_lightning.io import atomic_open
from cfl_lightning.kinds.events import EVENT_KIND_REGISTRY, event_kind

__all__ = [
    "plot_curves",
    "target_title",
    "model_label",
    "metric_label",
    "y_scale",
    "undrawable",
    "METRIC_LABELS",
    "FORMATS",
    "NOTE_PARTS",
    "legend_note",
]

FORMATS = ("png", "pdf", "svg")
# generic axis labels; :func:`metric_label` names the target's kind (state, transition, symbol)
METRIC_LABELS = {
    "kl_target": "p_π-weighted contribution of the target (nats/string)",
    "kl_target_unweighted": "contribution of the target (nats per visit)",
    "kl_total": "total KL (nats/string)",
}
_DECADES_LINEAR = 2.0  # signed values spanning at most this many decades get a linear axis
X_LABELS = {
    "occurrences": "occurrences of the target in training",
    "strings": "training strings containing the target",
}
HOLLOW_BELOW = 3  # points resting on fewer automata get hollow markers
# the legend note, one part per kind of mark (the bins' part only where there are bins)
NOTE_PARTS = (
    "vertical bars and bands: 95% intervals over automata",
    "horizontal bars: a bin's range of counts",
    "numbers: n (automata)",
    f"hollow markers: n < {HOLLOW_BELOW}",
)
_NOTE_CHARS_PER_INCH = 14  # at the note's 8 pt (about 16 characters an inch): a margin kept
BOTH_ROWS_NOTE = (
    "the same correlational runs appear in both rows: by occurrences, and by strings containing "
    "the target"
)
_MODEL_COLORS = {"LSTMLanguageModel": "C0", "TransformerLanguageModel": "C3"}
_X_ORDER = {"occurrences": 0, "strings": 1}


def _setting_rank(setting: str) -> int:
    """A setting's place in the legend (registered causal kinds, then correlational)."""
    order = setting_order()
    return order.index(setting) if setting in order else 99


def model_label(model: str) -> str:
    """``LSTMLanguageModel`` -> ``LSTM``."""
    return model[: -len("LanguageModel")] if model.endswith("LanguageModel") else model


def target_title(event: str) -> str:
    """``state:odd`` -> ``state odd``; ``transition:q1:a`` -> ``transition q1 -a->``;
    ``symbol:*`` -> ``every symbol, pooled``."""
    kind, _, rest = event.partition(":")
    if rest == "*":
        return f"every {kind}, pooled"
    if not rest:
        return event
    return event_kind(kind).panel_title(rest) if kind in EVENT_KIND_REGISTRY else f"{kind} {rest}"


def metric_label(metric: str, target: str | None = None) -> str:
    """The y axis label: the paper's name of the quantity, with its unit.

    ``kl_target_unweighted`` of ``state:q`` -> ``per-state contribution (nats per visit)``: an
    average over the test positions at which the target is at stake; ``kl_target``
    -> ``p_π(q) × per-state contribution (nats/string)``.
    """
    if metric not in ("kl_target", "kl_target_unweighted") or not target:
        return METRIC_LABELS.get(metric, metric)
    name = quantity_name("kl_target_unweighted", target)
    if metric == "kl_target_unweighted":
        return f"{name} (nats per visit)"
    kind = target.partition(":")[0]
    weight = (event_kind(kind).weight if kind in EVENT_KIND_REGISTRY else "") or "p_π"
    return f"{weight} × {name} (nats/string)"


def undrawable(rows: Sequence[CurveRow]) -> int:
    """How many points of ``rows`` cannot be drawn (a non-finite x or mean)."""
    return sum(not (math.isfinite(r.x) and math.isfinite(r.mean)) for r in rows)


def y_scale(means: Sequence[float]) -> tuple[str, float | None]:
    """The y axis for a panel's means: ``("log", None)``, ``("linear", None)`` or
    ``("symlog", linthresh)``.

    Log when every finite mean is positive; otherwise linear when the nonzero magnitudes span at
    most two decades (or all are zero), else symmetric log, linear below the smallest nonzero
    magnitude (rounded down to a power of ten).
    """
    arr = np.asarray([m for m in means if math.isfinite(m)], dtype=float)
    if arr.size and (arr > 0).all():
        return "log", None
    mags = np.abs(arr[arr != 0])
    if mags.size == 0 or math.log10(mags.max() / mags.min()) <= _DECADES_LINEAR:
        return "linear", None
    return "symlog", float(10.0 ** math.floor(math.log10(mags.min())))


def _natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _color(model: str, models: Sequence[str]) -> str:
    if model in _MODEL_COLORS:
        return _MODEL_COLORS[model]
    others = [m for m in models if m not in _MODEL_COLORS]
    return f"C{(others.index(model) + 4) % 10}"


def plot_curves(
    rows: Sequence[CurveRow],
    path: str | os.PathLike,
    *,
    metric: str = DEFAULT_METRIC,
    title: str | None = None,
    logx: bool = False,
    columns: int = 4,
    dpi: int = 150,
) -> Path:
    """Draw the curves of ``rows`` and save the figure atomically at ``path``.

    The format comes from the extension (png, pdf, svg); the y axis of each panel comes from
    :func:`y_scale`. Points with a non-finite x or mean are not drawn (:func:`undrawable`
    counts them). Returns the path.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"unsupported figure format {fmt!r}; use one of {FORMATS}")
    if not rows:
        raise ValueError("nothing to plot")
    models = sorted({r.model for r in rows})
    grid = _Grid.of(rows, columns)
    note = legend_note(rows, _figure_width(grid, models))
    fig, axes = _figure(rows, models, grid, len(note))
    handles: dict[tuple, tuple[str, object]] = {}
    for row, col, (x_kind, target) in grid.placed:
        curves = _panel_curves(rows, x_kind, target)
        left = grid.panel_at(row, col - 1)
        _draw_panel(axes[row][col], curves, models, handles, logx=logx)
        _panel_axes(axes[row][col], x_kind, target, curves, metric=metric, logx=logx,
                    left_target=None if left is None else left[1])
    _legend(fig, models, handles, note)
    if title:
        fig.suptitle(title, fontsize=12)
    _save(fig, path, fmt, dpi)
    return path


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class _Grid:
    """Where the panels go: ``(row, column, (x_kind, target))`` each, in drawing order."""

    placed: list[tuple[int, int, tuple[str, str]]]
    nrows: int
    ncols: int

    @classmethod
    def of(cls, rows: Sequence[CurveRow], columns: int) -> _Grid:
        """One panel per (x axis, target), targets in natural order; each x axis (occurrences,
        strings) starts a new row of at most ``columns`` panels."""
        panels = sorted(
            {(r.x_kind, r.target) for r in rows},
            key=lambda p: (_X_ORDER.get(p[0], 9), _natural(p[1])),
        )
        kinds = dict.fromkeys(p[0] for p in panels)
        groups = [[p for p in panels if p[0] == kind] for kind in kinds]
        ncols = max(1, min(columns, max(len(g) for g in groups)))
        placed = _layout(groups, ncols)
        return cls(placed, max(row for row, _, _ in placed) + 1, ncols)

    def panel_at(self, row: int, col: int) -> tuple[str, str] | None:
        """The panel at ``(row, col)``, or None where there is none."""
        return next((p for r, c, p in self.placed if (r, c) == (row, col)), None)


def _legend_columns(models: Sequence[str]) -> int:
    """One legend column per model (entries fill column-wise: each column one architecture)."""
    return max(1, min(len(models), 4))


def _figure_width(grid: _Grid, models: Sequence[str]) -> float:
    """The figure's width in inches: its panels', or its legend's if wider."""
    return max(3.9 * grid.ncols, 3.0 * _legend_columns(models))


def legend_note(rows: Sequence[CurveRow], width: float) -> list[str]:
    """The legend's note, in lines that fit a figure ``width`` inches wide: what each mark is
    (:data:`NOTE_PARTS`; the bins' part where there are correlational bins) and, where the same
    correlational runs are drawn in two rows, :data:`BOTH_ROWS_NOTE`."""
    import textwrap

    parts = [p for i, p in enumerate(NOTE_PARTS)
             if i != 1 or any(not _is_causal(r) for r in rows)]
    limit = max(30, int(width * _NOTE_CHARS_PER_INCH))
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 2 + len(part) <= limit:
            lines[-1] += "; " + part
        else:
            lines += textwrap.wrap(part, limit)
    if correlational_in_both_rows(rows):
        lines += textwrap.wrap(BOTH_ROWS_NOTE, limit)
    return lines


def _figure(
    rows: Sequence[CurveRow], models: Sequence[str], grid: _Grid, note_lines: int
) -> tuple[object, list]:
    """The figure (sized for its panels, legend and ``note_lines`` lines of note, on an Agg
    canvas) and its ``[nrows][ncols]`` axes; slots without a panel are hidden."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width = _figure_width(grid, models)
    height = 3.2 * grid.nrows + 0.35 + 0.22 * _legend_rows(rows, models) + 0.16 * note_lines
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(grid.nrows, grid.ncols, squeeze=False)
    used = {(row, col) for row, col, _ in grid.placed}
    for row in range(grid.nrows):
        for col in range(grid.ncols):
            if (row, col) not in used:
                axes[row][col].set_visible(False)
    return fig, axes


# --------------------------------------------------------------------------- style


def _panel_curves(
    rows: Sequence[CurveRow], x_kind: str, target: str
) -> dict[tuple, list[CurveRow]]:
    """The panel's rows per curve ``(model, setting, num_strings)``."""
    curves: dict[tuple, list[CurveRow]] = defaultdict(list)
    for r in rows:
        if r.x_kind == x_kind and r.target == target:
            curves[(r.model, r.setting, r.num_strings)].append(r)
    return curves


def _panel_means(curves: dict[tuple, list[CurveRow]]) -> np.ndarray:
    return np.array([r.mean for c in curves.values() for r in c], dtype=float)


def _draw_panel(
    ax: object,
    curves: dict[tuple, list[CurveRow]],
    models: Sequence[str],
    handles: dict[tuple, tuple[str, object]],
    *,
    logx: bool,
) -> None:
    """Draw a panel's curves, one colour per model, in (model, setting) order; add their
    legend entries to ``handles``. Points are sorted by x in place."""
    sizes = defaultdict(set)
    for _, setting, k in curves:
        sizes[setting].add(k)
    scale, _ = y_scale(_panel_means(curves).tolist())
    floor = _log_floor(curves.values()) if scale == "log" else None
    for (model, setting, k), points in sorted(curves.items(), key=_curve_order(models)):
        points.sort(key=lambda r: r.x)
        color = _color(model, models)
        label = f"{model_label(model)}, {setting_label(setting)}"
        if len(sizes[setting]) > 1 and k is not None:
            label += f", {k} strings"
        handle = _draw_curve(ax, points, setting, color, floor, logx)
        order = _setting_rank(setting)
        handles.setdefault((models.index(model), order, k or 0, label), (label, handle))


def _legend(
    fig: object,
    models: Sequence[str],
    handles: dict[tuple, tuple[str, object]],
    note: Sequence[str],
) -> None:
    """The figure's legend below the panels: one entry per label, in (model, setting) order,
    titled with the note on the marks (:func:`legend_note`)."""
    entries = list(
        {handles[key][0]: handles[key] for key in sorted(handles, reverse=True)}.values()
    )
    entries.reverse()
    fig.legend(
        [e[1] for e in entries],
        [e[0] for e in entries],
        loc="outside lower center",
        ncol=_legend_columns(models),
        fontsize=9,
        frameon=False,
        title="\n".join(note),
        title_fontsize=8,
    )


# --------------------------------------------------------------------------- axes


def _panel_axes(
    ax: object,
    x_kind: str,
    target: str,
    curves: dict[tuple, list[CurveRow]],
    *,
    metric: str,
    logx: bool,
    left_target: str | None,
) -> None:
    """A panel's title, axis labels (no y label where the panel to the left has the same),
    y scale (:func:`y_scale`) and x scale."""
    suffix = " (strings containing it)" if x_kind == "strings" else ""
    ax.set_title(target_title(target) + suffix, fontsize=11)
    ax.set_xlabel(X_LABELS.get(x_kind, x_kind), fontsize=9)
    ylabel = metric_label(metric, target)
    if left_target is None or metric_label(metric, left_target) != ylabel:
        ax.set_ylabel(ylabel, fontsize=9)
    _y_axis(ax, curves)
    if logx:
        _x_axis_log(ax, curves)
    ax.grid(True, which="major", alpha=0.3)
    ax.tick_params(which="both", labelsize=_TICK_FONT)


def _y_axis(ax: object, curves: dict[tuple, list[CurveRow]]) -> None:
    """Log (down to :func:`_log_floor`), symmetric-log or linear with a zero line; a note in a
    panel without a finite value."""
    means = _panel_means(curves)
    scale, linthresh = y_scale(means.tolist())
    if scale == "log":
        _log_y(ax)
        floor = _log_floor(curves.values())
        if floor is not None:
            ax.set_ylim(bottom=floor)
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


def _x_axis_log(ax: object, curves: dict[tuple, list[CurveRow]]) -> None:
    """``--logx``: a log axis labelled at the causal counts, or, with a zero count, linear up to
    1 and logarithmic beyond, nothing below 0."""
    xs = np.array([_x_position(r, True) for c in curves.values() for r in c], dtype=float)
    if xs.size and np.nanmin(xs) > 0:
        counts = sorted({r.x for c in curves.values() for r in c if _is_causal(r)})
        _log_x(ax, counts)
    else:
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(left=0)


_FLOOR_DECADES = 1.0  # a log y axis reaches at most this far below the panel's smallest mean


def _log_floor(curves: object) -> float | None:
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


def _is_causal(row: CurveRow) -> bool:
    return not row.setting.startswith("correlational")


def _x_position(row: CurveRow, logx: bool) -> float:
    """Where a point is drawn: a correlational bin at its median x on a log axis (when known),
    else at its mean x; a causal point at its count."""
    if logx and not _is_causal(row) and math.isfinite(row.x_median):
        return row.x_median
    return row.x


def correlational_in_both_rows(rows: Sequence[CurveRow]) -> bool:
    """Whether the same correlational runs are drawn twice: for one target and architecture,
    by occurrences (``correlational``) and by strings containing it (``correlational_strings``)."""
    settings = defaultdict(set)
    for r in rows:
        settings[(r.target, r.model, r.num_strings)].add(r.setting)
    return any({"correlational", "correlational_strings"} <= s for s in settings.values())


def _draw_curve(
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
    x = np.array([_x_position(r, logx) for r in points], dtype=float)
    y = np.array([r.mean for r in points], dtype=float)
    n = np.array([r.n for r in points])
    ax.plot(x, y, linestyle=style, color=color, linewidth=1.6)
    _draw_intervals(ax, points, x, y, color, alpha, floor)
    size = 4.5 if marker != "D" else 3.5
    _draw_markers(ax, x, y, n >= HOLLOW_BELOW, marker, color, size)
    # n: causal above-left, correlational below-right, so that the labels of a causal point and
    # a bin at the same count sit on opposite sides, off both markers
    offset, align = ((-4, 4), "right") if _is_causal(points[0]) else ((4, -9), "left")
    for xi, yi, ni in zip(x, y, n):
        if math.isfinite(xi) and math.isfinite(yi):
            ax.annotate(
                str(ni), (xi, yi), xytext=offset, textcoords="offset points", fontsize=6,
                color=color, ha=align,
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
    axis (``floor`` given) an interval reaching zero or below ends at the floor."""
    low = np.array([r.ci_low for r in points], dtype=float)
    high = np.array([r.ci_high for r in points], dtype=float)
    if floor is not None:
        low = np.where(low > 0, low, floor)
    if alpha:
        ax.fill_between(x, low, high, color=color, alpha=alpha, linewidth=0)
    has = np.isfinite(low) & np.isfinite(high) & np.isfinite(y)
    if has.any():
        ax.errorbar(
            x[has],
            y[has],
            yerr=[y[has] - low[has], high[has] - y[has]],
            fmt="none",
            ecolor=color,
            elinewidth=0.9,
            capsize=2,
            alpha=0.8,
        )
    if not _is_causal(points[0]):
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


def _layout(groups: Sequence[Sequence[tuple]], ncols: int) -> list[tuple[int, int, tuple]]:
    """(row, column, panel) for each panel; every group starts on a fresh row."""
    out, row = [], 0
    for group in groups:
        for i, panel in enumerate(group):
            out.append((row + i // ncols, i % ncols, panel))
        row += math.ceil(len(group) / ncols)
    return out


def _legend_rows(rows: Sequence[CurveRow], models: Sequence[str]) -> int:
    per_model = defaultdict(set)
    for r in rows:
        per_model[r.model].add((r.setting, r.num_strings))
    return max((len(v) for v in per_model.values()), default=1)


def _curve_order(models: Sequence[str]):
    def key(item: tuple) -> tuple:
        (model, setting, k), _ = item
        order = _setting_rank(setting)
        return (models.index(model), order, k or 0)

    return key


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


def _log_x(ax: object, counts: Sequence[float] = ()) -> None:
    """Log x axis labelled in plain counts: the causal ``counts``, every decade, and 2x and 5x
    ticks in between.

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
        """The decades plus the causal counts."""

        def tick_values(self, vmin: float, vmax: float) -> np.ndarray:
            return np.union1d(super().tick_values(vmin, vmax), counts)

    def crowds(x: float) -> bool:
        """Whether ``x``'s label would overlap a causal count's label (and is not one)."""
        low, high = ax.get_xlim()
        if low <= 0 or high <= low:
            return False
        pixels_per_decade = ax.bbox.width / math.log10(high / low)
        point = ax.figure.dpi / 72.0
        char = 0.6 * _TICK_FONT * point  # an average digit's width
        for c in counts:
            apart = abs(math.log10(x / c)) * pixels_per_decade
            need = (len(_count_label(x)) + len(_count_label(c))) / 2 * char + 3 * point
            if 0 < apart < need:
                return True
        return False

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


def _save(fig: object, path: Path, fmt: str, dpi: int) -> None:
    """``savefig`` into a temporary file beside ``path``, renamed onto it on success."""
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format=fmt, dpi=dpi)

"""Causal vs correlational learnability curves (matplotlib, Agg canvas, no pyplot state).

One panel per target (and per x axis: occurrences or strings containing the target), one colour
per architecture, causal curves solid, correlational curves dotted -- the layout of the paper's
Figures 2, 4 and 5 -- with what a reader needs to judge them:

* each point's 95% interval over automata (``ci_low``/``ci_high``) as a vertical bar and a light
  band, not +-1 SE; its ``n`` as a small number beside it, and a hollow marker where n < 3; an
  interval too wide to read (``ci_wide``) as a dashed bar outside the band;
* correlational bins with their x extent (``x_min``..``x_max``) as a horizontal bar, placed at
  their median x on log x axes (``x_median``) and at their mean x on linear ones;
* on log x axes, ticks labelled at the causal counts; on every x axis, a labelled tick at or
  beyond each end of what is drawn, inside the panel's limits;
* a legend note on these conventions, and on the correlational runs drawn in both rows (by
  occurrences and by strings containing the target) when a figure has both.

The y axis of each panel is chosen from its values (:func:`y_scale`): logarithmic when every
mean is positive, as in the paper; per-transition and per-symbol contributions are single-symbol
log ratios and can be negative, so a panel with a zero or negative mean gets a linear axis, or a
symmetric-log one when its values span more than two decades. Every finite point is drawn.

The figure is written in four modules, one concept each: this one (the layout: panels, legend,
saving), :mod:`~cfl_lightning.analysis.plot_text` (labels and the note),
:mod:`~cfl_lightning.analysis.plot_axes` (scales, limits, ticks) and
:mod:`~cfl_lightning.analysis.plot_marks` (a curve's lines, bars and markers).
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from cfl_lightning.analysis.aggregate import DEFAULT_METRIC, CurveRow
from cfl_lightning.analysis.labels import setting_label
from cfl_lightning.analysis.plot_axes import (
    is_difference,
    log_floor,
    panel_axes,
    panel_means,
    y_scale,
)
from cfl_lightning.analysis.plot_marks import color_of, draw_curve, setting_rank, settle_labels
from cfl_lightning.analysis.plot_text import (
    BOTH_ROWS_NOTE,
    DID_QUANTITY,
    METRIC_LABELS,
    NOTE_PARTS,
    WIDE_NOTE,
    did_label,
    legend_note,
    metric_label,
    model_label,
    target_title,
    unit_note,
)
from cfl_lightning.io import atomic_open

__all__ = [
    "plot_curves",
    "Panel",
    "did_rows",
    "panel_ylabel",
    "target_title",
    "model_label",
    "metric_label",
    "y_scale",
    "undrawable",
    "METRIC_LABELS",
    "FORMATS",
    "NOTE_PARTS",
    "BOTH_ROWS_NOTE",
    "WIDE_NOTE",
    "legend_note",
]

FORMATS = ("png", "pdf", "svg")
_X_ORDER = {"occurrences": 0, "strings": 1}
_READING_ORDER = {"kl_target_unweighted": 0, "kl_target": 1, "kl_total": 2}


def undrawable(rows: Sequence[CurveRow]) -> int:
    """How many points of ``rows`` cannot be drawn (a non-finite x or mean)."""
    return sum(not (math.isfinite(r.x) and math.isfinite(r.mean)) for r in rows)


def _natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


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
    readings = len({r.metric for r in rows}) > 1  # a panel per reading (``--metric both``)
    drawn = [*rows, *did_rows(rows)]
    grid = _Grid.of(drawn, columns, None if readings else metric)
    note = legend_note(drawn, _figure_width(grid, models))
    fig, axes = _figure(drawn, models, grid, len(note))
    handles: dict[tuple, tuple[str, object]] = {}
    for row, col, panel in grid.placed:
        curves = _panel_curves(drawn, panel, grid.metric)
        left = grid.panel_at(row, col - 1)
        _draw_panel(axes[row][col], curves, models, handles, logx=logx)
        panel_axes(axes[row][col], panel.x_kind, panel.target, curves, metric=panel.metric,
                   logx=logx, view=panel.view, reading=readings,
                   left_label=None if left is None else panel_ylabel(left))
    unit_title = unit_note(rows)
    if unit_title:
        title = f"{title}\n{unit_title}" if title else unit_title
    _legend(fig, models, handles, note)
    if title:
        fig.suptitle(title, fontsize=12 if not unit_title else 10)
    settle_labels(fig)
    _save(fig, path, fmt, dpi)
    return path


class Panel(NamedTuple):
    """One panel: the x axis, the target, the reading (metric) and ``view`` (``"value"``: the
    measure; ``"did"``: the measure minus the non-target control)."""

    x_kind: str
    target: str
    metric: str
    view: str = "value"


def did_rows(rows: Sequence[CurveRow]) -> list[CurveRow]:
    """The rows with a non-target control as points of their ``did`` panel: y is ``did``, the
    interval ``did_ci_low..did_ci_high`` (Student t), n the automata behind it."""
    return [
        replace(r, mean=r.did, sem=math.nan, n=r.did_n, ci_low=r.did_ci_low,
                ci_high=r.did_ci_high, ci_method="t", ci_wide=False, quantity=DID_QUANTITY)
        for r in rows if r.did_n
    ]


def _view(row: CurveRow) -> str:
    return "did" if row.quantity == DID_QUANTITY else "value"


def panel_ylabel(panel: Panel) -> str:
    """The y label of a panel: the reading's (:func:`metric_label`), or its did's."""
    label = metric_label(panel.metric, panel.target)
    return did_label(label) if panel.view == "did" else label


@dataclass(frozen=True)
class _Grid:
    """Where the panels go: ``(row, column, Panel)`` each, in drawing order; ``metric``: every
    panel's reading where the figure draws one (None: each row's own)."""

    placed: list[tuple[int, int, Panel]]
    nrows: int
    ncols: int
    metric: str | None = None

    @classmethod
    def of(cls, rows: Sequence[CurveRow], columns: int, metric: str | None = None) -> _Grid:
        """One panel per (x axis, target, reading, view), targets in natural order, the
        unweighted reading first; each x axis (occurrences, strings) and view (the measure, its
        did) starts a new row of at most ``columns`` panels."""
        panels = sorted(
            {Panel(r.x_kind, r.target, metric or r.metric, _view(r)) for r in rows},
            key=lambda p: (_X_ORDER.get(p.x_kind, 9), p.view != "value", _natural(p.target),
                           _READING_ORDER.get(p.metric, 9)),
        )
        kinds = dict.fromkeys((p.x_kind, p.view) for p in panels)
        groups = [[p for p in panels if (p.x_kind, p.view) == kind] for kind in kinds]
        ncols = max(1, min(columns, max(len(g) for g in groups)))
        placed = _layout(groups, ncols)
        return cls(placed, max(row for row, _, _ in placed) + 1, ncols, metric)

    def panel_at(self, row: int, col: int) -> Panel | None:
        """The panel at ``(row, col)``, or None where there is none."""
        return next((p for r, c, p in self.placed if (r, c) == (row, col)), None)


def _legend_columns(models: Sequence[str]) -> int:
    """One legend column per model (entries fill column-wise: each column one architecture)."""
    return max(1, min(len(models), 4))


def _figure_width(grid: _Grid, models: Sequence[str]) -> float:
    """The figure's width in inches: its panels', or its legend's if wider."""
    return max(3.9 * grid.ncols, 3.0 * _legend_columns(models))


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
    rows: Sequence[CurveRow], panel: Panel, metric: str | None
) -> dict[tuple, list[CurveRow]]:
    """The panel's rows per curve ``(model, setting, num_strings)`` (``metric``: the figure's one
    reading, or None: the rows of the panel's)."""
    curves: dict[tuple, list[CurveRow]] = defaultdict(list)
    for r in rows:
        if (r.x_kind, r.target, _view(r)) == (panel.x_kind, panel.target, panel.view) and (
            metric is not None or r.metric == panel.metric
        ):
            curves[(r.model, r.setting, r.num_strings)].append(r)
    return curves


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
    scale, _ = y_scale(panel_means(curves).tolist(), is_difference(curves))
    floor = log_floor(curves.values()) if scale == "log" else None
    for (model, setting, k), points in sorted(curves.items(), key=_curve_order(models)):
        points.sort(key=lambda r: r.x)
        color = color_of(model, models)
        label = f"{model_label(model)}, {setting_label(setting)}"
        if len(sizes[setting]) > 1 and k is not None:
            label += f", {k} strings"
        handle = draw_curve(ax, points, setting, color, floor, logx)
        order = setting_rank(setting)
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
        order = setting_rank(setting)
        return (models.index(model), order, k or 0)

    return key


def _save(fig: object, path: Path, fmt: str, dpi: int) -> None:
    """``savefig`` into a temporary file beside ``path``, renamed onto it on success."""
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format=fmt, dpi=dpi)
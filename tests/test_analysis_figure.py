"""What the analysis figure shows: 95% intervals, n, hollow markers, bin extents and positions,
ticks at the causal counts, the y unit and the legend notes (issue 19, item 3)."""

from __future__ import annotations

import numpy as np
import pytest

from cfl_lightning.analysis import plot
from cfl_lightning.analysis.aggregate import CurveRow


def causal(x, mean, n, low, high, setting="causal_exact", kind="occurrences"):
    return CurveRow("state:odd", "LSTMLanguageModel", setting, kind, 500, x, x, x, mean, 0.01, n,
                    ci_low=low, ci_high=high, x_median=x)


def corr(x, x_median, lo, hi, mean, n, setting="correlational", kind="occurrences"):
    return CurveRow("state:odd", "LSTMLanguageModel", setting, kind, 500, x, lo, hi, mean, 0.01, n,
                    ci_low=mean * 0.5, ci_high=mean * 1.5, x_median=x_median)


ROWS = [
    causal(125.0, 0.4, 8, 0.3, 0.5),
    causal(500.0, 0.2, 2, -0.5, 0.9),  # n = 2: hollow, its interval below zero
    corr(3000.0, 1200.0, 150.0, 9000.0, 0.05, 6),  # a wide bin: mean x far above its median
]


def draw(rows, tmp_path, monkeypatch, logx=True, render=True):
    """The figure of ``rows``, not saved; laid out and drawn on its canvas when ``render``."""
    captured = {}
    monkeypatch.setattr(plot, "_save", lambda fig, path, fmt, dpi: captured.setdefault("fig", fig))
    plot.plot_curves(rows, tmp_path / "f.png", logx=logx)
    if render:
        captured["fig"].canvas.draw()
    return captured["fig"]


def markers(ax):
    """(x, y, hollow) of every drawn point marker (not the error bars' caps)."""
    out = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", "_", "|") or line.get_linestyle() != "None":
            continue
        hollow = line.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))
        out += [(x, y, hollow) for x, y in zip(line.get_xdata(), line.get_ydata())]
    return sorted(out)


def test_points_show_n_hollow_markers_and_intervals(tmp_path, monkeypatch):
    fig = draw(ROWS, tmp_path, monkeypatch)
    ax = fig.axes[0]
    assert markers(ax) == [(125.0, 0.4, False), (500.0, 0.2, True), (1200.0, 0.05, False)]
    assert sorted(t.get_text() for t in ax.texts) == ["2", "6", "8"]  # n beside each point
    assert "nats per visit" in ax.get_ylabel()
    # vertical bars: the 95% intervals; one reaching below zero ends at the panel's floor
    segments = [s for c in ax.collections if hasattr(c, "get_segments") for s in c.get_segments()]
    vertical = {(round(s[0][0]), round(s[0][1], 6), round(s[1][1], 6))
                for s in segments if s[0][0] == s[1][0]}
    assert (125, 0.3, 0.5) in vertical
    floor = ax.get_ylim()[0]
    assert 0 < floor < 0.05 and (500, round(floor, 6), 0.9) in vertical
    # the bin's x extent, drawn at its median on the log axis
    horizontal = [s for s in segments if s[0][1] == s[1][1]]
    assert [(s[0][0], s[1][0]) for s in horizontal] == [(150.0, 9000.0)]


def test_log_x_ticks_at_the_causal_counts(tmp_path, monkeypatch):
    ax = draw(ROWS, tmp_path, monkeypatch).axes[0]
    low, high = ax.get_xlim()
    labels = {t.label1.get_text() for t in ax.xaxis.get_major_ticks() if low <= t.get_loc() <= high}
    assert {"125", "500"} <= labels
    assert "100" not in labels  # it would overlap 125


def test_linear_x_places_bins_at_their_mean(tmp_path, monkeypatch):
    ax = draw(ROWS, tmp_path, monkeypatch, logx=False).axes[0]
    assert (3000.0, 0.05, False) in markers(ax)


@pytest.mark.parametrize("both", [True, False])
def test_legend_notes(tmp_path, monkeypatch, both):
    rows = list(ROWS)
    rows.append(causal(25.0, 0.3, 4, 0.2, 0.4, "causal_at_least_once", "strings"))
    if both:  # the same correlational runs, placed by strings containing the target
        rows.append(corr(60.0, 40.0, 5.0, 200.0, 0.05, 6, "correlational_strings", "strings"))
    # the note's text is settled before drawing (its extent on the canvas: the test below)
    title = draw(rows, tmp_path, monkeypatch, render=False).legends[0].get_title().get_text()
    flat = " ".join(title.split())
    assert all(part in flat for part in plot.NOTE_PARTS)
    assert (" ".join(plot.BOTH_ROWS_NOTE.split()) in flat) is both  # negative control


@pytest.mark.parametrize("with_bins", [True, False])
def test_the_note_fits_a_one_panel_figure_and_names_each_mark(tmp_path, monkeypatch, with_bins):
    """Issue 31: the note was clipped at both ends of a one-panel figure and called the
    horizontal bars (a bin's range of counts) 95% intervals."""
    rows = ROWS if with_bins else ROWS[:2]
    fig = draw(rows, tmp_path, monkeypatch)
    title = fig.legends[0].get_title()
    box = title.get_window_extent(fig.canvas.get_renderer())
    width = fig.bbox.width
    assert 0 <= box.x0 and box.x1 <= width, (box, width)
    text = " ".join(title.get_text().split())
    assert "95% intervals over automata" in text and "numbers: n (automata)" in text
    assert ("horizontal bars: a bin's range of counts" in text) is with_bins
    assert "bars and bands: 95%" not in text.replace("vertical bars and bands: 95%", "")
    # negative control: the old one-line note is wider than this figure
    old = "bars and bands: 95% intervals over automata; numbers: n; hollow markers: n < 3"
    title.set_text(old)
    assert title.get_window_extent(fig.canvas.get_renderer()).width > 0.9 * width


def test_n_labels_of_a_causal_point_and_a_bin_at_one_count_sit_apart(tmp_path, monkeypatch):
    rows = [causal(125.0, 0.4, 8, 0.3, 0.5), corr(125.0, 125.0, 100.0, 141.0, 0.4, 6)]
    ax = draw(rows, tmp_path, monkeypatch).axes[0]
    labels = {t.get_text(): t for t in ax.texts}
    renderer = ax.figure.canvas.get_renderer()
    causal_box, bin_box = (labels[k].get_window_extent(renderer) for k in ("8", "6"))
    marker = ax.transData.transform((125.0, 0.4))
    assert causal_box.x1 < marker[0] < bin_box.x0  # one on each side of the shared marker


def test_rows_without_intervals_still_draw(tmp_path, monkeypatch):
    """Rows built before intervals existed (NaN ci): markers, no bars, no error."""
    rows = [CurveRow("symbol:a", "M", "causal_exact", "occurrences", 500, x, x, x, m, 0.0, 1)
            for x, m in ((10.0, -0.1), (20.0, 0.2))]
    ax = draw(rows, tmp_path, monkeypatch, logx=False).axes[0]
    assert [(x, y) for x, y, _ in markers(ax)] == [(10.0, -0.1), (20.0, 0.2)]
    assert all(hollow for *_, hollow in markers(ax))
    assert not np.isnan(ax.get_ylim()).any()


# --------------------------------------------------------------------------- issue 42


def labelled_ticks(ax):
    low, high = ax.get_xlim()
    ticks = ax.xaxis.get_major_ticks() + ax.xaxis.get_minor_ticks()
    return low, high, sorted(t.get_loc() for t in ticks
                             if low <= t.get_loc() <= high and t.label1.get_text())


@pytest.mark.parametrize("logx", [True, False])
def test_ticks_and_limits_cover_every_plotted_point(tmp_path, monkeypatch, logx):
    """Issue 42, item 2: with correlational bins the top bin (x about 814, its range to 900)
    sat past the last tick label (500), on the panel's edge."""
    rows = [causal(c, 0.4 - c / 2000, 8, 0.1, 0.5) for c in (125.0, 250.0, 500.0)]
    rows += [corr(m * 1.05, m, m * 0.8, m * 1.1, 0.3, 6) for m in (150.0, 300.0, 814.0)]
    ax = draw(rows, tmp_path, monkeypatch, logx=logx).axes[0]
    low, high, labelled = labelled_ticks(ax)
    drawn = [x for x, _, _ in markers(ax)] + [r.x_min for r in rows] + [r.x_max for r in rows]
    assert low < min(drawn) and max(drawn) < high  # inside the panel, off its edges
    assert labelled[0] <= min(drawn) and labelled[-1] >= max(drawn), labelled
    if logx:
        assert {125.0, 250.0, 500.0, 1000.0} <= set(labelled)  # the counts, and 1,000 beyond


def test_intervals_too_wide_to_read_are_dashed_and_named_in_the_note(tmp_path, monkeypatch):
    """Issue 42, item 1: a log-scale interval spanning more than 10x is drawn dashed, outside
    the band, and the panel's top stays near the readable points."""
    from dataclasses import replace

    wide = replace(causal(250.0, 0.3, 2, 0.003, 30.0), ci_method="log-t", ci_wide=True)
    rows = [causal(125.0, 0.4, 8, 0.3, 0.5), wide, causal(500.0, 0.2, 8, 0.15, 0.25)]
    fig = draw(rows, tmp_path, monkeypatch)
    ax = fig.axes[0]
    styles = {}
    for c in ax.collections:
        if hasattr(c, "get_segments"):
            for s, style in zip(c.get_segments(), c.get_linestyles() * len(c.get_segments())):
                if s[0][0] == s[1][0]:
                    styles[round(s[0][0])] = style[1] is not None  # dashed: a dash pattern
    assert styles == {125: False, 250: True, 500: False}
    assert ax.get_ylim()[1] < 1.0  # the wide bar (up to 30) runs to the edge
    note = " ".join(fig.legends[0].get_title().get_text().split())
    assert " ".join(plot.WIDE_NOTE.split()) in note
    # negative control: the same rows without the mark get no note and no dashed bar
    plain = draw([replace(r, ci_wide=False) for r in rows], tmp_path, monkeypatch)
    assert plot.WIDE_NOTE.split()[0] + " " not in plain.legends[0].get_title().get_text()

"""The headline figure's faults (issue 51 item 10): n labels overlapping near a shared count, a
log x axis running to 5,000 for data ending near 2,500, and one reading drawn; and the did row
of ``--control non-target`` (issue 48 item 1)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from cfl_lightning.analysis import plot
from cfl_lightning.analysis.aggregate import CurveRow
from cfl_lightning.analysis.plot_axes import nice_bounds
from cfl_lightning.analysis.plot_marks import N_LABEL


def point(x, mean, n, setting="causal_exact", model="LSTMLanguageModel", lo=None, hi=None,
          metric="kl_target_unweighted", **extra):
    lo, hi = (x, x) if lo is None else (lo, hi)
    return CurveRow("state:*", model, setting, "occurrences", 500, x, lo, hi, mean, 0.01, n,
                    metric=metric, ci_low=mean * 0.8, ci_high=mean * 1.2, x_median=x, **extra)


def draw(rows, tmp_path, monkeypatch, **options):
    captured = {}
    monkeypatch.setattr(plot, "_save", lambda fig, path, fmt, dpi: captured.setdefault("f", fig))
    plot.plot_curves(rows, tmp_path / "f.png", logx=True, **options)
    return captured["f"]


# the v2 state half near 1,000 (docs/figures/headline_v2_state.png before the fix): the LSTM's
# causal point at 1,000 and its bin at 930, whose n labels (32 and 10) overlapped; and two
# models' points at one place
CROWDED = [
    point(62.0, 0.32, 32), point(250.0, 0.12, 32), point(500.0, 0.062, 32),
    point(1000.0, 0.038, 32),
    point(930.0, 0.052, 10, "correlational", lo=800.0, hi=1131.0),
    point(640.0, 0.047, 37, "correlational", lo=566.0, hi=800.0),
    point(470.0, 0.066, 49, "correlational", lo=400.0, hi=566.0),
    # the other model's causal points on top of the LSTM's: their labels at one spot
    point(500.0, 0.062, 30, model="TransformerLanguageModel"),
    point(1000.0, 0.039, 30, model="TransformerLanguageModel"),
]


def label_overlaps(fig) -> list[tuple[str, str]]:
    renderer = fig.canvas.get_renderer()
    overlaps = []
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_gid() == N_LABEL]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels]
        overlaps += [(a, b) for (a, p), (b, q) in itertools.combinations(boxes, 2) if p.overlaps(q)]
    return overlaps


@pytest.mark.slow  # draws two figures
def test_n_labels_near_one_count_do_not_overlap(tmp_path, monkeypatch):
    fig = draw(CROWDED, tmp_path, monkeypatch)
    assert not label_overlaps(fig)
    # negative control: the labels at their fixed offsets overlap
    monkeypatch.setattr(plot, "settle_labels", lambda fig: fig.canvas.draw())
    assert label_overlaps(draw(CROWDED, tmp_path, monkeypatch))


@pytest.mark.parametrize(
    "low,high,ends",
    [
        (62.0, 2468.0, (60.0, 2500.0)),  # was (50, 5000): data stopped at half the axis
        (120.0, 1600.0, (120.0, 1600.0 * 1.25)),
        (814.0, 900.0, (800.0, 1000.0)),
        (25.0, 25.0, (20.0, 30.0)),  # one point on a round number: the round numbers around it
    ],
)
def test_a_log_axis_ends_at_the_nearest_round_number(low, high, ends):
    got = nice_bounds(low, high)
    assert got == pytest.approx(ends)
    assert got[0] <= low and got[1] >= high and got[1] / high <= 4 / 3 and low / got[0] <= 4 / 3


@pytest.mark.slow  # draws the figure
def test_the_axis_stops_near_the_data(tmp_path, monkeypatch):
    rows = [point(c, 0.5 / c**0.3, 32) for c in (62.0, 125.0, 250.0, 500.0, 1000.0)]
    rows.append(point(2100.0, 0.05, 9, "correlational", lo=1600.0, hi=2468.0))
    ax = draw(rows, tmp_path, monkeypatch).axes[0]
    right = ax.get_xlim()[1]
    assert 2468.0 < right < 3000.0, right  # was about 5,700 (5,000 and its margin)


@pytest.mark.slow  # draws the figure
def test_both_readings_get_a_panel_each(tmp_path, monkeypatch):
    weighted = [replace(r, metric="kl_target", mean=r.mean / 3, ci_low=r.ci_low / 3,
                        ci_high=r.ci_high / 3) for r in CROWDED]
    fig = draw([*CROWDED, *weighted], tmp_path, monkeypatch, columns=2)
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in axes] == [
        "every state, pooled, unweighted", "every state, pooled, p_π-weighted"]
    assert "nats per visit" in axes[0].get_ylabel() and "nats/string" in axes[1].get_ylabel()
    assert [len([t for t in ax.texts if t.get_gid() == N_LABEL]) for ax in axes] == [9, 9]


@pytest.mark.slow  # draws the figure
def test_a_did_row_on_a_linear_axis_below_the_measure(tmp_path, monkeypatch):
    # values spanning three decades either side of 0 (read on a symmetric-log axis elsewhere)
    dids = (0.3, 0.1, 0.002, -0.05, -0.1, 0.05, 0.0005, -0.02, 0.01)
    rows = [replace(r, did=d, did_ci_low=d - 0.03, did_ci_high=d + 0.03, did_n=r.n,
                    control=r.mean) for d, r in zip(dids, CROWDED)]
    fig = draw(rows, tmp_path, monkeypatch)
    top, bottom = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert top.get_yscale() == "log" and bottom.get_yscale() == "linear"
    assert bottom.get_title().endswith("minus control")
    assert "non-target control" in bottom.get_ylabel()
    assert "lower row: the target minus its non-target control" in " ".join(
        fig.legends[0].get_title().get_text().split())

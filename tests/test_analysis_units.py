"""``analyze --unit seed`` (issue 51 item 8): on runs of one hand-written automaton with several
training seeds, intervals over the seeds, labelled as intervals that do not generalize over
automata (stdout, the CSV's ``unit`` column, the figure's title and note)."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import numpy as np
import pytest
from scipy import stats

from cfl_lightning.analysis.aggregate import table_columns
from cfl_lightning.analysis.plot_text import SEED_NOTE
from cfl_lightning.analysis.report import build_curves
from cfl_lightning.analysis.selection import seed_units
from cfl_lightning.errors import CflError
from tests.helpers import exit_status, records, result, write_results

SEEDS = (0, 1, 2, 3, 4)
VALUES = {  # per count, one value per seed (symbol:a: a signed quantity, plain t-interval)
    100: (0.50, 0.62, 0.41, 0.55, 0.47),
    400: (0.20, 0.31, 0.18, 0.26, 0.22),
}


def seed_grid(automaton="dyck") -> list[dict]:
    """One automaton, five training seeds per count; the same corpus (count) for each seed."""
    items = []
    for count, values in VALUES.items():
        for seed, value in zip(SEEDS, values):
            items.append(result(automaton=automaton, event="symbol:a", count=count, seed=seed,
                                kl_target=value / 2, kl_total=1.0 + seed))
    return items


def t_interval(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return float(values.mean() - half), float(values.mean() + half)


def test_intervals_over_training_seeds_of_one_automaton():
    rows = build_curves(records(seed_grid()), ["symbol:a"], ["symbol:a"], unit="seed").rows
    for count, values in VALUES.items():
        (row,) = [r for r in rows if r.x == count]
        assert (row.n, row.unit) == (len(SEEDS), "seed")
        assert row.mean == pytest.approx(np.mean(values))
        assert (row.ci_low, row.ci_high) == pytest.approx(t_interval(values))
    assert "unit" in table_columns(rows)
    # negative control: over automata (the default) the seeds are repeats of one corpus, and
    # the best one (lowest kl_total: seed 0) stands alone, with no interval
    plain = build_curves(records(seed_grid()), ["symbol:a"], ["symbol:a"]).rows
    assert {r.n for r in plain} == {1} and all(np.isnan(r.ci_low) for r in plain)
    assert {r.mean for r in plain} == {VALUES[100][0], VALUES[400][0]}
    assert "unit" not in table_columns(plain)


def test_seed_units_refuse_several_automata_and_unseeded_runs():
    with pytest.raises(CflError, match="--unit seed: the runs hold 2 automata"):
        seed_units(records(seed_grid("A") + seed_grid("B")))
    unseeded = seed_grid()
    unseeded[3]["seed"] = None
    with pytest.raises(CflError, match="r3 records no seed"):
        seed_units(records(unseeded))


def test_the_command_labels_seed_intervals(tmp_path, capsys):
    write_results(tmp_path / "runs", seed_grid())
    code = exit_status(["analyze", str(tmp_path / "runs"), "--target", "symbol:a", "--unit",
                        "seed", "--control", "non-target"])
    out = capsys.readouterr().out
    assert code == 0
    assert SEED_NOTE in out and "over training seeds" in out
    write_results(tmp_path / "more", seed_grid("other"))
    code = exit_status(["analyze", str(tmp_path / "runs"), str(tmp_path / "more"), "--unit",
                        "seed", "--control", "non-target"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--unit seed" in err


@pytest.mark.slow  # draws the figure
def test_the_figure_title_and_note_say_the_unit(tmp_path, monkeypatch):
    from cfl_lightning.analysis import plot

    captured = {}
    monkeypatch.setattr(plot, "_save", lambda fig, path, fmt, dpi: captured.setdefault("f", fig))
    rows = build_curves(records(seed_grid()), ["symbol:a"], ["symbol:a"], unit="seed").rows
    plot.plot_curves(rows, tmp_path / "f.png", title="one automaton")
    fig = captured["f"]
    assert SEED_NOTE in fig._suptitle.get_text() and "one automaton" in fig._suptitle.get_text()
    note = " ".join(fig.legends[0].get_title().get_text().split())
    assert "95% intervals over training seeds" in note and "automata" not in note

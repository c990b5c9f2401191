"""Pooled targets (``--target 'symbol:*'``): every symbol of every run at its own count, with
intervals over automata (cluster means), never over (run, symbol) pairs; and the export that
keeps every event."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import csv
import json

import numpy as np
import pytest

from cfl_lightning.analysis import aggregate as ag
from cfl_lightning.analysis.pooling import (
    cluster_means,
    concrete_targets,
    covers,
    is_pooled,
    pool_records,
)
from cfl_lightning.analysis.plot import target_title
from cfl_lightning.analysis.stats import t_interval
from tests.helpers import correlational_run, exit_status, result, write_results


@pytest.fixture
def shared_value_runs(tmp_path):
    """12 automata; each run's 10 symbols share one value and fall in one bin [100, 200) (and a
    causal run per automaton of symbol:a at 150, the same value minus 0.1)."""
    rng = np.random.default_rng(1)
    values = rng.normal(1.0, 0.3, size=12)
    items = []
    for a, value in enumerate(values):
        counts = rng.integers(110, 200, size=10)  # within [150/sqrt2, 150*sqrt2]
        items.append(correlational_run(f"A{a:02d}", float(value), counts))
        causal = result(automaton=f"A{a:02d}", event="symbol:a", count=150, kl_target=None)
        causal["kl_target"], causal["kl_target_unweighted"] = value * 0.2, value - 0.1
        items.append(causal)
    write_results(tmp_path / "runs", items)
    return tmp_path / "runs", values


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _analyze(tmp_path, runs, capsys, *extra):
    out = tmp_path / "pooled.png"
    code = exit_status(["analyze", str(runs), "--target", "symbol:*", "--edges", "100,200",
                        "--output", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return _rows(out.with_suffix(".csv")), out


def test_a_pooled_bin_has_the_interval_over_automata(shared_value_runs, tmp_path, capsys):
    runs, values = shared_value_runs
    rows, out = _analyze(tmp_path, runs, capsys)
    corr = next(r for r in rows if r["setting"] == "correlational")
    assert corr["target"] == "symbol:*"
    assert (int(corr["n"]), int(corr["pairs"])) == (12, 120)  # n: automata; pairs beside it
    low, high = t_interval(values.tolist())
    assert float(corr["ci_low"]) == pytest.approx(low, rel=1e-5)
    assert float(corr["ci_high"]) == pytest.approx(high, rel=1e-5)
    # negative control: over the 120 pairs as if independent the interval is far narrower
    pair_low, pair_high = t_interval(np.repeat(values, 10).tolist())
    assert (pair_high - pair_low) < 0.6 * (high - low)
    # the causal point and the gap: 12 automata each side, the gap's pairs counted
    causal = next(r for r in rows if r["setting"] == "causal_exact")
    assert (int(causal["n"]), int(causal["pairs"])) == (12, 12)
    assert (int(causal["gap_n"]), int(causal["gap_pairs"])) == (12, 120)
    assert float(causal["gap"]) == pytest.approx(-0.1, abs=1e-9)
    assert out.exists()


def test_pooling_the_weighted_measure(shared_value_runs, tmp_path, capsys):
    runs, values = shared_value_runs
    rows, _ = _analyze(tmp_path, runs, capsys, "--metric", "kl_target")
    corr = next(r for r in rows if r["setting"] == "correlational")
    assert corr["metric"] == "kl_target"
    assert float(corr["mean"]) == pytest.approx(0.25 * values.mean(), rel=1e-5)
    assert corr["quantity"] == "p_pi-weighted per-symbol contribution"


def test_state_pooling_and_symbols_of_one_automaton_in_two_bins(tmp_path, capsys):
    items = [correlational_run("A0", 1.0, [110] * 5 + [310] * 5),
             correlational_run("A1", 3.0, [120] * 10),
             correlational_run("A2", 5.0, [320] * 10)]
    write_results(tmp_path / "runs", items)
    out = tmp_path / "f.png"
    code = exit_status(["analyze", str(tmp_path / "runs"), "--target", "symbol:*",
                        "--target", "state:*", "--edges", "100,200,400,1000",
                        "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    rows = {(r["target"], r["x_min"]): r for r in _rows(out.with_suffix(".csv"))}
    low, high = rows[("symbol:*", "100")], rows[("symbol:*", "200")]
    assert (int(low["n"]), int(low["pairs"]), float(low["mean"])) == (2, 15, 2.0)
    assert (int(high["n"]), int(high["pairs"]), float(high["mean"])) == (2, 15, 3.0)
    states = [r for r in rows.values() if r["target"] == "state:*"]
    assert sum(int(r["pairs"]) for r in states) == 9 and all(int(r["n"]) == 3 for r in states)


def test_pooled_curves_give_the_gap_table_under_both_measures(shared_value_runs, tmp_path,
                                                             capsys):
    runs, _ = shared_value_runs
    code = exit_status(["analyze", str(runs), "--target", "symbol:*", "--edges", "100,200",
                        "--output", str(tmp_path / "f.png")])
    out = capsys.readouterr().out
    assert code == 0
    first, second = out.index("measure kl_target_unweighted:"), out.index("measure kl_target:")
    assert first < second and out.count("causal point(s) have such runs") == 2


def test_a_single_target_csv_keeps_its_columns(shared_value_runs, tmp_path, capsys):
    runs, _ = shared_value_runs
    out = tmp_path / "one.png"
    code = exit_status(["analyze", str(runs), "--target", "symbol:a", "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    header = out.with_suffix(".csv").read_text().splitlines()[0].split(",")
    assert "pairs" not in header and header[-3:] == ["gap_kind", "ci_method", "ci_wide"]


def test_pooling_helpers():
    assert is_pooled("symbol:*") and not is_pooled("symbol:a") and not is_pooled(None)
    assert covers("symbol:*", "symbol:b") and not covers("symbol:*", "state:b")
    assert covers("transition:*", "transition:q1:a") and not covers("symbol:a", "symbol:b")
    known = ["symbol:b", "symbol:a", "state:q", "transition:q:a"]
    assert concrete_targets(["symbol:*", "state:q"], known) == ["state:q", "symbol:a", "symbol:b"]
    assert cluster_means([1.0, 3.0, 5.0, 0.1], ["x", "x", "y", "z"]) == ([2.0, 5.0, 0.1], 4)
    assert target_title("symbol:*") == "every symbol, pooled"  # the figure says pooled
    assert target_title("symbol:a") == "symbol a"
    recs = ag.expand_correlational(
        [ag.record_from_results(correlational_run("A", 1.0, range(100, 110)), "r")],
        ["symbol:a", "symbol:b"],
    )
    pooled = pool_records(recs, ["symbol:*", "symbol:a"])
    assert [r.event for r in pooled] == ["symbol:*", "symbol:a", "symbol:*"]


def test_export_without_target_keeps_every_event(shared_value_runs, tmp_path, capsys):
    runs, _ = shared_value_runs
    export = tmp_path / "all.jsonl"
    code = exit_status(["analyze", str(runs), "--export-results", str(export)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "exported 24 of 24 run(s) (every run, every event)" in err
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    corr = [line for line in lines if line["intervention"] == "none"]
    assert len(corr) == 12
    for line in corr:
        assert len(line["kl"]["symbol"]) == 10 and len(line["kl_unweighted"]["symbol"]) == 10
        assert len(line["kl"]["state"]) == 3
        assert len(line["occurrences"]["count"]) == 13
    # with a pooled target: its kind only
    code = exit_status(["analyze", str(runs), "--export-results", str(export),
                        "--target", "symbol:*"])
    err = capsys.readouterr().err
    assert code == 0, err
    line = next(json.loads(x) for x in export.read_text().splitlines() if '"none"' in x)
    assert set(line["kl"]) == {"symbol"} and len(line["kl"]["symbol"]) == 10
    assert len(line["occurrences"]["count"]) == 10


def test_correlational_runs_export_without_a_target(tmp_path, capsys):
    """Issue 27: 'exported 0 of 60 run(s) (those about )' with exit 0."""
    write_results(tmp_path / "runs", [correlational_run(f"A{a}", 1.0, [150] * 10)
                                      for a in range(6)])
    export = tmp_path / "all.jsonl"
    code = exit_status(["analyze", str(tmp_path / "runs"), "--export-results", str(export)])
    err = capsys.readouterr().err
    assert code == 0 and "exported 6 of 6 run(s)" in err, err
    assert len(export.read_text().splitlines()) == 6


def test_an_empty_export_is_an_error(tmp_path, capsys):
    """symbol:b is known only from a causal run's occurrences: no run is about it."""
    item = result(event="symbol:a", count=100)
    item["occurrences"] = {"count": {"symbol:a": 100, "symbol:b": 40}, "strings": {}}
    write_results(tmp_path / "runs", [item])
    export = tmp_path / "e.jsonl"
    code = exit_status(["analyze", str(tmp_path / "runs"), "--export-results", str(export),
                        "--target", "symbol:b"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "nothing to export" in err, err
    assert not export.exists()

"""The re-analysis views of ``analyze --plan`` (per-run view, equivalence with a margin, a gap's
predicted direction, the re-weighted causal values, the plan's coverage) on small hand-made
records, each against a hand computation with a negative control; and the headline study's
addendum held to an independent recomputation from the committed records."""

from __future__ import annotations

import math
import os

os.environ.setdefault("WANDB_MODE", "disabled")

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from cfl_lightning.analysis.plan import (
    Estimate,
    combine,
    decide,
    direction,
    evaluate_plan,
    load_plan,
    parse_plan,
)
from cfl_lightning.analysis.records import load_jsonl, record_from_results
from cfl_lightning.errors import CflError
from tests.helpers import correlational_run, load_script, result

REPO = Path(__file__).resolve().parents[1]
BASE = {"target": "symbol:*", "bins": [10, 20, 40], "counts": [15, 30],
        "measures": ["kl_target_unweighted", "kl_target"]}


def _plan(*contrasts, **extra):
    return parse_plan({**BASE, **extra, "contrasts": list(contrasts)}, "test plan")


def _records():
    """Correlational: automaton A0 has 3 pairs in [10, 20) (values 1, 1, 1), A1 one (value 4);
    in [20, 40): A2, A3 (values 2, 3). Causal at 15: four automata, unweighted 1.0-1.3,
    500 strings."""
    items = [
        correlational_run("A0", 1.0, [12, 13, 14, 100, 100, 100, 100, 100, 100, 100]),
        correlational_run("A1", 4.0, [15, 100, 100, 100, 100, 100, 100, 100, 100, 100]),
        correlational_run("A2", 2.0, [25, 100, 100, 100, 100, 100, 100, 100, 100, 100]),
        correlational_run("A3", 3.0, [30, 100, 100, 100, 100, 100, 100, 100, 100, 100]),
    ]
    for i, v in enumerate([1.0, 1.1, 1.2, 1.3]):
        for count in (15, 30):
            item = result(automaton=f"C{i}", event="symbol:a", count=count, kl_target=v / 2,
                          intervention="exact")
            item["kl_target_unweighted"] = v
            items.append(item)
    return [record_from_results(item, f"r{i}") for i, item in enumerate(items)]


def _welch(a, b, level=0.95):
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb)
    return a.mean() - b.mean(), a.mean() - b.mean() - half, a.mean() - b.mean() + half


def test_per_run_view_weights_pairs_equally():
    plan = _plan({"name": "T", "bin_difference": [20, 10], "expect": "above"},
                 {"name": "R", "bin_difference": [20, 10], "expect": "above", "view": "per_run"},
                 per_run_view=True)
    res = evaluate_plan(_records(), plan)
    key = ("kl_target_unweighted", "LSTMLanguageModel")
    topology, per_run = res.contrasts[(*key, "T")], res.contrasts[(*key, "R")]
    # topology view: bin 10 = mean(1 [A0's mean], 4) = 2.5; per-run: mean(1, 1, 1, 4) = 1.75
    assert topology.value == pytest.approx(2.5 - 2.5)
    assert per_run.value == pytest.approx(2.5 - 1.75)
    assert per_run.low == pytest.approx(_welch([2, 3], [1, 1, 1, 4])[1])
    assert per_run.n == 2 and per_run.n_other == 4
    mean, sem, n = res.per_run_bins[(*key, 10.0)]
    assert (mean, n) == (1.75, 4) and sem == pytest.approx(np.std([1, 1, 1, 4], ddof=1) / 2)
    assert topology.value != pytest.approx(per_run.value)  # negative control: views differ


def test_equivalence_two_one_sided_tests():
    inside = Estimate(0.01, -0.02, 0.04, 10, 10, inner=(-0.01, 0.03), bounds=(-0.05, 0.05))
    assert decide(inside, "equivalent") == "equivalent"
    wide = replace(inside, inner=(-0.06, 0.03))  # negative control: 90% leaves the margin
    assert decide(wide, "equivalent") == "not resolved"
    resolved = replace(wide, low=0.01, high=0.2, inner=(0.02, 0.15))
    assert decide(resolved, "equivalent") == "not equivalent"
    assert combine(["equivalent", "equivalent"]) == "reproduced"
    assert combine(["equivalent", "not equivalent"]) == "not reproduced"


def test_equivalence_margin_and_inner_interval_from_records():
    plan = _plan({"name": "E", "gap": 15, "expect": "equivalent", "margin": 0.1})
    res = evaluate_plan(_records(), plan)
    e = res.contrasts[("kl_target_unweighted", "LSTMLanguageModel", "E")]
    causal, near = [1.0, 1.1, 1.2, 1.3], [1.0, 4.0]  # pairs in [15/sqrt2, 15 sqrt2], per automaton
    assert e.inner == pytest.approx(_welch(causal, near, 0.90)[1:])
    assert e.bounds == pytest.approx((-0.25, 0.25))  # a tenth of the correlational mean 2.5


def test_predicted_direction_labels():
    above = Estimate(0.3, 0.1, 0.5, 5, 5)
    below = Estimate(-0.3, -0.5, -0.1, 5, 5)
    holds = Estimate(0.1, -0.1, 0.3, 5, 5)
    assert direction(above, "above") == "with" and direction(below, "above") == "against"
    assert direction(holds, "above") == "–" and direction(above, None) == "–"


def test_reweighted_gap_uses_unweighted_times_count_over_strings():
    plan = _plan({"name": "W", "gap": 30, "expect": "nonzero", "reweight": "count"})
    res = evaluate_plan(_records(), plan)
    w = res.contrasts[("kl_target", "LSTMLanguageModel", "W")]
    causal = [v * 30 / 500 for v in (1.0, 1.1, 1.2, 1.3)]
    near = [2.0 * 0.25, 3.0 * 0.25]  # the correlational weighted values in [21.2, 42.4]
    assert (w.value, w.low, w.high) == pytest.approx(_welch(causal, near))
    plain = evaluate_plan(_records(), _plan({"name": "W", "gap": 30, "expect": "nonzero"}))
    assert plain.contrasts[("kl_target", "LSTMLanguageModel", "W")].value != pytest.approx(w.value)
    assert res.contrast_verdicts[("kl_target_unweighted", "LSTMLanguageModel", "W")] == "n/a"


def test_level_widens_every_interval():
    plan = _plan({"name": "D", "count_difference": [30, 15], "expect": "below"},
                 {"name": "G", "gap": 30, "expect": "nonzero"})
    at95, at99 = (evaluate_plan(_records(), replace(plan, level=lv)) for lv in (0.95, 0.99))
    key = ("kl_target_unweighted", "LSTMLanguageModel", "G")
    assert at99.contrasts[key].low < at95.contrasts[key].low
    assert at99.contrasts[key].low == pytest.approx(
        _welch([1.0, 1.1, 1.2, 1.3], [2.0, 3.0], 0.99)[1])


@pytest.mark.parametrize("bad, what", [
    ({"name": "X", "gap": 15, "expect": "equivalent"}, "margin go together"),
    ({"name": "X", "gap": 15, "expect": "nonzero", "margin": 0.1}, "margin go together"),
    ({"name": "X", "count_difference": [30, 15], "expect": "below", "view": "per_run"}, "view"),
    ({"name": "X", "bin_difference": [20, 10], "expect": "above", "reweight": "count"},
     "reweight"),
    ({"name": "X", "bin_difference": [20, 10], "expect": "above", "predicts": "above"},
     "predicts"),
])
def test_bad_options_get_one_line(bad, what):
    with pytest.raises(CflError, match=what):
        _plan(bad)


def _recompute_module():
    return load_script(REPO / "docs" / "headline" / "recompute_addendum.py")


@pytest.mark.slow
@pytest.mark.parametrize("plan, files, half", [
    ("plan_v2_addendum_symbol.yaml", (), "symbol"),  # the script's default: version 2's records
    ("plan_v3_addendum_symbol.yaml", ("v3/results.jsonl",), "symbol"),
    ("plan_v2_addendum_state.yaml", ("v2/results.jsonl", "v2/results_state.jsonl"), "state"),
    ("plan_v3_addendum_state.yaml", ("v3/results.jsonl", "v3/results_state.jsonl"), "state"),
])
def test_addendum_agrees_with_an_independent_recomputation(capsys, plan, files, half):
    """`analyze --plan docs/headline/plan_v*_addendum_*.yaml` against numpy/scipy code that
    reads the committed JSONL itself (docs/headline/recompute_addendum.py), three decimals."""
    module = _recompute_module()
    paths = [REPO / "docs" / "headline" / f for f in files]
    module.main(["--half", half] + [str(p) for p in paths])
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    records = [r for f in (paths or module.FILES) for r in load_jsonl(f)]
    res = evaluate_plan(records, load_plan(REPO / "docs" / "headline" / plan))
    checked = 0
    for name, model, measure, value, low, high in lines:
        value, low, high = float(value), float(low), float(high)
        if name.endswith("-margin"):
            e = res.contrasts[(measure, model, name.replace("-margin", ""))]
            assert e.bounds == pytest.approx((low, high), abs=5e-4)
            continue
        if name.endswith("-90"):
            e = res.contrasts[(measure, model, name.replace("-90", ""))]
            assert e.inner == pytest.approx((low, high), abs=5e-4)
        else:
            e = res.contrasts[(measure, model, name)]
            assert (e.value, e.low, e.high) == pytest.approx((value, low, high), abs=5e-4)
        checked += 1
    assert checked >= 40

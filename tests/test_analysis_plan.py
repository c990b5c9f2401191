"""Pre-registered contrasts (``analyze --plan``): the plan file, its decision rules, and the
headline study's version-1 verdict held to the numbers the old docs/headline/verdict.py printed
on the committed docs/headline/results.jsonl."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

from pathlib import Path

import numpy as np
import pytest

from cfl_lightning.analysis.plan import (
    Estimate,
    combine,
    decide,
    evaluate_plan,
    load_plan,
    parse_plan,
)
from cfl_lightning.analysis.records import load_jsonl, record_from_results
from cfl_lightning.analysis.stats import t_interval
from cfl_lightning.errors import CflError
from tests.helpers import correlational_run, exit_status, result

REPO = Path(__file__).resolve().parents[1]
PLAN = REPO / "docs" / "headline" / "plan_v1.yaml"
RESULTS = REPO / "docs" / "headline" / "results.jsonl"
MODELS = {"LSTM": "LSTMLanguageModel", "Transformer": "TransformerLanguageModel"}

# docs/headline/verdict.py on the committed results (kl_target_unweighted): (value, low, high)
OLD_VERDICT = {
    "LSTM": {
        "C1": (-0.149, -0.325, 0.028), "C1'": (-0.149, -0.216, -0.082),
        "C2": (0.149, 0.099, 0.198), "C2'": (0.208, 0.163, 0.253),
        "D1": (-0.112, -0.164, -0.061), "D2": (-0.139, -0.172, -0.106),
        "D3": (-0.082, -0.104, -0.060),
        "G125": (-0.025, -0.134, 0.084), "G250": (0.033, -0.024, 0.090),
        "G500": (-0.009, -0.045, 0.027), "G1000": (0.002, -0.018, 0.023),
    },
    "Transformer": {
        "C1": (-0.121, -0.312, 0.069), "C1'": (-0.081, -0.207, 0.044),
        "C2": (0.243, 0.110, 0.375), "C2'": (0.205, 0.081, 0.330),
        "D1": (-0.071, -0.123, -0.019), "D2": (-0.079, -0.116, -0.042),
        "D3": (-0.083, -0.109, -0.057),
        "G125": (-0.056, -0.185, 0.073), "G250": (-0.012, -0.115, 0.091),
        "G500": (0.050, -0.062, 0.162), "G1000": (0.035, -0.076, 0.147),
    },
}
OLD_N = {"C1": (16, 6), "G250": (16, 34), "G500": (16, 30), "G1000": (16, 38), "D1": (16, None)}


@pytest.fixture(scope="module")
def headline():
    return evaluate_plan(load_jsonl(RESULTS), load_plan(PLAN))


def test_the_plan_reproduces_the_old_verdict(headline):
    for label, contrasts in OLD_VERDICT.items():
        for name, expected in contrasts.items():
            e = headline.contrasts[("kl_target_unweighted", MODELS[label], name)]
            assert tuple(round(v, 3) for v in (e.value, e.low, e.high)) == expected, (label, name)
        for name, (n, other) in OLD_N.items():
            e = headline.contrasts[("kl_target_unweighted", MODELS[label], name)]
            assert (e.n, e.n_other) == (n, other)
    bins = headline.bins
    assert round(bins[("kl_target_unweighted", MODELS["LSTM"], 100.0)].value, 3) == 0.437
    assert bins[("kl_target_unweighted", MODELS["LSTM"], 100.0)].n == 6


def test_the_plan_gives_both_measures_and_the_verdict(headline):
    weighted = {k[1:]: v for k, v in headline.contrasts.items() if k[0] == "kl_target"}
    # issue 27's numbers: the weighted rise and gaps the unweighted reading does not show
    c1 = weighted[(MODELS["Transformer"], "C1")]
    assert (round(c1.value, 3), round(c1.low, 3), round(c1.high, 3)) == (0.159, 0.093, 0.224)
    g = weighted[(MODELS["LSTM"], "G125")]
    assert (round(g.value, 2), round(g.low, 2), round(g.high, 2)) == (0.42, 0.22, 0.63)
    g = weighted[(MODELS["Transformer"], "G125")]
    assert (round(g.value, 2), round(g.low, 2), round(g.high, 2)) == (0.78, 0.45, 1.12)
    claims = headline.claim_verdicts
    expected = {
        ("kl_target_unweighted", "correlational rise"): ("not resolved", "not resolved"),
        ("kl_target_unweighted", "correlational fall"): ("reproduced", "reproduced"),
        ("kl_target_unweighted", "causal decrease"): ("reproduced", "reproduced"),
        ("kl_target_unweighted", "causal-correlational gap"): ("not resolved", "not resolved"),
        ("kl_target", "correlational rise"): ("not resolved", "reproduced"),
        ("kl_target", "correlational fall"): ("not reproduced", "not reproduced"),
        ("kl_target", "causal decrease"): ("reproduced", "reproduced"),
        ("kl_target", "causal-correlational gap"): ("reproduced", "reproduced"),
    }
    for (measure, claim), verdicts in expected.items():
        got = tuple(claims[(measure, MODELS[m], claim)] for m in ("LSTM", "Transformer"))
        assert got == verdicts, (measure, claim)


def _capture(argv, capsys):
    code = exit_status(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_analyze_plan_stdout(capsys):
    code, out, err = _capture(["analyze", str(RESULTS), "--plan", str(PLAN)], capsys)
    assert code == 0, err
    assert out.startswith("# plan: headline study, version 1 (target symbol:a")
    assert "| correlational rise | C1 (all) | kl_target | not resolved | reproduced |" in out
    assert "## measure: kl_target_unweighted" in out and "## measure: kl_target\n" in out
    assert ("| C1: bin 200 - bin 100 | 16 vs 6 | -0.149 | [-0.325, 0.028] | above 0 | "
            "not resolved |") in out


def test_decision_rules():
    est = lambda low, high, ref=0.0: Estimate(0.0, low, high, 5, 5, reference=ref)  # noqa: E731
    assert decide(est(0.1, 0.2), "above") == "reproduced"
    assert decide(est(-0.2, -0.1), "above") == "not reproduced"
    assert decide(est(-0.1, 0.1), "above") == "not resolved"
    assert decide(est(-0.2, -0.1), "below") == "reproduced"
    assert decide(est(0.1, 0.2), "below") == "not reproduced"
    assert decide(est(-0.2, -0.1), "nonzero") == "reproduced"
    assert decide(est(-0.2, 0.1), "nonzero") == "not resolved"
    assert decide(est(0.9, 1.2, 1.0), "above") == "not resolved"  # a ratio's "no effect" is 1
    assert decide(est(1.1, 1.2, 1.0), "above") == "reproduced"
    assert decide(est(float("nan"), float("nan")), "above") == "not resolved"
    assert combine(["reproduced", "reproduced"]) == "reproduced"
    assert combine(["reproduced", "not resolved"]) == "not resolved"
    assert combine(["reproduced", "not reproduced"]) == "not reproduced"
    assert combine(["not resolved", "reproduced"], "any") == "reproduced"
    assert combine(["not reproduced", "not reproduced"], "any") == "not reproduced"
    assert combine(["not reproduced", "not resolved"], "any") == "not resolved"


BASE = {
    "target": "symbol:a",
    "bins": [100, 200, 400],
    "counts": [150, 300],
    "contrasts": [{"name": "C", "bin_difference": [200, 100], "expect": "above"}],
}


@pytest.mark.parametrize("change,message", [
    ({"target": "a"}, "target: expected an event"),
    ({"bins": [3, 1]}, "bins: expected at least two increasing edges"),
    ({"counts": "many"}, "counts: expected a list of numbers"),
    ({"measures": ["kl"]}, "measures: 'kl' is not one of"),
    ({"contrasts": []}, "contrasts: expected at least one"),
    ({"contrasts": [{"name": "C", "bin_difference": [400, 100], "expect": "above"}]},
     "contrast C: 400 is not a bin's lower edge"),
    ({"contrasts": [{"name": "C", "gap": 125, "expect": "above"}]},
     "contrast C: 125 is not one of the counts"),
    ({"contrasts": [{"name": "C", "gap": 150, "expect": "up"}]}, "expect must be one of"),
    ({"contrasts": [{"name": "C", "gap": 150, "count_difference": [150, 300],
                     "expect": "above"}]}, "give one of"),
    ({"claims": [{"name": "X", "contrasts": ["D"]}]}, "claim X: no contrast named 'D'"),
    ({"min_visits": -1}, "min_visits: expected an integer >= 0"),
    ({"causal": "correlational"}, "causal: expected causal_exact"),
])
def test_bad_plans_are_named_in_one_line(change, message):
    with pytest.raises(CflError, match=message):
        parse_plan({**BASE, **change}, "p.yaml")
    parse_plan(BASE, "p.yaml")  # negative control


def test_a_bad_plan_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "plan.yaml"
    bad.write_text("target: [unclosed\n")
    code, out, err = _capture(["analyze", str(RESULTS), "--plan", str(bad)], capsys)
    assert code == 2 and err.count("\n") == 1 and "not YAML" in err and not out
    code, out, err = _capture(["analyze", str(RESULTS), "--plan", str(PLAN),
                               "--target", "symbol:a"], capsys)
    assert code == 2 and "--plan names its own target" in err


def test_a_plans_intervals_stay_the_pre_registered_t_intervals():
    """The curves' intervals of non-negative quantities moved to the log scale (issue 42); a
    plan fixed its rule before its runs, so its bins keep the plain t-interval, below zero
    included."""
    values = [0.002, 0.03, 0.004]
    items = [correlational_run(f"A{a}", v, [150] * 10) for a, v in enumerate(values)]
    for item in items:
        item["kl_unweighted"]["state"] = dict.fromkeys(item["kl_unweighted"]["state"], 0.0)
        item["kl_unweighted"]["state"]["q0"] = item["kl_unweighted"]["symbol"]["a"]
    records = [record_from_results(item, f"r{i}") for i, item in enumerate(items)]
    plan = parse_plan({**BASE, "target": "state:q0", "bins": [100, 1000], "counts": [150],
                       "contrasts": [{"name": "G", "gap": 150, "expect": "nonzero"}]})
    res = evaluate_plan(records, plan)
    b = res.bins[("kl_target_unweighted", "LSTMLanguageModel", 100.0)]
    assert b.n == 3 and (b.low, b.high) == pytest.approx(t_interval(values), rel=1e-9)
    assert b.low < 0


def test_a_pooled_plan_has_intervals_over_automata():
    """10 symbols share one value per automaton: the pooled bin's interval is the automata's."""
    rng = np.random.default_rng(3)
    values = rng.normal(1.0, 0.3, size=9)
    items = []
    for a, v in enumerate(values):
        items.append(correlational_run(f"A{a}", float(v), [int(c) for c in
                                                            rng.integers(110, 190, 10)]))
        for count, shift in ((150, 0.0), (300, -0.2)):
            causal = result(automaton=f"A{a}", event=f"symbol:{'ab'[a % 2]}", count=count)
            causal["kl_target_unweighted"] = float(v) + shift
            items.append(causal)
    records = [record_from_results(item, f"r{i}") for i, item in enumerate(items)]
    plan = parse_plan({**BASE, "target": "symbol:*", "contrasts": [
        {"name": "D", "count_difference": [300, 150], "expect": "below"},
        {"name": "G", "gap": 150, "expect": "nonzero"}]})
    res = evaluate_plan(records, plan)
    model = "LSTMLanguageModel"
    b = res.bins[("kl_target_unweighted", model, 100.0)]
    assert (b.n, b.pairs) == (9, 90)
    assert (b.low, b.high) == pytest.approx(t_interval(values.tolist()), rel=1e-9)
    d = res.contrasts[("kl_target_unweighted", model, "D")]
    assert d.n == 9 and d.value == pytest.approx(-0.2)
    assert res.contrast_verdicts[("kl_target_unweighted", model, "D")] == "reproduced"
    g = res.contrasts[("kl_target_unweighted", model, "G")]
    assert (g.n, g.n_other, g.pairs_other) == (9, 9, 90) and g.value == pytest.approx(0.0)
    assert res.contrast_verdicts[("kl_target_unweighted", model, "G")] == "not resolved"


def test_an_at_least_once_plan_bins_strings_containing_the_target():
    items = [result(automaton=f"S{a}", intervention="none", event="symbol:a", realized=900,
                    strings=30 + a, kl_target=0.1 * (a + 1)) for a in range(4)]
    items += [result(automaton=f"S{a}", intervention="at_least_once", event="symbol:a",
                     count=32, kl_target=0.5) for a in range(4)]
    records = [record_from_results(item, f"r{i}") for i, item in enumerate(items)]
    plan = parse_plan({**BASE, "causal": "causal_at_least_once", "bins": [30, 32, 40],
                       "counts": [32], "contrasts": [
                           {"name": "B", "bin_difference": [32, 30], "expect": "above"}]})
    res = evaluate_plan(records, plan)
    low = res.bins[("kl_target_unweighted", "LSTMLanguageModel", 30.0)]
    assert (low.n, low.value) == (2, pytest.approx(0.3))  # strings 30, 31 (not counts 900)
    assert res.counts[("kl_target_unweighted", "LSTMLanguageModel", 32.0)].n == 4

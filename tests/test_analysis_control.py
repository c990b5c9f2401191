"""Non-target controls (``analyze --control non-target``, issue 48 item 1): the control of a run
is the mean of the same measure over its other events of the target's kind (visited, EOS left
out); ``did`` = target - control per run, averaged per automaton, t-interval over automata.

The references here read the results directly (JSON, numpy, scipy), never
:mod:`cfl_lightning.analysis`.
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from cfl_lightning.analysis.control import EOS, control_value, did_summary, with_controls
from cfl_lightning.analysis.plan import evaluate_plan, parse_plan
from cfl_lightning.analysis.records import record_from_results
from cfl_lightning.errors import CflError
from tests.helpers import exit_status, write_results

ROOT = Path(__file__).resolve().parents[1]
HEADLINE_V3 = ROOT / "docs" / "headline" / "v3" / "results.jsonl"
READINGS = {"kl_target_unweighted": "kl_unweighted", "kl_target": "kl"}
MODELS = {"LSTMLanguageModel": "LSTM", "TransformerLanguageModel": "Transformer"}


# --------------------------------------------------------------------------- the reference


def reference_control(run: dict, per_event: str) -> float | None:
    """The run's non-target control from its results dict: the mean of ``run[per_event]`` over
    the events of its target's kind other than the target and EOS, with >= 1 test visit."""
    kind, _, target = run["event"].partition(":")
    values = [
        value for name, value in run[per_event][kind].items()
        if name != target and name != "EOS" and value is not None
        and (run["test_visits"].get(f"{kind}:{name}") or 0) >= 1
    ]
    return float(np.mean(values)) if values else None


def t_mean(values) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval (scipy)."""
    values = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return float(values.mean()), float(values.mean() - half), float(values.mean() + half)


def reference_causal(path: Path, target: str) -> dict:
    """``{(measure, model, count): {automaton: (target, control)}}`` of the causal runs."""
    out: dict = defaultdict(dict)
    with open(path) as handle:
        for line in handle:
            run = json.loads(line)
            if run["intervention"] == "none" or run["event"] != target:
                continue
            for measure, per_event in READINGS.items():
                value = run[measure]
                if value is None or (run.get("target_test_visits") or 0) < 1:
                    continue
                key = (measure, run["model"], run["count"])
                assert run["automaton_id"] not in out[key]  # one run per corpus: no repeats
                out[key][run["automaton_id"]] = (value, reference_control(run, per_event))
    return out


def did_rows(stdout: str) -> dict:
    """``{(measure, model label, x): (control, did, low, high, n)}`` of analyze's did tables."""
    out, measure, in_table = {}, None, False
    for line in stdout.splitlines():
        head = re.match(r"measure (\S+):", line)
        if head or line.startswith("gap at"):
            measure, in_table = head.group(1) if head else measure, False
            continue
        in_table = in_table or line.startswith("non-target control:")
        cells = line.split()
        if in_table and len(cells) == 10 and cells[2].startswith("causal"):
            _, model, _, x, _, control, did, low, high, n = cells
            out[(measure, model, float(x))] = (
                float(control), float(did), float(low.strip("[,")), float(high.strip("]")), int(n)
            )
    return out


# --------------------------------------------------------------------------- held-out check


@pytest.mark.slow
def test_did_on_the_headline_v3_records_equals_an_independent_recomputation(capsys):
    """Issue 48's check: `analyze docs/headline/v3/results.jsonl --target symbol:a --control
    non-target` gives did and its interval per reading, model and count equal (1e-4) to a
    recomputation from the records."""
    code = exit_status([
        "analyze", str(HEADLINE_V3), "--target", "symbol:a", "--control", "non-target"
    ])
    out = capsys.readouterr()
    assert code == 0, out.err
    shown = did_rows(out.out)
    reference = reference_causal(HEADLINE_V3, "symbol:a")
    assert len(shown) == len(reference) == 2 * 2 * 5  # readings x models x counts
    for (measure, model, count), runs in reference.items():
        control = np.mean([c for _, c in runs.values()])
        did, low, high = t_mean([v - c for v, c in runs.values()])
        got = shown[(measure, MODELS[model], float(count))]
        assert got[4] == len(runs) == 32
        assert np.allclose(got[:4], (control, did, low, high), atol=1e-4, rtol=0), (
            measure, model, count, got, (control, did, low, high))


def issue_table(reference: dict, measure: str, model: str) -> list[tuple[float, float, float]]:
    """The issue's three columns: N 1,000 minus N 62 of the target, of the control and of did,
    per topology, with 95% t-intervals over the topologies."""
    high, low = reference[(measure, model, 1000)], reference[(measure, model, 62)]
    both = sorted(set(high) & set(low))
    columns = []
    for part in (lambda v, c: v, lambda v, c: c, lambda v, c: v - c):
        columns.append(t_mean([part(*high[a]) - part(*low[a]) for a in both]))
    return columns


# the issue's table (three decimals), causal symbol half of version 3, unweighted
ISSUE_48_TABLE = {
    "LSTMLanguageModel": [(-0.413, -0.462, -0.364), (-0.321, -0.350, -0.293),
                          (-0.092, -0.147, -0.037)],
    "TransformerLanguageModel": [(-0.318, -0.365, -0.270), (-0.138, -0.173, -0.102),
                                 (-0.180, -0.221, -0.139)],
}
DID_PLAN = {
    "name": "issue 48's table",
    "target": "symbol:a",
    "control": "non-target",
    "bins": [50, 100],
    "counts": [62, 1000],
    "contrasts": [
        {"name": "T", "count_difference": [1000, 62], "expect": "below"},
        {"name": "C", "count_difference": [1000, 62], "of": "control", "expect": "below"},
        {"name": "D", "count_difference": [1000, 62], "of": "did", "expect": "below"},
    ],
}


@pytest.mark.slow
def test_the_issue_table_recomputed_and_as_a_plan():
    """The worked example of docs/guide/analysis.md: the reference gives the issue's table to
    its three decimals, and a plan's contrasts on the target, the control and did give the
    reference's numbers (1e-4)."""
    from cfl_lightning.analysis.records import load_jsonl

    reference = reference_causal(HEADLINE_V3, "symbol:a")
    result = evaluate_plan(load_jsonl(HEADLINE_V3), parse_plan(DID_PLAN))
    for model, expected in ISSUE_48_TABLE.items():
        columns = issue_table(reference, "kl_target_unweighted", model)
        assert np.allclose(columns, expected, atol=5e-4, rtol=0), (model, columns)
        for measure in READINGS:
            columns = issue_table(reference, measure, model)
            for name, column in zip("TCD", columns):
                e = result.contrasts[(measure, model, name)]
                assert e.n == 32
                assert np.allclose((e.value, e.low, e.high), column, atol=1e-4, rtol=0)


# --------------------------------------------------------------------------- the rule


def run(event="symbol:a", intervention="exact", automaton="A0", kl=None, visits=None, count=100,
        model="LSTMLanguageModel", weighted=None):
    """A results dict whose per-symbol maps are ``kl`` (unweighted; weighted: ``weighted`` or
    half of it), test visits ``visits`` (default 5 each)."""
    kl = kl or {"a": 0.5, "b": 0.2, "c": 0.4, "EOS": 9.0}
    weighted = weighted or {k: None if v is None else v / 2 for k, v in kl.items()}
    visits = visits or {f"symbol:{k}": 5 for k in kl}
    kind, _, name = event.partition(":")
    return {
        "model": model, "intervention": intervention, "event": event,
        "count": count if intervention != "none" else None, "realized_count": count,
        "num_strings": 500, "seed": 0, "automaton_id": automaton, "kl_total": 1.0,
        "kl_target": weighted.get(name), "kl_target_unweighted": kl.get(name),
        "target_test_visits": visits.get(event),
        "kl": {kind: weighted, "state": {"q0": 7.0}},
        "kl_unweighted": {kind: kl, "state": {"q0": 7.0}},
        "test_visits": {**visits, "state:q0": 5},
        "occurrences": {"count": {f"symbol:{k}": count for k in kl}},
    }


@pytest.mark.parametrize(
    "kl,visits,expected",
    [
        ({"a": 0.5, "b": 0.2, "c": 0.4, "EOS": 9.0}, None, 0.3),  # EOS, a and q0 left out
        ({"a": 0.5, "b": 0.2, "c": 0.4}, {"symbol:a": 5, "symbol:b": 5, "symbol:c": 0}, 0.2),
        ({"a": 0.5, "b": None, "c": 0.4}, None, 0.4),  # unknown, not 0
        ({"a": 0.5, "EOS": 1.0}, None, None),  # nothing to compare with
    ],
)
def test_the_control_is_the_mean_of_the_other_visited_events_of_the_kind(kl, visits, expected):
    record = record_from_results(run(kl=kl, visits=visits), "r")
    got = control_value(record, "kl_target_unweighted")
    assert got == pytest.approx(expected) if expected is not None else got is None
    weighted = control_value(record, "kl_target")
    assert weighted == pytest.approx(expected / 2) if expected is not None else weighted is None
    assert reference_control(run(kl=kl, visits=visits), "kl_unweighted") == (
        pytest.approx(expected) if expected is not None else None)


def test_a_pushdown_class_target_is_compared_with_the_other_classes():
    """``class:q/(`` (issue 48 item 4) sits under ``state:q/(`` in a pushdown run's maps: its
    control is the other classes' mean (``q/-``, ``q/[``), never its own entry."""
    results = run(event="class:q/(", kl={"a": 1.0})
    results["kl_unweighted"] = {"state": {"q/(": 0.9, "q/-": 0.1, "q/[": 0.3}}
    results["kl"] = {"state": {"q/(": 0.45, "q/-": 0.05, "q/[": 0.15}}
    results["test_visits"] = {"state:q/(": 5, "state:q/-": 5, "state:q/[": 5}
    results["kl_target"], results["kl_target_unweighted"] = 0.45, 0.9
    record = record_from_results(results, "r")
    assert control_value(record, "kl_target_unweighted") == pytest.approx(0.2)
    assert control_value(record, "kl_target") == pytest.approx(0.1)


def test_a_pushdown_pop_target_is_compared_with_the_other_pops():
    """``pop:(`` reads ``kl.pop`` (results.json since 2026-11-29): its control is the other
    stack symbols' pops (``[``), not the symbols or the classes."""
    results = run(event="pop:(", kl={"(": 0.9, "[": 0.3})
    results["kl_unweighted"]["symbol"] = {"(": 5.0, ")": 5.0}  # another kind: never read
    results["test_visits"] = {"pop:(": 5, "pop:[": 5, "symbol:(": 5, "symbol:)": 5}
    record = record_from_results(results, "r")
    assert control_value(record, "kl_target_unweighted") == pytest.approx(0.3)
    assert control_value(record, "kl_target") == pytest.approx(0.15)
    assert reference_control(results, "kl_unweighted") == pytest.approx(0.3)


def test_a_target_without_any_control_says_so(tmp_path, capsys):
    """Runs written before results.json had ``pop`` entries: the did table says in one line that
    no run has a control, rather than only dashes."""
    items = [run(event="pop:(", kl={"(": 0.9}, automaton=f"A{a}", count=c)
             for a in range(3) for c in (100, 400)]
    write_results(tmp_path / "runs", items)
    code = exit_status(["analyze", str(tmp_path / "runs"), "--target", "pop:(", "--control",
                        "non-target"])
    out = capsys.readouterr().out
    assert code == 0
    assert "pop:(: no run has a control: none records another pop: event" in out
    # negative control: a target with controls gets no such line
    write_results(tmp_path / "more", [run(automaton=f"A{a}", count=c)
                                      for a in range(3) for c in (100, 400)])
    exit_status(["analyze", str(tmp_path / "more"), "--target", "symbol:a", "--control",
                 "non-target"])
    assert "no run has a control" not in capsys.readouterr().out


def test_an_export_about_one_target_keeps_its_control(tmp_path, capsys):
    """``--export-results`` with ``--target pop:(`` (or ``class:q/(``) keeps the other events of
    the target's kind, so the export gives the same did as the runs; it once kept only the
    target's own entries, and the control was lost."""
    pops = [run(event="pop:(", kl={"(": 0.9, "[": 0.3 + a / 10}, automaton=f"A{a}", count=c)
            for a in range(3) for c in (100, 400)]
    for item in pops:
        item["test_visits"] = {"pop:(": 5, "pop:[": 5}
    classes = [run(event="class:q/(", kl={"a": 1.0}, automaton=f"B{a}", count=c)
               for a in range(3) for c in (100, 400)]
    for a, item in enumerate(classes):
        item["kl"] = {"state": {"q/(": 0.45, "q/-": 0.05 * a, "q/[": 0.15}}
        item["kl_unweighted"] = {"state": {"q/(": 0.9, "q/-": 0.1 * a, "q/[": 0.3}}
        item["test_visits"] = {"state:q/(": 5, "state:q/-": 5, "state:q/[": 5}
    for target, items in (("pop:(", pops), ("class:q/(", classes)):
        folder = tmp_path / target.replace(":", "_").replace("/", "_")
        write_results(folder / "runs", items)
        out = folder / "e.jsonl"
        assert exit_status(["analyze", str(folder / "runs"), "--target", target,
                            "--export-results", str(out)]) == 0
        args = ["--target", target, "--control", "non-target"]
        exit_status(["analyze", str(folder / "runs"), *args])
        direct = capsys.readouterr().out
        exit_status(["analyze", str(out), *args])
        assert capsys.readouterr().out == direct and "no run has a control" not in direct


def test_min_visits_applies_to_the_control_events_too():
    visits = {"symbol:a": 9, "symbol:b": 2, "symbol:c": 9, "symbol:EOS": 9}
    record = record_from_results(run(visits=visits), "r")
    assert control_value(record, "kl_target_unweighted", min_visits=1) == pytest.approx(0.3)
    assert control_value(record, "kl_target_unweighted", min_visits=3) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        control_value(record, "kl_total")


@pytest.mark.slow  # imports torch
def test_eos_is_the_metrics_name_of_the_end_of_string():
    from cfl_lightning.metrics import EOS_NAME

    assert EOS == EOS_NAME


def test_did_is_averaged_per_automaton_before_its_interval():
    """Two pairs of automaton A (a pooled target) count once: did over automata, not pairs."""
    items = [(1.0, 0.5, "A"), (3.0, 0.5, "A"), (1.0, 1.0, "B"), (0.0, None, "C")]
    summary = did_summary(items)
    per_automaton = [1.5, 0.0]  # A: mean of 0.5 and 2.5; B: 0; C: no control
    assert (summary.n, summary.pairs) == (2, 3)
    assert summary.did == pytest.approx(np.mean(per_automaton))
    assert summary.control == pytest.approx(np.mean([0.5, 1.0]))
    assert (summary.low, summary.high) == pytest.approx(t_mean(per_automaton)[1:])


def test_a_pooled_pair_is_compared_with_its_run_s_other_events():
    """symbol:* over one correlational run: the pair of b has control mean(a, c), of c mean(a,
    b), and so on (each pair's own event left out)."""
    from cfl_lightning.analysis.pooling import pool_records
    from cfl_lightning.analysis.selection import expand_correlational

    record = record_from_results(run(intervention="none"), "r")
    views = with_controls(expand_correlational([record], ["symbol:a", "symbol:b", "symbol:c"]))
    pooled = pool_records(views, ["symbol:*"])
    got = sorted((r.kl_target_unweighted, r.control[1]) for r in pooled)
    assert np.allclose(got, [(0.2, 0.45), (0.4, 0.35), (0.5, 0.3)])


# --------------------------------------------------------------------------- the command


@pytest.fixture
def control_runs(tmp_path):
    """Six automata, causal runs of symbol:a at 100 and 400 and correlational runs, the other
    symbols' values drawn at random: did's reference is computable by hand."""
    rng = np.random.default_rng(4)
    items = []
    for a in range(6):
        for count in (100, 400):
            values = rng.uniform(0.1, 1.0, size=4)
            kl = dict(zip("abcd", values.tolist())) | {"EOS": 5.0}
            items.append(run(automaton=f"A{a}", count=count, kl=kl))
        kl = dict(zip("abcd", rng.uniform(0.1, 1.0, size=4).tolist()))
        items.append(run(automaton=f"A{a}", intervention="none", count=int(100 + 50 * a), kl=kl))
    write_results(tmp_path / "runs", items)
    return tmp_path / "runs", items


def test_every_curve_point_gets_the_reference_s_control_and_did(control_runs):
    from cfl_lightning.analysis.aggregate import table_columns
    from cfl_lightning.analysis.report import build_curves
    from tests.helpers import records

    _, items = control_runs
    rows = build_curves(records(items), ["symbol:a"], ["symbol:a"], control=True,
                        edges=[100, 1000]).rows
    for count in (100, 400):
        causal = [i for i in items if i["count"] == count and i["intervention"] == "exact"]
        controls = [reference_control(i, "kl_unweighted") for i in causal]
        dids = [i["kl_target_unweighted"] - c for i, c in zip(causal, controls)]
        row = next(r for r in rows if r.setting == "causal_exact" and r.x == count)
        assert (row.control, row.did, row.did_ci_low, row.did_ci_high) == pytest.approx(
            (np.mean(controls), *t_mean(dids)))
        assert row.did_n == 6
    corr = [i for i in items if i["intervention"] == "none"]
    (row,) = [r for r in rows if r.setting == "correlational"]
    dids = [i["kl_target_unweighted"] - reference_control(i, "kl_unweighted") for i in corr]
    assert (row.did, row.did_n) == (pytest.approx(np.mean(dids)), 6)  # its own control too
    assert {"control", "did", "did_ci_low", "did_ci_high"} <= set(table_columns(rows))
    plain = build_curves(records(items), ["symbol:a"], ["symbol:a"], edges=[100, 1000]).rows
    assert "did" not in table_columns(plain)  # negative control: no control asked for


@pytest.mark.slow  # draws the figure
def test_the_csv_holds_control_and_did_on_every_row(tmp_path, control_runs, capsys):
    runs, items = control_runs
    out = tmp_path / "f.png"
    code = exit_status(["analyze", str(runs), "--target", "symbol:a", "--control", "non-target",
                        "--edges", "100,1000", "--metric", "both", "--output", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    with open(out.with_suffix(".csv"), newline="") as handle:
        both = list(csv.DictReader(handle))
    assert {r["metric"] for r in both} == set(READINGS)  # --metric both: one CSV, two readings
    rows = [r for r in both if r["metric"] == "kl_target_unweighted"]
    for count in (100, 400):
        causal = [i for i in items if i["count"] == count and i["intervention"] == "exact"]
        dids = [i["kl_target_unweighted"] - reference_control(i, "kl_unweighted") for i in causal]
        row = next(r for r in rows if r["setting"] == "causal_exact" and r["x"] == str(count))
        assert float(row["did"]) == pytest.approx(t_mean(dids)[0], abs=1e-5)
        assert (float(row["did_ci_low"]), float(row["did_ci_high"])) == pytest.approx(
            t_mean(dids)[1:], abs=1e-5)
        assert int(row["did_n"]) == 6
    corr = next(r for r in rows if r["setting"] == "correlational")
    assert corr["did"] and corr["control"]  # the correlational arm gets its control too
    assert "did" in captured.out and "non-target control" in captured.out
    # negative control: without --control, no such columns
    exit_status(["analyze", str(runs), "--target", "symbol:a", "--output", str(out)])
    with open(out.with_suffix(".csv"), newline="") as handle:
        assert "did" not in next(csv.reader(handle))


def test_control_alone_prints_the_tables_and_writes_nothing(tmp_path, control_runs, capsys):
    runs, _ = control_runs
    code = exit_status(["analyze", str(runs), "--target", "symbol:a", "--control", "non-target"])
    out = capsys.readouterr().out
    assert code == 0
    shown = did_rows(out)
    assert {k[0] for k in shown} == set(READINGS) and {k[2] for k in shown} == {100.0, 400.0}
    assert not list(tmp_path.glob("*.csv"))


def test_control_of_kl_total_is_a_usage_error(tmp_path, control_runs, capsys):
    runs, _ = control_runs
    code = exit_status(["analyze", str(runs), "--control", "non-target", "--metric", "kl_total"])
    assert code == 2 and "kl_total has no control" in capsys.readouterr().err


def test_a_plan_contrast_of_did_needs_the_plan_s_control():
    plan = {k: v for k, v in DID_PLAN.items() if k != "control"}
    with pytest.raises(CflError, match="contrast C: of: control needs the plan's control"):
        parse_plan(plan)
    with pytest.raises(CflError, match="of: expected one of"):
        parse_plan({**DID_PLAN, "contrasts": [{**DID_PLAN["contrasts"][0], "of": "other"}]})


def test_a_plan_s_did_contrast_equals_the_reference(control_runs):
    """count_difference of did, paired over automata, against numpy on the results dicts."""
    _, items = control_runs
    result = evaluate_plan(
        [record_from_results(i, f"r{n}") for n, i in enumerate(items)],
        parse_plan({**DID_PLAN, "counts": [100, 400], "contrasts": [
            {"name": "D", "count_difference": [400, 100], "of": "did", "expect": "below"}]}),
    )
    did = {}
    for i in items:
        if i["intervention"] == "exact":
            did[(i["automaton_id"], i["count"])] = (
                i["kl_target_unweighted"] - reference_control(i, "kl_unweighted"))
    diffs = [did[(f"A{a}", 400)] - did[(f"A{a}", 100)] for a in range(6)]
    e = result.contrasts[("kl_target_unweighted", "LSTMLanguageModel", "D")]
    assert (e.value, e.low, e.high) == pytest.approx(t_mean(diffs))
    control, did_at = result.controls[("kl_target_unweighted", "LSTMLanguageModel", 400.0)]
    assert did_at.value == pytest.approx(np.mean([did[(f"A{a}", 400)] for a in range(6)]))
